"""Each host's last error counter reading, for `validate` to judge the rise since.

`validate` reads nothing back from the nodes' disks and writes nothing there: the gpu_validate
role publishes the node's reading of its InfiniBand and PCIe AER error counters with its checks
(``gpu_validate_report.counters``), the report of the run keeps it under
``hosts.<host>.facts.gpu_validate.counters``, and the next run that validates the host passes
it back as ``gpu_validate_last_readings`` (an extra variable, ``{host: reading}``). A host no
earlier report of this inventory has a reading for gets none: its reading is the baseline.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

# The role variable the readings travel in (roles/gpu_validate/defaults/main.yml).
EXTRA_VAR = "gpu_validate_last_readings"
# Reports looked at, newest first, before a host is taken to have no earlier reading: a host not
# validated in the last MAX_REPORTS runs starts again from a baseline.
MAX_REPORTS = 200


def _reading_of(report: dict[str, Any], host: str) -> dict[str, Any] | None:
    facts = ((report.get("hosts") or {}).get(host) or {}).get("facts") or {}
    section = facts.get("gpu_validate") if isinstance(facts, dict) else None
    reading = section.get("counters") if isinstance(section, dict) else None
    if (isinstance(reading, dict) and isinstance(reading.get("time"), (int, float))
            and isinstance(reading.get("ib"), dict) and isinstance(reading.get("pcie"), dict)):
        return reading
    return None


def readings_in(hosts: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{host: reading}`` of a report's ``hosts`` section (a run's own earlier validate
    phase: `upgrade` and `remediate` validate more than once per run)."""
    report = {"hosts": dict(hosts)}
    found = {host: _reading_of(report, host) for host in hosts}
    return {host: reading for host, reading in found.items() if reading is not None}


def _newness(path: Path) -> tuple[str, int]:
    try:
        written = path.stat().st_mtime_ns
    except OSError:
        written = 0
    return path.parent.name[:15], written


def last_readings(runs: Path, inventory: Callable[[str], bool], hosts: Iterable[str],
                  skip_run: str | None = None) -> dict[str, dict[str, Any]]:
    """``{host: reading}``: for each of ``hosts``, the reading in the newest saved report of
    the inventory (``inventory`` says whether a report's ``inventory`` field names it) that has
    one. Reports are taken newest first by the UTC time their run id starts with, then by when
    the report was written (two runs can start in the same second, and the rest of an id is
    random); ``skip_run`` (the run asking) and unreadable or foreign files are passed over."""
    wanted = set(hosts)
    found: dict[str, dict[str, Any]] = {}
    if not wanted or not runs.is_dir():
        return found
    candidates = sorted((p for p in runs.glob("*/report.json") if p.parent.name != skip_run),
                        key=_newness, reverse=True)
    for path in candidates[:MAX_REPORTS]:
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if not isinstance(report, dict) or not inventory(str(report.get("inventory"))):
            continue
        for host in sorted(wanted - set(found)):
            reading = _reading_of(report, host)
            if reading is not None:
                found[host] = reading
        if set(found) == wanted:
            break
    return found
