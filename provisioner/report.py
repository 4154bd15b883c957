"""The cluster report: built from plan + playbook results, saved as JSON (and JUnit), rendered
for the console. A report from a simulated cluster says so at the top and in every file."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
        (run_dir / "junit.xml").write_text(self.junit(), encoding="utf-8")
        return path

    def junit(self) -> str:
        """JUnit XML for CI dashboards: one testsuite per report section with one testcase per
        host x check (fail -> <failure>, skip -> <skipped>), then one testsuite per playbook
        phase with one testcase per host (a failed task -> <failure>, an unreachable host ->
        <error>)."""
        prefix = "SIMULATED " if self.simulated else ""
        root = ET.Element("testsuites", name=f"{prefix}gpu-cluster-provisioner {self.run_id}")
        by_section: dict[str, list[Check]] = {}
        for c in self.checks:
            by_section.setdefault(c.phase, []).append(c)
        for section, checks in by_section.items():
            suite = _suite(root, prefix + section)
            for c in checks:
                case = ET.SubElement(suite, "testcase", classname=section,
                                     name=f"{c.host}.{c.name}")
                text = f"measured={c.measured} expected={c.expected}: {c.detail}"
                if c.status == "fail":
                    ET.SubElement(case, "failure", message=_xml(text), type="check")
                elif c.status == "skip":
                    ET.SubElement(case, "skipped", message=_xml(text))
            _count(suite)
        for phase in self.phases:
            suite = _suite(root, f"{prefix}{phase.name} ({phase.playbook})")
            suite.set("time", f"{phase.duration_s:.2f}")
            failures: dict[str, list[dict[str, Any]]] = {}
            for f in phase.failures:
                failures.setdefault(str(f["host"]), []).append(f)
            for host in [*sorted(phase.hosts), *(h for h in failures if h not in phase.hosts)]:
                case = ET.SubElement(suite, "testcase", classname=phase.name, name=host)
                stats = phase.hosts.get(host, {})
                mine = failures.get(host, [])
                lines = _xml("\n".join(f"{f['task']}: {f['message']}" for f in mine))
                unreachable = [f for f in mine if f.get("unreachable")]
                if unreachable or stats.get("unreachable"):
                    message = unreachable[0]["message"] if unreachable else "host unreachable"
                    error = ET.SubElement(case, "error", message=_xml(message), type="unreachable")
                    error.text = lines
                elif mine or stats.get("failed"):
                    message = mine[0]["message"] if mine else "a task failed"
                    failure = ET.SubElement(case, "failure", message=_xml(message), type="task")
                    failure.text = lines
            _count(suite)
        ET.indent(root)
        return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# Characters XML 1.0 cannot carry at all (terminal escapes in a task's stderr, say): ElementTree
# would write them and leave a file no JUnit reader parses.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub("?", text)


def _suite(root: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(root, "testsuite", name=name)


def _count(suite: ET.Element) -> None:
    """The testsuite's counters, from the testcases it holds."""
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attr, str(sum(case.find(tag) is not None for case in cases)))


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
