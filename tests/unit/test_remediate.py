"""`provisioner remediate` with run_playbook faked at the boundary: which drained nodes it takes
(drained and idle, a reason the provisioner wrote, unless --any-reason), the order of the
playbooks (survey and resume on the Slurm controller, reset and validate on the nodes), and that
only a node whose reset worked and whose validation passed is resumed; the others stay drained
with what remediate found. The real nodes: tests/e2e/test_certify_e2e.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import bringup, cli, plan, remediate
from provisioner.bringup import RunOptions
from provisioner.report import Report
from provisioner.results import HostStats, PlaybookResult
from tests.unit.fake_bringup import faked_run, no_display

CONTROLLER = "login-01"
SINFO = [
    "gpu-01|drained|gpuc certify pair_tcp_bw: best pair 0.19 Gbit/s < 9.8 Gbit/s",
    "gpu-02|drained|gpuc: gpu0_ecc: uncorrectable",
    "gpu-03|drained|gpuc upgrade to cuda-12.9 failed: validate: gpu3_nvlink",
    "gpu-04|draining|gpuc: xid: Xid 79",
    "gpu-05|drained|rack 4 PSU swap (alice)",
    "gpu-06|idle|none",
    "login-01|idle|none",
    "other-01|drained|gpuc: not ours",
]


def test_it_takes_drained_idle_nodes_with_its_own_reasons() -> None:
    states = remediate.parse_sinfo([*SINFO, "gpu-01|idle|listed twice, second partition"])
    hosts = [f"gpu-0{i}" for i in range(1, 7)]
    chosen = remediate.choose(states, hosts, any_reason=False)
    assert sorted(h for h, o in chosen.items() if o.taken) == ["gpu-01", "gpu-02", "gpu-03"]
    assert "jobs still run" in chosen["gpu-04"].detail
    assert "--any-reason" in chosen["gpu-05"].detail
    assert "gpu-06" not in chosen and "other-01" not in chosen  # idle; not in the inventory
    assert chosen["gpu-05"].reason == "rack 4 PSU swap (alice)"
    anyway = remediate.choose(states, hosts, any_reason=True)
    assert sorted(h for h, o in anyway.items() if o.taken) == [
        "gpu-01", "gpu-02", "gpu-03", "gpu-05"]


def test_a_node_slurms_prolog_drained_is_taken() -> None:
    states = remediate.parse_sinfo(["gpu-01|drained|gpuc prolog: gpu_count: 7 of 8 GPUs visible"])
    assert remediate.choose(states, ["gpu-01"], any_reason=False)["gpu-01"].taken


def inventory(tmp_path: Path, slurm: bool = True) -> Path:
    hosts = {f"gpu-0{i}": {"gpu_profile": "hgx-h100-8gpu", "ansible_host": f"gpu-0{i}.invalid"}
             for i in range(1, 7)}
    children: dict[str, Any] = {"gpu_nodes": {"hosts": hosts},
                                "cpu_nodes": {"hosts": {CONTROLLER: {}}}}
    if slurm:
        children["slurm_controller"] = {"hosts": {CONTROLLER: {}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": children}}))
    return path


@dataclass
class FakeCluster:
    """run_playbook for remediate's playbooks: ``reset_rc`` per node (default 0), ``failing``
    the nodes whose validation fails a check."""

    reset_rc: dict[str, int] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    rebooted: set[str] = field(default_factory=set)
    calls: list[tuple[str, str | None, dict[str, Any]]] = field(default_factory=list)

    def __call__(self, playbook: str, _inventories: Any, run_dir: Path, ident: str, *,
                 extravars: dict[str, Any] | None = None, limit: str | None = None,
                 **_kw: Any) -> PlaybookResult:
        self.calls.append((playbook, limit, dict(extravars or {})))
        result = PlaybookResult(playbook=playbook, status="successful", rc=0, duration_s=0.1,
                                artifact_dir=run_dir / ident)
        hosts = [h for h in (limit or "").split(":") if h]
        for host in hosts:
            result.stats[host] = HostStats(ok=2)
        if playbook == remediate.SURVEY_PLAYBOOK:
            result.reports[CONTROLLER] = {"remediate": {"sinfo": SINFO}}
        elif playbook == remediate.RESET_PLAYBOOK:
            for host in hosts:
                rc = self.reset_rc.get(host, 0)
                result.reports[host] = {"remediate": {
                    "reset_rc": rc, "reset_message": "" if rc == 0 else "fell off the bus",
                    "rebooted": host in self.rebooted, "reboot_error": ""}}
        elif playbook == "validate.yml":
            for host in hosts:
                status = "fail" if host in self.failing else "pass"
                result.reports[host] = {"gpu_validate": {"checks": [
                    {"name": "gpu3_nvlink", "status": status, "measured": 18, "expected": 18,
                     "detail": ""}]}}
        return result


def remediate_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeCluster,
                  **settings: Any) -> tuple[bool, Report]:
    cp = plan.build(inventory(tmp_path))
    report, run_dir = faked_run(tmp_path, monkeypatch, cp, "remediate", fake, [remediate])
    ok = remediate.run(cp, report, run_dir, bringup.VALIDATE_PHASES, RunOptions(), no_display,
                       settings=remediate.RemediateSettings(**settings))
    return ok, report


def test_only_a_node_reset_and_validated_is_resumed(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCluster(reset_rc={"gpu-02": 15}, failing={"gpu-03"})
    ok, report = remediate_run(tmp_path, monkeypatch, fake)
    assert ok is False
    assert [(book, limit) for book, limit, _ in fake.calls] == [
        (remediate.SURVEY_PLAYBOOK, CONTROLLER),
        (remediate.RESET_PLAYBOOK, "gpu-01:gpu-02:gpu-03"),
        ("validate.yml", "gpu-01:gpu-03"),  # gpu-02's GPUs could not be reset
        (remediate.RESUME_PLAYBOOK, CONTROLLER)]
    assert fake.calls[1][2]["remediate_reboot"] is False
    resume = fake.calls[-1][2]
    assert resume["upgrade_resume_nodes"] == ["gpu-01"]
    keep = resume["upgrade_keep_drained"]
    assert sorted(keep) == ["gpu-02", "gpu-03"]
    assert keep["gpu-02"].startswith("gpuc remediate: reset failed (rc 15): fell off the bus")
    assert keep["gpu-03"].startswith("gpuc remediate: validate failed: gpu3_nvlink; before: "
                                     "gpuc upgrade to cuda-12.9")
    outcomes = {o["host"]: o for o in report.remediate}
    assert outcomes["gpu-01"]["resumed"] and outcomes["gpu-01"]["validate"] == "passed"
    assert not outcomes["gpu-02"]["resumed"] and outcomes["gpu-02"]["validate"] == "not run"
    assert "--reboot" in outcomes["gpu-02"]["detail"]
    assert not outcomes["gpu-03"]["resumed"]
    assert not outcomes["gpu-05"]["taken"] and not outcomes["gpu-04"]["taken"]
    assert any(n.startswith("gpu-01: reset passed, validate passed, resumed")
               for n in report.notes), report.notes


def test_a_node_rebooted_after_a_failed_reset_is_validated(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCluster(reset_rc={"gpu-02": 15}, rebooted={"gpu-02"})
    ok, report = remediate_run(tmp_path, monkeypatch, fake, reboot=True)
    assert ok is True
    assert fake.calls[1][2]["remediate_reboot"] is True
    assert fake.calls[2][1] == "gpu-01:gpu-02:gpu-03"
    assert fake.calls[-1][2]["upgrade_resume_nodes"] == ["gpu-01", "gpu-02", "gpu-03"]
    assert {o["host"]: o["rebooted"] for o in report.remediate if o["taken"]} == {
        "gpu-01": False, "gpu-02": True, "gpu-03": False}


def test_without_slurm_it_is_refused_in_one_line_before_any_playbook(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def no_playbook(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a playbook ran")

    for module in (bringup, remediate):
        monkeypatch.setattr(module, "run_playbook", no_playbook)
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    assert cli.main(["remediate", "-i", str(inventory(tmp_path, slurm=False)), "--yes"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "has no Slurm" in line
    assert not (tmp_path / "runs").exists()
