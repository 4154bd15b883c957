"""`provisioner inspect` in-process (provisioner/commands/inspect.py): text, --json and --profile,
and the table's columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner import cli
from tests.unit.commands.cli_support import Tables, lines

IBSTAT = Path(__file__).resolve().parents[2] / "fixtures" / "ibstat" / "cx5-2port-spaces-sdr-ddr.txt"


def test_inspect_text_json_and_profile(tables: Tables,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", str(IBSTAT)]) == 0
    assert lines(capsys.readouterr().out)[-1] == "inspected 1 file(s)"
    assert tables.calls == []
    assert cli.main(["inspect", str(IBSTAT), "--profile", "hgx-h100-8gpu"]) == 1
    out = lines(capsys.readouterr().out)
    [(title, rows)] = tables.calls
    assert title == f"{IBSTAT} against hgx-h100-8gpu"
    failed = sum(r["status"] == "fail" for r in rows)
    assert failed and out[-1] == (f"inspected 1 file(s): {failed} check(s) failed against "
                                  "hgx-h100-8gpu")
    assert cli.main(["inspect", str(IBSTAT), "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert isinstance(one, dict) and one["file"] == str(IBSTAT) and "checks" not in one
    assert cli.main(["inspect", str(IBSTAT), str(IBSTAT), "--json"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert two == [one, one]
    assert cli.main(["inspect", str(IBSTAT), "--profile", "nope"]) == 2
    assert lines(capsys.readouterr().err)[0].startswith(
        "error: inspect: unknown --profile 'nope'; choose one of cloud-h200-1gpu, gb200-nvl72-tray, ")


def test_inspect_table_columns_are_each_checks_fields(
        tables: Tables, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", str(IBSTAT), "--profile", "hgx-h100-8gpu", "--json"]) == 1
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert cli.main(["inspect", str(IBSTAT), "--profile", "hgx-h100-8gpu"]) == 1
    [(_title, rows)] = tables.calls
    assert len(rows) == len(checks)
    assert any(c.get("expected") not in (None, "") for c in checks)
    for row, check in zip(rows, checks, strict=True):
        assert list(row) == ["name", "status", "measured", "expected", "detail"]
        assert row == {k: str(check.get(k, "")) for k in row}
