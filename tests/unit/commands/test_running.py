"""What a run records (provisioner/commands/running.py `_run`): Ansible's verbosity, the run lock,
the environment it refuses, the report's outcome and exit code, and a report that cannot
be saved (bringup.run_phases replaced: nothing here contacts a host)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provisioner import bringup, cli, runlock
from provisioner.commands import common
from provisioner.errors import InputError
from tests.unit.commands.cli_support import INTERNAL, FakeRun, lines, saved_report, write_inventory


def test_a_failed_run_exits_1_and_its_report_says_failed(
        inventory: Path, fake_run: FakeRun, runs: Path) -> None:
    fake_run.ok = False
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes"]) == 1
    report = saved_report(runs)
    assert (report["outcome"], report["exit_code"]) == ("failed", 1)


def test_verbose_sets_ansible_verbosity(inventory: Path, fake_run: FakeRun,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_VERBOSITY", "")
    monkeypatch.delenv("ANSIBLE_VERBOSITY")
    assert cli.main(["validate", "-vv", "-i", str(inventory)]) == 0
    import os

    assert os.environ["ANSIBLE_VERBOSITY"] == "2"


def test_a_stale_lock_is_taken_over_and_noted(inventory: Path, fake_run: FakeRun,
                                              runs: Path) -> None:
    from provisioner.inventory import load

    lock = runlock.lock_path(runs, load(inventory))
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": 999999999, "command": "up"}))
    assert cli.main(["-q", "validate", "-i", str(inventory)]) == 0
    assert saved_report(runs)["notes"] == [
        "took over a stale lock of PID 999999999 (started ?), which is no longer running"]


def test_bad_input_inside_a_run_keeps_its_exit_code_and_is_recorded(
        inventory: Path, fake_run: FakeRun, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake_run.error = InputError("the phase found   bad\ninput")
    assert cli.main(["-q", "validate", "-i", str(inventory)]) == 2
    assert lines(capsys.readouterr().err) == ["error: the phase found bad input"]
    report = saved_report(runs)
    assert (report["outcome"], report["exit_code"]) == ("error", 2)
    assert report["notes"] == ["the run stopped on an error: InputError: the phase found bad "
                               "input"]


def test_an_insecure_environment_is_refused_unless_the_inventory_says_so(
        tmp_path: Path, inventory: Path, fake_run: FakeRun, runs: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    assert cli.main(["validate", "-i", str(inventory)]) == 2
    assert lines(capsys.readouterr().err) == [
        "error: ANSIBLE_HOST_KEY_CHECKING in the environment would turn off SSH host key "
        "checking; unset it, or set ansible_host_key_checking: false in the inventory if you "
        "mean it (the report then says so)"]
    assert fake_run.calls == []
    off = write_inventory(tmp_path / "off" / "hosts.yml", cpu=False,
                          ansible_host_key_checking=False)
    assert cli.main(["-q", "validate", "-i", str(off)]) == 0
    assert len(fake_run.calls) == 1


def test_the_host_key_warning_is_one_line_however_narrow_the_console(
        tmp_path: Path, fake_run: FakeRun, runs: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    off = write_inventory(tmp_path / "hosts.yml", cpu=False, ansible_host_key_checking=False)
    monkeypatch.setattr(common, "console", Console(width=40, highlight=False))
    assert cli.main(["validate", "-i", str(off)]) == 0
    [note] = [n for n in saved_report(runs)["notes"] if "host key" in n]
    assert len(note) > 40
    assert f"warning: {note}" in capsys.readouterr().out.splitlines()


def test_ansible_verbosity_stops_at_4(inventory: Path, fake_run: FakeRun,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for verbose, expected in (("-vvvv", "4"), ("-vvvvv", "4"), ("-vvvvvvv", "4"), ("-vvv", "3")):
        monkeypatch.setenv("ANSIBLE_VERBOSITY", "")
        monkeypatch.delenv("ANSIBLE_VERBOSITY")
        assert cli.main(["validate", verbose, "-i", str(inventory)]) == 0
        assert os.environ["ANSIBLE_VERBOSITY"] == expected, verbose


def test_a_report_that_cannot_be_saved_after_an_error_is_a_warning(
        inventory: Path, runs: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    from provisioner import report as report_mod

    monkeypatch.delenv("PROVISIONER_DEBUG", raising=False)
    run_dirs: list[Path] = []

    def full_disk(_path: Path, _text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def broken(_cp: Any, _report: Any, run_dir: Path, *_a: Any) -> bool:
        run_dirs.append(run_dir)
        monkeypatch.setattr(report_mod, "write_private", full_disk)
        raise RuntimeError("the phase broke")

    monkeypatch.setattr(bringup, "run_phases", broken)
    assert cli.main(["validate", "-i", str(inventory)]) == 1
    [run_dir] = run_dirs
    assert lines(capsys.readouterr().err) == [
        f"warning: cannot save the report in {run_dir}: No space left on device",
        f"internal error: RuntimeError: the phase broke{INTERNAL}"]
