"""certify's rounds and judgement (provisioner/certify.py): every node in two pairs of a ring,
pairs of a round disjoint; a node slow with every partner is the suspect, a pair slow between
two nodes that are fine elsewhere is a suspect link, a lone slow pair of two nodes names the
link and no node; what a side published is matched to its planned pair. Outliers: a node
within the floor but clearly below the fleet (margin and robust spread both), never the
fleet's own noise; drift against a node's own history (provisioner/history.py)."""

from __future__ import annotations

import pytest

from provisioner.certify import (
    PairResult,
    better_of,
    disjoint_rounds,
    judge,
    outliers,
    pair_results,
    ring_rounds,
    round_vars,
)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 64])
def test_every_node_is_in_two_pairs_and_a_round_never_uses_a_node_twice(n: int) -> None:
    hosts = [f"h{i:02d}" for i in range(n)]
    rounds = ring_rounds(hosts)
    assert len(rounds) == (1 if n == 2 else 2 if n % 2 == 0 else 3)
    for pairs in rounds:
        used = [h for pair in pairs for h in pair]
        assert len(used) == len(set(used))
    edges = [pair for pairs in rounds for pair in pairs]
    for h in hosts:
        partners = {b if a == h else a for a, b in edges if h in (a, b)}
        assert len(partners) == (1 if n == 2 else 2), (h, partners)


def test_round_vars_pair_each_host_with_its_partner() -> None:
    rounds = ring_rounds(["a", "b", "c"])
    got = round_vars(rounds, {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"})
    assert got[0] == {
        "a": {"peer": "b", "address": "10.0.0.1", "peer_address": "10.0.0.2", "listen": True},
        "b": {"peer": "a", "address": "10.0.0.2", "peer_address": "10.0.0.1", "listen": False}}
    assert [sorted(r) for r in got] == [["a", "b"], ["b", "c"], ["a", "c"]]


def pair(a: str, b: str, gbps: float | None, number: int = 1) -> PairResult:
    return PairResult(a, b, number, gbps, gbps, "" if gbps is not None else "a: no result")


def test_the_node_slow_with_every_partner_is_the_only_suspect() -> None:
    # The default simulated cluster: two GPU nodes and a login node; sim-gpu-1 throttled.
    pairs = [pair("sim-gpu-1", "sim-gpu-2", 0.19), pair("sim-gpu-2", "sim-login-1", 9.8, 2),
             pair("sim-gpu-1", "sim-login-1", 0.2, 3)]
    verdict = judge(pairs)
    assert [(s.host, s.component) for s in verdict.suspects] == [("sim-gpu-1", "node")]
    [suspect] = verdict.suspects
    assert suspect.measured == 0.2 and suspect.expected == pytest.approx(9.8 * 0.75)
    assert suspect.evidence == ["sim-gpu-1<->sim-gpu-2: 0.19 Gbit/s",
                                "sim-gpu-1<->sim-login-1: 0.2 Gbit/s"]


def test_a_healthy_fleet_within_the_margin_has_no_suspect() -> None:
    hosts = [f"n{i}" for i in range(6)]
    # As measured between healthy simulated nodes: up to 14% apart.
    figures = [14.2, 12.2, 13.9, 14.3, 12.4, 13.6]
    pairs = [pair(hosts[i], hosts[(i + 1) % 6], figures[i]) for i in range(6)]
    assert judge(pairs).suspects == []


def test_a_slow_link_between_two_good_nodes_is_named_as_the_link() -> None:
    hosts = [f"n{i}" for i in range(6)]
    figures = [10.0, 10.0, 3.0, 10.0, 10.0, 10.0]  # n2<->n3 only
    pairs = [pair(hosts[i], hosts[(i + 1) % 6], figures[i]) for i in range(6)]
    verdict = judge(pairs)
    assert [(s.host, s.component) for s in verdict.suspects] == [("n2-n3", "link:n2-n3")]


def test_a_node_no_partner_reached_is_a_suspect() -> None:
    pairs = [pair("a", "b", 10.0), pair("b", "c", None, 2), pair("a", "c", None, 3)]
    verdict = judge(pairs)
    assert [(s.host, s.component) for s in verdict.suspects] == [("c", "node")]
    assert verdict.suspects[0].measured is None


def test_two_nodes_name_the_link_never_a_node() -> None:
    verdict = judge([pair("a", "b", 10.0)])
    assert verdict.suspects == []
    assert judge([pair("a", "b", None)]).suspects[0].component == "link:a-b"


def test_the_margin_is_where_the_line_is() -> None:
    pairs = [pair("a", "b", 10.0), pair("b", "c", 10.0, 2), pair("a", "c", 8.5, 3)]
    assert judge(pairs, margin=0.10).suspects[0].component == "link:a-c"
    assert judge(pairs, margin=0.20).suspects == []


def test_what_each_side_published_is_matched_to_its_planned_pair() -> None:
    rounds = ring_rounds(["a", "b", "c"])
    reports = {
        "a": {"certify": {"pairs": [
            {"round": 1, "peer": "b", "rc": 0, "result": {"rx_gbps": 9.0}},
            {"round": 3, "peer": "c", "rc": 1, "result": {"error": "TimeoutError: timed out"}}]}},
        "b": {"certify": {"pairs": [
            {"round": 1, "peer": "a", "rc": 0, "result": {"rx_gbps": 8.0}},
            {"round": 2, "peer": "c", "rc": 0, "result": {"rx_gbps": 7.0}}]}},
    }
    got = {(p.a, p.b): p for p in pair_results(rounds, reports)}
    assert got[("a", "b")].gbps == 8.0  # the slower direction
    assert got[("b", "c")].gbps is None
    assert got[("b", "c")].error == "c: no result (the node did not run its side)"
    # The ring closes with c and a (c listens); a timed out, c said nothing.
    assert got[("c", "a")].gbps is None
    assert got[("c", "a")].error == ("c: no result (the node did not run its side); "
                                     "a: TimeoutError: timed out")


def test_slow_pairs_are_measured_again_in_rounds_of_disjoint_pairs() -> None:
    assert disjoint_rounds([("a", "b"), ("b", "c"), ("c", "d"), ("a", "c")]) == [
        [("a", "b"), ("c", "d")], [("b", "c")], [("a", "c")]]
    assert disjoint_rounds([]) == []


def test_a_pair_slow_once_and_fine_again_is_no_suspect() -> None:
    # As measured on the simulated cluster under load: one healthy pair 25% below the others.
    first = [pair("g1", "g2", 7.7), pair("g2", "login", 10.3, 2), pair("login", "g1", 9.5, 3)]
    assert [s.component for s in judge(first).suspects] == ["link:g1-g2"]
    merged = better_of(first, [pair("g1", "g2", 10.1)])
    assert merged[0].gbps == 10.1 and merged[0].first_gbps == 7.7 and merged[0].retested
    assert merged[1] == first[1]
    assert judge(merged).suspects == []


def test_a_node_slow_twice_stays_the_suspect() -> None:
    first = [pair("g1", "g2", 0.19), pair("g2", "login", 12.0, 2), pair("login", "g1", 0.19, 3)]
    merged = better_of(first, [pair("g1", "g2", 0.2), pair("login", "g1", None, 3)])
    assert [(p.gbps, p.first_gbps) for p in merged if p.retested] == [(0.2, 0.19), (0.19, 0.19)]
    assert [(s.host, s.component) for s in judge(merged).suspects] == [("g1", "node")]


def test_the_fleets_own_noise_is_no_outlier() -> None:
    hosts = [f"n{i}" for i in range(6)]
    figures = [14.2, 12.2, 13.9, 14.3, 12.4, 13.6]  # healthy simulated pairs
    pairs = [pair(hosts[i], hosts[(i + 1) % 6], figures[i]) for i in range(6)]
    assert judge(pairs).outliers == []


def test_a_node_within_the_floor_but_below_its_peers_is_an_outlier_not_a_suspect() -> None:
    # sim-gpu-1 throttled to 6 Gbit/s with the floor at 40% of the median (--margin 60).
    pairs = [pair("sim-gpu-1", "sim-gpu-2", 5.9), pair("sim-gpu-2", "sim-login-1", 13.1, 2),
             pair("sim-gpu-1", "sim-login-1", 5.8, 3)]
    verdict = judge(pairs, margin=0.60)
    assert verdict.suspects == []
    [o] = verdict.outliers
    assert (o.host, o.measured, o.median) == ("sim-gpu-1", 5.9, 13.1)
    assert o.mad == 0.0 and o.robust_z is None  # two of three nodes alike: no spread
    # At the default floor (25%) the same node is a suspect, and not an outlier as well.
    verdict = judge(pairs)
    assert [s.host for s in verdict.suspects] == ["sim-gpu-1"] and verdict.outliers == []


@pytest.mark.parametrize(("figure", "flagged"), [
    (11.0, True),    # 14.7% below the median (12.9), 4.3 robust sd below
    (11.8, False),   # 8.5% below: inside the margin
])
def test_an_outlier_is_below_both_the_margin_and_the_spread(figure: float,
                                                            flagged: bool) -> None:
    nodes = {"a": 13.0, "b": 13.2, "c": 12.8, "d": 13.4, "e": 12.6, "x": figure}
    got = outliers(nodes, set())
    assert [o.host for o in got] == (["x"] if flagged else [])
    if flagged:
        assert got[0].robust_z is not None and got[0].robust_z > 3


def test_a_wide_fleet_flags_no_node_inside_its_spread() -> None:
    # 14% below the median (11), but the fleet itself spreads that wide: 0.45 robust sd.
    nodes = {"a": 10.0, "b": 14.0, "c": 12.0, "d": 16.0, "e": 8.0, "x": 9.5}
    assert outliers(nodes, set()) == []


def test_fewer_than_three_nodes_have_no_outlier_and_suspects_are_excluded() -> None:
    assert outliers({"a": 13.0, "b": 2.0}, set()) == []
    # No spread at all: the margin alone decides.
    assert outliers({"a": 13.0, "b": 13.0, "c": 12.5}, set()) == []
    assert outliers({"a": 13.0, "b": 13.0, "c": 2.0}, {"c"}) == []
    assert [o.host for o in outliers({"a": 13.0, "b": 13.0, "c": 2.0, "d": None}, set())] == [
        "c"]
