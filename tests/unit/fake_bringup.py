"""What the tests of a phased run (up, upgrade, remediate, validate) share: a display that shows
nothing, and a run whose playbooks are a fake's, with the stack's checks and the run directory's
permissions out of the way."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from provisioner import bringup
from provisioner.plan import ClusterPlan
from provisioner.report import Report


@contextlib.contextmanager
def no_display(_title: str) -> Iterator[Any]:
    yield lambda _event: None


def faked_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cp: ClusterPlan, command: str,
              playbooks: Callable[..., Any], modules: Iterable[ModuleType] = ()
              ) -> tuple[Report, Path]:
    """A new report and run directory for ``command``, with ``playbooks`` answering every
    run_playbook of bringup and of ``modules``."""
    for module in (bringup, *modules):
        monkeypatch.setattr(module, "run_playbook", playbooks)
    monkeypatch.setattr(bringup, "stack_checks", lambda *_a, **_k: [])
    monkeypatch.setattr(bringup, "secure_run_dir", lambda *_a: None)
    report = Report(run_id="r", command=command, inventory=str(cp.inventory.source),
                    simulated=False, started_at="t")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return report, run_dir
