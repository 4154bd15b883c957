"""Shared test setup: the pure parsers in plugins/module_utils/ are importable as ``gpucluster``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

# GPUC_CAPTURES points elsewhere (a git worktree does not sit beside ../shared).
CAPTURES = Path(os.environ.get("GPUC_CAPTURES") or ROOT.parent / "shared" / "captures")


# The day every test but the lifecycle ones plans on (PROVISIONER_TODAY, read by
# provisioner.matrix.lifecycle.today): a day on which no driver branch of the matrix has ended
# or ends within 90 days, so tests of other features are not judged by the calendar, and do
# not change verdict as NVIDIA's branches age. Tests of the lifecycle set their own day.
TEST_TODAY = "2025-05-15"
os.environ.setdefault("PROVISIONER_TODAY", TEST_TODAY)


# `make mutation` (mutmut sets MUTANT_UNDER_TEST in its pytest process): processes a test starts
# import mutmut's mutated copy of the package and report the functions they reach
# (tests/mutmut_subprocess/sitecustomize.py); nothing of this happens in any other run.
MUTMUT_HOOK_DIR = Path(__file__).resolve().parent / "mutmut_subprocess"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    if "MUTANT_UNDER_TEST" not in os.environ:
        yield
        return
    hits = Path(item.config.rootpath) / ".mutmut-subprocess-hits"
    hits.unlink(missing_ok=True)
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "GPUC_MUTMUT_HITS")}
    # mutmut runs the tests from its mutants/ directory: the package there is the mutated one.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path.cwd()), str(MUTMUT_HOOK_DIR), saved["PYTHONPATH"]) if p)
    os.environ["GPUC_MUTMUT_HITS"] = str(hits)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if hits.exists():
            import mutmut

            mutmut.state()._stats.update(hits.read_text().split())
            hits.unlink()


@pytest.fixture
def captures() -> Path:
    """Real outputs captured by others (../shared/captures); never copied into the project."""
    if not CAPTURES.is_dir():
        pytest.skip("../shared/captures is not present")
    return CAPTURES
