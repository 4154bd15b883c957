"""The monitoring role's Prometheus rules: promtool checks and unit-tests them, every alert the
issue names exists and has a promtool test, and the README has a runbook line for each."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[2]
RULES_DIR = PROJECT / "roles" / "monitoring" / "files" / "rules"
RULES = RULES_DIR / "gpucluster.rules.yml"
RULE_TESTS = RULES_DIR / "tests" / "gpucluster.rules.test.yml"
ALERTS = {"GpuClusterNodeUnhealthy", "GpuClusterHealthStale", "GpuClusterXidErrors",
          "GpuClusterNvlinkDown", "GpuClusterIbPortDown", "GpuUtilizationHigh",
          "GpuMemoryNearlyFull", "GpuTemperatureHigh", "NodeToNodeLatencyHigh"}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (scripts/install-system-deps.sh installs prometheus)")
    return path


def rules() -> list[dict[str, object]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_promtool_check_rules() -> None:
    done = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_test_rules() -> None:
    done = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True,
                          text=True, check=False, cwd=RULE_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules_can_fail(tmp_path: Path) -> None:
    """The unit tests notice a changed threshold (they are not vacuous)."""
    broken = tmp_path / "gpucluster.rules.yml"
    broken.write_text(RULES.read_text().replace("DCGM_FI_DEV_GPU_UTIL > 85",
                                                "DCGM_FI_DEV_GPU_UTIL > 80"))
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    done = subprocess.run([promtool(), "test", "rules", str(tests / RULE_TESTS.name)],
                          capture_output=True, text=True, check=False, cwd=tests)
    assert done.returncode != 0 and "GpuUtilizationHigh" in done.stdout + done.stderr


def test_every_alert_exists_and_has_a_promtool_test() -> None:
    names = {str(r["alert"]) for r in rules() if "alert" in r}
    assert names == ALERTS
    tested = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", [])
              if any(t.get("exp_alerts") or [])}
    assert tested == ALERTS
    recorded = {str(r["record"]) for r in rules() if "record" in r}
    for record in recorded - {"instance:gpucluster_health_checks_failing:count"}:
        assert record in RULE_TESTS.read_text(), f"{record} has no promql_expr_test"


def test_readme_has_a_runbook_line_per_alert() -> None:
    readme = (PROJECT / "README.md").read_text()
    for alert in ALERTS:
        assert f"`{alert}`" in readme, f"README: no runbook line for {alert}"


def test_utilisation_and_latency_thresholds_match_the_issue() -> None:
    by = {r.get("alert"): r for r in rules()}
    assert by["GpuUtilizationHigh"]["expr"] == "DCGM_FI_DEV_GPU_UTIL > 85"
    assert by["GpuUtilizationHigh"]["for"] == "15m"
    assert by["NodeToNodeLatencyHigh"]["expr"] == "gpucluster_peer_latency_seconds > 0.002"
    assert by["GpuClusterNodeUnhealthy"]["for"] == "5m"
