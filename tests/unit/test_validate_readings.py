"""How `validate` gets each host's last error counter reading without touching the node's disk:
the gpu_validate role publishes it with its checks, the run's report keeps it, and the next run
that validates the host hands it back as gpu_validate_last_readings (provisioner/readings.py,
bringup.last_counter_readings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import bringup, readings
from provisioner.plan import build
from provisioner.results import HostStats, PlaybookResult
from tests.unit.fake_bringup import no_display
from tests.unit.test_monitoring_phase import sim_inventory

ROOT = Path(__file__).resolve().parents[2]


def same_inventory(named: str) -> bool:
    return named == "inv.yml"


def reading(when: float, symbol_error: int = 0) -> dict[str, Any]:
    return {"time": when, "boot_id": "b", "ib": {"mlx5_0/1": {"symbol_error": symbol_error}},
            "pcie": {}}


def save(runs: Path, run_id: str, inventory: str, hosts: dict[str, Any]) -> None:
    (runs / run_id).mkdir(parents=True)
    report = {"run_id": run_id, "inventory": inventory, "hosts": {
        host: {"facts": {"gpu_validate": {"checks": [], "counters": value}}}
        for host, value in hosts.items()}}
    (runs / run_id / "report.json").write_text(json.dumps(report))


def test_each_host_gets_the_newest_reading_of_its_inventory(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    save(runs, "20250101-000000-aaaa", "inv.yml", {"a": reading(1), "b": reading(2)})
    save(runs, "20250102-000000-aaaa", "inv.yml", {"a": reading(3), "b": None})
    save(runs, "20250103-000000-aaaa", "other.yml", {"a": reading(99)})  # another cluster
    (runs / "20250104-000000-aaaa").mkdir()
    (runs / "20250104-000000-aaaa" / "report.json").write_text("{truncated")
    found = readings.last_readings(runs, same_inventory, ["a", "b", "c"])
    assert found == {"a": reading(3), "b": reading(2)}  # c: never validated, a baseline
    # The run asking is passed over (its own report may be on disk already).
    assert readings.last_readings(runs, same_inventory, ["a"], skip_run="20250102-000000-aaaa") == {
        "a": reading(1)}
    assert readings.last_readings(tmp_path / "absent", same_inventory, ["a"]) == {}
    assert readings.last_readings(runs, same_inventory, []) == {}


def test_a_reading_of_the_wrong_shape_is_none(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    save(runs, "20250101-000000-aaaa", "inv.yml", {"a": {"time": "x", "ib": {}, "pcie": {}},
                                                   "b": [1], "c": reading(5)})
    assert readings.last_readings(runs, same_inventory, ["a", "b", "c"]) == {"c": reading(5)}


class FakePlaybooks:
    """run_playbook stand-in: records the extra variables of each phase; validate answers with
    a reading per GPU node, as the role publishes it."""

    def __init__(self, gpu_nodes: list[str], symbol_error: int) -> None:
        self.gpu_nodes = gpu_nodes
        self.symbol_error = symbol_error
        self.extravars: dict[str, dict[str, Any]] = {}

    def __call__(self, playbook: str, _inventories: Any, run_dir: Path, ident: str, *,
                 extravars: dict[str, Any], **_kw: Any) -> PlaybookResult:
        self.extravars[ident] = dict(extravars)
        result = PlaybookResult(playbook=playbook, status="successful", rc=0, duration_s=0.1,
                                artifact_dir=run_dir)
        for host in self.gpu_nodes:
            result.stats[host] = HostStats(ok=2)
            if playbook == "validate.yml":
                result.reports[host] = {"gpu_validate": {
                    "checks": [], "counters": reading(len(self.extravars), self.symbol_error)}}
        return result


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phases: Any,
        symbol_error: int = 0, inventory: str = "inv/hosts.yml") -> FakePlaybooks:
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    plan = build(tmp_path / inventory)
    gpu_nodes = [name for name, host in plan.hosts.items() if host.kind == "gpu"]
    fake = FakePlaybooks(gpu_nodes, symbol_error)
    monkeypatch.setattr(bringup, "run_playbook", fake)
    monkeypatch.setattr(bringup, "stack_checks", lambda *_a, **_k: [])
    report, run_dir = bringup.start_report(plan, "validate")
    assert bringup.run_phases(plan, report, run_dir, phases, bringup.RunOptions(), no_display)
    report.finish(0)
    report.save(run_dir)
    return fake


def test_validate_hands_back_the_last_run_s_readings(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    sim_inventory(tmp_path, monkeypatch, gpu=2, cpu=1)
    first = run(tmp_path, monkeypatch, bringup.VALIDATE_PHASES)
    assert first.extravars["00-validate"][readings.EXTRA_VAR] == {}  # nothing saved yet
    second = run(tmp_path, monkeypatch, (("stack", "stack.yml"), ("validate", "validate.yml")),
                 symbol_error=7)
    # Only the validate phase carries them, and only the GPU nodes have one.
    assert readings.EXTRA_VAR not in second.extravars["00-stack"]
    assert second.extravars["01-validate"][readings.EXTRA_VAR] == {
        "sim-gpu-1": reading(1), "sim-gpu-2": reading(1)}
    # The same inventory named by its directory this time.
    third = run(tmp_path, monkeypatch, bringup.VALIDATE_PHASES, inventory="inv")
    assert third.extravars["00-validate"][readings.EXTRA_VAR]["sim-gpu-1"] == reading(2, 7)


def test_a_second_validate_phase_of_one_run_judges_against_the_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sim_inventory(tmp_path, monkeypatch, gpu=1, cpu=0)
    fake = run(tmp_path, monkeypatch, (("validate", "validate.yml"), ("validate", "validate.yml")))
    assert fake.extravars["00-validate"][readings.EXTRA_VAR] == {}
    assert fake.extravars["01-validate"][readings.EXTRA_VAR] == {"sim-gpu-1": reading(1)}


def test_the_role_passes_the_host_s_reading_and_publishes_the_new_one() -> None:
    tasks = yaml.safe_load((ROOT / "roles/gpu_validate/tasks/main.yml").read_text())
    args = tasks[0]["gpucluster.provisioner.gpu_node_facts"]
    assert args["counters_before"] == (
        "{{ gpu_validate_last_readings[inventory_hostname] | default(omit) }}")
    published = tasks[1]["ansible.builtin.set_fact"]["gpu_validate_report"]
    assert published["counters"] == (
        "{{ __gpu_validate_result.facts.counters.now | default(none) }}")
    defaults = yaml.safe_load((ROOT / "roles/gpu_validate/defaults/main.yml").read_text())
    assert defaults[readings.EXTRA_VAR] == {}
    assert "counters" in defaults["gpu_validate_subsets"]
