"""GPU isolation under Slurm on the shared simulated cluster: cgroup.conf's ConstrainDevices
with the GRES File= lines. A job that asks for 2 GPUs sees exactly 2 (CUDA_VISIBLE_DEVICES 0,1,
numbered inside the job as Slurm does under ConstrainDevices) and can open only those two
/dev/nvidia* files; a second job on the same node, while the first holds its GPUs, gets two
others and cannot open the first job's.

How "can open" is told apart without a GPU driver: the kernel checks the cgroup's device rules
before it looks for the driver behind a character device, so a file the job may use fails with
ENXIO (no driver: the simulated node has none) and one it may not with EPERM.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import FirstUp, eventually, heal

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = [pytest.mark.e2e]

CONTROLLER, NODE = "sim-login-1", "sim-gpu-1"
# Run inside the job: what it was given and what each GPU file answers.
PROBE = (
    "import errno, json, os\n"
    "seen = {}\n"
    "for i in range(8):\n"
    "    try:\n"
    "        os.close(os.open('/dev/nvidia%d' % i, os.O_RDWR))\n"
    "        seen[i] = 'opened'\n"
    "    except OSError as exc:\n"
    "        seen[i] = errno.errorcode[exc.errno]\n"
    "print(json.dumps({'visible': os.environ.get('CUDA_VISIBLE_DEVICES'), 'files': seen}))\n"
)


def on(node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", node, *command], capture_output=True, text=True,
                          timeout=timeout, check=False)


def probe(gpus: int) -> dict:
    out = on(CONTROLLER, "srun", "-w", NODE, f"--gpus-per-node={gpus}", "--time=1",
             "python3", "-c", PROBE, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def usable(result: dict) -> list[int]:
    """The GPU files the job may open: the ones that failed only for want of a driver."""
    files = {int(k): v for k, v in result["files"].items()}
    assert set(files.values()) <= {"ENXIO", "EPERM"}, files
    return sorted(i for i, why in files.items() if why == "ENXIO")


@pytest.fixture(scope="module")
def cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp) -> Path:
    return heal(cli, sim_inventory, first_up)


def test_cgroup_conf_constrains_devices(cluster: Path) -> None:
    conf = on(NODE, "cat", "/etc/slurm/cgroup.conf").stdout
    assert "ConstrainDevices=yes" in conf.splitlines(), conf
    shown = on(CONTROLLER, "scontrol", "show", "config").stdout
    assert any(line.split("=")[-1].strip() == "proctrack/cgroup" for line in shown.splitlines()
               if line.startswith("ProctrackType")), shown


def test_a_two_gpu_job_sees_and_opens_exactly_two(cluster: Path) -> None:
    result = probe(2)
    assert result["visible"] == "0,1", result
    assert len(usable(result)) == 2, result


def test_a_second_job_cannot_open_the_first_jobs_gpus(cluster: Path) -> None:
    held = on(CONTROLLER, "sbatch", "--parsable", "-w", NODE, "--gpus-per-node=2",
              "--time=2", "--job-name=gpuc-e2e-hold", "--wrap",
              f"python3 -c \"{PROBE}\" > /tmp/gpuc-e2e-hold.json; sleep 60")
    assert held.returncode == 0, held.stderr
    job = held.stdout.strip().split(";")[0]
    try:
        eventually("the holding job running", lambda: on(
            CONTROLLER, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING" or None,
            timeout=60)
        first = eventually("the holding job's probe", lambda: json.loads(
            on(NODE, "cat", "/tmp/gpuc-e2e-hold.json").stdout or "null"), timeout=30)
        second = probe(2)
        mine, theirs = usable(second), usable(first)
        assert len(mine) == 2 and len(theirs) == 2, (first, second)
        assert not set(mine) & set(theirs), (first, second)
        assert second["visible"] == "0,1", second
    finally:
        on(CONTROLLER, "scancel", job)
        on(NODE, "rm", "-f", "/tmp/gpuc-e2e-hold.json")
        time.sleep(2)
