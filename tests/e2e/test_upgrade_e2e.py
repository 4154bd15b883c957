"""`provisioner upgrade` on the 3-node simulated cluster (sim-login-1 is the Slurm controller,
sim-gpu-1 and sim-gpu-2 the compute nodes), one node per batch:

1. a 60 s job runs on sim-gpu-1; `upgrade --stack cuda-12.9` drains sim-gpu-1 and starts its
   stack phase only after the job has ended (watched from here, in a thread), the job ends by
   itself (COMPLETED, not cancelled), both nodes then run the cuda-12.9 driver and are resumed;
2. with an NVLink fault on sim-gpu-2, `upgrade --stack cuda-13.0` exits 1, sim-gpu-1 is
   resumed and sim-gpu-2 stays drained with the upgrade's reason in `sinfo -R`.

At the end the fault is healed, sim-gpu-2 resumed and `up` puts the cluster back on the
default stack (cuda-13.0) for the other tests.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import FirstUp, eventually, heal

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e

CONTROLLER = "sim-login-1"
NODES = ("sim-gpu-1", "sim-gpu-2")
JOB_SECONDS = 60
# The stack phase's start is recorded to the second, the job's end polled once a second.
CLOCK_SLACK_S = 3


def on(node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", node, *command], capture_output=True, text=True,
                          timeout=timeout, check=False)


def job_state(job: str) -> str:
    """JobState from `scontrol show job` (kept MinJobAge after the end), or "" when gone."""
    out = on(CONTROLLER, "scontrol", "--oneliner", "show", "job", job).stdout
    fields = dict(item.partition("=")[::2] for item in out.split() if "=" in item)
    return fields.get("JobState", "")


class JobWatch(threading.Thread):
    """Polls a job once a second; ``ended_at`` is the first time it was seen past running."""

    BUSY = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED")

    def __init__(self, job: str) -> None:
        super().__init__(daemon=True)
        self.job = job
        self.ended_at: float | None = None
        self.final_state = ""
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            state = job_state(self.job)
            if state not in self.BUSY:
                self.ended_at, self.final_state = time.time(), state
                return
            time.sleep(1)


def drivers(node: str) -> set[str]:
    out = on(node, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    assert out.returncode == 0, out.stderr
    return {line.strip() for line in out.stdout.splitlines() if line.strip()}


def stack_driver(cli: Cli, stack: str) -> str:
    out = cli("stacks", "show", stack, "--json")
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["driver_version"])


def drain_reasons() -> dict[str, str]:
    out = on(CONTROLLER, "sinfo", "-R", "-h", "-o", "%n|%E").stdout
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def node_states() -> dict[str, str]:
    out = on(CONTROLLER, "sinfo", "-N", "-h", "-n", ",".join(NODES), "-o", "%N %T").stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def upgrade(cli: Cli, inventory: Path, stack: str) -> tuple[int, dict[str, Any], str]:
    # --reboot: a node whose driver changes keeps running the old module until it reboots (the
    # simulated node as a real one); without it every changed node fails driver_loaded.
    out = cli("upgrade", "--inventory", str(inventory), "--stack", stack, "--batch-size", "1",
              "--reboot", "--yes", "--json", timeout=3600)
    assert out.stdout.strip(), out.stderr[-3000:]
    return out.returncode, json.loads(out.stdout), out.stderr


@pytest.fixture
def cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp) -> Iterator[Path]:
    """The healed shared cluster; afterwards no fault, nothing drained, back on cuda-13.0."""
    inv = heal(cli, sim_inventory, first_up)
    try:
        yield inv
    finally:
        out = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(inv))
        assert out.returncode == 0, out.stderr + out.stdout
        for node in NODES:
            if node in drain_reasons():
                on(CONTROLLER, "scontrol", "update", f"NodeName={node}", "State=RESUME")
        up = cli("up", "--inventory", str(inv), "--yes", "--skip-smoke", timeout=3600)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr


def test_rolling_upgrade_waits_for_jobs_and_keeps_a_failed_node_drained(
        cli: Cli, cluster: Path) -> None:
    new = stack_driver(cli, "cuda-12.9")
    assert drivers(NODES[0]) != {new}, "the cluster already runs cuda-12.9"

    submitted = on(CONTROLLER, "sbatch", "--parsable", "-w", NODES[0], "--wrap",
                   f"sleep {JOB_SECONDS}")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    eventually(f"job {job} RUNNING on {NODES[0]}", lambda: job_state(job) == "RUNNING",
               timeout=60, interval=1)
    watch = JobWatch(job)
    watch.start()
    try:
        code, report, stderr = upgrade(cli, cluster, "cuda-12.9")
    finally:
        watch.stop.set()
    watch.join(timeout=10)
    assert code == 0, stderr[-3000:] + json.dumps(report.get("batches"), indent=1)
    first, second = report["batches"]
    assert (first["nodes"], second["nodes"]) == ([NODES[0]], [NODES[1]])
    assert [line.split()[0] for line in first["jobs_waited_for"]] == [job]
    # The job ended by itself, and only then did sim-gpu-1's stack phase start.
    assert watch.final_state == "COMPLETED", watch.final_state
    assert watch.ended_at is not None
    stack_started = datetime.fromisoformat(first["stack_started_at"]).timestamp()
    assert stack_started >= watch.ended_at - CLOCK_SLACK_S, (first, watch.ended_at)
    drained = datetime.fromisoformat(first["drained_at"]).timestamp()
    assert first["drain_wait_s"] >= watch.ended_at - drained - CLOCK_SLACK_S, first
    assert second["jobs_waited_for"] == []
    for batch in (first, second):
        assert batch["outcome"] == "passed" and batch["resumed"] == batch["nodes"], batch
    for node in NODES:
        assert drivers(node) == {new}, node
    states = node_states()
    assert all("drain" not in states[node] for node in NODES), states

    # A node that fails validation on the way back stays drained, with the reason.
    faulted = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(cluster),
                  "--fault", f"{NODES[1]}:gpu3-nvlink-down")
    assert faulted.returncode == 0, faulted.stderr + faulted.stdout
    code, report, stderr = upgrade(cli, cluster, "cuda-13.0")
    assert code == 1, stderr[-3000:]
    first, second = report["batches"]
    assert first["outcome"] == "passed" and first["resumed"] == [NODES[0]], first
    assert second["outcome"] == "failed", second
    assert second["phases"]["validate"] == f"failed on {NODES[1]}", second
    assert second["resumed"] == []
    # The failed checks, in gpu_validate's order (GPU, NVLink, IB, Xid, DCGM): the fault's
    # NVLink check before DCGM's diag, which the stand-in dcgmi fails with it.
    prefix = "gpuc upgrade to cuda-13.0 failed: validate: gpu3_nvlink"
    reason = second["kept_drained"][NODES[1]]
    assert reason.startswith(prefix), reason
    # gpuc-slurm-health may have drained it before the upgrade did: the upgrade then keeps
    # that reason after its own ("...; drained before: gpuc: gpu3_nvlink ..."), same start.
    reasons = drain_reasons()
    assert reasons.get(NODES[1], "").startswith(prefix), reasons
    assert NODES[0] not in reasons, reasons
    assert drivers(NODES[0]) == {stack_driver(cli, "cuda-13.0")}
    assert report["lost_hosts"][NODES[1]]["phase"] == "validate"
