"""Error counters on the simulated cluster, judged by their rise between two readings.

`provisioner validate` on the healthy cluster passes (its reading is judged against the one the
last validate of this inventory left in its report). Then sim-gpu-1's mlx5_0 port counts 1000
symbol errors and its GPU 2 an uncorrectable non-fatal PCIe error (`sim up --fault` on the
running node: the counter files rise): the next validate fails exactly those two checks on
sim-gpu-1, names the port, the counter and the interval, and passes sim-gpu-2. gpuc-health on
the node, with a state file of its own, takes the baseline before the rise and fails the same
port after it. A validate run after that passes: the failed run's reading is the new baseline
and nothing rose since. The fault is healed and the node resumed at the end (the node's own
timer runs gpuc-health too, and Slurm's health check drains an unhealthy node)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.sim.faults import SYMBOL_ERRORS
from provisioner.sim.tools.node import IB_SYSFS, KERNEL_LOG, PCI_SYSFS
from tests.e2e import conftest as e2e
from tests.e2e.conftest import FirstUp, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e

NODE = "sim-gpu-1"
HEALTHY = "sim-gpu-2"
GPUC_HEALTH = "/usr/local/sbin/gpuc-health"
# A state file of the test's own: the node's timer keeps its baseline in the default one.
STATE = "/run/gpuc-e2e-counters.json"
PORT_CHECK = "ib_mlx5_0_port1_errors"
AER_CHECK = "gpu2_pcie_errors"


@pytest.fixture(scope="module")
def cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp) -> Path:
    return e2e.heal(cli, sim_inventory, first_up)


def gpuc_health() -> tuple[int, dict[str, dict[str, Any]]]:
    out = subprocess.run(["podman", "exec", NODE, GPUC_HEALTH, "--json", "--state", STATE,
                          "--kernel-log", KERNEL_LOG, "--ib-sysfs-root", IB_SYSFS,
                          "--pci-sysfs-root", PCI_SYSFS],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode in (0, 1, 2), out.stdout[-2000:] + out.stderr
    return out.returncode, {c["name"]: c for c in json.loads(out.stdout)["checks"]}


def validate_checks(cli: Cli, cluster: Path, runs_dir: Path,
                    rc: int) -> dict[tuple[str, str], dict[str, Any]]:
    out = cli("validate", "--inventory", str(cluster))
    assert out.returncode == rc, out.stdout[-3000:] + out.stderr
    report = newest_report(runs_dir)
    assert [p["name"] for p in report["phases"]] == ["validate"]
    return {(c["host"], c["name"]): c for c in report["checks"]}


@pytest.fixture
def raised(cli: Cli, cluster: Path) -> Iterator[Path]:
    sim = ("sim", "up", "--nodes", "3", "--inventory-dir", str(cluster))
    subprocess.run(["podman", "exec", NODE, "rm", "-f", STATE], capture_output=True,
                   timeout=60, check=False)
    try:
        yield cluster
    finally:
        assert cli(*sim).returncode == 0  # the counter files back to 0
        subprocess.run(["podman", "exec", NODE, "rm", "-f", STATE], capture_output=True,
                       timeout=60, check=False)
        e2e._resume_drained(cluster)


def test_counters_raised_between_two_readings_fail_their_port_and_gpu(
        cli: Cli, raised: Path, runs_dir: Path) -> None:
    before = validate_checks(cli, raised, runs_dir, 0)
    assert before[(NODE, PORT_CHECK)]["status"] in ("pass", "skip")
    rc, health = gpuc_health()
    assert rc in (0, 1) and health[PORT_CHECK]["status"] == "skip", health[PORT_CHECK]
    assert health[PORT_CHECK]["detail"] == "mlx5_0/1: first reading: baseline recorded"

    out = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(raised),
              "--fault", f"{NODE}:mlx5_0-symbol-errors", "--fault", f"{NODE}:gpu2-aer-nonfatal")
    assert out.returncode == 0, out.stderr + out.stdout

    checks = validate_checks(cli, raised, runs_dir, 1)
    failed = {key for key, c in checks.items() if c["status"] == "fail"}
    assert failed == {(NODE, PORT_CHECK), (NODE, AER_CHECK)}, failed
    port = checks[(NODE, PORT_CHECK)]
    assert port["measured"]["symbol_error"] == SYMBOL_ERRORS
    assert port["detail"].startswith(f"mlx5_0/1: symbol_error +{SYMBOL_ERRORS} ")
    assert "since the last reading" in port["detail"]
    assert "CmpltTO +1" in checks[(NODE, AER_CHECK)]["detail"]
    assert checks[(HEALTHY, PORT_CHECK)]["status"] == "pass"
    assert checks[(NODE, "ib_mlx5_1_port1_errors")]["status"] == "pass"

    rc, health = gpuc_health()
    assert rc == 2
    assert health[PORT_CHECK]["status"] == "fail"
    assert f"symbol_error +{SYMBOL_ERRORS}" in health[PORT_CHECK]["detail"]
    assert health[AER_CHECK]["status"] == "fail"

    # The failed run's reading is the baseline now: nothing rose since, validate passes.
    after = validate_checks(cli, raised, runs_dir, 0)
    assert after[(NODE, PORT_CHECK)]["status"] == "pass"
    assert after[(NODE, PORT_CHECK)]["measured"]["symbol_error"] == 0
