"""`provisioner sim` in-process (provisioner/commands/sim.py): the spec `sim up` hands the
simulator, `sim down`'s and `sim executors`' output. The simulator's functions are replaced:
no container is touched."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from provisioner import cli
from provisioner.commands import common
from tests.unit.commands.cli_support import lines, unwrapped


@dataclass
class FakeSim:
    ups: list[dict[str, Any]] = field(default_factory=list)

    def up(self, spec: Any, inventory_dir: Path, profile_json: Any, progress: Any = None,
           recreate: bool = False) -> Any:
        progress("starting nodes")
        self.ups.append({"spec": spec, "inventory_dir": inventory_dir, "recreate": recreate})
        from types import SimpleNamespace

        return SimpleNamespace(addresses={"sim-gpu-1": "10.88.0.2"})


@pytest.fixture
def fake_sim(monkeypatch: pytest.MonkeyPatch) -> FakeSim:
    from provisioner.sim import cluster, executor_containers

    fake = FakeSim()
    monkeypatch.setattr(cluster, "up", fake.up)
    monkeypatch.setattr(cluster, "down", lambda progress: 3)
    monkeypatch.setattr(executor_containers, "up", lambda count, say: {})

    def no_podman(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a test started podman")

    monkeypatch.setattr("subprocess.run", no_podman)
    monkeypatch.setattr("subprocess.Popen", no_podman)
    return fake


@pytest.mark.parametrize(("nodes", "gpu", "cpu"), [(1, 1, 0), (2, 1, 1), (4, 3, 1)])
def test_sim_up_spec(tmp_path: Path, fake_sim: FakeSim, capsys: pytest.CaptureFixture[str],
                     nodes: int, gpu: int, cpu: int) -> None:
    from provisioner.sim.cluster import SimSpec

    inv_dir = tmp_path / "inv"
    assert cli.main(["sim", "up", "--nodes", str(nodes), "--fault", "gpu3-nvlink-down",
                     "--fault", "sim-gpu-1:gpu0-missing", "--inventory-dir", str(inv_dir),
                     "--recreate"]) == 0
    assert fake_sim.ups == [{"spec": SimSpec(gpu_nodes=gpu, cpu_nodes=cpu,
                                             profile="sim-h100-8gpu",
                                             faults=("gpu3-nvlink-down",
                                                     "sim-gpu-1:gpu0-missing"),
                                             os="debian12"),
                             "inventory_dir": inv_dir, "recreate": True}]
    out = capsys.readouterr().out
    assert "starting nodes" in out.splitlines()
    assert "  sim-gpu-1      10.88.0.2\n" in out
    assert unwrapped(out).endswith(unwrapped(f"10.88.0.2 inventory: {inv_dir / 'hosts.yml'}"))


def test_sim_up_defaults_and_refusals(fake_sim: FakeSim,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.paths import workspace_root

    assert cli.main(["-q", "sim", "up"]) == 0
    [up] = fake_sim.ups
    assert up["inventory_dir"] == workspace_root() / "inventories" / "sim"
    assert (up["spec"].gpu_nodes, up["spec"].cpu_nodes, up["spec"].profile, up["recreate"]) == (
        2, 1, "sim-h100-8gpu", False)
    assert cli.main(["sim", "up", "--nodes", "65"]) == 2
    assert cli.main(["sim", "up", "--nodes", "0"]) == 2
    assert lines(capsys.readouterr().err) == ["error: sim up: --nodes must be between 1 and 64"] * 2
    assert cli.main(["sim", "down"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "simulated cluster removed (3 container(s))"
    assert cli.main(["sim", "executors", "--count", "0"]) == 0
    assert capsys.readouterr().out.splitlines() == ["no simulated executor is running"]


def test_sim_os_and_down_progress(tmp_path: Path, fake_sim: FakeSim,
                                  monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.sim import cluster

    assert cli.main(["-q", "sim", "up", "--os", "rocky9", "--inventory-dir",
                     str(tmp_path)]) == 0
    assert fake_sim.ups[0]["spec"].os == "rocky9"

    def down(progress: Any) -> int:
        progress("removing sim-gpu-1")
        return 1

    monkeypatch.setattr(cluster, "down", down)
    capsys.readouterr()
    assert cli.main(["sim", "down"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "removing sim-gpu-1", "simulated cluster removed (1 container(s))"]
    assert cli.main(["sim", "down", "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines() == ["simulated cluster removed (1 container(s))"]


def test_sim_up_profile_goes_into_the_spec(tmp_path: Path, fake_sim: FakeSim,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.profiles import load_profiles
    from provisioner.sim import cluster

    given: list[tuple[Any, Any]] = []

    def up(spec: Any, _inventory_dir: Path, profile_json: Any, progress: Any = None,
           recreate: bool = False) -> Any:
        given.append((spec, profile_json))
        return fake_sim.up(spec, _inventory_dir, profile_json, progress, recreate)

    monkeypatch.setattr(cluster, "up", up)
    name = "hgx-h100-8gpu"
    default = cluster.SimSpec().profile
    assert name != default
    assert cli.main(["-q", "sim", "up", "--profile", name, "--inventory-dir",
                     str(tmp_path)]) == 0
    [(spec, profile_json)] = given
    assert spec.profile == name
    assert profile_json == load_profiles()[name].sim_json()


def test_sim_executors_count_progress_and_addresses(
        fake_sim: FakeSim, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    from provisioner.sim import executor_containers

    counts: list[int] = []

    def up(count: int, say: Any) -> dict[str, str]:
        counts.append(count)
        say(f"starting {count} executor(s)")
        return {f"sim-exec-{i}": f"10.88.0.{20 + i}" for i in range(1, count + 1)}

    ssh_config = Path("/sim/executors/ssh_config")
    monkeypatch.setattr(executor_containers, "up", up)
    monkeypatch.setattr(executor_containers, "ssh_config_path", lambda: ssh_config)
    monkeypatch.setattr(common, "console", Console(width=1000, highlight=False))
    assert cli.main(["sim", "executors"]) == 0
    assert counts == [2]  # its help: "how many (default 2; 0 removes them)"
    assert lines(capsys.readouterr().out) == [
        "starting 2 executor(s)", "  sim-exec-1     10.88.0.21", "  sim-exec-2     10.88.0.22",
        f"use: provisioner up ... --executors sim-exec-1,sim-exec-2 --executor-ssh-config "
        f"{ssh_config}"]
    assert cli.main(["-q", "sim", "executors", "--count", "3"]) == 0
    assert counts[-1] == 3
    assert lines(capsys.readouterr().out) == [
        "  sim-exec-1     10.88.0.21", "  sim-exec-2     10.88.0.22",
        "  sim-exec-3     10.88.0.23",
        f"use: provisioner up ... --executors sim-exec-1,sim-exec-2,sim-exec-3 "
        f"--executor-ssh-config {ssh_config}"]
