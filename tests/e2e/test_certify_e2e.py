"""`provisioner certify` on the 3-node simulated cluster (two GPU nodes, the login node as a
reference peer): healthy, every pair measured and no suspect; with sim-gpu-1's network slowed
for real (`net-slow`: a tc token bucket on its eth0), certify exits 1 naming sim-gpu-1 and no
other, the report's certify section and JUnit say so, and with --drain Slurm shows the node
drained with certify's reason. The fault is healed and the node resumed at the end."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e import conftest as e2e
from tests.e2e.conftest import FirstUp, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e
SLOW = "sim-gpu-1"


@pytest.fixture(scope="module")
def cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp) -> Path:
    return e2e.heal(cli, sim_inventory, first_up)


def test_a_healthy_cluster_has_no_suspect(cli: Cli, cluster: Path) -> None:
    out = cli("certify", "--inventory", str(cluster), "--json")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    data = json.loads(out.stdout)
    assert data["suspects"] == []
    assert len(data["pairs"]) == 3
    assert all(p["gbps"] and p["gbps"] > 0 for p in data["pairs"]), data["pairs"]


@pytest.fixture
def slowed(cli: Cli, cluster: Path) -> Iterator[Path]:
    sim = ("sim", "up", "--nodes", "3", "--inventory-dir", str(cluster))
    try:
        assert cli(*sim, "--fault", f"{SLOW}:net-slow").returncode == 0
        qdisc = subprocess.run(["podman", "exec", SLOW, "tc", "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True, timeout=60, check=False).stdout
        assert "tbf" in qdisc, qdisc
        yield cluster
    finally:
        assert cli(*sim).returncode == 0
        e2e._resume_drained(cluster)


def test_the_slowed_node_is_named_and_drained(cli: Cli, slowed: Path, runs_dir: Path) -> None:
    out = cli("certify", "--inventory", str(slowed), "--drain")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr
    assert f"SUSPECT {SLOW} (node)" in out.stdout
    report = newest_report(runs_dir)
    suspects = report["certify"]["suspects"]
    assert [(s["host"], s["component"], s["check"]) for s in suspects] == [
        (SLOW, "node", "pair_tcp_bw")], suspects
    assert len(suspects[0]["evidence"]) == 2  # both of its pairs
    assert suspects[0]["measured"] < suspects[0]["expected"]
    # Each suspect is a JUnit failure.
    run_dir = runs_dir / report["run_id"]
    failures = [case.get("name") for case in ET.parse(run_dir / "junit.xml").iter("testcase")
                if case.find("failure") is not None]
    # The suspect, and the run's overall verdict (every failed run has one).
    assert failures == [f"{SLOW}.pair_tcp_bw:node", "certify verdict"], failures
    # Drained in Slurm with certify's reason; the other nodes are not.
    controller = "sim-login-1"
    rows = subprocess.run(["podman", "exec", controller, "sinfo", "-N", "-h", "-o", "%N|%T|%E"],
                          capture_output=True, text=True, timeout=60, check=False).stdout
    state = {line.split("|")[0]: line.split("|")[1:] for line in rows.splitlines() if line}
    assert state[SLOW][0].startswith("drain"), state
    assert state[SLOW][1].startswith("gpuc certify pair_tcp_bw"), state
    assert not state["sim-gpu-2"][0].startswith("drain"), state
    assert report["certify"]["drained"] == {SLOW: state[SLOW][1]} or \
        list(report["certify"]["drained"]) == [SLOW]
