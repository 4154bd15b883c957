"""`provisioner report` in-process (provisioner/commands/report.py): the exit code is the saved
run's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner import cli


def test_report_exits_with_the_saved_runs_code(runs: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    run_id = "20260101-000000-abcd"
    (runs / run_id).mkdir(parents=True)
    data = {"run_id": run_id, "command": "validate", "outcome": "failed", "exit_code": 1,
            "inventory": "hosts.yml", "phases": [], "checks": [], "notes": []}
    (runs / run_id / "report.json").write_text(json.dumps(data))
    assert cli.main(["report", run_id, "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == data
    assert cli.main(["-q", "report"]) == 1
