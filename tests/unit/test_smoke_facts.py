"""The smoke phase gathers the GPU nodes' platforms afresh (playbooks/facts.yml) before it builds
the wheelhouse, on the smoke run's nodes, and builds it for what the nodes answer in that run:
a node reinstalled with another Python gets wheels for its new one. A node that answers no
usable platform gets the controller's, and the report's notes say so; one facts.yml cannot
reach is lost, as in the other phases. run_playbook and the wheel download are faked at their
boundaries; tests/integration/test_facts_playbook.py runs facts.yml for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provisioner import bringup, smoke_launch
from provisioner.plan import ClusterPlan, build
from provisioner.report import Report
from provisioner.results import HostStats, PlaybookResult, TaskFailure
from provisioner.wheelhouse import NodePlatform
from tests.unit.fake_bringup import no_display
from tests.unit.test_monitoring_phase import sim_inventory

GPU = ("sim-gpu-1", "sim-gpu-2")
CONTROLLER = NodePlatform("3.11", "x86_64")


class Playbooks:
    """run_playbook stand-in. facts.yml: each GPU node in the limit publishes its platform
    (``answers``: host -> (python, machine)) or is unreachable; smoke.yml: every node passes.
    ``log`` records what ran, in order, with its ident and limit, and each wheelhouse built."""

    def __init__(self, answers: dict[str, tuple[str, str]],
                 unreachable: tuple[str, ...] = ()) -> None:
        self.answers = answers
        self.unreachable = unreachable
        self.log: list[tuple[str, ...]] = []

    def __call__(self, playbook: str, _inventories: Any, run_dir: Path, ident: str, *,
                 limit: str | None = None, **_kw: Any) -> PlaybookResult:
        self.log.append((playbook, ident, str(limit)))
        result = PlaybookResult(playbook=playbook, status="successful", rc=0, duration_s=0.1,
                                artifact_dir=run_dir)
        for host in _targets(limit):
            if playbook == "facts.yml" and host in self.unreachable:
                result.stats[host] = HostStats(unreachable=1)
                result.failures.append(TaskFailure(host, "Facts | Gather", "no route", True))
                continue
            result.stats[host] = HostStats(ok=2)
            if playbook == "facts.yml":
                python, machine = self.answers[host]
                major, minor = python.split(".")
                result.reports[host] = {"node_platform": {
                    "python": {"version": {"major": int(major), "minor": int(minor)}},
                    "architecture": machine}}
            else:
                result.reports[host] = {"smoke_job": {"passes": {"nccl_tests": {
                    "rc": 0, "skipped": "nccl-tests not built: nvcc cannot compile"}}}}
        if any(not s.healthy for s in result.stats.values()):
            result.status, result.rc = "failed", 4
        return result

    def wheelhouse(self, dest: Path, **kw: Any) -> Path:
        self.log.append(("wheelhouse", *sorted(p.key for p in kw["platforms"])))
        return dest


def _targets(limit: str | None) -> list[str]:
    parts = (limit or "all").split(":")
    chosen = {p for p in parts if not p.startswith("!")}
    return [h for h in GPU if f"!{h}" not in parts and ("all" in chosen or h in chosen)]


@pytest.fixture
def plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ClusterPlan:
    monkeypatch.setattr(bringup, "secure_run_dir", lambda *_a: None)
    monkeypatch.setattr(smoke_launch, "controller_platform", lambda: CONTROLLER)
    return build(sim_inventory(tmp_path, monkeypatch) / "hosts.yml")


def fake(monkeypatch: pytest.MonkeyPatch, answers: dict[str, tuple[str, str]],
         unreachable: tuple[str, ...] = ()) -> Playbooks:
    playbooks = Playbooks(answers, unreachable)
    monkeypatch.setattr(bringup, "run_playbook", playbooks)
    monkeypatch.setattr(smoke_launch, "ensure_wheelhouse", playbooks.wheelhouse)
    return playbooks


def smoke(plan: ClusterPlan, tmp_path: Path, limit: str | None = None,
          index: int = 0) -> tuple[bool, Report]:
    report = Report(run_id="r", command="smoke", inventory=str(plan.inventory.source),
                    simulated=True, started_at="t")
    run_dir = tmp_path / f"run-{index}"
    run_dir.mkdir()
    ok = bringup.run_smoke(plan, report, run_dir, [plan.inventory.source], index,
                           bringup.RunOptions(limit=limit), no_display)
    return ok, report


def test_facts_are_gathered_before_the_wheelhouse_on_the_smoke_runs_nodes(
        plan: ClusterPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    playbooks = fake(monkeypatch, {"sim-gpu-1": ("3.13", "x86_64")})
    ok, report = smoke(plan, tmp_path, limit="sim-gpu-1", index=6)
    assert playbooks.log == [("facts.yml", "06-facts", "sim-gpu-1"),
                             ("wheelhouse", "cp313-x86_64"),
                             ("smoke.yml", "06-smoke", "sim-gpu-1")]
    assert ok is True, report.notes
    assert [p.name for p in report.phases] == ["facts", "smoke"]
    assert report.notes == [] and report.lost_hosts == {}
    # Each node's platform is in the report, under the section facts.yml publishes.
    assert report.hosts["sim-gpu-1"]["facts"]["node_platform"]["architecture"] == "x86_64"


def test_a_reinstalled_node_gets_wheels_for_the_python_it_runs_now(
        plan: ClusterPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = fake(monkeypatch, {"sim-gpu-1": ("3.11", "x86_64"), "sim-gpu-2": ("3.11", "x86_64")})
    assert smoke(plan, tmp_path, index=0)[0] is True
    assert ("wheelhouse", "cp311-x86_64") in before.log
    # sim-gpu-2 is reinstalled with Debian 13 between the runs: what the earlier run learnt
    # about it does not count.
    after = fake(monkeypatch, {"sim-gpu-1": ("3.11", "x86_64"), "sim-gpu-2": ("3.13", "x86_64")})
    ok, report = smoke(plan, tmp_path, index=1)
    assert ("wheelhouse", "cp311-x86_64", "cp313-x86_64") in after.log
    assert ok is True and report.notes == []


def test_a_node_without_a_usable_platform_gets_the_controllers_and_a_note(
        plan: ClusterPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    playbooks = fake(monkeypatch, {"sim-gpu-1": ("3.13", "x86_64"),
                                   "sim-gpu-2": ("3.12", "ppc64le")})
    _ok, report = smoke(plan, tmp_path)
    assert ("wheelhouse", "cp311-x86_64", "cp313-x86_64") in playbooks.log
    [note] = report.notes
    assert note.startswith("wheelhouse: no Python version or known machine")
    assert "from sim-gpu-2:" in note and "sim-gpu-1" not in note
    assert "controller's platform (cp311-x86_64)" in note


def test_platforms_of_names_at_most_ten_nodes_in_its_note() -> None:
    hosts = [f"gpu-{i:02d}" for i in range(12)]
    platforms, [note] = smoke_launch.platforms_of({}, hosts)
    assert platforms == [smoke_launch.controller_platform()]
    assert "gpu-09 and 2 more:" in note and "gpu-10" not in note


def test_a_node_facts_cannot_reach_is_lost_and_left_out_of_the_job(
        plan: ClusterPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    playbooks = fake(monkeypatch, {"sim-gpu-1": ("3.13", "x86_64")}, unreachable=("sim-gpu-2",))
    ok, report = smoke(plan, tmp_path)
    assert ok is False  # the job passed on sim-gpu-1, the run lost sim-gpu-2
    assert playbooks.log == [("facts.yml", "00-facts", "None"),
                             ("wheelhouse", "cp313-x86_64"),
                             ("smoke.yml", "00-smoke", "all:!sim-gpu-2")]
    assert report.lost_hosts == {"sim-gpu-2": {"phase": "smoke", "reason": "unreachable",
                                               "task": "Facts | Gather", "message": "no route"}}
    assert report.phases[0].hosts["sim-gpu-2"]["unreachable"] == 1
    assert "facts: the smoke job goes on without sim-gpu-2 (1 lost)" in report.notes
    # `up --retry-failed` resumes the smoke phase, facts.yml included.
    data = report.to_dict() | {"command": "up"}
    assert bringup.retry_of(data, str(plan.inventory.source)).phase == "smoke"


def test_no_node_reached_no_wheelhouse_no_job(
        plan: ClusterPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    playbooks = fake(monkeypatch, {}, unreachable=GPU)
    ok, report = smoke(plan, tmp_path)
    assert ok is False
    assert playbooks.log == [("facts.yml", "00-facts", "None")]
    assert set(report.lost_hosts) == set(GPU)
    assert "the smoke job did not run: facts.yml reached no GPU node" in report.notes


def test_a_site_index_needs_no_platforms(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    inv = sim_inventory(tmp_path, monkeypatch)
    (inv / "index.yml").write_text("all:\n  vars:\n    smoke_job_pip_index_url: "
                                   "https://pypi.example.org/simple\n")
    monkeypatch.setattr(bringup, "secure_run_dir", lambda *_a: None)
    playbooks = fake(monkeypatch, {})
    ok, _report = smoke(build(inv), tmp_path)
    assert ok is True
    assert playbooks.log == [("smoke.yml", "00-smoke", "None")]


def test_up_and_smoke_both_gather_facts_on_the_nodes_not_lost(
        plan: ClusterPlan, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """run_phases runs the smoke phase for `up` and for `provisioner smoke` alike; after an
    earlier phase lost a node, facts.yml and the job leave it out."""
    playbooks = fake(monkeypatch, {"sim-gpu-1": ("3.13", "x86_64")})
    report = Report(run_id="r", command="up", inventory=str(plan.inventory.source),
                    simulated=True, started_at="t")
    report.lost_hosts["sim-gpu-2"] = {"phase": "validate", "reason": "unreachable",
                                      "task": "", "message": ""}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ok = bringup.run_phases(plan, report, run_dir, (bringup.SMOKE_PHASE,),
                            bringup.RunOptions(), no_display)
    assert ok is False  # sim-gpu-2 stays lost
    assert [(entry[0], entry[2]) for entry in playbooks.log if entry[0] != "wheelhouse"] == [
        ("facts.yml", "all:!sim-gpu-2"), ("smoke.yml", "all:!sim-gpu-2")]
    assert [p.name for p in report.phases] == ["facts", "smoke"]
