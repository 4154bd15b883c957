"""`provisioner smoke` in-process (provisioner/commands/smoke.py): the smoke phase and the options
it gets (bringup.run_phases replaced: nothing here contacts a host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner import bringup, cli
from tests.unit.commands.cli_support import FakeRun, saved_report


def test_smoke_runs_the_smoke_phase_with_its_options(inventory: Path, fake_run: FakeRun,
                                                     runs: Path) -> None:
    assert cli.main(["-q", "smoke", "-i", str(inventory)]) == 0
    assert fake_run.phases == (bringup.SMOKE_PHASE,)
    assert fake_run.options == bringup.RunOptions(limit=None, timeout_s=1800,
                                                  launcher="direct", framework="pytorch")
    assert saved_report(runs)["command"] == "smoke"


def test_smoke_options(inventory: Path, fake_run: FakeRun) -> None:
    assert cli.main(["-q", "smoke", "-i", str(inventory), "--limit", "gpu-01", "--timeout",
                     "60", "--launcher", "direct", "--framework", "tensorflow"]) == 0
    assert fake_run.options == bringup.RunOptions(limit="gpu-01", timeout_s=60,
                                                  launcher="direct", framework="tensorflow")


def test_a_container_reaches_the_run_with_the_slurm_launcher(
        inventory: Path, fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import slurm

    monkeypatch.setattr(slurm, "choose_launcher", lambda cp, requested: "slurm")
    assert cli.main(["-q", "smoke", "-i", str(inventory), "--container", "/opt/b"]) == 0
    assert (fake_run.options.launcher, fake_run.options.container) == ("slurm", "/opt/b")
