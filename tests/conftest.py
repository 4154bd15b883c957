"""Shared test setup: the pure parsers in plugins/module_utils/ are importable as ``gpucluster``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

# GPUC_CAPTURES points elsewhere (a git worktree does not sit beside ../shared).
CAPTURES = Path(os.environ.get("GPUC_CAPTURES") or ROOT.parent / "shared" / "captures")


@pytest.fixture
def captures() -> Path:
    """Real outputs captured by others (../shared/captures); never copied into the project."""
    if not CAPTURES.is_dir():
        pytest.skip("../shared/captures is not present")
    return CAPTURES
