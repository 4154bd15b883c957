"""A GB200 NVL72-style NVLink domain on the simulated cluster (sim-gb200-4gpu: two 4-GPU trays
and a login node; the nodes are x86_64 containers): `up` installs the stack and validate judges
every GPU's NVLink fabric registration and the IMEX service the domain needs (installed on the
simulated trays as a site's image has it). A GPU whose registration is still In Progress fails
its node naming it; an IMEX daemon stopped on one tray fails that tray's service and the other
tray's view of the domain, over the real network between the nodes; started again, validate
passes. The module starts its own cluster and leaves the default one to the next `sim up`."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import newest_report, own_cluster, podman_exec, sim_up_profile

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e
TRAYS = ("sim-gpu-1", "sim-gpu-2")


def sim_up(cli: Cli, inv: Path, *faults: str) -> None:
    sim_up_profile(cli, inv, "sim-gb200-4gpu", *faults)


def checks(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["host"], c["name"]): c for c in report["checks"]
            if c["phase"] == "gpu_validate"}


@pytest.fixture(scope="module")
def domain(cli: Cli, tmp_path_factory: pytest.TempPathFactory, runs_dir: Path) -> Path:
    inv = tmp_path_factory.mktemp("inv-gb200")
    return own_cluster(cli, inv, "sim-gb200-4gpu")


def test_a_healthy_domain_passes_fabric_and_imex(domain: Path, runs_dir: Path) -> None:
    got = checks(newest_report(runs_dir))
    for tray in TRAYS:
        for gpu in range(4):
            assert got[(tray, f"gpu{gpu}_fabric")]["status"] == "pass"
        for name in ("fabric_partition", "imex_service", "imex_nodes_config", "imex_domain",
                     "imex_channel"):
            assert got[(tray, name)]["status"] == "pass", got[(tray, name)]
        assert got[(tray, "imex_domain")]["detail"] == "2 node(s) READY, all connected"
    # One NVLink partition across both trays: the same clique and cluster UUID.
    assert got[("sim-gpu-1", "fabric_partition")]["measured"] == got[
        ("sim-gpu-2", "fabric_partition")]["measured"]


def test_a_gpu_not_registered_with_the_fabric_fails_naming_it(
        cli: Cli, domain: Path, runs_dir: Path) -> None:
    sim_up(cli, domain, "sim-gpu-2:gpu1-fabric-in-progress")
    try:
        out = cli("validate", "--inventory", str(domain))
        assert out.returncode != 0
        got = checks(newest_report(runs_dir))
        bad = got[("sim-gpu-2", "gpu1_fabric")]
        assert bad["status"] == "fail" and bad["measured"] == "In Progress / N/A"
        assert "GPU1: NVLink fabric registration In Progress" in bad["detail"]
        assert got[("sim-gpu-2", "gpu0_fabric")]["status"] == "pass"
        assert got[("sim-gpu-1", "gpu1_fabric")]["status"] == "pass"
        assert "gpu1_fabric" in out.stdout + out.stderr
    finally:
        sim_up(cli, domain)


def test_a_stopped_imex_daemon_fails_both_trays_until_it_runs_again(
        cli: Cli, domain: Path, runs_dir: Path) -> None:
    stop = podman_exec("sim-gpu-2", "systemctl stop nvidia-imex")
    assert stop.returncode == 0, stop.stderr
    try:
        out = cli("validate", "--inventory", str(domain))
        assert out.returncode != 0
        got = checks(newest_report(runs_dir))
        assert got[("sim-gpu-2", "imex_service")]["status"] == "fail"
        assert "nvidia-imex is inactive" in got[("sim-gpu-2", "imex_service")]["detail"]
        seen = got[("sim-gpu-1", "imex_domain")]
        assert seen["status"] == "fail" and seen["measured"] == "DOWN"
        assert "UNAVAILABLE" in seen["detail"] and "INVALID" in seen["detail"]
        assert got[("sim-gpu-1", "imex_service")]["status"] == "pass"
    finally:
        start = podman_exec("sim-gpu-2", "systemctl start nvidia-imex")
        assert start.returncode == 0, start.stderr
    again = cli("validate", "--inventory", str(domain))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    assert checks(newest_report(runs_dir))[("sim-gpu-1", "imex_domain")]["status"] == "pass"
