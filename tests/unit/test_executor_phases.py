"""`up --executors` in run_phases: which phases are sharded, what each executor's shard holds
as nodes are lost, retried or limited, the loss policy each executor's preflight is given, and
the report naming each host's executor. The protocol itself: tests/integration/test_executors.py;
on the simulated cluster: tests/e2e/test_executors_e2e.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provisioner import bringup
from provisioner.bringup import SHARDED_PHASES
from provisioner.executors import Executors
from provisioner.plan import build
from provisioner.report import Report
from provisioner.results import HostStats, PlaybookResult, TaskFailure
from provisioner.slurm import SCHEDULER_PHASE
from tests.unit.test_max_fail import PHASES, FakePlaybooks, no_display
from tests.unit.test_monitoring_phase import sim_inventory

EXECUTORS = Executors(names=("exec-1", "exec-2"), bin_dir="/v/bin")


class FakeSharded:
    """run_sharded stand-in: records each phase's shards and extra variables; the hosts named
    in ``outcome`` fail or are unreachable in that phase."""

    def __init__(self, outcome: dict[str, dict[str, str]]) -> None:
        self.outcome = outcome
        self.shards: dict[str, dict[str, list[str]]] = {}
        self.extravars: dict[str, dict[str, Any]] = {}

    def __call__(self, playbook: str, _inventories: Any, run_dir: Path, ident: str,
                 shards: dict[str, list[str]], _executors: Executors, _project: Path, *,
                 extravars: dict[str, Any], **_kw: Any) -> PlaybookResult:
        phase = ident.split("-", 1)[1]
        self.shards[phase] = {k: list(v) for k, v in shards.items()}
        self.extravars[phase] = dict(extravars)
        result = PlaybookResult(playbook=playbook, status="successful", rc=0, duration_s=0.1,
                                artifact_dir=run_dir)
        for executor, hosts in shards.items():
            for host in hosts:
                what = self.outcome.get(phase, {}).get(host)
                result.stats[host] = HostStats(ok=2, failed=int(what == "failed"),
                                               unreachable=int(what == "unreachable"))
                result.executors[host] = executor
                if what:
                    result.failures.append(TaskFailure(host, f"{phase} task", f"{what} here",
                                                       unreachable=what == "unreachable"))
        if any(not s.healthy for s in result.stats.values()):
            result.status, result.rc = "failed", 2
        return result


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: dict[str, dict[str, str]],
        phases: tuple[tuple[str, str], ...] = PHASES,
        **options: Any) -> tuple[bool, Report, FakePlaybooks, FakeSharded, list[str]]:
    plan = build(sim_inventory(tmp_path, monkeypatch, gpu=3, cpu=1) / "hosts.yml")
    hosts = list(plan.inventory.hosts)
    local = FakePlaybooks(hosts, {})
    sharded = FakeSharded(outcome)
    monkeypatch.setattr(bringup, "run_playbook", local)
    monkeypatch.setattr(bringup, "run_sharded", sharded)
    monkeypatch.setattr(bringup, "stack_checks", lambda *_a, **_k: [])
    monkeypatch.setattr(bringup, "secure_run_dir", lambda *_a: None)
    report = Report(run_id="r", command="up", inventory="i", simulated=True, started_at="t")
    for name in plan.hosts:
        report.hosts[name] = {"kind": "gpu"}
    (tmp_path / "run").mkdir()
    ok = bringup.run_phases(plan, report, tmp_path / "run", phases,
                            bringup.RunOptions(executors=EXECUTORS, **options), no_display)
    return ok, report, local, sharded, hosts


def test_the_per_node_phases_run_sharded_and_the_report_names_each_executor(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, local, sharded, hosts = run(tmp_path, monkeypatch, {},
                                            phases=(*PHASES, SCHEDULER_PHASE))
    assert ok is True
    assert set(sharded.shards) == {"preflight", "stack", "validate"}
    assert set(local.limits) == {"scheduler"}  # slurm.conf needs every node's facts
    halves = {"exec-1": hosts[:2], "exec-2": hosts[2:]}
    assert all(shards == halves for shards in sharded.shards.values())
    assert report.executors == halves
    assert {h: report.hosts[h]["executor"] for h in hosts} == {
        h: e for e, hs in halves.items() for h in hs}
    assert {"preflight", "stack", "fabric", "validate", "monitoring"} == SHARDED_PHASES


def test_a_lost_node_leaves_its_shard_and_the_policy_is_a_count_over_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, _local, sharded, hosts = run(tmp_path, monkeypatch,
                                             {"stack": {"sim-gpu-2": "unreachable"}},
                                             max_fail="50%")
    assert ok is False
    assert set(report.lost_hosts) == {"sim-gpu-2"}
    assert [p.name for p in report.phases] == ["preflight", "stack", "validate"]
    validate = sharded.shards["validate"]
    assert "sim-gpu-2" not in [h for shard in validate.values() for h in shard]
    assert sorted(h for shard in validate.values() for h in shard) == sorted(
        set(hosts) - {"sim-gpu-2"})
    # 50% of the 4 nodes preflight targets: each executor's preflight may lose 2 in all.
    assert sharded.extravars["preflight"]["gpuc_max_fail"] == "2"
    assert sharded.extravars["validate"]["gpuc_max_fail"] == "1"


def test_losses_summed_over_executors_stop_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, _local, sharded, _hosts = run(
        tmp_path, monkeypatch, {"stack": {"sim-gpu-1": "failed", "sim-gpu-3": "failed"}},
        max_fail="1")
    # One lost node on each executor: each shard alone is within the policy, the run is not.
    assert {e for e, shard in sharded.shards["stack"].items()
            for h in shard if h in ("sim-gpu-1", "sim-gpu-3")} == {"exec-1", "exec-2"}
    assert ok is False
    assert "validate" not in sharded.shards
    assert any(n.startswith("stopped after stack: 2 node(s) lost") for n in report.notes)


def test_a_retry_shards_only_the_retried_hosts_before_validate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, _report, _local, sharded, hosts = run(tmp_path, monkeypatch, {}, phases=PHASES[1:],
                                              retry_hosts=("sim-gpu-3",))
    assert ok is True
    assert [h for shard in sharded.shards["stack"].values() for h in shard] == ["sim-gpu-3"]
    assert sorted(h for shard in sharded.shards["validate"].values() for h in shard) == sorted(
        hosts)


def test_a_limit_resolved_to_hosts_narrows_every_shard(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, _report, _local, sharded, _hosts = run(tmp_path, monkeypatch, {},
                                               limit="sim-gpu-1,sim-login-1",
                                               limit_hosts=("sim-gpu-1", "sim-login-1"))
    assert ok is True
    for shards in sharded.shards.values():
        assert sorted(h for shard in shards.values() for h in shard) == [
            "sim-gpu-1", "sim-login-1"]


@pytest.mark.parametrize(("limit", "lost", "pattern"), [
    (None, ["b"], "all:!b"),
    ("gpu_nodes", ["b", "a"], "gpu_nodes:!a:!b"),
    # Ansible splits on commas when the pattern has one: a colon there would join "c:!b" into
    # one host name that matches nothing.
    ("a,c", ["b"], "a,c,!b"),
    ("x", [], "x"),
])
def test_the_limit_without_lost_nodes_keeps_ansibles_separator(
        limit: str | None, lost: list[str], pattern: str) -> None:
    assert bringup._limit_without(limit, dict.fromkeys(lost)) == pattern


def test_what_the_executors_wrote_is_made_private_after_each_phase(tmp_path: Path) -> None:
    import stat

    run_dir = tmp_path / "run"
    events = run_dir / "executors" / "exec-1" / "01-stack" / "artifacts" / "01-stack"
    events.mkdir(parents=True)
    (events / "stdout").write_text("task output")
    (events / "stdout").chmod(0o644)
    for directory in (run_dir / "executors", events):
        directory.chmod(0o755)
    report = Report(run_id="r", command="up", inventory="i", simulated=True, started_at="t")
    bringup.secure_run_dir(run_dir, report)
    assert stat.S_IMODE((events / "stdout").stat().st_mode) == 0o600
    assert stat.S_IMODE(events.stat().st_mode) == 0o700
    assert stat.S_IMODE((run_dir / "executors").stat().st_mode) == 0o700
