"""`provisioner certify --level burn-in` on the 3-node simulated cluster (extended tier).

Healthy: after the pairs, both GPU nodes run the burn-in and pass what the simulated cluster can
show -- copy bandwidth per GPU with the simulated nvbandwidth, DCGM's diagnostic as the load with
every GPU sampled for a hardware clock slowdown, no new Xid -- and skip, saying why, what it
cannot: throughput (the smoke job's PyTorch has no CUDA there, so it is not measured) and the
NCCL soak (no all_reduce_perf: nvcc cannot compile on a simulated node). With sim-gpu-2's GPU 3
link downgraded (``gpu3-pcie-downgrade``: Gen4 x8, a quarter of Gen5 x16) and sim-gpu-1's GPU 2
held down by the hardware (``gpu2-hw-slowdown``), exactly those GPUs of those nodes are the
suspects, each a JUnit failure, and the exit status is 1. The faults are healed at the end."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import conftest as e2e
from tests.e2e.conftest import FirstUp, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e
GPU_NODES = ("sim-gpu-1", "sim-gpu-2")
BURN = ("--level", "burn-in", "--burn-seconds", "10")


@pytest.fixture(scope="module")
def cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp) -> Path:
    return e2e.heal(cli, sim_inventory, first_up)


def burn_in_checks(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["host"], c["name"]): c for c in report["checks"]
            if c["phase"] == "certify burn-in"}


def test_burn_in_on_the_healthy_cluster_passes_what_it_can_show(
        cli: Cli, cluster: Path, runs_dir: Path) -> None:
    out = cli("certify", "--inventory", str(cluster), *BURN, "--json")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    data = json.loads(out.stdout)
    assert data["level"] == "burn-in" and data["suspects"] == [], data["suspects"]
    checks = burn_in_checks(newest_report(runs_dir))
    for host in GPU_NODES:
        assert data["burnin"]["nodes"][host]["copy_tool"] == "nvbandwidth"
        assert data["burnin"]["nodes"][host]["load"] == "dcgm"
        for gpu in range(8):
            for name in ("h2d", "d2h", "d2d", "clocks"):
                check = checks[(host, f"burnin_gpu{gpu}_{name}")]
                assert check["status"] == "pass", check
        assert checks[(host, "burnin_dcgm_diag")]["status"] == "pass"
        assert checks[(host, "burnin_xid")]["status"] == "pass"
        tflops = checks[(host, "burnin_tflops")]
        assert tflops["status"] == "skip"
        assert tflops["detail"].startswith("throughput not measured: DCGM's diagnostic"), tflops
        soak = checks[(host, "burnin_nccl_soak")]
        assert soak["status"] == "skip" and "all_reduce_perf is not installed" in soak["detail"]
    assert not [key for key, c in checks.items() if c["status"] == "fail"]


def test_the_faulted_gpus_of_the_faulted_nodes_are_named(
        cli: Cli, cluster: Path, runs_dir: Path) -> None:
    sim = ("sim", "up", "--nodes", "3", "--inventory-dir", str(cluster))
    try:
        faults = cli(*sim, "--fault", "sim-gpu-2:gpu3-pcie-downgrade",
                     "--fault", "sim-gpu-1:gpu2-hw-slowdown")
        assert faults.returncode == 0, faults.stdout[-2000:] + faults.stderr
        out = cli("certify", "--inventory", str(cluster), *BURN)
        assert out.returncode == 1, out.stdout[-3000:] + out.stderr
        assert "SUSPECT sim-gpu-2 (gpu:3): burnin_gpu3_h2d" in out.stdout, out.stdout[-3000:]
        assert "SUSPECT sim-gpu-1 (gpu:2): burnin_gpu2_clocks" in out.stdout
        report = newest_report(runs_dir)
        suspects = sorted((s["host"], s["component"], s["check"])
                          for s in report["certify"]["suspects"])
        assert suspects == [("sim-gpu-1", "gpu:2", "burnin_gpu2_clocks"),
                            ("sim-gpu-2", "gpu:3", "burnin_gpu3_d2h"),
                            ("sim-gpu-2", "gpu:3", "burnin_gpu3_h2d")], suspects
        checks = burn_in_checks(report)
        assert "hw_slowdown active" in checks[("sim-gpu-1", "burnin_gpu2_clocks")]["detail"]
        assert checks[("sim-gpu-2", "burnin_gpu3_h2d")]["measured"] < \
            checks[("sim-gpu-2", "burnin_gpu3_h2d")]["expected"]
        # Only those: the other GPUs and the other node's same GPUs pass.
        assert checks[("sim-gpu-1", "burnin_gpu3_h2d")]["status"] == "pass"
        assert checks[("sim-gpu-2", "burnin_gpu2_clocks")]["status"] == "pass"
        run_dir = runs_dir / report["run_id"]
        failures = sorted(str(case.get("name"))
                          for case in ET.parse(run_dir / "junit.xml").iter("testcase")
                          if case.find("failure") is not None)
        assert failures == ["certify verdict", "sim-gpu-1.burnin_gpu2_clocks",
                            "sim-gpu-2.burnin_gpu3_d2h", "sim-gpu-2.burnin_gpu3_h2d"], failures
    finally:
        assert cli(*sim).returncode == 0
