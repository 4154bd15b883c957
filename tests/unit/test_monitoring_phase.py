"""Monitoring is a phase of `up` (after validate, before the smoke job) and of site.yml in the
same order; `up` ends with where Prometheus listens, or says that no [monitoring] group asked
for one. The simulated cluster's inventory puts its login node in [monitoring] and points
node_health at the simulated kernel interfaces, as it does for gpu_validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import bringup
from provisioner.paths import collection_root
from provisioner.plan import build
from provisioner.sim.cluster import SimCluster, SimSpec, _write_inventory, sim_inventory_vars
from provisioner.sim.stand_in_packages import Mirror
from provisioner.sim.tools.node import IB_SYSFS, KERNEL_LOG


def site_imports() -> list[str]:
    site = yaml.safe_load((collection_root() / "playbooks" / "site.yml").read_text())
    return [str(play["ansible.builtin.import_playbook"]) for play in site]


def test_monitoring_runs_after_validate_and_before_smoke() -> None:
    names = [name for name, _playbook in bringup.UP_PHASES]
    assert names[-2:] == ["validate", "monitoring"]
    assert bringup.SMOKE_PHASE[0] == "smoke"
    assert dict(bringup.UP_PHASES)["monitoring"] == "monitoring.yml"
    assert (collection_root() / "playbooks" / "monitoring.yml").is_file()


def test_site_yml_chains_the_phases_of_up_in_the_same_order() -> None:
    imports = site_imports()
    assert "monitoring.yml" in imports
    # Every phase playbook of `up` appears in site.yml, in the order `up` runs them (site.yml
    # may chain more plays after them).
    positions = [imports.index(playbook) for _name, playbook in bringup.UP_PHASES]
    assert positions == sorted(positions), imports


def sim_inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: int = 2,
                  cpu: int = 1) -> Path:
    monkeypatch.setenv("PROVISIONER_CACHE", str(tmp_path / "cache"))
    spec = SimSpec(gpu_nodes=gpu, cpu_nodes=cpu)
    cluster = SimCluster(spec=spec, inventory_dir=tmp_path / "inv", addresses={
        name: f"10.89.0.{i}" for i, (name, _group) in enumerate(spec.node_names(), start=2)})
    cluster.inventory_dir.mkdir()
    _write_inventory(cluster, Mirror(Path("/unused"), "0" * 40))
    return cluster.inventory_dir


def test_sim_inventory_puts_the_login_node_in_monitoring(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = build(sim_inventory(tmp_path, monkeypatch) / "hosts.yml")
    groups = {name: entry.groups for name, entry in plan.inventory.hosts.items()}
    assert groups == {"sim-login-1": ("cpu_nodes", "monitoring", "slurm_controller"),
                      "sim-gpu-1": ("gpu_nodes",), "sim-gpu-2": ("gpu_nodes",)}
    for entry in plan.inventory.hosts.values():
        assert entry.vars["node_health_kernel_log"] == KERNEL_LOG
        assert entry.vars["node_health_ib_sysfs_root"] == IB_SYSFS
        # The same stand-ins gpu_validate reads.
        assert entry.vars["gpu_validate_kernel_log"] == KERNEL_LOG
        assert entry.vars["gpu_validate_ib_sysfs_root"] == IB_SYSFS


def test_a_single_node_sim_cluster_monitors_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = build(sim_inventory(tmp_path, monkeypatch, gpu=1, cpu=0) / "hosts.yml")
    assert plan.inventory.hosts["sim-gpu-1"].groups == ("gpu_nodes", "monitoring")


def test_sim_inventory_vars_name_no_unknown_variable() -> None:
    from provisioner.inventory import known_variables

    assert set(sim_inventory_vars()) - set(known_variables()) == set()


def published(url: str = "http://10.89.0.2:9090/") -> dict[str, dict[str, Any]]:
    return {"sim-gpu-1": {"node_health": {"status": 0}},
            "sim-login-1": {"monitoring": {"prometheus_url": url,
                                           "alerts_url": f"{url}classic/alerts",
                                           "alertmanager_url": url.replace("9090", "9093")},
                            "node_health": {"status": 0}}}


def test_up_names_where_prometheus_listens(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    plan = build(sim_inventory(tmp_path, monkeypatch) / "hosts.yml")
    [note] = bringup.monitoring_notes(plan, published())
    assert note.startswith("Prometheus on sim-login-1: http://10.89.0.2:9090/ (the container's "
                           "address on the simulated cluster's podman network")
    assert "alerts page http://10.89.0.2:9090/classic/alerts" in note
    assert "Alertmanager http://10.89.0.2:9093/" in note


def test_up_without_a_monitoring_group_says_so(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    inv = sim_inventory(tmp_path, monkeypatch) / "hosts.yml"
    data = yaml.safe_load(inv.read_text())
    del data["all"]["children"]["monitoring"]
    inv.write_text(yaml.safe_dump(data))
    [note] = bringup.monitoring_notes(build(inv), {"sim-gpu-1": {"node_health": {}}})
    assert note.startswith("no [monitoring] group in the inventory: Prometheus and "
                           "Alertmanager were not installed")
