"""The certify ledger (provisioner/history.py): appended privately, read back oldest first, a
torn line skipped; drift judged against a node's own recent median (same check, simulated apart
from real, none before MIN_RUNS earlier runs); `provisioner history` shows it and refuses an
unknown host in one line."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from provisioner import cli, history
from provisioner.history import Point


def point(run: int, host: str, value: float | None, simulated: bool = True,
          check: str = "pair_tcp_bw") -> Point:
    return Point(f"run{run:02d}", f"2026-11-27T10:{run:02d}:00+00:00", host, check, value,
                 "Gbit/s", simulated)


def test_points_are_appended_privately_and_read_back_oldest_first(tmp_path: Path) -> None:
    history.record([point(2, "b", 12.0), point(2, "a", 13.0)], tmp_path)
    history.record([point(1, "a", 11.0), point(3, "a", None)], tmp_path)
    path = history.ledger_path(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    got = history.load(host="a", root=tmp_path)
    assert [(p.run_id, p.value) for p in got] == [("run01", 11.0), ("run02", 13.0),
                                                  ("run03", None)]
    assert list(history.series(history.load(root=tmp_path))) == ["a", "b"]


def test_a_torn_or_foreign_line_is_skipped(tmp_path: Path) -> None:
    history.record([point(1, "a", 11.0)], tmp_path)
    with history.ledger_path(tmp_path).open("a") as handle:
        handle.write('{"run_id": "x", "host": \n')  # cut short
        handle.write(json.dumps({"host": "a"}) + "\n")  # not a point
    assert [p.value for p in history.load(root=tmp_path)] == [11.0]
    assert history.load(root=tmp_path / "none") == []


def test_no_reference_before_enough_earlier_runs() -> None:
    earlier = [point(i, "a", 13.0) for i in range(history.MIN_RUNS - 1)]
    assert history.reference(earlier) is None
    assert history.drift([point(9, "a", 1.0)], earlier, 0.10) == []


def test_a_node_below_its_own_recent_median_drifts() -> None:
    earlier = [point(i, "a", v) for i, v in enumerate([5.0, 13.0, 12.6, 13.4, 12.8, 13.2])]
    [d] = history.drift([point(9, "a", 11.0), point(9, "b", 1.0)], earlier, 0.10)
    # The last WINDOW runs only: the old 5.0 is out of the window.
    assert (d.host, d.measured, d.reference) == ("a", 11.0, 13.0)
    assert d.runs == ["run01", "run02", "run03", "run04", "run05"]
    assert history.drift([point(9, "a", 11.8)], earlier, 0.10) == []  # 9.2% below


def test_drift_compares_simulated_with_simulated_and_one_check_with_itself() -> None:
    earlier = [point(i, "a", 13.0, simulated=False) for i in range(5)]
    earlier += [point(i, "a", 13.0, check="other") for i in range(5)]
    assert history.drift([point(9, "a", 1.0)], earlier, 0.10) == []
    assert [d.host for d in history.drift([point(9, "a", 1.0, simulated=False)], earlier,
                                          0.10)] == ["a"]


def test_history_command_shows_each_node_and_refuses_an_unknown_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path))
    assert cli.main(["history"]) == 0
    assert "no certify figures yet" in capsys.readouterr().out
    history.record([point(i, "sim-gpu-1", 13.0 - i) for i in range(4)]
                   + [point(1, "sim-gpu-2", 12.5)])
    assert cli.main(["history", "--host", "sim-gpu-1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["sim-gpu-1"]
    assert [p["value"] for p in data["sim-gpu-1"]] == [13.0, 12.0, 11.0, 10.0]
    assert cli.main(["history"]) == 0
    out = capsys.readouterr().out
    assert "sim-gpu-2" in out
    assert "sim-gpu-1: median of the 3 runs before the last: 12 Gbit/s" in out
    assert cli.main(["history", "--host", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no certify figures for nope" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def ranked(run: int, host: str, value: float, fleet: float) -> Point:
    return Point(f"run{run:02d}", f"2026-11-27T10:{run:02d}:00+00:00", host, "pair_tcp_bw",
                 value, "Gbit/s", True, fleet)


def test_a_fleet_that_slows_as_a_whole_drifts_no_node() -> None:
    # Every node at the fleet's median before; now the whole fleet measures 25% lower (a busy
    # controller): on raw figures every node would drift, by standing none does.
    earlier = [ranked(i, h, 13.0, 13.0) for i in range(4) for h in ("a", "b", "c")]
    now = [ranked(9, h, 9.8, 9.8) for h in ("a", "b", "c")]
    assert history.drift(now, earlier, 0.10) == []


def test_a_node_that_fell_behind_its_fleet_drifts() -> None:
    earlier = [ranked(i, "a", 13.0, 13.0) for i in range(4)]
    earlier += [ranked(i, "b", 11.7, 13.0) for i in range(4)]  # always 90% of the fleet
    now = [ranked(9, "a", 8.0, 12.5), ranked(9, "b", 11.0, 12.5)]
    [d] = history.drift(now, earlier, 0.10)
    assert (d.host, d.measured, d.reference, d.usual_standing) == ("a", 8.0, 12.5, 1.0)
    # b stands where it always stood (88% against its usual 90%): no drift.
    assert history.drift([ranked(9, "b", 11.0, 12.5)], earlier, 0.10) == []


def test_the_fleet_reference_is_kept_with_each_point(tmp_path: Path) -> None:
    history.record([ranked(1, "a", 8.0, 12.5), point(2, "a", 9.0)], tmp_path)
    got = history.load(root=tmp_path)
    assert [(p.reference, p.standing) for p in got] == [(12.5, 0.64), (None, None)]
