"""`provisioner validate` in-process (provisioner/commands/validate.py): the phases and options
the run gets (bringup.run_phases replaced: nothing here contacts a host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner import bringup, cli
from tests.unit.commands.cli_support import FakeRun, saved_report


def test_validate_passes_limit_and_executors(inventory: Path, fake_run: FakeRun,
                                             monkeypatch: pytest.MonkeyPatch,
                                             runs: Path) -> None:
    from provisioner import executors as ex

    monkeypatch.setattr(ex, "check", lambda _e: None)
    assert cli.main(["-q", "validate", "-i", str(inventory), "--limit", "login-01,gpu-01",
                     "--executors", "exec-1"]) == 0
    assert fake_run.phases == bringup.VALIDATE_PHASES
    assert fake_run.options == bringup.RunOptions(
        limit="login-01,gpu-01", executors=ex.parse("exec-1", None),
        limit_hosts=("login-01", "gpu-01"))  # the inventory's order
    assert saved_report(runs)["command"] == "validate"
