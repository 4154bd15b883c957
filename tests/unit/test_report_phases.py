"""Report.add_phase: what a playbook's result leaves in the report (the phase's record, each
host's facts, the checks of the roles' report facts). Written against its mutants, which no
test had run: every field of the input reaches the report, or the test says which."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from provisioner.report import Check, Phase, Report
from provisioner.results import HostStats, PlaybookResult, TaskFailure


def new_report() -> Report:
    return Report("r1", "up", "hosts.yml", simulated=False, started_at="t")


def result(**kwargs: Any) -> PlaybookResult:
    base: dict[str, Any] = {"playbook": "stack.yml", "status": "successful", "rc": 0,
                            "duration_s": 1.0, "artifact_dir": Path("artifacts")}
    return PlaybookResult(**{**base, **kwargs})


def test_the_phase_records_the_playbooks_result() -> None:
    stats = {"gpu-b": HostStats(ok=4, changed=2, failed=1),
             "gpu-a": HostStats(ok=9, changed=3, skipped=2),
             "gpu-c": HostStats(unreachable=1)}
    failures = [TaskFailure("gpu-b", "Driver | Install", "dpkg lock"),
                TaskFailure("gpu-c", "Gathering Facts", "no route", unreachable=True)]
    played = result(status="failed", rc=2, duration_s=12.3456, stats=stats, failures=failures)
    report = new_report()
    phase = report.add_phase("stack", played)
    assert report.phases == [phase]
    assert phase == Phase(
        name="stack", playbook="stack.yml", status="failed", rc=2,
        duration_s=12.35,  # to the hundredth of a second
        changed=2 + 3, ok=False,
        hosts={"gpu-a": {"ok": 9, "changed": 3, "failed": 0, "unreachable": 0, "skipped": 2,
                         "rescued": 0, "ignored": 0},
               "gpu-b": {"ok": 4, "changed": 2, "failed": 1, "unreachable": 0, "skipped": 0,
                         "rescued": 0, "ignored": 0},
               "gpu-c": {"ok": 0, "changed": 0, "failed": 0, "unreachable": 1, "skipped": 0,
                         "rescued": 0, "ignored": 0}},
        failures=[{"host": "gpu-b", "task": "Driver | Install", "message": "dpkg lock",
                   "unreachable": False},
                  {"host": "gpu-c", "task": "Gathering Facts", "message": "no route",
                   "unreachable": True}])
    assert list(phase.hosts) == ["gpu-a", "gpu-b", "gpu-c"]  # sorted, whatever the order given
    assert report.checks == [] and report.hosts == {}
    saved = report.to_dict()["phases"]
    assert saved == [asdict(phase)]


def test_a_passed_phase_says_ok_and_phases_add_up_in_order() -> None:
    report = new_report()
    first = report.add_phase("preflight", result(playbook="preflight.yml", duration_s=0.004,
                                                 stats={"gpu-a": HostStats(ok=3)}))
    second = report.add_phase("stack", result(duration_s=7.0))
    assert report.phases == [first, second]
    assert (first.name, first.playbook, first.status, first.rc) == (
        "preflight", "preflight.yml", "successful", 0)
    assert first.ok is True and first.changed == 0 and first.duration_s == 0.0
    assert first.failures == [] and second.hosts == {} and second.ok is True
    assert isinstance(second.duration_s, float) and second.duration_s == 7.0


def test_dropped_failures_are_counted_in_one_last_entry() -> None:
    failures = [TaskFailure("gpu-a", "t", "m")]
    phase = new_report().add_phase("stack", result(status="failed", rc=2, failures=failures,
                                                   dropped_failures=17))
    assert phase.failures == [
        {"host": "gpu-a", "task": "t", "message": "m", "unreachable": False},
        {"host": "*", "task": "*", "unreachable": False,
         "message": "17 more failures not shown"}]
    assert new_report().add_phase("stack", result(failures=failures)).failures == [
        {"host": "gpu-a", "task": "t", "message": "m", "unreachable": False}]


def test_report_facts_become_host_facts_and_checks() -> None:
    gpu_checks = [
        {"name": "gpu_count", "status": "pass", "measured": 8, "expected": 8, "detail": "ok"},
        {"name": 7, "status": False, "measured": [1.5], "expected": {"min": 2}},  # no detail
    ]
    reports = {
        "gpu-b": {
            "preflight": {"checks": [{"name": "disk", "status": "warn", "measured": "9G",
                                      "expected": "10G", "detail": "low"}]},
            "gpu_validate": {"gpus": 8, "checks": gpu_checks},
            "smoke": None,
            "notes": ["a list", "of text"],
            "nccl": {"busbw": 400},  # a section without checks
        },
        "gpu-a": {"gpu_validate": {"gpus": 8, "checks": []}},
    }
    report = new_report()
    report.hosts["gpu-b"] = {"kind": "gpu"}
    report.add_phase("validate", result(reports=reports))
    assert report.hosts == {
        "gpu-a": {"facts": {"gpu_validate": reports["gpu-a"]["gpu_validate"]}},
        "gpu-b": {"kind": "gpu", "facts": {  # preflight's facts are its checks only
            "gpu_validate": reports["gpu-b"]["gpu_validate"], "smoke": None,
            "notes": ["a list", "of text"], "nccl": {"busbw": 400}}},
    }
    assert report.checks == [
        Check(host="gpu-b", phase="preflight", name="disk", status="warn", measured="9G",
              expected="10G", detail="low"),
        Check(host="gpu-b", phase="gpu_validate", name="gpu_count", status="pass", measured=8,
              expected=8, detail="ok"),
        Check(host="gpu-b", phase="gpu_validate", name="7", status="False", measured=[1.5],
              expected={"min": 2}, detail=""),
    ]


def test_a_later_phase_adds_to_a_hosts_facts_and_checks() -> None:
    report = new_report()
    check = {"name": "driver", "status": "pass", "measured": "550", "expected": "550"}
    report.add_phase("stack", result(reports={"gpu-a": {"stack": {"driver": "550",
                                                                  "checks": [check]}}}))
    report.add_phase("validate", result(reports={"gpu-a": {"nccl": {"busbw": 1}},
                                                 "gpu-c": {"nccl": {"checks": []}}}))
    assert report.hosts == {
        "gpu-a": {"facts": {"stack": {"driver": "550", "checks": [check]},
                            "nccl": {"busbw": 1}}},
        "gpu-c": {"facts": {"nccl": {"checks": []}}}}
    assert [(c.host, c.phase, c.name, c.detail) for c in report.checks] == [
        ("gpu-a", "stack", "driver", "")]
