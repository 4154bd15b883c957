"""Driver branch lifecycle (stacks.yml driver_branches): `plan` warns within 90 days of a
branch's end, refuses a branch past it unless allow_eol_driver, and the report records it. The
day is injected (PROVISIONER_TODAY or plan.build's ``today``), never the test's calendar."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
import yaml

from provisioner import cli, plan
from provisioner.errors import InputError
from provisioner.matrix import load_matrix
from provisioner.matrix.lifecycle import branch_status, end_date, judge, supported_stacks, today
from provisioner.matrix.versions import DESIGNATIONS

MATRIX = load_matrix()
ON = date(2026, 11, 27)


def test_every_stack_branch_has_a_designation_an_end_and_a_source() -> None:
    for stack in MATRIX.stacks.values():
        spec = MATRIX.driver_branches[stack.driver.branch]
        assert spec.designation in DESIGNATIONS
        assert spec.source.startswith("[LIFE]")
    assert MATRIX.driver_branches[580].designation == "long-term support"
    assert end_date(MATRIX.driver_branches[580]) == date(2028, 6, 30)
    assert end_date(MATRIX.driver_branches[535]) == date(2026, 6, 30)
    assert MATRIX.driver_branches[595].designation == "production"


def test_branches_no_stack_is_on_are_known_too() -> None:
    """A host override to a release of R610 or R620 is judged by the table as well: R610, a
    new feature branch, ended in August 2026; R620 is supported to September 2029."""
    assert (branch_status(MATRIX, 610, ON).ended, branch_status(MATRIX, 620, ON).ended) == (
        True, False)
    assert branch_status(MATRIX, 620, ON).designation == "long-term support"
    assert end_date(MATRIX.driver_branches[620]) == date(2029, 9, 30)
    with pytest.raises(InputError, match=r"R610 .* end of life on 2026-08-31"):
        judge(MATRIX, ON, [("gpu-01", 610, "cuda-13.0", False)])
    assert branch_status(MATRIX, 630, ON).designation == "unknown"


def test_the_default_is_on_a_supported_long_term_or_production_branch() -> None:
    default = MATRIX.stacks[MATRIX.default_stack]
    status = branch_status(MATRIX, default.driver.branch, ON)
    assert status.designation in ("long-term support", "production")
    assert not status.ended
    oses = set(MATRIX.repositories.cuda)
    assert set(default.os_support) == oses
    # The newest such stack that claims every OS.
    candidates = [s for s in supported_stacks(MATRIX, ON) if set(s.os_support) == oses
                  and branch_status(MATRIX, s.driver.branch, ON).designation != "new feature"]
    assert candidates[-1].name == MATRIX.default_stack


def test_past_the_end_is_refused_naming_the_date_and_the_replacements() -> None:
    with pytest.raises(InputError) as exc:
        judge(MATRIX, ON, [("gpu-01", 535, "cuda-12.2", False)])
    assert str(exc.value) == (
        "host gpu-01: driver branch R535 (gpu_stack cuda-12.2) reached its end of life on "
        "2026-06-30 [NVIDIA's lifecycle, stacks.yml driver_branches]; pick a supported stack "
        "(cuda-13.0, cuda-13.2) or set allow_eol_driver: true")


def test_allowed_past_the_end_is_one_warning_per_stack() -> None:
    [note] = judge(MATRIX, ON, [("gpu-01", 535, "cuda-12.2", True),
                                ("gpu-02", 535, "cuda-12.2", True)])
    assert note.kind == "ended-allowed"
    assert note.hosts == ("gpu-01", "gpu-02")
    assert note.text == ("warning: 2 host(s) on driver branch R535 (gpu_stack cuda-12.2), end "
                         "of life since 2026-06-30: allowed by allow_eol_driver")


@pytest.mark.parametrize(("day", "warned"), [
    (date(2026, 12, 30), False),   # 91 days before 2027-03-31
    (date(2026, 12, 31), True),    # 90 days before
    (date(2027, 3, 31), True),     # its last day
])
def test_within_90_days_of_the_end_warns(day: date, warned: bool) -> None:
    notes = judge(MATRIX, day, [("gpu-01", 595, "cuda-13.2", False)])
    assert bool(notes) is warned
    if warned:
        assert notes[0].text.startswith("warning: driver branch R595 (gpu_stack cuda-13.2, 1 "
                                        "host(s)) reaches its end of life on 2027-03-31, in ")


def test_today_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_TODAY", "2027-01-02")
    assert today() == date(2027, 1, 2)
    monkeypatch.setenv("PROVISIONER_TODAY", "tomorrow")
    with pytest.raises(InputError, match="PROVISIONER_TODAY='tomorrow' is not a date"):
        today()
    monkeypatch.delenv("PROVISIONER_TODAY")
    assert today() == date.today()


# --------------------------------------------------------------------------- through plan


def inventory(tmp_path: Path, stack: str, **extra: object) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-01": {"ansible_host": "192.0.2.10"}, "gpu-02": {"ansible_host": "192.0.2.11"}},
        "vars": {"gpu_profile": "hgx-h100-8gpu", "gpu_stack": stack, **extra}}}}}))
    return path


@pytest.mark.parametrize("stack", ["cuda-11.8", "cuda-12.2"])
def test_plan_refuses_an_r535_inventory(tmp_path: Path, stack: str,
                                        monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PROVISIONER_TODAY", ON.isoformat())
    assert cli.main(["plan", "-i", str(inventory(tmp_path, stack))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert f"host gpu-01: driver branch R535 (gpu_stack {stack}) reached its end of life on " \
           "2026-06-30" in err[0]


def test_plan_accepts_it_with_allow_eol_driver_and_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PROVISIONER_TODAY", ON.isoformat())
    path = inventory(tmp_path, "cuda-12.2", allow_eol_driver=True)
    assert cli.main(["plan", "-i", str(path)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines()
                if line.startswith("warning:")]
    assert warnings == ["warning: 2 host(s) on driver branch R535 (gpu_stack cuda-12.2), end of "
                        "life since 2026-06-30: allowed by allow_eol_driver"]


def test_allow_eol_driver_must_be_a_boolean(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="allow_eol_driver must be true or false"):
        plan.build(inventory(tmp_path, "cuda-12.2", allow_eol_driver="yes please"), today=ON)


def test_the_report_records_the_allowed_branch(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import bringup

    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    cp = plan.build(inventory(tmp_path, "cuda-12.2", allow_eol_driver=True), today=ON)
    report, _run_dir = bringup.start_report(cp, "up")
    assert report.driver_lifecycle == [{"stack": "cuda-12.2", "branch": 535,
                                        "end_of_life": "2026-06-30", "kind": "ended-allowed",
                                        "hosts": ["gpu-01", "gpu-02"]}]
    assert any("allowed by allow_eol_driver" in note for note in report.notes)


def test_a_supported_stack_plans_quietly(tmp_path: Path) -> None:
    assert plan.build(inventory(tmp_path, "cuda-13.0"), today=ON).lifecycle == []


def test_plan_refuses_an_override_to_an_ended_branch(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The branch judged is the host's driver, an override's included: 610.57.04 on a cuda-13.0
    host (R610 ended in August 2026), given in full as a site reads it from its repository."""
    monkeypatch.setenv("PROVISIONER_TODAY", ON.isoformat())
    path = inventory(tmp_path, "cuda-13.0", nvidia_driver_version="610.57.04-1ubuntu1")
    assert cli.main(["plan", "-i", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "driver branch R610 (gpu_stack cuda-13.0) reached its end of life " \
        "on 2026-08-31" in err[0], err
