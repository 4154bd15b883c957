"""Shape rules the code holds itself to: no function in provisioner/ over 60 lines (any
exception named, with why), and the phases of a run driven by their hooks, not by their names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "provisioner"
MAX_LINES = 60
# (file, function): why it is longer. None is: each command's options are declared in its own
# module (provisioner/commands/), beside its handler.
LONGER: dict[tuple[str, str], str] = {}


def functions() -> list[tuple[str, str, int]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                out.append((str(path.relative_to(PACKAGE)), node.name,
                            node.end_lineno - node.lineno + 1))
    return out


def test_no_function_is_over_60_lines_but_the_named_exception() -> None:
    long = {(path, name): lines for path, name, lines in functions() if lines > MAX_LINES}
    assert set(long) == set(LONGER), long


def _function(module: str, name: str) -> ast.FunctionDef:
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("name", ["_run_phases", "_unjudged", "_run_phase_playbook", "_go_on"])
def test_the_phase_loop_never_compares_a_phase_name(name: str) -> None:
    """What a phase does beyond its playbook is in bringup.PHASE_HOOKS; the loop reads hooks.
    (The sharded phases are a set of names, asked by membership.)"""
    from provisioner import bringup

    compared = [ast.unparse(node) for node in ast.walk(_function("bringup.py", name))
                if isinstance(node, ast.Compare)
                and any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops)
                and "name" in ast.unparse(node)]
    assert compared == []
    from provisioner.slurm import SCHEDULER_PHASE

    phases = [*bringup.UP_PHASES, SCHEDULER_PHASE, bringup.SMOKE_PHASE]
    assert set(bringup.PHASE_HOOKS) <= {phase for phase, _ in phases}
