"""`provisioner certify` on the 3-node simulated cluster (two GPU nodes, the login node as a
reference peer): healthy, every pair measured and no suspect; with sim-gpu-1's network slowed
for real (`net-slow`: a tc token bucket on its eth0), certify exits 1 naming sim-gpu-1 and no
other, the report's certify section and JUnit say so, and with --drain Slurm shows the node
drained with certify's reason. The fault is healed and the node resumed at the end.

Every simulated node's eth0 has a line rate of 2000 Mbit/s (a tc token bucket), so a healthy
pair measures the network and not how busy the machine's CPUs are.

Extended tier: with sim-gpu-1 slowed to 1400 Mbit/s (`net-slow-1400mbit`: 30% below the line
rate) and the floor at 15% of the fleet's median (--margin 85), nothing is a suspect, sim-gpu-1 is the one outlier and, with
three healthy runs before it in the ledger, it has drifted below its own median; `provisioner
history` shows its runs. `provisioner remediate` takes back a drained node whose fault is gone
(GPU reset, validate, resume) and keeps one whose GPU fell off the bus (Xid 79: the reset fails)
drained with what it found."""

from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    # Every node's eth0 at the line rate, which bounds what each pair measured.
    for node in ("sim-login-1", "sim-gpu-1", "sim-gpu-2"):
        qdisc = subprocess.run(["podman", "exec", node, "tc", "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True, timeout=60, check=False).stdout
        assert "tbf" in qdisc and "rate 2Gbit" in qdisc, (node, qdisc)
    assert all(p["gbps"] and 0 < p["gbps"] <= 2.1 for p in data["pairs"]), data["pairs"]


@pytest.fixture
def slowed(cli: Cli, cluster: Path) -> Iterator[Path]:
    sim = ("sim", "up", "--nodes", "3", "--inventory-dir", str(cluster))
    try:
        assert cli(*sim, "--fault", f"{SLOW}:net-slow").returncode == 0
        qdisc = subprocess.run(["podman", "exec", SLOW, "tc", "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True, timeout=60, check=False).stdout
        assert "tbf" in qdisc and "rate 200Mbit" in qdisc, qdisc
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
    # The run's page, drawn by headless Chromium with the suspect marked; the screenshot is kept
    # under the run.
    from provisioner import report_html

    page = run_dir / "index.html"
    dom = report_html.dump_dom(page)
    assert dom is not None, "headless Chromium could not draw the page (make deps installs it)"
    marked = re.findall(r'<[^>]*class="[^"]*\bsuspect\b[^"]*"[^>]*data-host="([^"]+)"', dom)
    assert marked == [SLOW], marked
    assert report_html.screenshot(page, run_dir / "index.png")
    assert (run_dir / "index.png").stat().st_size > 10_000
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


@contextmanager
def _slowed_to(cli: Cli, cluster: Path, fault: str, shown: str) -> Iterator[Path]:
    sim = ("sim", "up", "--nodes", "3", "--inventory-dir", str(cluster))
    try:
        assert cli(*sim, "--fault", f"{SLOW}:{fault}").returncode == 0
        qdisc = subprocess.run(["podman", "exec", SLOW, "tc", "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True, timeout=60, check=False).stdout
        assert "tbf" in qdisc and shown in qdisc, qdisc
        yield cluster
    finally:
        assert cli(*sim).returncode == 0


def _healthy_runs_for(cli: Cli, cluster: Path, host: str) -> list[dict[str, object]]:
    """The host's ledger entries, after as many healthy certify runs as drift needs."""
    from provisioner.history import MIN_RUNS

    def ledger() -> list[dict[str, object]]:
        out = cli("history", "--host", host, "--json")
        return list(json.loads(out.stdout).get(host, [])) if out.returncode == 0 else []

    while len(ledger()) < MIN_RUNS:
        out = cli("certify", "--inventory", str(cluster), "--json")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    return ledger()


def test_a_node_slower_than_its_peers_within_the_floor_is_an_outlier_and_drifts(
        cli: Cli, cluster: Path, runs_dir: Path) -> None:
    earlier = _healthy_runs_for(cli, cluster, SLOW)
    assert isinstance(earlier[-1]["value"], float) and earlier[-1]["value"] > 0, earlier
    with _slowed_to(cli, cluster, "net-slow-1400mbit", "rate 1400Mbit") as slowed:
        out = cli("certify", "--inventory", str(slowed), "--margin", "85")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    assert f"OUTLIER {SLOW}:" in out.stdout and f"DRIFT {SLOW}:" in out.stdout, out.stdout
    section = newest_report(runs_dir)["certify"]
    assert section["suspects"] == [], section
    assert [o["host"] for o in section["outliers"]] == [SLOW], section
    assert [d["host"] for d in section["drift"]] == [SLOW], section
    [o] = section["outliers"]
    assert o["measured"] < o["median"] * 0.9
    later = json.loads(cli("history", "--host", SLOW, "--json").stdout)[SLOW]
    assert len(later) == len(earlier) + 1 and later[-1]["value"] == o["measured"]


def _slurm_states() -> dict[str, list[str]]:
    rows = subprocess.run(["podman", "exec", "sim-login-1", "sinfo", "-N", "-h", "-o",
                           "%N|%T|%E"], capture_output=True, text=True, timeout=60,
                          check=False).stdout
    return {line.split("|")[0]: line.split("|")[1:] for line in rows.splitlines() if line}


def test_remediate_resumes_the_mended_node_and_keeps_the_broken_one_drained(
        cli: Cli, cluster: Path, runs_dir: Path) -> None:
    broken = "sim-gpu-2"
    sim = ("sim", "up", "--nodes", "3", "--inventory-dir", str(cluster))
    try:
        # sim-gpu-1 drained by certify earlier, its network since mended (no fault); sim-gpu-2's
        # GPU 0 fell off the bus, drained as gpuc-slurm-health drains (a reason starting gpuc).
        assert cli(*sim, "--fault", f"{broken}:gpu0-xid-79").returncode == 0
        for node, reason in ((SLOW, "gpuc certify pair_tcp_bw: best pair 0.19 Gbit/s < 9.8"),
                             (broken, "gpuc: xid: Xid 79 on 00000000:19:00.0")):
            subprocess.run(["podman", "exec", "sim-login-1", "scontrol", "update",
                            f"NodeName={node}", "State=DRAIN", f"Reason={reason}"],
                           check=True, timeout=60)
        out = cli("remediate", "--inventory", str(cluster))
        assert out.returncode == 1, out.stdout[-3000:] + out.stderr  # one node stays drained
        report = newest_report(runs_dir)
        outcomes = {o["host"]: o for o in report["remediate"]}
        assert outcomes[SLOW]["reset"] == "passed" and outcomes[SLOW]["validate"] == "passed"
        assert outcomes[SLOW]["resumed"] is True
        assert outcomes[broken]["reset"].startswith("failed (rc 15)"), outcomes[broken]
        assert outcomes[broken]["resumed"] is False
        states = _slurm_states()
        assert not states[SLOW][0].startswith("drain"), states
        assert states[broken][0].startswith("drain"), states
        assert states[broken][1].startswith("gpuc remediate: reset failed (rc 15)"), states
        # The mended node's GPUs were reset for real (the simulated driver logs each reset).
        resets = subprocess.run(["podman", "exec", SLOW, "cat", "/var/lib/gpu-sim/resets"],
                                capture_output=True, text=True, timeout=60, check=False).stdout
        assert len(resets.splitlines()) >= 8, resets
    finally:
        assert cli(*sim).returncode == 0
        e2e._resume_drained(cluster)
