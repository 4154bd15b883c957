"""`provisioner upgrade` in-process (provisioner/commands/upgrade.py): the settings the batches
get and the confirmation prompt (upgrade.run replaced: nothing here contacts a host)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provisioner import bringup, cli, upgrade
from tests.unit.commands.cli_support import Terminal, saved_report, unwrapped


def test_upgrade_passes_its_settings_to_the_batches(
        inventory: Path, runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import matrix

    stack = matrix.load_matrix().default_stack
    seen: list[dict[str, Any]] = []

    def batches(cp: Any, report: Any, run_dir: Path, phases: Any, options: Any, display: Any,
                *, settings: upgrade.UpgradeSettings) -> bool:
        seen.append({"phases": tuple(phases), "options": options, "settings": settings})
        return True

    monkeypatch.setattr(upgrade, "run", batches)
    assert cli.main(["-q", "upgrade", "-i", str(inventory), "--stack", stack, "--yes"]) == 0
    assert seen == [{"phases": upgrade.BATCH_PHASES,
                     "options": bringup.RunOptions(timeout_s=7200, reboot_ok=False),
                     "settings": upgrade.UpgradeSettings(
                         stack=stack, batch_size="1", drain_timeout_s=3600, force=False,
                         max_failed_batches=1)}]
    assert saved_report(runs)["command"] == "upgrade"
    seen.clear()
    for path in runs.glob("*/report.json"):
        path.unlink()
    assert cli.main(["-q", "upgrade", "-i", str(inventory), "--stack", stack, "--yes",
                     "--batch-size", "50%", "--drain-timeout", "30", "--force",
                     "--max-failed-batches", "2", "--reboot", "--timeout", "99"]) == 0
    assert seen[0]["options"] == bringup.RunOptions(timeout_s=99, reboot_ok=True)
    assert seen[0]["settings"] == upgrade.UpgradeSettings(
        stack=stack, batch_size=upgrade.parse_batch_size("50%"), drain_timeout_s=30,
        force=True, max_failed_batches=2)


def test_upgrade_asks_with_the_stack_and_the_batch_size(
        inventory: Path, runs: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import matrix

    stack = matrix.load_matrix().default_stack
    monkeypatch.setattr(upgrade, "run", lambda *_a, **_k: pytest.fail("no batch may run"))
    monkeypatch.setattr("sys.stdin", Terminal("no\n"))
    assert cli.main(["upgrade", "-i", str(inventory), "--stack", stack,
                     "--batch-size", "25%"]) == 2
    assert unwrapped(capsys.readouterr().err).startswith(unwrapped(
        f"Upgrade 1 GPU node(s) of {inventory} to {stack}, 25% at a time? [y/N]"))
