"""Fixtures of the CLI tests: an inventory, the runs directory, the recorded tables and the
stand-in run (bringup.run_phases replaced: nothing contacts a host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner import bringup, render
from tests.unit.commands.cli_support import FakeRun, Tables, write_inventory


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    return write_inventory(tmp_path / "inv" / "hosts.yml")


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    for name in [k for k in __import__("os").environ if k.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    return tmp_path / "runs"


@pytest.fixture
def tables(monkeypatch: pytest.MonkeyPatch) -> Tables:
    recorder = Tables()
    monkeypatch.setattr(render, "rows_table", recorder)
    return recorder


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch, runs: Path) -> FakeRun:
    fake = FakeRun()
    monkeypatch.setattr(bringup, "run_phases", fake)
    return fake
