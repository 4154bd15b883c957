"""Slurm's own OCI containers on the shared simulated cluster: the slurm_node role's oci.conf
(crun, rootless, as the job's user) through gpuc-oci-run.

The test plays the site's part first: an OCI bundle on each GPU node, as a site unpacks an
image there (Slurm does not copy bundles). Its rootfs has an identity of its own
(/etc/os-release), the mount points a job's directories need, and the node's /usr read-only,
so the smoke job's virtual environment runs in it. It shares the node's PID namespace and
binds its /proc, as HPC container runtimes do (Enroot, Charliecloud); a fresh proc mount would
also meet the simulator's boot-id bind mount over /proc, which the kernel refuses to a user
namespace (a real node has no such mount).

Then, through srun --container as the smoke job's unprivileged user:
- a 2-GPU job runs in the bundle (its os-release) and has exactly 2 GPU device files, both
  usable (ENXIO: the simulated node has no driver behind them); a second job on the node at the
  same time gets two others;
- `provisioner smoke --container BUNDLE` passes, every rank running as the container's root
  (the user namespace maps the job's user to uid 0), and `sacct` lists its steps COMPLETED
  with the bundle as their Container and their gres/gpu TRES.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import FirstUp, eventually, heal, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = [pytest.mark.e2e]

CONTROLLER, NODES = "sim-login-1", ("sim-gpu-1", "sim-gpu-2")
BUNDLE = "/opt/gpuc-e2e-bundle"
USER = "gpuc-smoke"  # the smoke job's user (smoke_job_user), made by the first up
# The bundle a site would unpack: rootfs + config.json. The mount points of the smoke job's
# directories (smoke_job_dir, smoke_job_venv, smoke_job_work_dir) exist in the image.
MAKE_BUNDLE = f"""
import json, os
b = {BUNDLE!r}
for d in ("usr", "proc", "sys", "dev", "tmp", "root", "opt/gpu-cluster-provisioner/smoke",
          "opt/gpu-cluster-provisioner/smoke-venv", "var/tmp/gpuc-smoke"):
    os.makedirs(f"{{b}}/rootfs/{{d}}", exist_ok=True)
os.makedirs(f"{{b}}/rootfs/etc", exist_ok=True)
for d in ("bin", "lib", "lib64", "sbin"):
    if not os.path.lexists(f"{{b}}/rootfs/{{d}}"):
        os.symlink(f"usr/{{d}}", f"{{b}}/rootfs/{{d}}")
files = {{"os-release": 'PRETTY_NAME="gpuc e2e bundle"\\nID=gpuc-e2e-bundle\\n',
          "passwd": "root:x:0:0:root:/root:/bin/sh\\n", "hosts": "", "resolv.conf": ""}}
for name, text in files.items():
    with open(f"{{b}}/rootfs/etc/{{name}}", "w") as fh:
        fh.write(text)
bind = lambda path, *opts: {{"destination": path, "type": "bind", "source": path,
                             "options": ["rbind", *opts]}}
config = {{
    "ociVersion": "1.0.0",
    "process": {{"terminal": False, "user": {{"uid": 0, "gid": 0}}, "args": ["true"],
                "env": ["PATH=/usr/bin:/bin"], "cwd": "/", "noNewPrivileges": True}},
    "root": {{"path": "rootfs", "readonly": True}},
    "mounts": [bind("/proc"), bind("/sys", "ro"),
               {{"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}},
               {{"destination": "/dev/pts", "type": "devpts", "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]}},
               bind("/dev/shm"),
               {{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                "options": ["nosuid", "nodev"]}},
               bind("/usr", "ro")],
    "linux": {{"namespaces": [{{"type": "user"}}, {{"type": "mount"}}]}},
}}
with open(f"{{b}}/config.json", "w") as fh:
    json.dump(config, fh, indent=1)
for root, dirs, names in os.walk(b):
    for name in dirs + names:
        path = os.path.join(root, name)
        if not os.path.islink(path):
            os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
"""
# Run in the container: who it is, what it was given and what each GPU file answers.
PROBE = (
    "import errno, json, os\n"
    "seen = {}\n"
    "for i in range(8):\n"
    "    try:\n"
    "        os.close(os.open('/dev/nvidia%d' % i, os.O_RDWR))\n"
    "        seen[i] = 'opened'\n"
    "    except OSError as exc:\n"
    "        seen[i] = errno.errorcode[exc.errno]\n"
    "release = open('/etc/os-release').read().split()\n"
    "files = sorted(f for f in os.listdir('/dev') if f.startswith('nvidia'))\n"
    "print(json.dumps({'release': release, 'dev': files, 'files': seen}))\n"
)


def on(node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", node, *command], capture_output=True, text=True,
                          timeout=timeout, check=False)


def as_user(*command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A command of the smoke job's user on the first GPU node (which has Slurm's client)."""
    return on(NODES[0], "runuser", "-u", USER, "--", *command, timeout=timeout)


def probe(gpus: int) -> dict:
    out = as_user("srun", "-w", NODES[0], f"--gpus-per-node={gpus}", "--time=1",
                  f"--container={BUNDLE}", "python3", "-c", PROBE, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def gpu_files(result: dict) -> list[str]:
    return [f for f in result["dev"] if f[len("nvidia"):].isdigit()]


@pytest.fixture(scope="module")
def cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp) -> Path:
    inv = heal(cli, sim_inventory, first_up)
    for node in NODES:
        conf = on(node, "cat", "/etc/slurm/oci.conf")
        assert conf.returncode == 0 and "gpuc-oci-run crun" in conf.stdout, conf.stderr
        made = on(node, "python3", "-c", MAKE_BUNDLE)
        assert made.returncode == 0, made.stderr
    assert on(NODES[0], "id", USER).returncode == 0, f"no {USER} on {NODES[0]}"
    return inv


def test_a_two_gpu_container_job_runs_in_the_bundle_with_exactly_its_two_gpus(
        cluster: Path) -> None:
    result = probe(2)
    assert "ID=gpuc-e2e-bundle" in result["release"], result
    assert len(gpu_files(result)) == 2, result
    assert "nvidiactl" in result["dev"], result
    usable = sorted(i for i, why in result["files"].items() if why == "ENXIO")
    assert len(usable) == 2, result
    # The others are not in the container at all.
    assert set(result["files"].values()) <= {"ENXIO", "ENOENT"}, result


def test_a_second_container_job_gets_two_other_gpus(cluster: Path) -> None:
    # A batch job on the node whose step 0 runs in the container and then holds its GPUs;
    # its output goes to a file of the node (slurmstepd writes it there).
    output = "/tmp/gpuc-e2e-oci-%j.out"
    held = as_user("sbatch", "--parsable", "-w", NODES[0], "--gpus-per-node=2", "--time=2",
                   "--job-name=gpuc-e2e-oci-hold", f"--output={output}", "--wrap",
                   f"srun --container={BUNDLE} python3 -c \"{PROBE}\"; sleep 60")
    assert held.returncode == 0, held.stderr
    job = held.stdout.strip().split(";")[0]
    written = output.replace("%j", job)
    try:
        first = eventually("the holding job's probe", lambda: _probe_in(written), timeout=90)
        second = probe(2)
        assert len(gpu_files(first)) == 2 and len(gpu_files(second)) == 2, (first, second)
        assert not set(gpu_files(first)) & set(gpu_files(second)), (first, second)
    finally:
        on(CONTROLLER, "scancel", job)
        on(NODES[0], "rm", "-f", written)
        time.sleep(2)


def _probe_in(path: str) -> dict | None:
    lines = [line for line in on(NODES[0], "cat", path).stdout.splitlines()
             if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def test_the_smoke_job_runs_in_the_container(cli: Cli, cluster: Path, runs_dir: Path) -> None:
    out = cli("smoke", "--inventory", str(cluster), "--container", BUNDLE)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    smoke = newest_report(runs_dir)["smoke"]
    assert smoke["launcher"] == "slurm" and smoke["container"] == BUNDLE, smoke
    passes = [run for run in smoke["runs"] if not run["label"].startswith("nccl-tests")]
    assert passes and all(run["verdict"]["passed"] for run in passes), passes
    # The job's user is uid 0 inside its user namespace, where it runs as USER outside.
    assert all(run["run_as"] == ["root"] for run in passes), passes
    acct = on(CONTROLLER, "sacct", "-a", "-n", "-P", "-S", "now-30minutes",
              "-o", "JobID,JobName,Container,State,AllocTRES")
    steps = [line.split("|") for line in acct.stdout.splitlines()
             if ".0|" in line and "gpuc-smoke-" in line]
    ran = [s for s in steps if s[2] == BUNDLE and s[3] == "COMPLETED"]
    assert len(ran) >= 3, acct.stdout  # the intra pass on each node, then the multi-node one
    assert all("gres/gpu=" in s[4] for s in ran), acct.stdout
