"""The loss policy of `up` (--max-fail N|P%): a failed or unreachable node is lost, the phases
after go on without it while the run has lost no more nodes than the policy allows, and the run
still ends failed, naming each lost node. preflight.yml applies the same rule to the nodes it
targeted (its last play), so the plain ansible-playbook path stops before anything is installed
too. The e2e test (tests/e2e/test_node_faults_e2e.py) stops a node of the simulated cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from provisioner import bringup
from provisioner.paths import collection_root
from provisioner.plan import build
from provisioner.report import Report
from provisioner.results import HostStats, PlaybookResult, TaskFailure
from tests.unit.fake_bringup import no_display
from tests.unit.test_monitoring_phase import sim_inventory

CASES = [(None, 1), (None, 3), (None, 8), (None, 9), (None, 20), (None, 39), (None, 40),
         (None, 2000), ("0", 5), ("2", 3), ("1", 100), ("0%", 50), ("10%", 9), ("10%", 10),
         ("50%", 3), ("100%", 4), ("5%", 2000)]


@pytest.mark.parametrize(("policy", "nodes", "allowed"), [
    (None, 3, 0), (None, 8, 0), (None, 9, 0), (None, 20, 1), (None, 2000, 100),
    ("2", 3, 2), ("10%", 9, 0), ("10%", 10, 1), ("50%", 3, 1), ("100%", 4, 4)])
def test_allowed_losses(policy: str | None, nodes: int, allowed: int) -> None:
    assert bringup.allowed_losses(policy, nodes) == allowed


@pytest.mark.parametrize("text", ["", "x", "-1", "1.5", "101%", "%", "5 %", "1e3"])
def test_a_bad_policy_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a node count"):
        bringup.parse_max_fail(text)


def preflight_policy_expression() -> str:
    plays = yaml.safe_load((collection_root() / "playbooks" / "preflight.yml").read_text())
    [task] = plays[-1]["tasks"]
    assert task["name"] == bringup.POLICY_TASK
    assert plays[-1]["any_errors_fatal"] is True
    return str(task["vars"]["__preflight_allowed"])


@pytest.mark.parametrize(("policy", "nodes"), CASES)
def test_preflight_playbook_and_python_apply_the_same_rule(policy: str | None,
                                                           nodes: int) -> None:
    env = jinja2.Environment(autoescape=False)
    expression = preflight_policy_expression()
    values = {"__preflight_targeted": str(nodes),
              "__preflight_policy": "" if policy is None else policy}
    rendered = env.from_string(expression).render(**values).strip()
    assert int(rendered) == bringup.allowed_losses(policy, nodes)


def test_cli_refuses_a_bad_policy_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import cli

    assert cli.main(["up", "--inventory", "x.yml", "--max-fail", "7 nodes"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "--max-fail" in line and "'7 nodes' is not a node count" in line


class FakePlaybooks:
    """run_playbook stand-in: each phase answers with the stats given for it; records the
    limit each phase was run with."""

    def __init__(self, hosts: list[str], outcome: dict[str, dict[str, str]]) -> None:
        self.hosts = hosts
        self.outcome = outcome  # phase -> host -> "failed" | "unreachable"
        self.limits: dict[str, str | None] = {}

    def __call__(self, playbook: str, _inventories: Any, _run_dir: Path, ident: str, *,
                 limit: str | None = None, **_kw: Any) -> PlaybookResult:
        phase = ident.split("-", 1)[1]
        self.limits[phase] = limit
        parts = (limit or "all").split(":")
        excluded = {part[1:] for part in parts if part.startswith("!")}
        chosen = {part for part in parts if not part.startswith("!")}
        result = PlaybookResult(playbook=playbook, status="successful", rc=0, duration_s=0.1,
                                artifact_dir=_run_dir)
        for host in self.hosts:
            if host in excluded or ("all" not in chosen and host not in chosen):
                continue
            what = self.outcome.get(phase, {}).get(host)
            result.stats[host] = HostStats(ok=3, failed=int(what == "failed"),
                                           unreachable=int(what == "unreachable"))
            if what:
                result.failures.append(TaskFailure(host, f"{phase} task", f"{what} here",
                                                   unreachable=what == "unreachable"))
        if any(not s.healthy for s in result.stats.values()):
            result.status, result.rc = "failed", 2
        return result


PHASES = (("preflight", "preflight.yml"), ("stack", "stack.yml"), ("validate", "validate.yml"))


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: dict[str, dict[str, str]],
        max_fail: str | None) -> tuple[bool, Report, FakePlaybooks]:
    plan = build(sim_inventory(tmp_path, monkeypatch, gpu=3, cpu=1) / "hosts.yml")
    fake = FakePlaybooks(list(plan.hosts), outcome)
    monkeypatch.setattr(bringup, "run_playbook", fake)
    monkeypatch.setattr(bringup, "stack_checks", lambda *_a, **_k: [])
    monkeypatch.setattr(bringup, "secure_run_dir", lambda *_a: None)
    report = Report(run_id="r", command="up", inventory="i", simulated=True, started_at="t")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ok = bringup.run_phases(plan, report, run_dir, PHASES,
                            bringup.RunOptions(max_fail=max_fail), no_display)
    return ok, report, fake


def test_within_the_policy_the_other_nodes_finish_every_phase(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, fake = run(tmp_path, monkeypatch, {"stack": {"sim-gpu-2": "unreachable"}}, "1")
    assert ok is False  # a lost node fails the run, whatever the policy allowed
    assert [p.name for p in report.phases] == ["preflight", "stack", "validate"]
    assert fake.limits == {"preflight": None, "stack": None, "validate": "all:!sim-gpu-2"}
    assert report.lost_hosts == {"sim-gpu-2": {"phase": "stack", "reason": "unreachable",
                                               "task": "stack task",
                                               "message": "unreachable here"}}
    assert "sim-gpu-2" not in report.phases[-1].hosts
    assert any("going on without sim-gpu-2" in n for n in report.notes)


def test_beyond_the_policy_the_run_stops_after_that_phase(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, fake = run(tmp_path, monkeypatch,
                           {"stack": {"sim-gpu-2": "failed", "sim-gpu-3": "unreachable"}}, "1")
    assert ok is False
    assert [p.name for p in report.phases] == ["preflight", "stack"]
    assert "validate" not in fake.limits
    assert set(report.lost_hosts) == {"sim-gpu-2", "sim-gpu-3"}
    assert report.lost_hosts["sim-gpu-2"]["reason"] == "failed"
    assert any(n.startswith("stopped after stack: 2 node(s) lost") for n in report.notes)


def test_the_default_policy_loses_no_node_of_a_small_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, _fake = run(tmp_path, monkeypatch, {"preflight": {"sim-gpu-1": "failed"}}, None)
    assert ok is False
    assert [p.name for p in report.phases] == ["preflight"]


def test_the_preflight_messenger_is_not_lost(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    result = PlaybookResult(playbook="preflight.yml", status="failed", rc=2, duration_s=1,
                            artifact_dir=tmp_path)
    result.stats = {"a": HostStats(ok=5, failed=1), "b": HostStats(unreachable=1),
                    "c": HostStats(ok=5)}
    result.failures = [TaskFailure("b", "Preflight | Measure", "no route", True),
                       TaskFailure("a", bringup.POLICY_TASK, "preflight lost 1 node(s)")]
    lost = bringup._losses(result, [], "preflight")
    assert set(lost) == {"b"}


def test_no_lost_node_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, fake = run(tmp_path, monkeypatch, {}, None)
    assert ok is True and report.lost_hosts == {}
    assert set(fake.limits.values()) == {None}


# --retry-failed RUN: the hosts RUN lost, from the phase they stopped in; validate and after on
# the whole cluster again.

def saved(tmp_path: Path, **over: Any) -> dict[str, Any]:
    hosts = {"sim-gpu-1": {"failed": 0, "unreachable": 0},
             "sim-gpu-2": {"failed": 0, "unreachable": 0}}
    data: dict[str, Any] = {
        "run_id": "20261124-000000-abcd", "command": "up", "outcome": "failed", "exit_code": 1,
        "inventory": str(tmp_path / "hosts.yml"), "checks": [], "lost_hosts": {},
        "phases": [{"name": "preflight", "hosts": hosts}, {"name": "stack", "hosts": hosts}]}
    data.update(over)
    return data


def test_retry_takes_the_lost_hosts_from_their_earliest_phase(tmp_path: Path) -> None:
    data = saved(tmp_path, lost_hosts={
        "sim-gpu-2": {"phase": "fabric", "reason": "unreachable"},
        "sim-gpu-3": {"phase": "stack", "reason": "check failed"}})
    retry = bringup.retry_of(data, str(tmp_path / "hosts.yml"))
    assert retry == bringup.Retry(run_id="20261124-000000-abcd",
                                  hosts=("sim-gpu-2", "sim-gpu-3"), phase="stack")


def test_retry_takes_the_inventory_as_its_file_or_its_directory(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    (tmp_path / "other.yml").write_text("all: {}\n")
    lost = {"sim-gpu-2": {"phase": "stack", "reason": "unreachable"}}
    assert bringup.retry_of(saved(tmp_path, lost_hosts=lost), str(tmp_path)).hosts == (
        "sim-gpu-2",)
    by_dir = saved(tmp_path, lost_hosts=lost, inventory=str(tmp_path))
    assert bringup.retry_of(by_dir, str(tmp_path / "hosts.yml")).phase == "stack"
    from provisioner.errors import InputError

    with pytest.raises(InputError, match="give the same inventory"):
        bringup.retry_of(saved(tmp_path, lost_hosts=lost), str(tmp_path / "other.yml"))


def test_retry_reads_an_older_report_without_lost_hosts(tmp_path: Path) -> None:
    data = saved(tmp_path, lost_hosts=None)
    data["phases"][1] = {"name": "stack", "hosts": {
        "sim-gpu-1": {"failed": 0, "unreachable": 0},
        "sim-gpu-2": {"failed": 2, "unreachable": 0}}}
    retry = bringup.retry_of(data, str(tmp_path / "hosts.yml"))
    assert (retry.hosts, retry.phase) == (("sim-gpu-2",), "stack")


@pytest.mark.parametrize(("over", "message"), [
    ({}, "lost no host"),
    ({"command": "validate"}, "is a `validate` run"),
    ({"inventory": "/elsewhere/hosts.yml"}, "give the same inventory"),
])
def test_retry_refuses_what_it_cannot_resume(tmp_path: Path, over: dict[str, Any],
                                             message: str) -> None:
    from provisioner.errors import InputError

    with pytest.raises(InputError, match=message):
        bringup.retry_of(saved(tmp_path, **over), str(tmp_path / "hosts.yml"))


def test_a_retried_run_limits_the_phases_before_validate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = build(sim_inventory(tmp_path, monkeypatch, gpu=3, cpu=1) / "hosts.yml")
    fake = FakePlaybooks(list(plan.hosts), {})
    monkeypatch.setattr(bringup, "run_playbook", fake)
    monkeypatch.setattr(bringup, "stack_checks", lambda *_a, **_k: [])
    monkeypatch.setattr(bringup, "secure_run_dir", lambda *_a: None)
    report = Report(run_id="r", command="up", inventory="i", simulated=True, started_at="t")
    (tmp_path / "run").mkdir()
    ok = bringup.run_phases(plan, report, tmp_path / "run", PHASES[1:],
                            bringup.RunOptions(retry_hosts=("sim-gpu-2", "sim-gpu-3")),
                            no_display)
    assert ok is True
    assert fake.limits == {"stack": "sim-gpu-2:sim-gpu-3", "validate": None}
    assert set(report.phases[0].hosts) == {"sim-gpu-2", "sim-gpu-3"}
    assert set(report.phases[1].hosts) == set(plan.hosts)


def test_the_scheduler_phase_is_never_limited_to_a_subset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.slurm import SCHEDULER_PHASE

    assert SCHEDULER_PHASE[0] == bringup.SCHEDULER
    plan = build(sim_inventory(tmp_path, monkeypatch, gpu=3, cpu=1) / "hosts.yml")
    fake = FakePlaybooks(list(plan.hosts), {"stack": {"sim-gpu-3": "unreachable"}})
    monkeypatch.setattr(bringup, "run_playbook", fake)
    monkeypatch.setattr(bringup, "stack_checks", lambda *_a, **_k: [])
    monkeypatch.setattr(bringup, "secure_run_dir", lambda *_a: None)
    report = Report(run_id="r", command="up", inventory="i", simulated=True, started_at="t")
    (tmp_path / "run").mkdir()
    bringup.run_phases(plan, report, tmp_path / "run", (*PHASES[:2], SCHEDULER_PHASE),
                       bringup.RunOptions(limit="sim-gpu-2:sim-gpu-3", max_fail="1"),
                       no_display)
    assert fake.limits == {"preflight": "sim-gpu-2:sim-gpu-3", "stack": "sim-gpu-2:sim-gpu-3",
                           "scheduler": "all:!sim-gpu-3"}


def test_the_report_says_what_an_unreachable_node_costs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANSIBLE_TIMEOUT", "ANSIBLE_SSH_TIMEOUT", "ANSIBLE_SSH_RETRIES",
                 "ANSIBLE_SSH_ARGS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    plan = build(sim_inventory(tmp_path, monkeypatch, gpu=2, cpu=0) / "hosts.yml")
    report, _run_dir = bringup.start_report(plan, "up")
    conn = report.connection
    assert (conn["connect_timeout_s"], conn["ssh_retries"], conn["unreachable_cost_s"]) == (5, 1,
                                                                                            10)
    assert report.to_dict()["connection"] == conn

    from rich.console import Console

    from provisioner import render

    console = Console(width=400, record=True)
    report.lost_hosts = {"sim-gpu-2": {"phase": "stack", "reason": "unreachable"}}
    report.finish(1)
    data = report.to_dict()
    render.report(console, data)
    text = console.export_text()
    assert ("unreachable: ssh gave up after 2 attempt(s) with a 5 s connect timeout "
            "(ansible.cfg [defaults] timeout)") in text
    # No unreachable node, no line about it.
    data["lost_hosts"]["sim-gpu-2"]["reason"] = "failed"
    console = Console(width=400, record=True)
    render.report(console, data)
    assert "ssh gave up" not in console.export_text()
    # A node lost with its executor: the lost line names the executor and its reason; ssh's
    # timeouts from this controller explain nothing there.
    data["lost_hosts"]["sim-gpu-2"] = {"phase": "stack", "reason": "unreachable",
                                       "task": "executor exec-2",
                                       "message": "ssh: connect to host exec-2 port 22: timed out"}
    console = Console(width=400, record=True)
    render.report(console, data)
    text = console.export_text()
    assert ("lost sim-gpu-2: unreachable in stack (executor exec-2: ssh: connect to host exec-2 "
            "port 22: timed out)") in text
    assert "ssh gave up" not in text
