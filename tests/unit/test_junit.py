"""The JUnit file CI dashboards read: checks and playbook phases as testcases, failures as
<failure>, unreachable hosts as <error>, untrusted text escaped by the XML library."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from provisioner.report import Check, Report
from provisioner.results import HostStats, PlaybookResult, TaskFailure

NASTY = 'quote " amp & lt < gt > apos \''


def _report(simulated: bool = False) -> Report:
    report = Report("r1", "up", "inv", simulated=simulated, started_at="now")
    result = PlaybookResult(
        playbook="stack.yml", status="failed", rc=2, duration_s=12.345,
        artifact_dir=Path("/nonexistent"),
        stats={"gpu-a": HostStats(ok=5), "gpu-b": HostStats(ok=2, failed=1),
               "gpu-c": HostStats(unreachable=1)},
        failures=[TaskFailure("gpu-b", "NVIDIA driver | Install", f"dpkg lock held {NASTY}"),
                  TaskFailure("gpu-c", "Gathering Facts", "ssh: connect refused",
                              unreachable=True)])
    report.add_phase("stack", result)
    report.checks += [
        Check("gpu-a", "validate", "gpu_count", "pass", 8, 8, "ok"),
        Check("gpu-b", "validate", "nvlink", "fail", 10, 18, f"links down {NASTY}"),
        Check("gpu-b", "validate", "ib", "skip", None, None, "no HCA"),
    ]
    return report


def _suites(report: Report) -> list[ET.Element]:
    """The suites of checks and phases (the last suite, "run", holds the verdict)."""
    suites = ET.fromstring(report.junit()).findall("testsuite")
    assert suites[-1].get("name", "").endswith("run")
    return suites[:-1]


def _cases(suite: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in suite.findall("testcase")}


def test_checks_become_testcases_with_failure_and_skipped() -> None:
    root = ET.fromstring(_report().junit())
    assert root.tag == "testsuites" and root.get("name") == "gpu-cluster-provisioner r1"
    [suite] = [s for s in root.findall("testsuite") if s.get("name") == "validate"]
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped"),
            suite.get("errors")) == ("3", "1", "1", "0")
    cases = _cases(suite)
    assert set(cases) == {"gpu-a.gpu_count", "gpu-b.nvlink", "gpu-b.ib"}
    assert list(cases["gpu-a.gpu_count"]) == []
    failure = cases["gpu-b.nvlink"].find("failure")
    assert failure is not None
    assert failure.get("message") == f"measured=10 expected=18: links down {NASTY}"
    skipped = cases["gpu-b.ib"].find("skipped")
    assert skipped is not None and skipped.get("message") == "measured=None expected=None: no HCA"


def test_playbook_phase_failures_and_unreachable_hosts() -> None:
    root = ET.fromstring(_report().junit())
    [suite] = [s for s in root.findall("testsuite") if s.get("name") == "stack (stack.yml)"]
    assert suite.get("time") == "12.35"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = _cases(suite)
    assert list(cases["gpu-a"]) == []
    failure = cases["gpu-b"].find("failure")
    assert failure is not None and failure.get("message") == f"dpkg lock held {NASTY}"
    assert failure.text == f"NVIDIA driver | Install: dpkg lock held {NASTY}"
    error = cases["gpu-c"].find("error")
    assert error is not None and error.get("type") == "unreachable"
    assert error.get("message") == "ssh: connect refused"
    assert cases["gpu-c"].find("failure") is None


def test_controller_failure_without_host_stats_is_a_testcase() -> None:
    report = Report("r2", "up", "inv", simulated=False, started_at="now")
    report.add_phase("preflight", PlaybookResult(
        playbook="preflight.yml", status="failed", rc=4, duration_s=0.5,
        artifact_dir=Path("/nonexistent"),
        failures=[TaskFailure("controller", "preflight.yml", "ERROR! syntax error")]))
    [suite] = _suites(report)
    failure = _cases(suite)["controller"].find("failure")
    assert failure is not None and failure.get("message") == "ERROR! syntax error"


def test_simulated_report_says_so_in_every_suite(tmp_path: Path) -> None:
    report = _report(simulated=True)
    report.save(tmp_path)
    text = (tmp_path / "junit.xml").read_text(encoding="utf-8")
    assert text.startswith("<?xml")
    root = ET.fromstring(text)
    assert root.get("name", "").startswith("SIMULATED ")
    assert all(s.get("name", "").startswith("SIMULATED ") for s in root.findall("testsuite"))


def test_characters_xml_cannot_carry_are_replaced() -> None:
    report = Report("r3", "validate", "inv", simulated=False, started_at="now")
    report.checks.append(Check("gpu-a", "validate", "xid", "fail", "\x1b[31m79\x1b[0m", 0,
                               "bell \x07 nul \x00"))
    [suite] = _suites(report)
    failure = _cases(suite)["gpu-a.xid"].find("failure")
    assert failure is not None
    assert failure.get("message") == "measured=?[31m79?[0m expected=0: bell ? nul ?"


def _verdict(report: Report) -> ET.Element:
    [case] = ET.fromstring(report.junit()).findall("testsuite")[-1].findall("testcase")
    return case


def test_a_failed_run_is_never_an_empty_or_green_file() -> None:
    """A phase that failed with no host to blame (ansible-playbook stopped, was interrupted)
    is a failed testcase itself, and the verdict case fails with the run."""
    report = Report("r4", "up", "inv", simulated=False, started_at="now")
    report.add_phase("preflight", PlaybookResult(
        playbook="preflight.yml", status="canceled", rc=254, duration_s=0.5,
        artifact_dir=Path("/nonexistent")))
    report.notes.append("interrupted by SIGINT")
    report.finish(130, "interrupted")
    [suite] = _suites(report)
    assert (suite.get("tests"), suite.get("failures")) == ("1", "1")
    failure = _cases(suite)["preflight"].find("failure")
    assert failure is not None and failure.get("message") == "preflight.yml: canceled (rc 254)"
    verdict = _verdict(report).find("failure")
    assert verdict is not None
    assert verdict.get("message") == "interrupted: interrupted by SIGINT"


def test_a_passed_run_has_a_passed_verdict_and_no_phase_case() -> None:
    report = Report("r5", "validate", "inv", simulated=False, started_at="now")
    report.add_phase("validate", PlaybookResult(
        playbook="validate.yml", status="successful", rc=0, duration_s=0.5,
        artifact_dir=Path("/nonexistent"), stats={"gpu-a": HostStats(ok=3)}))
    report.finish(0)
    [suite] = _suites(report)
    assert set(_cases(suite)) == {"gpu-a"} and suite.get("failures") == "0"
    assert list(_verdict(report)) == []
    report.finish(1)
    verdict = _verdict(report).find("failure")
    assert verdict is not None and verdict.get("message") == "failed: exit code 1"
