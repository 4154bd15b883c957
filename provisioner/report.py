"""The cluster report: built from plan + playbook results, saved as JSON (and JUnit), rendered
for the console. A report from a simulated cluster says so at the top and in every file.

``Report`` is its own builder: a run starts it (``Report.start``), and every change after that
(a phase's result, checks, notes, lost nodes, reboots, the smoke, certify, remediate and upgrade
sections) goes through one of its methods, up to ``finish``. No other module assigns its fields
or writes into its lists (tests/unit/test_report_builder.py scans the package for it)."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioner.errors import InputError, ProvisionerError
from provisioner.paths import workspace_root
from provisioner.results import PlaybookResult
from provisioner.untrusted import redact, redact_data

SIMULATED_BANNER = ("SIMULATED CLUSTER: podman containers with simulated GPUs, NVLink and "
                    "InfiniBand. Nothing here measures real hardware.")


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def runs_dir() -> Path:
    env = os.environ.get("PROVISIONER_RUNS_DIR")
    return Path(env) if env else workspace_root() / "runs"


class ReportNotSaved(ProvisionerError):
    """The report could not be written (disk full, read-only runs directory). Exit 1: the run
    may have changed hosts, but its outcome is not on record."""


def private_dir(path: Path) -> Path:
    """Make ``path`` (and missing parents) a directory only its owner can read: 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` atomically (a temp file in the same directory, fsync, rename) with mode
    0600: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def make_private(root: Path) -> None:
    """Directories 0700 and files 0600 under ``root`` (what ansible-runner left in a run
    directory is the controller's environment, variables and task output)."""
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        with_errors = [(base / d, 0o700) for d in dirnames] + [(base / f, 0o600)
                                                               for f in filenames]
        for path, mode in with_errors:
            try:
                if not path.is_symlink():
                    path.chmod(mode)
            except OSError:
                continue
    root.chmod(0o700)


# What a run directory holds for people to read: ansible-runner's task output and event records
# (the controller's and each executor's) and the smoke job's logs and results. Only these are
# masked after a phase. The rest is read again by the run or by Ansible (plan.yml, the fact
# cache), where a masked substring of a version or path corrupts the file, or was masked when
# it was written (report.json, junit.xml); all of it stays private (make_private).
FOR_PEOPLE = (
    "ansible/artifacts/*/stdout", "ansible/artifacts/*/stderr",
    "ansible/artifacts/*/job_events/*.json",
    "executors/*/*/artifacts/*/stdout", "executors/*/*/artifacts/*/stderr",
    "executors/*/*/artifacts/*/job_events/*.json",
    "smoke/**/*",
)


def redact_tree(root: Path, found: set[str]) -> int:
    """Mask the given secrets (and URL credentials) in the files of the run directory ``root``
    written for people (FOR_PEOPLE); the number of files rewritten. A JSON file is masked value
    by value, so it stays JSON whatever the secret matches."""
    inside = root.resolve()
    paths = {p for pattern in FOR_PEOPLE for p in root.glob(pattern)
             if p.is_file() and not p.is_symlink() and p.resolve().is_relative_to(inside)}
    rewritten = 0
    for path in sorted(paths):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        clean = _redact_json(text, found) if path.suffix == ".json" else redact(text, found)
        if clean != text:
            write_private(path, clean)
            rewritten += 1
    return rewritten


def _redact_json(text: str, found: set[str]) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return redact(text, found)  # not JSON (cut short): nothing a rewrite can break
    clean = redact_data(data, found)
    return text if clean == data else json.dumps(clean)


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
class Batch:
    """One batch of `provisioner upgrade`: what happened to its nodes, in order."""

    number: int
    nodes: list[str]
    # passed | failed | drain timed out | drain failed | interrupted | not run
    outcome: str = "not run"
    # Slurm: when the nodes were drained, how long the upgrade waited for their jobs (seconds),
    # the jobs it waited for (and cancelled, --force); None without Slurm.
    drained_at: str | None = None
    drain_wait_s: float | None = None
    jobs_waited_for: list[str] = field(default_factory=list)
    jobs_cancelled: list[str] = field(default_factory=list)
    # When the stack phase of this batch started (after the drain).
    stack_started_at: str | None = None
    # Phase -> "passed", "failed on NODE, ..." or "not run" (stack, validate, monitoring).
    phases: dict[str, str] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)
    # Node -> why it stays drained (the Slurm reason the upgrade left on it).
    kept_drained: dict[str, str] = field(default_factory=dict)
    detail: str = ""


# The note that sums up a run's reboots (Report.record_reboots keeps one, the latest).
REBOOT_NOTE = re.compile(r"^\d+ reboot\(s\): ")


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
    # `provisioner certify`: the pairs, the reference, the suspects (provisioner/certify.py).
    certify: dict[str, Any] | None = None
    # `provisioner remediate`: per drained node, what was done and what came of it
    # (provisioner/remediate.py NodeOutcome).
    remediate: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Hosts whose SSH host key is not checked (inventory says so): the console says it too.
    host_key_checking_off: list[str] = field(default_factory=list)
    # Nodes the run lost and went on without: host -> phase, reason, task, message.
    lost_hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    # `up --reboot`: every reboot in the order it started, as the driver role's rolling_reboot
    # recorded it (host, started_at, ended_at, boot_id_before, boot_id_after, outcome).
    reboots: list[dict[str, Any]] = field(default_factory=list)
    # `up --retry-failed`: the run this one resumes (its id) and the hosts it retried.
    resumes: str | None = None
    retried_hosts: list[str] = field(default_factory=list)
    # `upgrade`: one entry per batch, in order (those it did not reach: outcome "not run").
    batches: list[Batch] = field(default_factory=list)
    # How long a node that does not answer holds up a phase: ssh's connect timeout, Ansible's
    # ssh retries, where each comes from, the hosts whose inventory sets its own
    # (ssh_policy.connection_settings).
    connection: dict[str, Any] = field(default_factory=dict)
    # `up --executors`: executor -> the hosts it ran (the per-node phases; each host's entry
    # names its executor too). Empty when the controller ran every phase itself.
    executors: dict[str, list[str]] = field(default_factory=dict)
    # Driver branches near or past their end of life (plan.lifecycle): stack, branch, end,
    # kind ("ending", or "ended-allowed" where allow_eol_driver let it run), hosts.
    driver_lifecycle: list[dict[str, Any]] = field(default_factory=list)
    _t0: float = field(default_factory=time.monotonic, repr=False)
    # Literal secrets of the inventory (mirror credentials): masked in everything saved.
    _secrets: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def start(cls, run_id: str, command: str, inventory: str, simulated: bool, *,
              inventory_secrets: Iterable[str] = (), host_key_checking_off: Sequence[str] = (),
              connection: Mapping[str, Any] | None = None,
              driver_lifecycle: Iterable[Mapping[str, Any]] = (), notes: Iterable[str] = (),
              hosts: Mapping[str, Mapping[str, Any]] | None = None) -> Report:
        """A run's report, started now: the inventory's secrets (masked in everything saved),
        the hosts whose SSH host key is not checked (the first note says so), what an
        unreachable node costs a phase, the driver branches near their end of life, the
        plan's notes and each host's planned kind, profile and stack."""
        report = cls(run_id=run_id, command=command, inventory=inventory, simulated=simulated,
                     started_at=datetime.now(UTC).isoformat(timespec="seconds"),
                     host_key_checking_off=list(host_key_checking_off),
                     connection=dict(connection or {}),
                     driver_lifecycle=[dict(entry) for entry in driver_lifecycle],
                     hosts={name: dict(entry) for name, entry in (hosts or {}).items()},
                     _secrets=set(inventory_secrets))
        if report.host_key_checking_off:
            off = report.host_key_checking_off
            report.add_note(f"SSH host key checking is OFF for {len(off)} host(s) "
                            f"({', '.join(off[:5])}): the inventory turns it off")
        report.add_notes(notes)
        return report

    def add_note(self, note: str) -> None:
        self.notes.append(note)

    def add_notes(self, notes: Iterable[str]) -> None:
        self.notes.extend(notes)

    def drop_repeated_notes(self) -> None:
        """Each note once, where it first appeared (`upgrade` notes monitoring once a batch)."""
        self.notes[:] = list(dict.fromkeys(self.notes))

    def add_check(self, check: Check) -> None:
        self.checks.append(check)

    def add_checks(self, checks: Iterable[Check]) -> None:
        self.checks.extend(checks)

    def record_lost(self, hosts: Mapping[str, Mapping[str, Any]]) -> None:
        """Nodes the run lost and goes on without (host -> phase, reason, task, message); a
        node lost again keeps the latest reason."""
        self.lost_hosts.update({host: dict(why) for host, why in hosts.items()})

    def record_executors(self, shards: Mapping[str, Sequence[str]]) -> None:
        """`up --executors`: executor -> the hosts it runs, and each host's entry names its
        executor."""
        self.executors = {name: list(hosts) for name, hosts in shards.items()}
        for name, hosts in shards.items():
            for host in hosts:
                if host in self.hosts:
                    self.hosts[host]["executor"] = name

    def record_reboots(self, reboots: Sequence[Mapping[str, Any]], note: str) -> None:
        """The run's reboots, in the order they started, and the note that sums them up in
        place of an earlier one (a run of several batches reads the record after each)."""
        self.reboots = [dict(r) for r in reboots]
        self.notes[:] = [n for n in self.notes if not REBOOT_NOTE.match(n)]
        self.add_note(note)

    def record_resume(self, run_id: str, hosts: Sequence[str]) -> None:
        """`up --retry-failed`: the run this one resumes and the hosts it retries."""
        self.resumes, self.retried_hosts = run_id, list(hosts)

    def record_smoke(self, section: Mapping[str, Any]) -> None:
        self.smoke = dict(section)

    def record_certify(self, section: Mapping[str, Any]) -> None:
        self.certify = dict(section)

    def record_remediate(self, outcomes: Iterable[Mapping[str, Any]]) -> None:
        self.remediate = [dict(o) for o in outcomes]

    def plan_batches(self, batches: Sequence[Sequence[str]]) -> list[Batch]:
        """`upgrade`: one batch per list of nodes, numbered from 1, none run yet."""
        self.batches = [Batch(number=n, nodes=list(nodes)) for n, nodes in enumerate(batches, 1)]
        return self.batches

    def update_batch(self, batch: Batch, *, outcome: str | None = None,
                     detail: str | None = None, stack_started_at: str | None = None,
                     drained_at: str | None = None, drain_wait_s: float | None = None,
                     jobs_waited_for: Sequence[str] | None = None,
                     jobs_cancelled: Sequence[str] | None = None,
                     phases: Mapping[str, str] | None = None,
                     resumed: Sequence[str] | None = None,
                     kept_drained: Mapping[str, str] | None = None) -> None:
        """What happened to one of this report's batches: each value given replaces the
        batch's, except ``phases`` and ``kept_drained``, merged into what it holds. A value
        not given (None) leaves the batch's as it is."""
        if not any(mine is batch for mine in self.batches):
            raise ValueError(f"batch {batch.number} is not one of run {self.run_id}'s")
        for name, value in (("outcome", outcome), ("detail", detail),
                            ("stack_started_at", stack_started_at), ("drained_at", drained_at),
                            ("drain_wait_s", drain_wait_s)):
            if value is not None:
                setattr(batch, name, value)
        if jobs_waited_for is not None:
            batch.jobs_waited_for = list(jobs_waited_for)
        if jobs_cancelled is not None:
            batch.jobs_cancelled = list(jobs_cancelled)
        if resumed is not None:
            batch.resumed = list(resumed)
        batch.phases.update(phases or {})
        batch.kept_drained.update(kept_drained or {})

    def prefix_phases(self, since: int, prefix: str) -> list[Phase]:
        """``prefix`` before the name of each phase from index ``since`` on (`upgrade`: the
        phases of one batch); those phases."""
        renamed = self.phases[since:]
        for phase in renamed:
            phase.name = prefix + phase.name
        return renamed

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
                    self.add_check(Check(host=host, phase=section, name=str(item["name"]),
                                         status=str(item["status"]),
                                         measured=item.get("measured"),
                                         expected=item.get("expected"),
                                         detail=str(item.get("detail", ""))))
        return phase

    def finish(self, exit_code: int, outcome: str | None = None) -> None:
        self.exit_code = exit_code
        self.outcome = outcome or ("passed" if exit_code == 0 else "failed")
        self.finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.duration_s = round(time.monotonic() - self._t0, 2)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_t0", None)
        data.pop("_secrets", None)
        if self.simulated:
            data = {"SIMULATED": SIMULATED_BANNER, **data}
        return dict(redact_data(data, self._secrets))

    def save(self, run_dir: Path) -> Path:
        """report.json, junit.xml and the run's page index.html, each written atomically, 0600
        in a 0700 directory. Raises ReportNotSaved (one line) when the disk refuses the report.
        The page comes last and never costs the report: one that cannot be drawn is a page
        saying why in one line (`provisioner report RUN --html` draws it again)."""
        from provisioner.report_html import write_page_or_say_why

        path = run_dir / "report.json"
        text = json.dumps(self.to_dict(), indent=2, default=str) + "\n"
        try:
            private_dir(run_dir)
            write_private(path, text)
            write_private(run_dir / "junit.xml", self.junit())
        except OSError as exc:
            raise ReportNotSaved(f"cannot save the report in {run_dir}: "
                                 f"{exc.strerror or exc}") from exc
        write_page_or_say_why(run_dir, json.loads(text))
        return path

    def junit(self) -> str:
        """JUnit XML for CI dashboards: one testsuite per report section with one testcase per
        host x check (fail -> <failure>, skip -> <skipped>), then one testsuite per playbook
        phase with one testcase per host (a failed task -> <failure>, an unreachable host ->
        <error>)."""
        prefix = "SIMULATED " if self.simulated else ""
        root = ET.Element("testsuites", name=f"{prefix}gpu-cluster-provisioner {self.run_id}")
        _check_suites(root, prefix, self.checks)
        for phase in self.phases:
            _phase_suite(root, prefix, phase)
        if self.batches:
            _batch_suite(root, prefix, self.batches)
        # The verdict as a case of its own: a failed or interrupted run is never an empty or
        # all-green file, whatever stopped it.
        suite = _suite(root, f"{prefix}run")
        case = ET.SubElement(suite, "testcase", classname="run", name=f"{self.command} verdict")
        if self.exit_code != 0 or self.outcome not in ("passed", "running"):
            why = "; ".join(self.notes[-3:]) or f"exit code {self.exit_code}"
            ET.SubElement(case, "failure", message=_xml(f"{self.outcome}: {why}"),
                          type="verdict")
        _count(suite)
        # Masked value by value: masking the serialized text would also mask a secret that
        # matches markup (a tag or attribute name) and leave a file no JUnit reader parses.
        for element in root.iter():
            element.text = redact(element.text, self._secrets) if element.text else element.text
            for attr, value in element.attrib.items():
                element.set(attr, redact(value, self._secrets))
        ET.indent(root)
        return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _check_suites(root: ET.Element, prefix: str, checks: list[Check]) -> None:
    """Add one testsuite per report section to ``root``, with one testcase per host x check (a
    failed check holds a <failure>, a skipped one <skipped>). Returns None."""
    by_section: dict[str, list[Check]] = {}
    for c in checks:
        by_section.setdefault(c.phase, []).append(c)
    for section, section_checks in by_section.items():
        suite = _suite(root, prefix + section)
        for c in section_checks:
            case = ET.SubElement(suite, "testcase", classname=section,
                                 name=f"{c.host}.{c.name}")
            text = f"measured={c.measured} expected={c.expected}: {c.detail}"
            if c.status == "fail":
                ET.SubElement(case, "failure", message=_xml(text), type="check")
            elif c.status == "skip":
                ET.SubElement(case, "skipped", message=_xml(text))
        _count(suite)


def _phase_suite(root: ET.Element, prefix: str, phase: Phase) -> None:
    """Add the testsuite of one playbook phase to ``root``, with one testcase per host (a failed
    task holds a <failure>, an unreachable host an <error>), or the phase itself as the failed
    case when it failed without a host to blame. Returns None."""
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
    if not phase.ok and not any(c.find("failure") is not None or c.find("error")
                                is not None for c in suite.findall("testcase")):
        # The phase failed without a host to blame (ansible-playbook stopped early,
        # timed out, was interrupted): the phase itself is the failed case.
        case = ET.SubElement(suite, "testcase", classname=phase.name, name=phase.name)
        ET.SubElement(case, "failure", message=_xml(
            f"{phase.playbook}: {phase.status} (rc {phase.rc})"), type="phase")
    _count(suite)


def _batch_suite(root: ET.Element, prefix: str, batches: list[Batch]) -> None:
    """`upgrade`: one testcase per batch; a failed batch is a failure, one not run skipped."""
    suite = _suite(root, f"{prefix}upgrade batches")
    for batch in batches:
        case = ET.SubElement(suite, "testcase", classname="upgrade",
                             name=f"batch {batch.number}: {','.join(batch.nodes)}")
        if batch.outcome == "not run":
            ET.SubElement(case, "skipped", message=_xml(batch.detail or "not run"))
        elif batch.outcome != "passed":
            failure = ET.SubElement(case, "failure", message=_xml(
                f"{batch.outcome}: {batch.detail}"), type="batch")
            failure.text = _xml("\n".join(f"{node}: {why}"
                                          for node, why in batch.kept_drained.items()))
    _count(suite)


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
    """A saved report by run id (default: the newest, by run id: ids start with the UTC
    time). A missing, truncated or malformed file is one InputError line."""
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
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the report ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a report (not UTF-8 text at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: truncated or invalid report (JSON error at line "
                         f"{exc.lineno} column {exc.colno}: {exc.msg})") from None
    missing = [] if isinstance(data, dict) else ["a JSON object"]
    if not missing:
        missing = [k for k, kind in _REQUIRED.items() if not isinstance(data.get(k), kind)]
    if missing:
        raise InputError(f"{path}: not a provisioner report (missing or wrong: "
                         f"{', '.join(missing)})")
    return dict(data)


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "run_id": str, "command": str, "outcome": str, "exit_code": int, "phases": list,
    "checks": list}
