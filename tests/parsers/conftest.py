"""Parser tests: make ``plugins/module_utils/gpucluster`` importable as ``gpucluster`` and load fixtures.

``tests/conftest.py`` (shared) may already put ``module_utils`` on ``sys.path``; doing it here too
keeps ``pytest tests/parsers`` self-sufficient.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
MODULE_UTILS = str(PROJECT / "plugins" / "module_utils")
if MODULE_UTILS not in sys.path:
    sys.path.insert(0, MODULE_UTILS)

FIXTURES = PROJECT / "tests" / "fixtures"


@pytest.fixture
def fixture_text() -> Callable[[str, str], str]:
    """``fixture_text("ibstat", "x.txt")`` -> the text of tests/fixtures/ibstat/x.txt."""

    def read(kind: str, name: str) -> str:
        return (FIXTURES / kind / name).read_text(encoding="utf-8")

    return read
