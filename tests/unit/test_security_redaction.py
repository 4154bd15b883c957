"""Masking the inventory's secrets in a run directory: what is written for people (task output,
event records, smoke job logs, the report) loses them; what the run still reads (the plan
inventory, the fact cache) is never rewritten, however short the secret."""

from __future__ import annotations

import json
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from provisioner import bringup
from provisioner.plan import build
from provisioner.report import Phase, Report
from tests.unit.test_monitoring_phase import sim_inventory

# A short mirror password: also a substring of package names, versions and paths.
MIRROR = "http://mirror:cuda@10.89.0.1:8080/"


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Report, Path]:
    """A run directory as the stack phase leaves it, the report of a plan whose mirror URL
    carries the password ``cuda``."""
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    hosts = sim_inventory(tmp_path, monkeypatch) / "hosts.yml"
    data = yaml.safe_load(hosts.read_text())
    data["all"]["vars"]["gpu_package_source"] = MIRROR
    hosts.write_text(yaml.safe_dump(data))
    plan = build(hosts)
    report, run_dir = bringup.start_report(plan, "up")
    assert "cuda" in report._secrets
    plan.write_inventory(run_dir / "plan.yml")
    artifacts = run_dir / "ansible" / "artifacts" / "01-stack"
    (artifacts / "job_events").mkdir(parents=True)
    (artifacts / "fact_cache").mkdir()
    (artifacts / "stdout").write_text(f"TASK [Repo | Add]\nfatal: {MIRROR} cuda refused\n")
    (artifacts / "job_events" / "3-abc.json").write_text(json.dumps(
        {"uuid": "abc", "counter": 3, "stdout": "fatal: password cuda refused",
         "event_data": {"res": {"msg": "mirror cuda said no", "rc": 1}}}))
    (artifacts / "fact_cache" / "sim-gpu-1").write_text(json.dumps(
        {"ansible_distribution": "Debian", "gpu_node_cuda_version": "13.0"}))
    smoke = run_dir / "smoke"
    smoke.mkdir()
    (smoke / "sim-gpu-1-intra.log").write_text("pip: cuda rejected the credentials\n")
    (smoke / "sim-gpu-1-intra.log").chmod(0o644)
    return report, run_dir


def test_the_plan_inventory_is_never_rewritten(run: tuple[Report, Path]) -> None:
    report, run_dir = run
    plan = run_dir / "plan.yml"
    before = plan.read_bytes()
    assert b"cuda-" in before or b"/cuda/" in before  # versions and paths hold the secret
    bringup.secure_run_dir(run_dir, report)
    assert plan.read_bytes() == before
    assert "sim-gpu-1" in yaml.safe_load(plan.read_text())["all"]["hosts"]


def test_the_fact_cache_is_never_rewritten(run: tuple[Report, Path]) -> None:
    report, run_dir = run
    cache = run_dir / "ansible" / "artifacts" / "01-stack" / "fact_cache" / "sim-gpu-1"
    before = cache.read_bytes()
    bringup.secure_run_dir(run_dir, report)
    assert cache.read_bytes() == before


def test_task_output_events_and_smoke_logs_lose_the_secret(run: tuple[Report, Path]) -> None:
    report, run_dir = run
    bringup.secure_run_dir(run_dir, report)
    artifacts = run_dir / "ansible" / "artifacts" / "01-stack"
    assert "cuda" not in (artifacts / "stdout").read_text()
    event = json.loads((artifacts / "job_events" / "3-abc.json").read_text())
    assert "cuda" not in json.dumps(event)
    assert event["counter"] == 3 and event["event_data"]["res"]["rc"] == 1
    log = run_dir / "smoke" / "sim-gpu-1-intra.log"
    assert "cuda" not in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_a_secret_inside_a_number_leaves_the_saved_report_valid(tmp_path: Path) -> None:
    report = Report("r1", "up", "inv", simulated=False, started_at="t")
    report._secrets = {"1234"}
    report.notes.append("mirror password 1234 refused")
    report.phases.append(Phase("stack", "stack.yml", "successful", 0, 12345.5, 0, True,
                               hosts={}, failures=[]))
    run_dir = tmp_path / "run"
    path = report.save(run_dir)
    before = path.read_bytes()
    bringup.secure_run_dir(run_dir, report)
    assert path.read_bytes() == before
    saved = json.loads(before)
    assert saved["phases"][0]["duration_s"] == 12345.5
    assert saved["notes"] == ["mirror password *** refused"]


def test_the_report_dict_masks_the_secret(run: tuple[Report, Path]) -> None:
    report, _run_dir = run
    report.notes.append(f"the mirror {MIRROR} answered 401 to cuda")
    report.hosts["sim-gpu-1"]["detail"] = {"cuda": "cuda-13.0"}
    assert "cuda" not in json.dumps(report.to_dict())


def test_a_secret_that_is_also_markup_leaves_junit_valid(tmp_path: Path) -> None:
    report = Report("r1", "up", "inv", simulated=False, started_at="t")
    report._secrets = {"tests"}
    report.notes.append("mirror password tests refused")
    report.finish(1)
    report.save(tmp_path / "run")
    root = ET.parse(tmp_path / "run" / "junit.xml").getroot()
    texts = [v for e in root.iter() for v in (e.text or "", *e.attrib.values())]
    assert "failed: mirror password *** refused" in texts
    assert not any("tests" in text for text in texts)
