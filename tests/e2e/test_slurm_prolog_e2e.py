"""Slurm's Prolog on the 3-node simulated cluster: with GPU 0 of sim-gpu-1 fallen off the bus,
a batch job sent there does not run. The Prolog (the slurm_node role's gpuc-slurm-prolog:
`gpuc-health --quick` before the job) drains the node with its own reason ("gpuc prolog:
gpu_count: ...") and Slurm requeues the job held; a job on sim-gpu-2 runs meanwhile.

The node's periodic health check (HealthCheckProgram) would drain it too, with "gpuc: ...",
whenever its interval comes round: while the test runs, that node's settings have an empty
drain_statuses (the health check only reports), so the reason can only be the Prolog's and the
job cannot find the node drained before it. Fault, settings and node are restored at the end,
and a job then runs on sim-gpu-1 again.

Runs on the session's shared cluster (tests/e2e/conftest.py); the Prolog comes with up's
scheduler phase, gpuc-health with its monitoring phase.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from provisioner.sim.tools.node import FAULTS_FILE
from tests.e2e.conftest import eventually

pytestmark = [pytest.mark.e2e]

NODE, OTHER = "sim-gpu-1", "sim-gpu-2"
FAULT = "gpu0-missing"
# The settings the health check and the Prolog read (slurm_node: __slurm_node_health_config).
SETTINGS = "/etc/gpuc-health/slurm.json"
REPORT_ONLY = ("import json, sys; p = sys.argv[1]; d = json.load(open(p)); "
               "d['drain_statuses'] = []; open(p, 'w').write(json.dumps(d))")
MARK = "/tmp/gpuc-prolog-e2e-ran"  # what the job would leave on the node had it run


def on(node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", node, *command], capture_output=True, text=True,
                          timeout=timeout, check=False)


def controller_of(inventory: Path) -> str:
    groups = yaml.safe_load((inventory / "hosts.yml").read_text())["all"]["children"]
    hosts = sorted((groups.get("slurm_controller") or {}).get("hosts") or {})
    assert hosts, "the simulated inventory has no [slurm_controller]"
    return str(hosts[0])


def node_state(controller: str, node: str) -> tuple[str, str]:
    """(State, Reason) as `scontrol show node` prints them (Reason without its [user@time])."""
    out = on(controller, "scontrol", "--oneliner", "show", "node", node).stdout.strip()
    head, _sep, reason = out.partition(" Reason=")
    state = next((item.partition("=")[2] for item in head.split()
                  if item.startswith("State=")), "")
    return state, reason.split(" [", 1)[0]


def test_an_unhealthy_node_refuses_the_job_in_its_prolog_and_drains_itself(
        healthy_cluster: Path) -> None:
    controller = controller_of(healthy_cluster)
    def idle() -> bool:
        return all(node_state(controller, n)[0] == "IDLE" for n in (NODE, OTHER))

    eventually(f"{NODE} and {OTHER} idle", idle, timeout=60)
    job = ""
    assert on(NODE, "cp", "-p", SETTINGS, f"{SETTINGS}.e2e").returncode == 0
    try:
        edit = on(NODE, "python3", "-c", REPORT_ONLY, SETTINGS)
        assert edit.returncode == 0, edit.stderr
        inject = on(NODE, "sh", "-c", f"rm -f {MARK}; echo {FAULT} >> {FAULTS_FILE}")
        assert inject.returncode == 0, inject.stderr
        submitted = on(controller, "sbatch", "--parsable", "-w", NODE, "-N1", "--time=1",
                       "--chdir=/tmp", "-o", "/dev/null", "--wrap", f"touch {MARK}")
        assert submitted.returncode == 0, submitted.stderr
        job = submitted.stdout.strip().split(";")[0]

        def drained() -> tuple[str, str] | None:
            state, reason = node_state(controller, NODE)
            return (state, reason) if "DRAIN" in state else None

        state, reason = eventually(f"{NODE} drained by its Prolog", drained, timeout=90)
        print(f"{NODE} {state}: {reason}")
        assert reason.startswith("gpuc prolog: gpu_count: 7 of 8 GPUs visible"), reason

        def requeued() -> str | None:
            out = on(controller, "squeue", "-h", "-j", job, "-o", "%T|%r").stdout.strip()
            return out if out.startswith("PENDING|") and "held" in out.lower() else None

        # slurm.conf(5), Prolog: a failed Prolog requeues the job in a held state.
        print(f"job {job}: {eventually(f'job {job} requeued held', requeued, timeout=60)}")
        assert on(NODE, "test", "-e", MARK).returncode != 0, f"job {job} ran on {NODE}"
        other = on(controller, "srun", "-w", OTHER, "-N1", "--time=1", "hostname", timeout=90)
        assert (other.returncode, other.stdout.strip()) == (0, OTHER), other.stderr
    finally:
        if job:
            on(controller, "scancel", job)
        on(NODE, "sed", "-i", f"/^{FAULT}$/d", FAULTS_FILE)
        on(NODE, "mv", f"{SETTINGS}.e2e", SETTINGS)
        on(controller, "scontrol", "update", f"NodeName={NODE}", "State=RESUME")
    # Healed and resumed: its Prolog passes and the job runs there.
    again = on(controller, "srun", "-w", NODE, "-N1", "--time=1", "hostname", timeout=90)
    assert (again.returncode, again.stdout.strip()) == (0, NODE), again.stderr
