"""`provisioner stacks` in-process (provisioner/commands/stacks.py): list and show, and the names
they refuse."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner import cli, render
from tests.unit.commands.cli_support import Tables, lines


def test_stacks_show_and_list(monkeypatch: pytest.MonkeyPatch, tables: Tables,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import matrix

    default = matrix.load_matrix().default_stack
    shown: list[tuple[str, Any]] = []
    monkeypatch.setattr(render, "mapping", lambda _c, title, data: shown.append((title, data)))
    assert cli.main(["stacks", "show", default]) == 0
    [(title, detail)] = shown
    assert title == f"stack {default}" and detail
    assert cli.main(["stacks"]) == 0 and cli.main(["stacks", "list"]) == 0
    assert [t for t, _ in tables.calls] == ["known-good stacks (provisioner/data/stacks.yml)"] * 2
    assert tables.calls[0][1] == matrix.stack_rows(matrix.load_matrix())
    capsys.readouterr()
    assert cli.main(["stacks", "show"]) == 2
    assert lines(capsys.readouterr().err) == [
        f"error: stacks show: name a stack, e.g. `provisioner stacks show {default}`"]
    assert cli.main(["stacks", "list", default]) == 2
    assert lines(capsys.readouterr().err) == [
        f"error: stacks list takes no name (got {default!r}); to see one stack: "
        f"`provisioner stacks show {default}`"]
