"""`up --reboot` reboots in batches, and a node that does not come back is reported while the
others go on (a node lost to its reboot), on the shared simulated cluster:

- both GPU nodes run an older NVIDIA module than the installed driver (the driver was changed
  outside a reboot: what a node looks like after a driver upgrade the provisioner did not
  reboot); sim-gpu-2 also has the simulator's `reboot-no-return` fault (it hangs before sshd);
- `up --reboot --batch-size 1 --reboot-timeout 30 --max-fail 1` reboots sim-gpu-1, waits until
  it is back, then sim-gpu-2 (never both at once: the report's record of the reboots, with the
  boot ids before and after, says so); sim-gpu-2 does not come back within 30 s;
- the run exits 1, the report names sim-gpu-2 as lost in the stack phase with the role's
  message, sim-gpu-1 passes every later phase with its new boot and the planned module loaded.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.conftest import SIM_NODES, newest_report, podman_exec

Cli = Callable[..., subprocess.CompletedProcess[str]]
BACK, LOST = "sim-gpu-1", "sim-gpu-2"
MODULE = "/run/gpu-sim/module/nvidia/version"
INSTALLED = "/usr/lib/gpu-sim/driver-version"

pytestmark = pytest.mark.e2e


def started_at(node: str) -> datetime:
    out = subprocess.run(["podman", "inspect", node, "--format", "{{json .State.StartedAt}}"],
                         capture_output=True, text=True, timeout=60, check=True)
    return datetime.fromisoformat(json.loads(out.stdout).replace("Z", "+00:00"))


def boot_id(node: str) -> str:
    return podman_exec(node, "cat /proc/sys/kernel/random/boot_id").stdout.strip()


def test_reboots_roll_and_a_node_that_does_not_come_back_is_reported(
        cli: Cli, healthy_cluster: Path, runs_dir: Path) -> None:
    inv = healthy_cluster
    installed = podman_exec(BACK, f"cat {INSTALLED}").stdout.strip()
    assert installed, "no driver installed on the shared cluster"
    before = {node: (boot_id(node), started_at(node)) for node in (BACK, LOST)}
    try:
        out = cli("sim", "up", "--nodes", "3", "--fault", f"{LOST}:reboot-no-return",
                  "--inventory-dir", str(inv))
        assert out.returncode == 0, out.stderr + out.stdout
        for node in (BACK, LOST):
            assert podman_exec(node, f"echo 1.0.0 > {MODULE}").returncode == 0

        run = cli("up", "--inventory", str(inv), "--reboot", "--batch-size", "1",
                  "--reboot-timeout", "30", "--max-fail", "1", "--skip-smoke")
        text = run.stdout + run.stderr
        assert run.returncode == 1, text[-4000:]
        report = newest_report(runs_dir)

        # The node that did not come back: lost in the stack phase, with the role's message.
        lost = report["lost_hosts"]
        assert set(lost) == {LOST}, lost
        assert lost[LOST]["phase"] == "stack", lost
        assert "did not come back from its reboot within 30 s" in lost[LOST]["message"], lost
        assert LOST in text and "did not come back" in text, text[-4000:]
        assert podman_exec(LOST, "systemctl is-active ssh.service").stdout.strip() != "active"

        # The node that came back: a new boot, the installed driver's module loaded, and every
        # phase after the stack ran on it and passed.
        assert boot_id(BACK) != before[BACK][0]
        assert podman_exec(BACK, f"cat {MODULE}").stdout.strip() == installed
        loaded = [c for c in report["checks"]
                  if c["host"] == BACK and c["name"] == "driver_loaded"]
        assert loaded and all(c["status"] == "pass" for c in loaded), loaded
        phases = {p["name"]: p for p in report["phases"]}
        assert "validate" in phases and "monitoring" in phases, list(phases)
        for name in ("validate", "monitoring"):
            stats = phases[name]["hosts"]
            assert BACK in stats and LOST not in stats, (name, stats)
        failed = [c for c in report["checks"] if c["host"] == BACK and c["status"] == "fail"]
        assert not failed, failed

        # Slurm still knows the lost node: a run that misses a planned compute node keeps its
        # slurm.conf line (dropping it would take it out of Slurm and restart every daemon).
        conf = podman_exec("sim-login-1", "cat /etc/slurm/slurm.conf").stdout
        assert f"NodeName={LOST} " in conf and f"NodeName={BACK} " in conf, conf

        # One at a time, from the run's own record of its reboots: sim-gpu-1 came back with a
        # new boot id (the one it runs now) before sim-gpu-2's reboot started; sim-gpu-2 never
        # came back; the report says at most one node was down at once.
        reboots = {r["host"]: r for r in report["reboots"]}
        assert set(reboots) == {BACK, LOST}, report["reboots"]
        back, gone = reboots[BACK], reboots[LOST]
        assert (back["outcome"], gone["outcome"]) == ("back", "lost"), reboots
        assert back["boot_id_before"] == before[BACK][0], back
        assert back["boot_id_after"] == boot_id(BACK) != before[BACK][0], back
        assert gone["boot_id_before"] == before[LOST][0] and gone["boot_id_after"] is None, gone
        assert back["ended_at"] <= gone["started_at"], reboots
        assert "2 reboot(s): 1 back, 1 lost; at most 1 node(s) down at once" in report["notes"]
        # And as the containers saw it: sim-gpu-2 started again after sim-gpu-1 had.
        back_at, lost_at = started_at(BACK), started_at(LOST)
        assert before[BACK][1] < back_at < lost_at, (before, back_at, lost_at)
    finally:
        heal = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(inv))
        assert heal.returncode == 0, heal.stderr + heal.stdout
    # Healed: its sshd is up again and it runs the installed driver's module (its boot loaded it).
    assert podman_exec(LOST, "systemctl is-active ssh.service").stdout.strip() == "active"
    assert podman_exec(LOST, f"cat {MODULE}").stdout.strip() == installed
    # Every node still has its own link-layer address after the reboots: nodes that shared one
    # (udev derives it from the machine id) stalled every new connection in the tests after.
    macs = {node: podman_exec(node, "cat /sys/class/net/eth0/address").stdout.strip()
            for node in SIM_NODES}
    assert all(macs.values()) and len(set(macs.values())) == len(macs), macs
