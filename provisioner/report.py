"""The cluster report: built from plan + playbook results, saved as JSON (and JUnit), rendered
for the console. A report from a simulated cluster says so at the top and in every file."""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from provisioner.errors import InputError
from provisioner.paths import workspace_root
from provisioner.results import PlaybookResult

SIMULATED_BANNER = ("SIMULATED CLUSTER: podman containers with simulated GPUs, NVLink and "
                    "InfiniBand. Nothing here measures real hardware.")


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def runs_dir() -> Path:
    env = os.environ.get("PROVISIONER_RUNS_DIR")
    return Path(env) if env else workspace_root() / "runs"


@dataclass
class Check:
    host: str
    phase: str
    name: str
    status: str  # pass | fail | warn | skip
    measured: Any
    expected: Any
    detail: str


@dataclass
class Phase:
    name: str
    playbook: str
    status: str
    rc: int
    duration_s: float
    changed: int
    ok: bool
    hosts: dict[str, dict[str, int]]
    failures: list[dict[str, Any]]


@dataclass
class Report:
    run_id: str
    command: str
    inventory: str
    simulated: bool
    started_at: str
    finished_at: str = ""
    duration_s: float = 0.0
    outcome: str = "running"  # passed | failed
    exit_code: int = 0
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    smoke: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    _t0: float = field(default_factory=time.monotonic, repr=False)

    def add_phase(self, name: str, result: PlaybookResult) -> Phase:
        phase = Phase(
            name=name, playbook=result.playbook, status=result.status, rc=result.rc,
            duration_s=round(result.duration_s, 2), changed=result.changed_total, ok=result.ok,
            hosts={h: asdict(s) for h, s in sorted(result.stats.items())},
            failures=[asdict(f) for f in result.failures],
        )
        if result.dropped_failures:
            phase.failures.append({"host": "*", "task": "*", "unreachable": False,
                                   "message": f"{result.dropped_failures} more failures "
                                              "not shown"})
        self.phases.append(phase)
        for host, sections in sorted(result.reports.items()):
            facts = self.hosts.setdefault(host, {}).setdefault("facts", {})
            facts.update({k: v for k, v in sections.items() if k != "preflight"})
            for section, payload in sections.items():
                for item in (payload or {}).get("checks", []) if isinstance(payload, dict) else []:
                    self.checks.append(Check(host=host, phase=section, name=str(item["name"]),
                                             status=str(item["status"]),
                                             measured=item.get("measured"),
                                             expected=item.get("expected"),
                                             detail=str(item.get("detail", ""))))
        return phase

    def finish(self, exit_code: int) -> None:
        self.exit_code = exit_code
        self.outcome = "passed" if exit_code == 0 else "failed"
        self.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.duration_s = round(time.monotonic() - self._t0, 2)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_t0", None)
        if self.simulated:
            data = {"SIMULATED": SIMULATED_BANNER, **data}
        return data

    def save(self, run_dir: Path) -> Path:
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / "report.json"
        path.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        (run_dir / "junit.xml").write_text(self.junit())
        return path

    def junit(self) -> str:
        """One testsuite per phase with one testcase per host x check (CI dashboards read it)."""
        by_phase: dict[str, list[Check]] = {}
        for c in self.checks:
            by_phase.setdefault(c.phase, []).append(c)
        prefix = "SIMULATED " if self.simulated else ""
        parts = ['<?xml version="1.0" encoding="UTF-8"?>',
                 f'<testsuites name="{escape(prefix)}gpu-cluster-provisioner {self.run_id}">']
        for phase, checks in by_phase.items():
            fails = sum(c.status == "fail" for c in checks)
            skips = sum(c.status == "skip" for c in checks)
            parts.append(f'  <testsuite name="{escape(prefix + phase)}" tests="{len(checks)}" '
                         f'failures="{fails}" skipped="{skips}">')
            for c in checks:
                name = escape(f"{c.host}.{c.name}", {'"': "&quot;"})
                parts.append(f'    <testcase classname="{escape(phase)}" name="{name}">')
                text = escape(f"measured={c.measured} expected={c.expected}: {c.detail}",
                              {'"': "&quot;"})
                if c.status == "fail":
                    parts.append(f'      <failure message="{text}"/>')
                elif c.status == "skip":
                    parts.append(f'      <skipped message="{text}"/>')
                parts.append("    </testcase>")
            parts.append("  </testsuite>")
        parts.append("</testsuites>")
        return "\n".join(parts) + "\n"


def load(run_id: str | None) -> dict[str, Any]:
    """A saved report by run id (default: the newest)."""
    base = runs_dir()
    if run_id is None:
        candidates = sorted(p for p in base.glob("*/report.json")) if base.is_dir() else []
        if not candidates:
            raise InputError(f"no saved reports under {base}: run `provisioner up` first")
        path = candidates[-1]
    else:
        path = base / run_id / "report.json"
        if not path.is_file():
            raise InputError(f"no report for run {run_id!r} under {base}")
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable report ({exc})") from exc
    return data
