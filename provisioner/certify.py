"""`provisioner certify`: name the node (or the link) that slows the cluster's network.

Every node of the inventory (GPU nodes, and CPU nodes such as a login node, which serve as
reference peers) is measured against two others: the nodes in a ring, each ring edge a pair,
the edges split into rounds of disjoint pairs (two rounds for an even count, three for an odd
one), every pair of a round at once. A pair sends TCP both ways at once for a few seconds
(roles/certify/files/gpuc_pairbw.py); its figure is the slower direction.

Judging (one place, here): a node's figure is its best pair. The reference is the median of
the nodes' figures, so one bad node (or a few) cannot drag it. A node whose best pair is more
than MARGIN (25%) below the reference was slow with every partner: it is the suspect. A pair more
than MARGIN below the reference whose two nodes each have a pair at the reference is a suspect
link. With two nodes there is one pair: a slow one names the link, never a node (nothing
points at either). A pair that measured nothing (a partner that never came) implicates its
nodes like a slow one.

Before anything is named, every slow pair is measured again (its own rounds of disjoint pairs,
twice as long, up to RETESTS times while it stays slow) and keeps its best figure: a pair slowed
for a moment by something else on its nodes is not a fault, a slow link or node is slow every
time. On the simulated cluster under load (2 cores, molecule beside it) one healthy pair once
measured 25% below the others, and another 29% below twice in a row.

Outliers (judged here too): a node that is no suspect, yet whose best pair is more than
OUTLIER_MARGIN (10%) below the fleet's median best pair and more than OUTLIER_Z robust standard
deviations (1.4826 times the median absolute deviation of the nodes' best pairs) below it, is
flagged: within spec, slower than its peers. Both tests must hold, so a fleet whose healthy
pairs spread by more than the margin (the simulated one, 2 cores: 14%) does not flag its own
noise, and a fleet with no spread at all still needs the margin. With fewer than three nodes
there is no fleet to be an outlier of. Drift (provisioner.history): a node more than
OUTLIER_MARGIN below the median of its own recent runs. Outliers and drift are warnings: they
are shown and saved (checks with status warn, passing JUnit cases); the exit status is the
suspects'.

The figures are TCP over the nodes' cluster addresses (ansible_host): what the Slurm daemons,
the smoke job's rendezvous, NCCL's bootstrap and gloo use. They are not NCCL's GPU bandwidth.

Levels: ``quick`` (the default) is the pairs alone; ``burn-in`` adds, after the pairs, the GPU
nodes' burn-in (provisioner/burnin.py judges it): its failed checks are suspects too, their
component the GPU they name (``gpu:<index>``) or ``node``, drained with ``--drain`` like the
pairs' suspect nodes.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner import burnin, history, slurm
from provisioner.errors import InputError
from provisioner.plan import ClusterPlan
from provisioner.report import Check, Report, new_run_id, runs_dir
from provisioner.results import PlaybookResult, ProgressCallback
from provisioner.runner import run_playbook

PLAYBOOK = "certify.yml"
DRAIN_PLAYBOOK = "certify_drain.yml"
CHECK = "pair_tcp_bw"
# A node (or link) more than this far below the reference is a suspect. One 4-second TCP
# measurement per pair is noisy: between healthy nodes of the simulated cluster (2 cores, at the
# commit that added certify, 2026-11-27) the pairs spread from 12.2 to 14.3 Gbit/s, 14% under
# the best; a bad link or node is several times slower, not a few percent.
MARGIN = 0.25
# Outliers: more than this far below the fleet's median best pair (and OUTLIER_Z robust
# standard deviations below it) is flagged, not failed; drift uses the same margin against the
# node's own recent runs.
OUTLIER_MARGIN = 0.10
OUTLIER_Z = 3.0
# The median absolute deviation times this estimates the standard deviation of normal data.
MAD_TO_SIGMA = 1.4826
SECONDS = 4
# A slow pair is measured again up to this many times, each time for twice SECONDS, and keeps
# its best figure: on the simulated cluster under load (2 cores, molecule converging beside it)
# a healthy pair measured slow twice in a row; a bad link or node is slow every time.
RETESTS = 2
PORT = 29599
QUICK, BURN_IN = "quick", "burn-in"
LEVELS = (QUICK, BURN_IN)


@dataclass(frozen=True)
class PairResult:
    a: str
    b: str
    round: int
    # Gbit/s each side received (the other's egress); None: that side measured nothing.
    a_rx_gbps: float | None
    b_rx_gbps: float | None
    error: str = ""
    # Measured again because it was slow: the first figure (this one is the better of two).
    first_gbps: float | None = None
    retested: bool = False

    @property
    def gbps(self) -> float | None:
        """The pair's figure: its slower direction (None when a side measured nothing)."""
        if self.a_rx_gbps is None or self.b_rx_gbps is None:
            return None
        return min(self.a_rx_gbps, self.b_rx_gbps)


@dataclass(frozen=True)
class Suspect:
    host: str
    component: str
    check: str
    measured: float | None
    expected: float
    evidence: list[str]


@dataclass(frozen=True)
class Outlier:
    host: str
    check: str
    measured: float
    median: float
    # The fleet's spread: the median absolute deviation of the nodes' best pairs.
    mad: float
    # How many robust standard deviations below the median (None: the fleet has no spread).
    robust_z: float | None


@dataclass
class Verdict:
    reference_gbps: float | None
    margin: float
    node_gbps: dict[str, float | None]
    suspects: list[Suspect] = field(default_factory=list)
    outliers: list[Outlier] = field(default_factory=list)

    @property
    def floor(self) -> float | None:
        """The line below which a pair is slow (None: nothing was measured)."""
        return None if self.reference_gbps is None else self.reference_gbps * (1 - self.margin)

    def is_slow(self, pair: PairResult) -> bool:
        """A pair that measured nothing, or below the floor."""
        floor = self.floor
        return pair.gbps is None or (floor is not None and pair.gbps < floor)


def ring_rounds(hosts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """The ring's edges (host i with host i+1, the last with the first) in rounds of disjoint
    pairs: even edges, then odd ones, then (odd count) the closing edge alone. Two hosts: one
    pair; fewer: none."""
    n = len(hosts)
    if n < 2:
        return []
    if n == 2:
        return [[(hosts[0], hosts[1])]]
    edges = [(hosts[i], hosts[(i + 1) % n]) for i in range(n)]
    if n % 2 == 0:
        return [edges[0::2], edges[1::2]]
    return [edges[0:n - 1:2], edges[1:n - 1:2], [edges[n - 1]]]


def disjoint_rounds(pairs: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """``pairs`` in rounds where no host is in two pairs (each pair in the first round that
    has room for it)."""
    rounds: list[list[tuple[str, str]]] = []
    for a, b in pairs:
        for existing in rounds:
            if not {a, b} & {h for pair in existing for h in pair}:
                existing.append((a, b))
                break
        else:
            rounds.append([(a, b)])
    return rounds


def better_of(first: Sequence[PairResult], again: Sequence[PairResult]) -> list[PairResult]:
    """Each pair of ``first`` with its figure from ``again`` where that is better (a pair not
    measured again stays as it was)."""
    retest = {(p.a, p.b): p for p in again}
    out = []
    for p in first:
        q = retest.get((p.a, p.b))
        if q is None:
            out.append(p)
            continue
        best = q if (q.gbps or -1.0) > (p.gbps or -1.0) else p
        out.append(PairResult(p.a, p.b, p.round, best.a_rx_gbps, best.b_rx_gbps,
                              best.error, first_gbps=p.first_gbps if p.retested else p.gbps,
                              retested=True))
    return out


def round_vars(rounds: Sequence[Sequence[tuple[str, str]]],
               addresses: Mapping[str, str]) -> list[dict[str, dict[str, Any]]]:
    """certify_rounds for the role: each host of a round with its partner; the pair's first
    host listens."""
    out = []
    for pairs in rounds:
        entry: dict[str, dict[str, Any]] = {}
        for a, b in pairs:
            entry[a] = {"peer": b, "address": addresses[a], "peer_address": addresses[b],
                        "listen": True}
            entry[b] = {"peer": a, "address": addresses[b], "peer_address": addresses[a],
                        "listen": False}
        out.append(entry)
    return out


def pair_results(rounds: Sequence[Sequence[tuple[str, str]]],
                 reports: Mapping[str, Mapping[str, Any]]) -> list[PairResult]:
    """Each planned pair with what its two sides published (certify_report.pairs)."""

    def side(host: str, peer: str, number: int) -> tuple[float | None, str]:
        for entry in ((reports.get(host) or {}).get("certify") or {}).get("pairs") or []:
            if entry.get("round") == number and entry.get("peer") == peer:
                result = entry.get("result") or {}
                if entry.get("rc") == 0 and isinstance(result.get("rx_gbps"), (int, float)):
                    return float(result["rx_gbps"]), ""
                return None, f"{host}: {result.get('error') or 'exit ' + str(entry.get('rc'))}"
        return None, f"{host}: no result (the node did not run its side)"

    out = []
    for number, pairs in enumerate(rounds, start=1):
        for a, b in pairs:
            a_rx, a_err = side(a, b, number)
            b_rx, b_err = side(b, a, number)
            out.append(PairResult(a, b, number, a_rx, b_rx, "; ".join(e for e in (a_err, b_err)
                                                                        if e)))
    return out


def _describe(pair: PairResult) -> str:
    figure = f"{pair.gbps:.3g} Gbit/s" if pair.gbps is not None else f"nothing ({pair.error})"
    return f"{pair.a}<->{pair.b}: {figure}"


def outliers(node_gbps: Mapping[str, float | None], exclude: set[str],
             margin: float = OUTLIER_MARGIN) -> list[Outlier]:
    """The nodes (not in ``exclude``, the suspects) more than ``margin`` and OUTLIER_Z robust
    standard deviations below the median of the nodes' figures; none with fewer than three."""
    figures = {h: g for h, g in node_gbps.items() if g is not None}
    if len(figures) < 3:
        return []
    median = statistics.median(figures.values())
    mad = statistics.median(abs(g - median) for g in figures.values())
    out = []
    for host, gbps in sorted(figures.items()):
        if host in exclude or gbps >= median * (1 - margin):
            continue
        z = (median - gbps) / (MAD_TO_SIGMA * mad) if mad > 0 else None
        if z is None or z > OUTLIER_Z:
            out.append(Outlier(host, CHECK, gbps, round(median, 4), round(mad, 4),
                               None if z is None else round(z, 2)))
    return out


def judge(pairs: Sequence[PairResult], margin: float = MARGIN,
          outlier_margin: float = OUTLIER_MARGIN) -> Verdict:
    """Suspect nodes and links from the pairs (see the module's description)."""
    hosts = sorted({h for p in pairs for h in (p.a, p.b)})
    mine = {h: [p for p in pairs if h in (p.a, p.b)] for h in hosts}
    node_gbps: dict[str, float | None] = {
        h: max((p.gbps for p in mine[h] if p.gbps is not None), default=None) for h in hosts}
    figures = [g for g in node_gbps.values() if g is not None]
    reference = statistics.median(figures) if figures else None
    verdict = Verdict(reference, margin, node_gbps)
    if reference is None:
        # Nothing measured anywhere: every pair is evidence against both its nodes alike.
        for p in pairs:
            verdict.suspects.append(Suspect(f"{p.a}-{p.b}", f"link:{p.a}-{p.b}", CHECK, None,
                                            0.0, [_describe(p)]))
        return verdict
    floor = reference * (1 - margin)
    slow = verdict.is_slow
    suspects = set()
    if len(hosts) > 2:
        for h in hosts:
            if all(slow(p) for p in mine[h]):
                suspects.add(h)
                verdict.suspects.append(Suspect(
                    h, "node", CHECK, node_gbps[h], round(floor, 4),
                    [_describe(p) for p in mine[h]]))
    for p in pairs:
        if slow(p) and p.a not in suspects and p.b not in suspects:
            verdict.suspects.append(Suspect(
                f"{p.a}-{p.b}", f"link:{p.a}-{p.b}", CHECK, p.gbps, round(floor, 4),
                [_describe(p)] + [_describe(q) for q in pairs
                                  if q is not p and (p.a in (q.a, q.b) or p.b in (q.a, q.b))]))
    verdict.outliers = outliers(node_gbps, suspects, outlier_margin)
    return verdict


@dataclass
class CertifyRun:
    report: Report
    run_dir: Path
    verdict: Verdict
    pairs: list[PairResult]
    drained: dict[str, str] = field(default_factory=dict)
    # --level burn-in: the GPU nodes' burn-in, judged (None at the quick level).
    burn_in: burnin.BurnIn | None = None


def _addresses(plan: ClusterPlan) -> dict[str, str]:
    return {name: str(entry.connection.get("ansible_host") or name)
            for name, entry in plan.inventory.hosts.items()}


def check_input(plan: ClusterPlan, margin: float,
                outlier_margin: float = OUTLIER_MARGIN, level: str = QUICK) -> None:
    """One line (InputError) for what certify cannot run with, before anything starts."""
    if level not in LEVELS:
        raise InputError(f"certify: --level must be one of {', '.join(LEVELS)}, not {level!r}")
    if len(plan.hosts) < 2:
        raise InputError("certify: the inventory has one node; pairs need at least two")
    for option, value in (("--margin", margin), ("--outlier-margin", outlier_margin)):
        if not 0 < value < 1:
            raise InputError(f"certify: {option} must be between 0 and 100 percent, not "
                             f"{value * 100:g}")


def _history_points(report: Report, verdict: Verdict) -> list[history.Point]:
    return [history.Point(report.run_id, report.started_at, host, CHECK, gbps, "Gbit/s",
                          report.simulated, verdict.reference_gbps)
            for host, gbps in sorted(verdict.node_gbps.items())]


def _suspect_checks(report: Report, verdict: Verdict, seconds: int) -> None:
    for s in verdict.suspects:
        report.add_check(Check(
            host=s.host, phase="certify", name=f"{s.check}:{s.component}", status="fail",
            measured=s.measured, expected=s.expected,
            detail=(f"{s.component} below {(1 - verdict.margin) * 100:g}% of the fleet's median "
                    f"best pair ({verdict.reference_gbps} Gbit/s, TCP both ways at once, "
                    f"{seconds} s): " + "; ".join(s.evidence))))


def _record(report: Report, points: Sequence[history.Point]) -> None:
    """The run's figures into the ledger; a ledger that cannot be written is a note."""
    try:
        history.record(points)
    except OSError as exc:
        report.add_note(f"history: not recorded ({history.ledger_path()}: "
                        f"{exc.strerror or exc})")


def _warnings(report: Report, verdict: Verdict, drift: Sequence[history.Drift],
              outlier_margin: float) -> None:
    below = f"more than {outlier_margin * 100:g}% below"
    for o in verdict.outliers:
        spread = (f"{o.robust_z} robust standard deviations" if o.robust_z is not None
                  else "the fleet has no spread")
        report.add_check(Check(
            host=o.host, phase="certify", name=f"{o.check}:outlier", status="warn",
            measured=o.measured, expected=round(o.median * (1 - outlier_margin), 4),
            detail=(f"best pair {o.measured} Gbit/s, {below} the fleet's median best pair "
                    f"({o.median} Gbit/s; {spread}, MAD {o.mad}): within the floor, slower "
                    "than its peers")))
    for d in drift:
        usual = (f"its usual standing, {d.usual_standing * 100:.0f}% of the fleet's median best "
                 f"pair over its last {len(d.runs)} runs ({d.reference} Gbit/s against this "
                 "run's fleet)" if d.usual_standing is not None else
                 f"the median of its own last {len(d.runs)} runs ({d.reference} Gbit/s)")
        report.add_check(Check(
            host=d.host, phase="certify", name=f"{d.check}:drift", status="warn",
            measured=d.measured, expected=round(d.reference * (1 - outlier_margin), 4),
            detail=f"best pair {d.measured} Gbit/s, {below} {usual}: {', '.join(d.runs)}"))


def burn_in_suspects(burn: burnin.BurnIn) -> list[Suspect]:
    """A suspect for each failed burn-in check: one per GPU it names, else its node."""
    out = []
    for c in burn.failed:
        measured = c.measured if isinstance(c.measured, (int, float)) else None
        # The soak's expectation is a band [low, high]: its low end stands for it here.
        bound = c.expected[0] if isinstance(c.expected, list) and c.expected else c.expected
        expected = bound if isinstance(bound, (int, float)) else 0.0
        for component in [f"gpu:{g}" for g in c.gpus] or ["node"]:
            out.append(Suspect(c.host, component, c.name, measured, expected, [c.detail]))
    return out


def _burn_in(plan: ClusterPlan, report: Report, run_dir: Path, seconds: int,
             on_progress: ProgressCallback | None) -> burnin.BurnIn:
    """The burn-in after the pairs: its playbook a phase of the report, each check a report
    check (phase ``certify burn-in``)."""
    burn = burnin.run(plan, run_dir, seconds, on_progress)
    if burn.result is not None:
        report.add_phase("certify burn-in", burn.result)
    report.add_checks(Check(host=c.host, phase="certify burn-in", name=c.name, status=c.status,
                            measured=c.measured, expected=c.expected, detail=c.detail)
                      for c in burn.checks)
    return burn


def _measure(plan: ClusterPlan, report: Report, run_dir: Path, *, margin: float,
             outlier_margin: float, seconds: int, timeout_s: int,
             on_progress: ProgressCallback | None) -> tuple[list[PairResult], Verdict, bool]:
    """Every pair measured in ring rounds, and a slow pair measured again up to RETESTS times,
    each time for twice as long, keeping its best figure; each playbook a phase of the report.
    The pairs, their verdict, and whether every playbook ran to its end."""
    hosts = sorted(plan.hosts)
    rounds = ring_rounds(hosts)
    addresses = _addresses(plan)
    extravars = {"certify_rounds": round_vars(rounds, addresses),
                 "certify_seconds": seconds, "certify_port": PORT,
                 "certify_hosts": ":".join(hosts)}
    result: PlaybookResult = run_playbook(PLAYBOOK, [plan.inventory.source], run_dir,
                                          "00-certify", extravars=extravars,
                                          timeout=timeout_s, on_progress=on_progress)
    report.add_phase("certify", result)
    pairs = pair_results(rounds, result.reports)
    verdict = judge(pairs, margin, outlier_margin)
    ok = result.ok
    for attempt in range(1, RETESTS + 1):
        slow = [(p.a, p.b) for p in pairs if verdict.is_slow(p)]
        if not slow:
            break
        again_rounds = disjoint_rounds(slow)
        again = run_playbook(PLAYBOOK, [plan.inventory.source], run_dir,
                             f"{attempt:02d}-certify-again",
                             extravars={**extravars, "certify_seconds": seconds * 2,
                                        "certify_rounds": round_vars(again_rounds, addresses)},
                             timeout=timeout_s, on_progress=on_progress)
        report.add_phase(f"certify again (slow pairs, {attempt} of {RETESTS})", again)
        ok = ok and again.ok
        pairs = better_of(pairs, pair_results(again_rounds, again.reports))
        verdict = judge(pairs, margin, outlier_margin)
    return pairs, verdict, ok


def run(plan: ClusterPlan, *, drain: bool = False, margin: float = MARGIN,
        outlier_margin: float = OUTLIER_MARGIN, seconds: int = SECONDS,
        on_progress: ProgressCallback | None = None, timeout_s: int = 900,
        level: str = QUICK, burn_seconds: int = burnin.BURN_SECONDS) -> CertifyRun:
    check_input(plan, margin, outlier_margin, level)
    run_id = new_run_id()
    run_dir = runs_dir() / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    report = Report.start(run_id, "certify", str(plan.inventory.source), plan.simulated)
    pairs, verdict, ok = _measure(plan, report, run_dir, margin=margin,
                                  outlier_margin=outlier_margin, seconds=seconds,
                                  timeout_s=timeout_s, on_progress=on_progress)
    _suspect_checks(report, verdict, seconds)
    burn = _burn_in(plan, report, run_dir, burn_seconds, on_progress) if level == BURN_IN \
        else None
    burned = burn_in_suspects(burn) if burn is not None else []
    ok = ok and (burn is None or burn.result is None or burn.result.ok)
    points = _history_points(report, verdict)
    drift = history.drift(points, history.load(check=CHECK), outlier_margin)
    _warnings(report, verdict, drift, outlier_margin)
    drained = run_drain(plan, run_dir, verdict, burned) if drain else {}
    report.record_certify({
        "check": CHECK, "level": level, "margin": margin, "outlier_margin": outlier_margin,
        "seconds": seconds,
        "reference_gbps": verdict.reference_gbps, "node_gbps": verdict.node_gbps,
        "pairs": [{**asdict(p), "gbps": p.gbps} for p in pairs],
        "suspects": [asdict(s) for s in [*verdict.suspects, *burned]],
        "outliers": [asdict(o) for o in verdict.outliers],
        "drift": [asdict(d) for d in drift],
        "drained": drained,
        **({"burnin": burnin.section(burn, burn_seconds)} if burn is not None else {}),
    })
    _record(report, points)
    code = 1 if verdict.suspects or burned or not ok else 0
    report.finish(code)
    report.save(run_dir)
    return CertifyRun(report, run_dir, verdict, pairs, drained, burn)


def run_drain(plan: ClusterPlan, run_dir: Path, verdict: Verdict,
              burned: Sequence[Suspect] = ()) -> dict[str, str]:
    """Drain the suspect nodes in Slurm with the check as the reason; {} without Slurm. A node
    with burn-in suspects (``burned``: its GPUs or itself) is drained with the first one."""
    groups = {g for e in plan.inventory.hosts.values() for g in e.groups}
    nodes = {s.host: slurm.reason(f"gpuc certify {s.check}: best pair {s.measured} Gbit/s < "
                                  f"{s.expected} Gbit/s")
             for s in verdict.suspects if s.component == "node"
             and s.host in plan.hosts and plan.hosts[s.host].kind == "gpu"}
    for s in burned:
        if s.host in plan.hosts and plan.hosts[s.host].kind == "gpu":
            nodes.setdefault(s.host, slurm.reason(f"gpuc certify {s.check}: {s.component} "
                                                  f"measured {s.measured}, expected "
                                                  f"{s.expected}"))
    if not nodes or "slurm_controller" not in groups:
        return {}
    result = run_playbook(DRAIN_PLAYBOOK, [plan.inventory.source], run_dir, "02-drain",
                          extravars={"certify_drain": nodes}, timeout=300)
    return nodes if result.ok else {}
