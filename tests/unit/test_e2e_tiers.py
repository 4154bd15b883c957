"""The extended tier names e2e modules, tests and parameters that exist: a renamed test must not
slip into `make test` (or out of every tier) unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.e2e.conftest import EXTENDED

E2E = Path(__file__).resolve().parents[1] / "e2e"


def test_every_extended_entry_names_a_module_and_test_that_exist() -> None:
    for entry in EXTENDED:
        module, _, test = entry.partition("::")
        path = E2E / module
        assert path.is_file(), entry
        if test:
            name, _, param = test.partition("[")
            tree = ast.parse(path.read_text(encoding="utf-8"))
            functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert name in functions, entry
            if param:  # a parameter's id is a string the module spells
                assert param.endswith("]"), entry
                assert f'"{param[:-1]}"' in path.read_text(encoding="utf-8"), entry
