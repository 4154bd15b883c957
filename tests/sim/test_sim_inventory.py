"""The inventory `sim up` writes passes the inventory contract and tells the smoke phase where
the mirror's files are, so the production path finds the wheelhouse without knowing about the
simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner import smoke_launch
from provisioner.plan import build
from provisioner.sim.cluster import SimCluster, SimSpec, _write_inventory, mirror_dir
from provisioner.sim.stand_in_packages import Mirror


def test_sim_inventory_names_the_mirror_directory_for_the_wheelhouse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISIONER_CACHE", str(tmp_path / "cache"))
    spec = SimSpec(gpu_nodes=2, cpu_nodes=1)
    cluster = SimCluster(spec=spec, inventory_dir=tmp_path / "inv", addresses={
        name: f"10.89.0.{i}" for i, (name, _group) in enumerate(spec.node_names(), start=2)})
    cluster.inventory_dir.mkdir()
    _write_inventory(cluster, Mirror(Path("/unused"), "0" * 40))

    plan = build(cluster.inventory_dir / "hosts.yml")
    assert plan.simulated
    filled: list[Path] = []
    monkeypatch.setattr(smoke_launch, "ensure_wheelhouse", lambda dest, **_: filled.append(dest) or dest)
    with smoke_launch.wheelhouse_url(plan, tmp_path / "unused") as url:
        assert url == "http://gpuc-sim-mirror:8080/wheels/"
    assert filled == [mirror_dir() / "wheels"]
    assert mirror_dir().is_relative_to(tmp_path / "cache")
