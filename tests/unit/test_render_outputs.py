"""The report as the run commands print it (--json, -q, -v), on report objects: validate,
smoke and up need hosts to run, so their printing is proven here on a Report."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from provisioner import cli, render
from provisioner.report import Check, Phase, Report


def report(simulated: bool) -> Report:
    rep = Report("20260101-000000-beef", "smoke", "inventories/sim", simulated=simulated,
                 started_at="2026-01-01T00:00:00+00:00")
    rep.phases.append(Phase(name="smoke", playbook="smoke.yml", status="failed", rc=2,
                            duration_s=3.0, changed=1, ok=False,
                            hosts={"gpu-01": {"failed": 1, "unreachable": 0}},
                            failures=[{"host": "gpu-01", "task": "Smoke | Run",
                                       "message": "rank 3 died", "unreachable": False}]))
    rep.checks.append(Check(host="gpu-01", phase="smoke", name="busbw", status="fail",
                            measured=12.5, expected=300, detail="below the floor"))
    rep.checks.append(Check(host="gpu-01", phase="smoke", name="ddp", status="pass",
                            measured=True, expected=True, detail="loss went down"))
    rep.smoke = {"simulated": simulated, "runs": [], "log_dir": Path("/tmp/runs/x/smoke")}
    rep.finish(1)
    return rep


@pytest.mark.parametrize("simulated", [True, False])
def test_json_text_round_trips_with_the_simulated_flag(simulated: bool) -> None:
    data = report(simulated).to_dict()
    doc = json.loads(render.as_json(data))
    assert doc["simulated"] is simulated
    assert ("SIMULATED" in doc) is simulated
    assert doc["outcome"] == "failed" and doc["exit_code"] == 1
    assert doc["smoke"]["log_dir"] == "/tmp/runs/x/smoke"  # a Path, printed as its text
    assert [c["status"] for c in doc["checks"]] == ["fail", "pass"]


def args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"json": False, "quiet": False, "verbose": 0, **kw})


def test_show_report_json_prints_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    cli.show_report(args(json=True), {**report(True).to_dict(), "report_path": "r.json"})
    out = capsys.readouterr().out
    assert json.loads(out)["report_path"] == "r.json"


def test_show_report_quiet_prints_the_verdict_only(capsys: pytest.CaptureFixture[str]) -> None:
    cli.show_report(args(quiet=True), {**report(True).to_dict(), "report_path": "r.json"})
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith("cluster FAILED (SIMULATED) in ") and line.endswith("r.json")


def test_verbose_report_lists_passed_checks_too() -> None:
    data = report(False).to_dict()
    plain, verbose = io.StringIO(), io.StringIO()
    render.report(Console(file=plain, width=200), data)
    render.report(Console(file=verbose, width=200), data, verbose=True)
    assert "fail gpu-01 busbw: measured 12.5, expected 300" in plain.getvalue()
    assert "pass gpu-01 ddp" not in plain.getvalue()
    assert "pass gpu-01 ddp: measured yes, expected yes: loss went down" in verbose.getvalue()
    assert "SIMULATED" not in verbose.getvalue()


def test_flatten_names_nested_keys() -> None:
    facts = {"cas": [{"name": "mlx5_0", "ports": {"1": {"state": "ACTIVE"}}}],
             "rates": [100, 200], "errors": [], "none": None}
    assert render.flatten(facts) == [("cas.0.name", "mlx5_0"),
                                     ("cas.0.ports.1.state", "ACTIVE"),
                                     ("rates", "100, 200"), ("errors", ""), ("none", "-")]


def test_a_node_that_failed_is_said_failed_and_only_an_unreachable_one_lost() -> None:
    rep = report(False)
    rep.lost_hosts = {
        "gpu-01": {"phase": "validate", "reason": "check failed", "task": "gpu0_memory",
                   "message": "GPU0: 2 aggregate uncorrectable ECC error(s)"},
        "gpu-02": {"phase": "stack", "reason": "unreachable", "task": "Gathering Facts",
                   "message": "ssh: connect to host gpu-02 port 22: No route to host"},
        "gpu-03": {"phase": "stack", "reason": "failed", "task": "NVIDIA driver | Install",
                   "message": "E: Unable to locate package"}}
    rep.checks.append(Check(host="gpu-01", phase="gpu_validate", name="gpu0_memory",
                            status="fail", measured={"volatile_uncorrectable": 0,
                                                     "aggregate_uncorrectable": 2,
                                                     "remap_pending": None},
                            expected=0, detail="GPU0: 2 aggregate uncorrectable ECC error(s)"))
    out = io.StringIO()
    render.report(Console(file=out, width=200), rep.to_dict(), verbose=True)
    lines = out.getvalue().splitlines()
    assert any(line.startswith("failed gpu-01: check failed in validate") for line in lines)
    assert any(line.startswith("lost gpu-02: unreachable in stack") for line in lines)
    assert any(line.startswith("failed gpu-03: failed in stack") for line in lines)
    assert not any(line.startswith("lost gpu-01") or line.startswith("lost gpu-03")
                   for line in lines)
    # The measured mapping as a person reads it, not a Python dict.
    assert "measured aggregate uncorrectable 2, expected 0" in out.getvalue()
    assert "{'volatile" not in out.getvalue()
