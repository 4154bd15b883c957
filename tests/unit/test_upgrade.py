"""`provisioner upgrade`: batching, the refusal of a stack before any host is touched, and the
order of the playbooks per batch with run_playbook faked at the boundary (drain.yml and
resume.yml on the Slurm controller, stack/validate/monitoring on the batch): a node failing
validation stays drained with the reason and stops the later batches, a drain timeout stops
everything, and without Slurm nothing is drained. The playbooks themselves run for real
against stand-in Slurm commands in tests/integration/test_upgrade_playbooks.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import bringup, plan, slurm, upgrade
from provisioner.bringup import RunOptions
from provisioner.errors import InputError
from provisioner.report import Report
from provisioner.results import HostStats, PlaybookResult, TaskFailure
from tests.unit.fake_bringup import faked_run, no_display

CONTROLLER = "login-01"


@pytest.mark.parametrize(("size", "nodes", "expected"), [
    ("1", 5, [1, 1, 1, 1, 1]),
    ("2", 5, [2, 2, 1]),
    ("50%", 5, [3, 2]),          # 2.5 rounded up
    ("50%", 4, [2, 2]),
    ("1%", 3, [1, 1, 1]),        # at least one node
    ("100%", 5, [5]),
    ("9", 4, [4]),               # more than the nodes: one batch of all
    ("2", 1, [1]),
])
def test_batches(size: str, nodes: int, expected: list[int]) -> None:
    names = [f"gpu-{i:02d}" for i in range(1, nodes + 1)]
    batches = upgrade.split_batches(names, size)
    assert [len(b) for b in batches] == expected
    assert [n for b in batches for n in b] == names  # every node once, in inventory order


@pytest.mark.parametrize("text", ["0", "abc", "", "0%", "101%", "-1", "1.5", "%", "50 %"])
def test_a_bad_batch_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a number of nodes"):
        upgrade.parse_batch_size(text)


@pytest.mark.parametrize("text", ["1", "12", "1%", "100%", " 3 "])
def test_good_batch_sizes(text: str) -> None:
    assert upgrade.parse_batch_size(text) == text.strip()


def test_the_failure_reason_names_the_checks_and_is_bounded() -> None:
    reason = upgrade.failure_reason("cuda-12.9", {"phase": "validate", "reason": "failed",
                                                  "task": "GPU validate | Stop on a failed check",
                                                  "checks": ["gpu3_nvlink", "gpu3_nvlink_link0"]})
    assert reason == "gpuc upgrade to cuda-12.9 failed: validate: gpu3_nvlink, gpu3_nvlink_link0"
    assert upgrade.failure_reason("x", {"phase": "stack", "reason": "unreachable",
                                        "task": "Gathering Facts"}) == (
        "gpuc upgrade to x failed: stack: unreachable")
    long = upgrade.failure_reason("x", {"phase": "stack", "task": "t" * 500})
    assert len(long) == slurm.REASON_MAX and long.endswith("...")


# --- the plan --------------------------------------------------------------------------------

def inventory(tmp_path: Path, slurm: bool = True, gpus: int = 3,
              profile: str = "hgx-h100-8gpu", **gpu_vars: Any) -> Path:
    hosts = {f"gpu-{i:02d}": {"gpu_profile": profile, "ansible_host": f"gpu-{i:02d}.invalid",
                              **gpu_vars} for i in range(1, gpus + 1)}
    children: dict[str, Any] = {"gpu_nodes": {"hosts": hosts},
                                "cpu_nodes": {"hosts": {CONTROLLER: {}}}}
    if slurm:
        children["slurm_controller"] = {"hosts": {CONTROLLER: {}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": children}}))
    return path


def test_the_stack_override_plans_every_gpu_node_like_gpu_stack(tmp_path: Path) -> None:
    path = inventory(tmp_path, gpu_stack="cuda-12.6")
    cp = plan.build(path, stack="cuda-12.9")
    stacks = {name: h.stack.stack for name, h in cp.hosts.items() if h.stack}
    assert stacks == {"gpu-01": "cuda-12.9", "gpu-02": "cuda-12.9", "gpu-03": "cuda-12.9"}
    assert cp.hosts["gpu-01"].variables()["gpu_stack"] == "cuda-12.9"
    assert cp.hosts["gpu-01"].variables()["gpu_expected"]["driver_version"] == (
        cp.hosts["gpu-01"].stack.driver_version)  # type: ignore[union-attr]
    # Without the override the inventory's own stack stays.
    assert plan.build(path).hosts["gpu-01"].stack.stack == "cuda-12.6"  # type: ignore[union-attr]


@pytest.mark.parametrize(("stack", "profile", "message"), [
    ("cuda-1.0", "hgx-h100-8gpu", "stack 'cuda-1.0' is not a known stack; choose one of"),
    ("cuda-13.0", "sxm2-v100-8gpu", "cannot target volta GPUs"),
])
def test_an_impossible_stack_is_refused_before_any_playbook(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        stack: str, profile: str, message: str) -> None:
    from provisioner import cli

    def no_playbook(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a playbook ran")

    monkeypatch.setattr(bringup, "run_playbook", no_playbook)
    monkeypatch.setattr(upgrade, "run_playbook", no_playbook)
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    path = inventory(tmp_path, profile=profile)
    assert cli.main(["upgrade", "-i", str(path), "--stack", stack, "--yes"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert message in line
    assert not (tmp_path / "runs").exists()


# --- the batches, with run_playbook faked ------------------------------------------------------

@dataclass
class Call:
    playbook: str
    limit: str | None
    extravars: dict[str, Any]


@dataclass
class FakeCluster:
    """run_playbook stand-in for every playbook of the upgrade. Batch phases answer per host
    from ``fail`` (phase -> host -> "failed" | "check" | "unreachable"); drain.yml answers with
    ``jobs`` at drain time and ``jobs_left`` after the wait (then it fails, as the playbook's
    last assert does)."""

    hosts: list[str]
    fail: dict[str, dict[str, str]] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    jobs_left: list[str] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)

    def __call__(self, playbook: str, _inventories: Any, run_dir: Path, ident: str, *,
                 extravars: dict[str, Any] | None = None, limit: str | None = None,
                 **_kw: Any) -> PlaybookResult:
        self.calls.append(Call(playbook, limit, dict(extravars or {})))
        result = PlaybookResult(playbook=playbook, status="successful", rc=0, duration_s=0.1,
                                artifact_dir=run_dir / ident)
        if playbook in ("drain.yml", "resume.yml"):
            assert limit == CONTROLLER
            result.stats[CONTROLLER] = HostStats(ok=6, changed=1)
            if playbook == "drain.yml":
                result.reports[CONTROLLER] = {"upgrade": {
                    "drained_at": 1_800_000_000.0, "jobs_done_at": 1_800_000_042.5,
                    "jobs_at_drain": self.jobs, "jobs_left": self.jobs_left,
                    "jobs_cancelled": [], "held": self.held}}
                if self.jobs_left:
                    result.stats[CONTROLLER].failed = 1
                    result.failures.append(TaskFailure(
                        CONTROLLER, "Upgrade | Check that no job runs on the nodes any more",
                        "jobs still run"))
        else:
            phase = playbook.removesuffix(".yml")
            parts = (limit or "").split(":")
            for host in [h for h in parts if h and f"!{h}" not in parts and h[0] != "!"]:
                what = self.fail.get(phase, {}).get(host)
                result.stats[host] = HostStats(ok=4, failed=int(what in ("failed", "check")),
                                               unreachable=int(what == "unreachable"))
                if what == "check":
                    result.reports[host] = {"gpu_validate": {"checks": [
                        {"name": "gpu3_nvlink", "status": "fail", "measured": 0,
                         "expected": 18, "detail": "GPU 3: 0 of 18 links up"}]}}
                if what:
                    result.failures.append(TaskFailure(host, f"{phase} task", f"{what} here",
                                                       unreachable=what == "unreachable"))
        if any(not s.healthy for s in result.stats.values()):
            result.status, result.rc = "failed", 2
        return result

    def sequence(self) -> list[tuple[str, str | None]]:
        return [(c.playbook.removesuffix(".yml"), c.limit) for c in self.calls]


def upgrade_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_kw: dict[str, Any],
                slurm: bool = True, gpus: int = 3,
                **settings: Any) -> tuple[bool, Report, FakeCluster]:
    cp = plan.build(inventory(tmp_path, slurm=slurm, gpus=gpus), stack="cuda-12.9")
    fake = FakeCluster(hosts=list(cp.inventory.gpu_hosts), **fake_kw)
    report, run_dir = faked_run(tmp_path, monkeypatch, cp, "upgrade", fake, [upgrade])
    ok = upgrade.run(cp, report, run_dir, upgrade.BATCH_PHASES, RunOptions(), no_display,
                     settings=upgrade.UpgradeSettings(stack="cuda-12.9", **settings))
    return ok, report, fake


def test_each_batch_drains_upgrades_validates_monitors_then_resumes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, fake = upgrade_run(tmp_path, monkeypatch, {"jobs": ["7 ann RUNNING gpu-01 t"]},
                                   batch_size="2")
    assert ok is True
    assert fake.sequence() == [
        ("drain", CONTROLLER), ("stack", "gpu-01:gpu-02"), ("validate", "gpu-01:gpu-02"),
        ("monitoring", "gpu-01:gpu-02"), ("resume", CONTROLLER),
        ("drain", CONTROLLER), ("stack", "gpu-03"), ("validate", "gpu-03"),
        ("monitoring", "gpu-03"), ("resume", CONTROLLER)]
    drain = fake.calls[0].extravars
    assert drain["upgrade_nodes"] == ["gpu-01", "gpu-02"]
    assert drain["upgrade_stack"] == "cuda-12.9"
    assert drain["upgrade_slurm_controller"] == CONTROLLER
    assert drain["upgrade_drain_timeout"] == 3600 and drain["upgrade_force"] is False
    assert fake.calls[4].extravars["upgrade_resume_nodes"] == ["gpu-01", "gpu-02"]
    assert fake.calls[4].extravars["upgrade_keep_drained"] == {}
    first = report.batches[0]
    assert (first.outcome, first.nodes, first.resumed) == ("passed", ["gpu-01", "gpu-02"],
                                                           ["gpu-01", "gpu-02"])
    assert first.drain_wait_s == 42.5 and first.jobs_waited_for == ["7 ann RUNNING gpu-01 t"]
    assert first.drained_at == "2027-01-15T08:00:00+00:00"
    assert first.phases == {"stack": "passed", "validate": "passed", "monitoring": "passed"}
    assert [p.name for p in report.phases][:5] == [
        "batch 1 drain", "batch 1 stack", "batch 1 validate", "batch 1 monitoring",
        "batch 1 resume"]
    # The batch phases run with the plan of the new stack and the driver reboot setting.
    stack_call = fake.calls[1]
    assert stack_call.extravars["nvidia_driver_reboot_ok"] is False


def test_a_node_failing_validation_stays_drained_and_stops_the_next_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, fake = upgrade_run(tmp_path, monkeypatch,
                                   {"fail": {"validate": {"gpu-02": "check"}}},
                                   batch_size="2", max_failed_batches=1)
    assert ok is False
    assert fake.sequence() == [
        ("drain", CONTROLLER), ("stack", "gpu-01:gpu-02"), ("validate", "gpu-01:gpu-02"),
        ("monitoring", "gpu-01:gpu-02:!gpu-02"), ("resume", CONTROLLER)]
    resume = fake.calls[-1].extravars
    reason = "gpuc upgrade to cuda-12.9 failed: validate: gpu3_nvlink"
    assert resume["upgrade_resume_nodes"] == ["gpu-01"]
    assert resume["upgrade_keep_drained"] == {"gpu-02": reason}
    first, second = report.batches
    assert first.outcome == "failed" and first.kept_drained == {"gpu-02": reason}
    assert first.phases == {"stack": "passed", "validate": "failed on gpu-02",
                            "monitoring": "passed"}
    assert second.outcome == "not run" and "--max-failed-batches 1" in second.detail
    assert any("batch(es) 2 not run, nodes gpu-03 untouched" in n for n in report.notes)
    assert report.lost_hosts["gpu-02"]["phase"] == "validate"
    junit = report.junit()
    assert 'name="batch 1: gpu-01,gpu-02"' in junit and reason in junit
    assert '<skipped message="not run: the upgrade stopped after batch 1' in junit


def test_more_failed_batches_allowed_go_on(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, fake = upgrade_run(tmp_path, monkeypatch,
                                   {"fail": {"stack": {"gpu-01": "unreachable"}}},
                                   max_failed_batches=2)
    assert ok is False
    assert [b.outcome for b in report.batches] == ["failed", "passed", "passed"]
    assert report.batches[0].phases == {"stack": "failed on gpu-01", "validate": "not run",
                                        "monitoring": "not run"}
    assert report.batches[0].kept_drained == {
        "gpu-01": "gpuc upgrade to cuda-12.9 failed: stack: unreachable"}
    # The later batches' limits leave out the node lost before (Ansible's "gpu-02:!gpu-01").
    assert [c.limit for c in fake.calls if c.playbook == "stack.yml"] == [
        "gpu-01", "gpu-02:!gpu-01", "gpu-03:!gpu-01"]


def test_a_drain_timeout_stops_everything(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    job = "42 bob RUNNING gpu-01 train"
    ok, report, fake = upgrade_run(tmp_path, monkeypatch, {"jobs": [job], "jobs_left": [job]},
                                   max_failed_batches=3, drain_timeout_s=60)
    assert ok is False
    assert fake.sequence() == [("drain", CONTROLLER)]  # no stack, no resume, no next batch
    first = report.batches[0]
    assert first.outcome == "drain timed out"
    assert "1 job(s) still ran on gpu-01 after 60 s: 42 bob RUNNING gpu-01 train" in (
        first.detail)
    assert [b.outcome for b in report.batches[1:]] == ["not run", "not run"]
    assert any("gpu-01" in n and job in n and "stay drained" in n for n in report.notes)


def test_without_slurm_nothing_is_drained_and_the_report_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, fake = upgrade_run(tmp_path, monkeypatch, {}, slurm=False, gpus=2)
    assert ok is True
    assert fake.sequence() == [
        ("stack", "gpu-01"), ("validate", "gpu-01"), ("monitoring", "gpu-01"),
        ("stack", "gpu-02"), ("validate", "gpu-02"), ("monitoring", "gpu-02")]
    assert any(n.startswith("no scheduler drained the nodes") for n in report.notes)
    assert all(b.drained_at is None and b.resumed == [] for b in report.batches)


def test_a_node_drained_before_is_upgraded_but_never_resumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, report, fake = upgrade_run(tmp_path, monkeypatch, {"held": {"gpu-02": "RMA pending"}},
                                   batch_size="100%")
    assert ok is True
    resume = fake.calls[-1].extravars
    assert resume["upgrade_resume_nodes"] == ["gpu-01", "gpu-03"]
    assert resume["upgrade_keep_drained"] == {}  # its reason is left as it was
    assert "Reason=RMA pending" in report.batches[0].kept_drained["gpu-02"]


def test_a_phase_that_stops_without_naming_a_node_fails_the_whole_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cp = plan.build(inventory(tmp_path, gpus=2), stack="cuda-12.9")
    fake = FakeCluster(hosts=list(cp.inventory.gpu_hosts))

    def timed_out(playbook: str, *args: Any, **kw: Any) -> PlaybookResult:
        result = fake(playbook, *args, **kw)
        if playbook == "validate.yml":
            result.status, result.rc, result.stats = "timeout", 254, {}
        return result

    for module in (bringup, upgrade):
        monkeypatch.setattr(module, "run_playbook", timed_out)
    monkeypatch.setattr(bringup, "stack_checks", lambda *_a, **_k: [])
    monkeypatch.setattr(bringup, "secure_run_dir", lambda *_a: None)
    report = Report(run_id="r", command="upgrade", inventory="i", simulated=False,
                    started_at="t")
    (tmp_path / "run").mkdir()
    ok = upgrade.run(cp, report, tmp_path / "run", upgrade.BATCH_PHASES, RunOptions(),
                     no_display, settings=upgrade.UpgradeSettings(stack="cuda-12.9",
                                                                  batch_size="2"))
    assert ok is False
    batch = report.batches[0]
    assert batch.resumed == [] and set(batch.kept_drained) == {"gpu-01", "gpu-02"}
    assert batch.kept_drained["gpu-01"] == (
        "gpuc upgrade to cuda-12.9 failed: validate: validate.yml timeout (rc 254)")


def test_the_report_carries_the_batches_to_json_and_console(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from provisioner import render

    _ok, report, _fake = upgrade_run(tmp_path, monkeypatch,
                                     {"fail": {"validate": {"gpu-02": "check"}}},
                                     max_failed_batches=1)
    report.finish(1)
    data = json.loads(json.dumps(report.to_dict(), default=str))
    assert [b["outcome"] for b in data["batches"]] == ["passed", "failed", "not run"]
    assert data["batches"][1]["kept_drained"] == {
        "gpu-02": "gpuc upgrade to cuda-12.9 failed: validate: gpu3_nvlink"}
    console = Console(record=True, width=200)
    render.report(console, data)
    text = console.export_text()
    assert "upgrade batches" in text
    assert "drained gpu-02: gpuc upgrade to cuda-12.9 failed: validate: gpu3_nvlink" in text
    assert "waited 42s for 0 job(s)" in text


def test_the_stack_override_is_refused_by_plan_build(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a known stack"):
        plan.build(inventory(tmp_path), stack="cuda-99")


def test_an_interrupt_marks_the_batch_and_the_ones_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.run_cancel import Interrupted

    cp = plan.build(inventory(tmp_path, gpus=3), stack="cuda-12.9")
    fake = FakeCluster(hosts=list(cp.inventory.gpu_hosts))

    def stopped(playbook: str, *args: Any, **kw: Any) -> PlaybookResult:
        if playbook == "validate.yml" and len(fake.calls) > 5:  # in the second batch
            raise Interrupted(2)
        return fake(playbook, *args, **kw)

    for module in (bringup, upgrade):
        monkeypatch.setattr(module, "run_playbook", stopped)
    monkeypatch.setattr(bringup, "stack_checks", lambda *_a, **_k: [])
    monkeypatch.setattr(bringup, "secure_run_dir", lambda *_a: None)
    report = Report(run_id="r", command="upgrade", inventory="i", simulated=False,
                    started_at="t")
    (tmp_path / "run").mkdir()
    with pytest.raises(Interrupted):
        upgrade.run(cp, report, tmp_path / "run", upgrade.BATCH_PHASES, RunOptions(),
                    no_display, settings=upgrade.UpgradeSettings(stack="cuda-12.9"))
    assert [b.outcome for b in report.batches] == ["passed", "interrupted", "not run"]
    assert "gpu-02 may be left drained in Slurm" in report.batches[1].detail
    assert report.batches[2].detail == "not run: the upgrade stopped after batch 2 (interrupted)"
