"""drain.yml and resume.yml for real (ansible-runner, localhost as the Slurm controller) against
stand-in sinfo, scontrol, squeue and scancel that log their arguments: the drain, the wait for
the jobs, the timeout that stops the upgrade, --force, a node someone else drained, and the
reasons left on the nodes. The batch phases (stack, validate, monitoring) are faked as in
tests/unit/test_upgrade.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import bringup, plan, upgrade
from provisioner.bringup import RunOptions
from provisioner.report import Report
from tests.unit.fake_bringup import no_display
from tests.unit.test_upgrade import CONTROLLER, FakeCluster

JOB = "123 alice RUNNING gpu-01 train job"


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand-in Slurm commands first on PATH; their state and call log in the returned dir.
    squeue lists JOB while the counter in `busy` is above zero (one less per call); scancel
    ends the jobs."""
    state = tmp_path / "slurm"
    bin_dir = state / "bin"
    bin_dir.mkdir(parents=True)
    log = f'printf "%s\\n" "$(basename "$0") $*" >> {state}/calls\n'
    scripts = {
        "sinfo": f"cat {state}/sinfo.txt\n",
        "scontrol": "",
        "squeue": (f"n=$(cat {state}/busy)\nif [ \"$n\" -gt 0 ]; then\n"
                   f"  echo $((n - 1)) > {state}/busy\n  echo '{JOB}'\nfi\n"),
        "scancel": f"echo 0 > {state}/busy\n",
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{log}{body}")
        path.chmod(0o755)
    (state / "sinfo.txt").write_text("gpu-01|idle|none\ngpu-02|idle|none\n")
    (state / "busy").write_text("0\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return state


def calls(state: Path, command: str) -> list[str]:
    log = state / "calls"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split(" ", 1)[1] for line in lines if line.startswith(f"{command} ")]


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: dict[str, dict[str, str]],
        **settings: Any) -> Report:
    local = {"ansible_connection": "local",
             "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": local, "children": {
        "gpu_nodes": {"hosts": {"gpu-01": {"gpu_profile": "hgx-h100-8gpu"},
                                "gpu-02": {"gpu_profile": "hgx-h100-8gpu"}}},
        "cpu_nodes": {"hosts": {CONTROLLER: {}}},
        "slurm_controller": {"hosts": {CONTROLLER: {}}}}}}))
    cp = plan.build(inv, stack="cuda-12.9")
    # Only the batch phases are faked: drain.yml and resume.yml run through the real runner.
    monkeypatch.setattr(bringup, "run_playbook", FakeCluster(hosts=["gpu-01", "gpu-02"],
                                                             fail=fail))
    monkeypatch.setattr(bringup, "stack_checks", lambda *_a, **_k: [])
    report = Report(run_id="r", command="upgrade", inventory=str(inv), simulated=False,
                    started_at="t")
    (tmp_path / "run").mkdir()
    upgrade.run(cp, report, tmp_path / "run", upgrade.BATCH_PHASES,
                RunOptions(timeout_s=300), no_display,
                settings=upgrade.UpgradeSettings(stack="cuda-12.9", drain_poll_s=1, **settings))
    return report


def test_drain_waits_for_the_jobs_then_resumes_or_keeps_drained_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: Path) -> None:
    (slurm / "busy").write_text("3\n")  # the job ends after three looks
    report = run(tmp_path, monkeypatch, {"validate": {"gpu-02": "check"}},
                 max_failed_batches=2)
    assert calls(slurm, "scontrol") == [
        "update NodeName=gpu-01 State=DRAIN Reason=gpuc upgrade to cuda-12.9",
        "update NodeName=gpu-01 State=RESUME",
        "update NodeName=gpu-02 State=DRAIN Reason=gpuc upgrade to cuda-12.9",
        "update NodeName=gpu-02 State=DRAIN "
        "Reason=gpuc upgrade to cuda-12.9 failed: validate: gpu3_nvlink"]
    assert calls(slurm, "scancel") == []
    first, second = report.batches
    assert first.outcome == "passed" and first.resumed == ["gpu-01"]
    assert first.jobs_waited_for == [JOB] and first.jobs_cancelled == []
    assert first.drain_wait_s is not None and first.drain_wait_s >= 1  # at least one delay
    assert first.drained_at and first.stack_started_at
    assert first.stack_started_at >= first.drained_at
    assert second.outcome == "failed" and second.jobs_waited_for == []
    assert second.kept_drained == {
        "gpu-02": "gpuc upgrade to cuda-12.9 failed: validate: gpu3_nvlink"}
    squeue = calls(slurm, "squeue")
    assert squeue[0] == ("--noheader --nodelist gpu-01 --states RUNNING,COMPLETING,SUSPENDED "
                         "--format %i %u %T %N %j")
    assert len(squeue) == 4 + 1  # batch 1: the listing and three looks; batch 2: the listing


def test_jobs_past_the_timeout_stop_the_upgrade_with_the_nodes_drained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: Path) -> None:
    (slurm / "busy").write_text("1000\n")
    report = run(tmp_path, monkeypatch, {}, drain_timeout_s=2)
    assert calls(slurm, "scontrol") == [
        "update NodeName=gpu-01 State=DRAIN Reason=gpuc upgrade to cuda-12.9"]
    assert calls(slurm, "scancel") == []
    assert [b.outcome for b in report.batches] == ["drain timed out", "not run"]
    assert report.batches[0].detail == f"1 job(s) still ran on gpu-01 after 2 s: {JOB}"
    [drain] = report.phases
    assert drain.name == "batch 1 drain" and not drain.ok
    [failure] = drain.failures
    assert failure["task"] == "Upgrade | Check that no job runs on the nodes any more"
    assert "nodes gpu-01 are drained, but after 2 s 1 job(s) still run on them" in (
        failure["message"])


def test_force_cancels_the_jobs_left_after_the_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: Path) -> None:
    (slurm / "busy").write_text("1000\n")
    report = run(tmp_path, monkeypatch, {}, drain_timeout_s=1, force=True, batch_size="2")
    assert calls(slurm, "scancel") == ["--nodelist gpu-01,gpu-02"]
    assert calls(slurm, "scontrol") == [
        "update NodeName=gpu-01,gpu-02 State=DRAIN Reason=gpuc upgrade to cuda-12.9",
        "update NodeName=gpu-01,gpu-02 State=RESUME"]
    [batch] = report.batches
    assert batch.outcome == "passed" and batch.jobs_cancelled == [JOB]
    assert batch.resumed == ["gpu-01", "gpu-02"]


def test_a_node_drained_before_keeps_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm: Path) -> None:
    (slurm / "sinfo.txt").write_text(
        "gpu-01|idle|none\ngpu-02|drained|RMA pending\ngpu-02|drained|RMA pending\n")
    report = run(tmp_path, monkeypatch, {}, batch_size="2")
    assert calls(slurm, "scontrol") == [
        "update NodeName=gpu-01 State=DRAIN Reason=gpuc upgrade to cuda-12.9",
        "update NodeName=gpu-01 State=RESUME"]
    [batch] = report.batches
    assert batch.outcome == "passed" and batch.resumed == ["gpu-01"]
    assert "Reason=RMA pending" in batch.kept_drained["gpu-02"]
