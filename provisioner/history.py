"""Each node's certify figures over its runs: one ledger under the runs directory.

Every certify run appends one line per node and check to ``<runs>/history/certify.jsonl``
(JSON Lines, 0600 in a 0700 directory, like the reports): the run, when it started, the host,
the check, the figure and its unit, and whether the cluster was simulated. A run directory can
be pruned; the ledger keeps the figures. ``provisioner history [--host H]`` reads it, and
certify judges drift from it (a node more than the margin below its own recent median).

Drift judging (one place, here): a node's standing in a run is its figure over that run's fleet
reference (certify's median best pair). Its usual standing is the median of its last
``WINDOW`` standings on the same check from earlier runs, simulated and real kept apart; a node
with fewer than ``MIN_RUNS`` earlier figures has no usual standing yet (nothing is judged). A
node drifted when its standing now is more than the margin below its usual one: it is slower
than it used to be against the same fleet. Judging the standing rather than the raw figure
keeps what moves every node at once (a busy controller, the simulated cluster's 2 cores) from
flagging them all; a fleet that slows as a whole is the reference's own history, not a node's.
Ledger lines without a reference (none is recorded when nothing was measured) are judged on
their raw figures.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from provisioner.errors import InputError
from provisioner.report import private_dir, runs_dir

LEDGER = "certify.jsonl"
# A node's own reference: the median of its last WINDOW figures (earlier runs, same check).
WINDOW = 5
# Fewer earlier figures than this: no reference yet (a median of one or two runs is one
# measurement's noise).
MIN_RUNS = 3


@dataclass(frozen=True)
class Point:
    run_id: str
    at: str
    host: str
    check: str
    value: float | None
    unit: str
    simulated: bool
    # The run's fleet reference on the same check (certify: the median best pair); None: none.
    reference: float | None = None

    @property
    def standing(self) -> float | None:
        """The figure over the run's reference (None without either)."""
        if self.value is None or not self.reference:
            return None
        return self.value / self.reference


@dataclass(frozen=True)
class Drift:
    host: str
    check: str
    measured: float | None
    # What the node would measure at its usual standing against this run's fleet (or, for
    # lines without a reference, the median of its raw figures).
    reference: float
    runs: list[str]  # the earlier runs the usual standing is the median of
    usual_standing: float | None = None  # the median standing (None: raw figures judged)


def ledger_path(root: Path | None = None) -> Path:
    return (root or runs_dir()) / "history" / LEDGER


def record(points: Iterable[Point], root: Path | None = None) -> Path:
    """Append ``points`` to the ledger (created 0600 in a 0700 directory)."""
    path = ledger_path(root)
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        for point in points:
            handle.write(json.dumps(asdict(point), sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return path


def _point(entry: Any) -> Point | None:
    if not isinstance(entry, dict):
        return None
    value, ref = entry.get("value"), entry.get("reference")
    try:
        return Point(str(entry["run_id"]), str(entry["at"]), str(entry["host"]),
                     str(entry["check"]),
                     float(value) if isinstance(value, (int, float)) else None,
                     str(entry.get("unit") or ""), bool(entry.get("simulated")),
                     float(ref) if isinstance(ref, (int, float)) else None)
    except KeyError:
        return None


def load(host: str | None = None, check: str | None = None,
         root: Path | None = None) -> list[Point]:
    """The ledger's points, oldest first (optionally one host's, one check's). A line that is
    not a point (a write cut short) is skipped; no ledger: no points."""
    path = ledger_path(root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise InputError(f"history: cannot read {path}: {exc.strerror}") from None
    points = []
    for line in text.splitlines():
        try:
            point = _point(json.loads(line))
        except json.JSONDecodeError:
            continue
        if point is None or (host and point.host != host) or (check and point.check != check):
            continue
        points.append(point)
    points.sort(key=lambda p: (p.at, p.run_id))
    return points


def series(points: Sequence[Point]) -> dict[str, list[Point]]:
    """Points by host (each host's oldest first), hosts in name order."""
    out: dict[str, list[Point]] = {}
    for point in sorted(points, key=lambda p: (p.host, p.at, p.run_id)):
        out.setdefault(point.host, []).append(point)
    return out


def reference(earlier: Sequence[Point]) -> tuple[float, list[str]] | None:
    """The median of the last WINDOW measured figures of ``earlier`` (one host's, one check's,
    oldest first) and their runs; None with fewer than MIN_RUNS."""
    measured = [p for p in earlier if p.value is not None][-WINDOW:]
    if len(measured) < MIN_RUNS:
        return None
    return statistics.median(p.value for p in measured if p.value is not None), [
        p.run_id for p in measured]


def usual_standing(earlier: Sequence[Point]) -> tuple[float, list[str]] | None:
    """The median of the last WINDOW standings of ``earlier`` and their runs; None with fewer
    than MIN_RUNS."""
    ranked = [p for p in earlier if p.standing is not None][-WINDOW:]
    if len(ranked) < MIN_RUNS:
        return None
    return statistics.median(p.standing for p in ranked if p.standing is not None), [
        p.run_id for p in ranked]


def drift(now: Sequence[Point], earlier: Sequence[Point], margin: float) -> list[Drift]:
    """The points of ``now`` whose standing is more than ``margin`` below their host's usual
    standing (same check, simulated with simulated, real with real); points without a
    reference are judged on their raw figures. A point that measured nothing is judged by the
    run's own checks, not here."""
    out = []
    for point in now:
        if point.value is None:
            continue
        mine = [p for p in earlier if p.host == point.host and p.check == point.check
                and p.simulated == point.simulated and p.run_id != point.run_id]
        usual = usual_standing(mine) if point.standing is not None else None
        if usual is not None and point.reference:
            expected = usual[0] * point.reference
            if point.value < expected * (1 - margin):
                out.append(Drift(point.host, point.check, point.value, round(expected, 4),
                                 usual[1], round(usual[0], 4)))
            continue
        raw = reference(mine) if point.standing is None else None
        if raw is not None and point.value < raw[0] * (1 - margin):
            out.append(Drift(point.host, point.check, point.value, round(raw[0], 4), raw[1]))
    return out
