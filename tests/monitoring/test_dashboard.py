"""The committed Grafana dashboard is the generator's output, shows what the issue asks for, and
every PromQL expression in it parses (promtool, through a rules file of recording rules)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[2]
COMMITTED = PROJECT / "roles" / "monitoring" / "files" / "dashboards" / "gpucluster.json"


def generator() -> ModuleType:
    pytest.importorskip("grafana_foundation_sdk")
    spec = importlib.util.spec_from_file_location("dashboard", PROJECT / "scripts/dashboard.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["dashboard"] = module
    spec.loader.exec_module(module)
    return module


def board() -> dict[str, object]:
    return dict(json.loads(COMMITTED.read_text()))


def test_committed_json_is_the_generators_output() -> None:
    assert COMMITTED.read_text() == generator().render(), (
        "run: python scripts/dashboard.py")


def test_dashboard_has_the_panels_the_issue_asks_for() -> None:
    exprs = generator().expressions(board())
    text = "\n".join(exprs)
    for metric in ("gpucluster_health_status", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                   "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                   "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "_nvlink", "ib_",
                   "gpucluster_peer_latency_seconds"):
        assert metric in text, metric
    panels = board()["panels"]
    assert isinstance(panels, list)
    types = {p["type"] for p in panels}
    assert {"table", "timeseries", "heatmap"} <= types


def test_every_expression_parses(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed")
    exprs = generator().expressions(board())
    assert len(exprs) >= 10
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": expr} for i, expr in enumerate(exprs)]}]}
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # The check itself rejects a broken expression (it is not a no-op).
    path.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"record": "x:y", "expr": "sum by (instance (up)"}]}]}))
    bad = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                         text=True, check=False)
    assert bad.returncode != 0
