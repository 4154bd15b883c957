"""The report on disk: the JUnit file whole for a report with every kind of case, report.json as
saved, the privacy helpers, and `provisioner report`'s loader in-process (its CLI tests run a
subprocess that mutation testing cannot see). Written against mutants that survived."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from provisioner import report as report_mod
from provisioner.errors import InputError
from provisioner.report import Batch, Check, Phase, Report


def golden_report() -> Report:
    r = Report("r9", "upgrade", "inv", simulated=False, started_at="t")
    r.checks = [
        Check("gpu-a", "gpu_validate", "gpu_count", "pass", 8, 8, "ok"),
        Check("gpu-b", "gpu_validate", "gpu_count", "fail", 7, 8, "one GPU missing"),
        Check("gpu-b", "smoke", "intra_node", "skip", None, 460.0, "no floor"),
    ]
    r.phases = [
        Phase("stack", "stack.yml", "failed", 2, 12.5, 0, False,
              hosts={"gpu-a": {"failed": 0, "unreachable": 0},
                     "gpu-b": {"failed": 1, "unreachable": 0},
                     "gpu-c": {"failed": 0, "unreachable": 1},
                     "gpu-d": {"failed": 1, "unreachable": 0},
                     "gpu-e": {"failed": 0, "unreachable": 1}},
              failures=[{"host": "gpu-b", "task": "Driver | Install", "message": "dpkg lock",
                         "unreachable": False},
                        {"host": "gpu-b", "task": "Driver | Hold", "message": "held",
                         "unreachable": False},
                        {"host": "gpu-c", "task": "Gathering Facts", "message": "no route",
                         "unreachable": True}]),
        Phase("validate", "validate.yml", "timeout", 254, 3.0, 0, False,
              hosts={"gpu-a": {"failed": 0, "unreachable": 0}}, failures=[]),
    ]
    r.batches = [
        Batch(1, ["gpu-a", "gpu-b"], outcome="passed"),
        Batch(2, ["gpu-c"], outcome="failed", detail="validate failed on gpu-c",
              kept_drained={"gpu-c": "gpuc: upgrade failed", "gpu-d": "gpuc: held"}),
        Batch(3, ["gpu-e"]),
        Batch(4, ["gpu-f"], outcome="not run", detail="stopped after batch 2"),
    ]
    r.notes = ["n1", "n2", "n3", "n4"]
    r.finish(1)
    return r


GOLDEN = """<?xml version='1.0' encoding='utf-8'?>
<testsuites name="gpu-cluster-provisioner r9">
  <testsuite name="gpu_validate" tests="2" failures="1" errors="0" skipped="0">
    <testcase classname="gpu_validate" name="gpu-a.gpu_count" />
    <testcase classname="gpu_validate" name="gpu-b.gpu_count">
      <failure message="measured=7 expected=8: one GPU missing" type="check" />
    </testcase>
  </testsuite>
  <testsuite name="smoke" tests="1" failures="0" errors="0" skipped="1">
    <testcase classname="smoke" name="gpu-b.intra_node">
      <skipped message="measured=None expected=460.0: no floor" />
    </testcase>
  </testsuite>
  <testsuite name="stack (stack.yml)" time="12.50" tests="5" failures="2" errors="2" skipped="0">
    <testcase classname="stack" name="gpu-a" />
    <testcase classname="stack" name="gpu-b">
      <failure message="dpkg lock" type="task">Driver | Install: dpkg lock
Driver | Hold: held</failure>
    </testcase>
    <testcase classname="stack" name="gpu-c">
      <error message="no route" type="unreachable">Gathering Facts: no route</error>
    </testcase>
    <testcase classname="stack" name="gpu-d">
      <failure message="a task failed" type="task" />
    </testcase>
    <testcase classname="stack" name="gpu-e">
      <error message="host unreachable" type="unreachable" />
    </testcase>
  </testsuite>
  <testsuite name="validate (validate.yml)" time="3.00" tests="2" failures="1" errors="0" skipped="0">
    <testcase classname="validate" name="gpu-a" />
    <testcase classname="validate" name="validate">
      <failure message="validate.yml: timeout (rc 254)" type="phase" />
    </testcase>
  </testsuite>
  <testsuite name="upgrade batches" tests="4" failures="1" errors="0" skipped="2">
    <testcase classname="upgrade" name="batch 1: gpu-a,gpu-b" />
    <testcase classname="upgrade" name="batch 2: gpu-c">
      <failure message="failed: validate failed on gpu-c" type="batch">gpu-c: gpuc: upgrade failed
gpu-d: gpuc: held</failure>
    </testcase>
    <testcase classname="upgrade" name="batch 3: gpu-e">
      <skipped message="not run" />
    </testcase>
    <testcase classname="upgrade" name="batch 4: gpu-f">
      <skipped message="stopped after batch 2" />
    </testcase>
  </testsuite>
  <testsuite name="run" tests="1" failures="1" errors="0" skipped="0">
    <testcase classname="run" name="upgrade verdict">
      <failure message="failed: n2; n3; n4" type="verdict" />
    </testcase>
  </testsuite>
</testsuites>
"""


def test_the_junit_file_of_a_report_with_every_kind_of_case() -> None:
    """Checks (pass, fail, skip), a phase with failed hosts (with and without failure lines),
    unreachable hosts (with and without a message), a phase that failed with nobody to blame,
    upgrade batches of every outcome, and the verdict from the last three notes."""
    assert golden_report().junit() == GOLDEN


def test_a_passed_run_has_no_verdict_failure_and_a_running_one_neither() -> None:
    report = Report("r", "up", "inv", simulated=False, started_at="t")
    assert 'type="verdict"' not in report.junit()  # outcome "running", exit code 0
    report.finish(0)
    assert 'type="verdict"' not in report.junit()
    report.finish(0, "interrupted")
    assert '<failure message="interrupted: exit code 0" type="verdict" />' in report.junit()


def test_finish_records_the_outcome_time_and_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    report = Report("r", "up", "inv", simulated=False, started_at="t")
    monkeypatch.setattr(report_mod.time, "monotonic", lambda: report._t0 + 12.3456)
    report.finish(1)
    assert (report.exit_code, report.outcome, report.duration_s) == (1, "failed", 12.35)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", report.finished_at)
    report.finish(0)
    assert report.outcome == "passed"


def test_saved_files_are_the_report_as_json_and_its_junit_masked(tmp_path: Path) -> None:
    report = Report("r", "up", "inv", simulated=True, started_at="t")
    report._secrets = {"hunter2"}
    report.notes.append("mirror password hunter2 refused")
    report.finish(1)
    run_dir = tmp_path / "runs" / "r"
    path = report.save(run_dir)
    assert path == run_dir / "report.json"
    text = path.read_text()
    assert text == json.dumps(report.to_dict(), indent=2, default=str) + "\n"
    data = json.loads(text)
    assert next(iter(data)) == "SIMULATED"
    assert "_t0" not in data and "_secrets" not in data
    assert data["notes"] == ["mirror password *** refused"]
    junit = (run_dir / "junit.xml").read_text()
    assert "hunter2" not in junit and "mirror password *** refused" in junit
    for saved in (path, run_dir / "junit.xml", run_dir / "index.html"):
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert sorted(p.name for p in run_dir.iterdir()) == ["index.html", "junit.xml", "report.json"]
    assert "hunter2" not in (run_dir / "index.html").read_text()


def test_a_report_that_cannot_be_saved_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "runs"
    blocker.write_text("a file where the run directory should be")
    report = Report("r", "up", "inv", simulated=False, started_at="t")
    with pytest.raises(report_mod.ReportNotSaved) as err:
        report.save(blocker / "r")
    assert str(err.value).startswith(f"cannot save the report in {blocker / 'r'}: ")


def test_private_dir_and_make_private(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    (loose / "sub").mkdir(mode=0o755)
    target = tmp_path / "target"
    target.write_text("y")
    target.chmod(0o644)
    (loose / "sub" / "f").write_text("x")
    (loose / "sub" / "f").chmod(0o644)
    (loose / "link").symlink_to(target)
    assert report_mod.private_dir(loose) == loose
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    nested = report_mod.private_dir(tmp_path / "a" / "b")
    assert nested.is_dir() and stat.S_IMODE(nested.stat().st_mode) == 0o700
    report_mod.make_private(loose)
    assert stat.S_IMODE((loose / "sub").stat().st_mode) == 0o700
    assert stat.S_IMODE((loose / "sub" / "f").stat().st_mode) == 0o600
    # A link is left alone, and so is what it points at.
    assert (loose / "link").is_symlink() and stat.S_IMODE(target.stat().st_mode) == 0o644


def test_write_private_replaces_atomically_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_text("old")
    target.chmod(0o644)
    report_mod.write_private(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_run_ids_sort_by_time_and_the_runs_dir_is_configurable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", report_mod.new_run_id())
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "elsewhere"))
    assert report_mod.runs_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("PROVISIONER_RUNS_DIR")
    assert report_mod.runs_dir() == report_mod.workspace_root() / "runs"


# --- `provisioner report`'s loader -------------------------------------------------------------

MINIMAL = {"run_id": "x", "command": "up", "outcome": "passed", "exit_code": 0, "phases": [],
           "checks": []}


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    return tmp_path / "runs"


def saved(runs: Path, run_id: str, content: bytes | None = None) -> Path:
    path = runs / run_id / "report.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(content if content is not None else json.dumps(
        {**MINIMAL, "run_id": run_id}).encode())
    return path


def test_load_takes_the_newest_run_by_its_id_not_its_file_time(runs: Path) -> None:
    newer = saved(runs, "20261126-020000-bbbb")
    saved(runs, "20261126-010000-aaaa")
    os.utime(newer, (1, 1))  # the newer run's file is the older file
    assert report_mod.load(None)["run_id"] == "20261126-020000-bbbb"
    assert report_mod.load("20261126-010000-aaaa")["run_id"] == "20261126-010000-aaaa"


@pytest.mark.parametrize(("content", "message"), [
    (b'{"run_id": "x", "comm', "truncated or invalid report (JSON error at line 1 column 17: "
                              "Unterminated string starting at)"),
    (b"\xff\xfe{}", "not a report (not UTF-8 text at byte 0)"),
    (b"[1, 2]", "not a provisioner report (missing or wrong: a JSON object)"),
    (json.dumps({**MINIMAL, "exit_code": "0", "checks": None}).encode(),
     "not a provisioner report (missing or wrong: exit_code, checks)"),
    (json.dumps({"run_id": "x"}).encode(),
     "not a provisioner report (missing or wrong: command, outcome, exit_code, phases, checks)"),
])
def test_load_refuses_what_is_no_report_in_one_line(runs: Path, content: bytes,
                                                    message: str) -> None:
    path = saved(runs, "20261126-010000-aaaa", content)
    with pytest.raises(InputError) as err:
        report_mod.load("20261126-010000-aaaa")
    assert str(err.value) == f"{path}: {message}"


def test_load_names_what_is_missing(runs: Path) -> None:
    with pytest.raises(InputError) as err:
        report_mod.load(None)
    assert str(err.value) == f"no saved reports under {runs}: run `provisioner up` first"
    saved(runs, "20261126-010000-aaaa")
    with pytest.raises(InputError) as err:
        report_mod.load("20261126-000000-none")
    assert str(err.value) == f"no report for run '20261126-000000-none' under {runs}"


@pytest.mark.parametrize("stats", [{"failed": 1, "unreachable": 0},
                                   {"failed": 0, "unreachable": 1}])
def test_a_failed_phase_with_a_host_to_blame_gets_no_phase_case(stats: dict[str, int]) -> None:
    report = Report("r", "up", "inv", simulated=False, started_at="t")
    report.phases = [Phase("stack", "stack.yml", "failed", 2, 1.0, 0, False,
                           hosts={"gpu-a": stats}, failures=[])]
    assert 'type="phase"' not in report.junit()


def test_redact_tree_masks_files_in_place_and_counts_them(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("token=s3cret outside")
    root = tmp_path / "run"
    artifacts = root / "ansible" / "artifacts" / "00-preflight"
    artifacts.mkdir(parents=True)
    (artifacts / "stdout").write_text("url https://u:pw@mirror/ and hunter2")
    (artifacts / "stderr").write_text("nothing to hide")
    (root / "smoke").mkdir()
    (root / "smoke" / "c.log").write_bytes(b"\xff\xfe hunter2")
    (root / "smoke" / "link.log").symlink_to(outside)
    assert report_mod.redact_tree(root, {"hunter2"}) == 1
    assert (artifacts / "stdout").read_text() == "url https://***@mirror/ and ***"
    assert stat.S_IMODE((artifacts / "stdout").stat().st_mode) == 0o600
    assert (artifacts / "stderr").read_text() == "nothing to hide"
    assert (root / "smoke" / "c.log").read_bytes() == b"\xff\xfe hunter2"  # not text
    assert outside.read_text() == "token=s3cret outside"  # a link is not followed
    assert report_mod.redact_tree(root, {"hunter2"}) == 0


def test_load_takes_the_newest_of_three(runs: Path) -> None:
    for run_id in ("20261126-030000-cccc", "20261126-010000-aaaa", "20261126-020000-bbbb"):
        saved(runs, run_id)
    assert report_mod.load(None)["run_id"] == "20261126-030000-cccc"
