"""`provisioner health` in-process (provisioner/commands/health.py): --json is the summary, the
exit is the worst node, the table and the progress title (cluster_health.run replaced)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provisioner import cli
from tests.unit.commands.cli_support import Tables, lines


def test_health_json_is_the_summary_and_the_exit_is_the_worst_node(
        inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import cluster_health

    calls: list[dict[str, Any]] = []
    summary = cluster_health.HealthSummary(run_id="r1", run_dir=tmp_path, simulated=False, nodes=[
        cluster_health.NodeHealth("gpu-01", 1, warnings=("ecc",), detail="1 warning")])

    def run(cp: Any, progress: Any = None, limit: str | None = None,
            timeout_s: int = 0) -> cluster_health.HealthSummary:
        calls.append({"limit": limit, "timeout_s": timeout_s})
        return summary

    monkeypatch.setattr(cluster_health, "run", run)
    assert cli.main(["health", "-i", str(inventory), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == summary.to_dict()
    assert calls == [{"limit": None, "timeout_s": 300}]
    assert cli.main(["-q", "health", "-i", str(inventory), "--limit", "gpu-01",
                     "--timeout", "20"]) == 1
    assert calls[-1] == {"limit": "gpu-01", "timeout_s": 20}
    assert lines(capsys.readouterr().out)[-1] == "worst: degraded (exit 1)"


def test_health_table_and_progress_title(inventory: Path, tmp_path: Path, tables: Tables,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import cluster_health, progress

    titles: list[str] = []

    class Display:
        def __init__(self, _console: Any, title: str) -> None:
            titles.append(title)

        def __enter__(self) -> Any:
            return lambda _event: None

        def __exit__(self, *_exc: object) -> None:
            return None

    monkeypatch.setattr(progress, "ProgressDisplay", Display)
    summary = cluster_health.HealthSummary(run_id="r7", run_dir=tmp_path, simulated=False, nodes=[
        cluster_health.NodeHealth("gpu-01", 0), cluster_health.NodeHealth(
            "gpu-02", 2, failing=("xid", "ecc"), detail="Xid 79")])
    monkeypatch.setattr(cluster_health, "run", lambda *_a, **_k: summary)
    assert cli.main(["health", "-i", str(inventory)]) == 2
    assert titles == ["health (health.yml)"]
    assert tables.calls == [("node health (run r7)", [
        {"node": "gpu-01", "status": "healthy", "failing": "-", "warnings": "-",
         "detail": "-"},
        {"node": "gpu-02", "status": "unhealthy", "failing": "xid, ecc", "warnings": "-",
         "detail": "Xid 79"}])]
