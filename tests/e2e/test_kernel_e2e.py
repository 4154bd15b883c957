"""A newer kernel installed but not booted yet (unattended-upgrades or a manual upgrade did it;
the node reboots into it at its next maintenance), on the simulated cluster:

- its headers are there but DKMS never built the driver's module for it (the kernel's DKMS
  hook failed): the driver role builds it (`dkms autoinstall -k`) and the node passes;
- its headers are not there and no repository offers them: the role fails the node in one
  line naming the kernel and the headers package, and changes nothing else.

Without the role's check, either node would come back from its next reboot without a GPU
driver. The faults are the simulator's (`kernel-newer-unbuilt`, `kernel-newer-no-headers`);
the roles run through a two-role playbook (the repository role publishes the driver's pins)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from provisioner.sim.faults import newer_kernel
from tests.e2e.conftest import podman_exec

Cli = Callable[..., subprocess.CompletedProcess[str]]
ROOT = Path(__file__).resolve().parents[2]
NODE = "sim-gpu-1"
PLAYBOOK = f"""\
- name: The driver role on one node, after the repository role
  hosts: {NODE}
  gather_facts: true
  roles:
    - role: gpucluster.provisioner.nvidia_repo
    - role: gpucluster.provisioner.nvidia_driver
"""

pytestmark = pytest.mark.e2e


def driver_roles(inventory: Path, plan: Path, tmp: Path,
                 *extra: str) -> subprocess.CompletedProcess[str]:
    book = tmp / "driver.yml"
    book.write_text(PLAYBOOK)
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory / "hosts.yml"),
         "-i", str(plan), *extra, str(book)], capture_output=True, text=True, cwd=ROOT, timeout=1200,
        check=False, env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                          "ANSIBLE_FORCE_COLOR": "0"})


def dkms_status() -> str:
    out = podman_exec(NODE, "dkms status")
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_newer_kernel_gets_the_module_or_a_one_line_failure(
        cli: Cli, healthy_cluster: Path, tmp_path: Path) -> None:
    inv = healthy_cluster
    running = podman_exec(NODE, "uname -r").stdout.strip()
    newer = newer_kernel(running)
    plan = tmp_path / "plan.yml"
    assert cli("plan", "--inventory", str(inv), "-o", str(plan)).returncode == 0
    version = re.search(r"nvidia_driver_version: '?([0-9.]+)", plan.read_text())
    assert version, "no nvidia_driver_version in the plan"
    built = f"nvidia/{version[1]}, {newer}, x86_64: installed"
    try:
        # 1. Headers there, module never built: the role builds it.
        out = cli("sim", "up", "--nodes", "3", "--fault", f"{NODE}:kernel-newer-unbuilt",
                  "--inventory-dir", str(inv))
        assert out.returncode == 0, out.stderr + out.stdout
        assert f"nvidia/{version[1]}, {running}, x86_64: installed" in dkms_status()
        assert newer not in dkms_status()
        run = driver_roles(inv, plan, tmp_path)
        assert run.returncode == 0, run.stdout[-3000:]
        assert re.search(r"Build the module for kernels that lack it.*\nchanged: \[" + NODE,
                         run.stdout), run.stdout[-3000:]
        assert built in dkms_status()
        again = driver_roles(inv, plan, tmp_path)  # and a rerun changes nothing
        assert again.returncode == 0, again.stdout[-3000:]
        assert re.search(rf"^{NODE}\s+: ok=\d+\s+changed=0 ", again.stdout, re.M), \
            again.stdout[-3000:]
        # 2. No headers anywhere: one line naming the kernel and the package; nothing built.
        out = cli("sim", "up", "--nodes", "3", "--fault", f"{NODE}:kernel-newer-no-headers",
                  "--inventory-dir", str(inv))
        assert out.returncode == 0, out.stderr + out.stdout
        assert newer not in dkms_status()
        failed = driver_roles(inv, plan, tmp_path)
        assert failed.returncode != 0
        text = re.sub(r"\s+", " ", failed.stdout)
        assert (f"host {NODE}: kernel {newer} is installed but its headers are not, and "
                f"linux-headers-{newer} could not be installed") in text, failed.stdout[-3000:]
        assert "a reboot into it leaves the node without a GPU driver" in text
        assert f"nvidia/{version[1]}, {running}, x86_64: installed" in dkms_status()
    finally:
        healed = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(inv))
        assert healed.returncode == 0, healed.stderr + healed.stdout
    assert newer not in dkms_status()
    assert podman_exec(NODE, f"test -e /boot/vmlinuz-{newer}").returncode != 0


def held() -> set[str]:
    out = podman_exec(NODE, "apt-mark showhold")
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_the_kernel_is_held_on_request_and_released_without_touching_other_holds(
        cli: Cli, healthy_cluster: Path, tmp_path: Path) -> None:
    """nvidia_driver_hold_kernel on a Debian node (the simulator installs stand-ins of the
    kernel's packages: linux-image-K, linux-headers-K and the -amd64 metapackages): held with
    it, released without it, an administrator's own hold kept, reruns changing nothing."""
    inv = healthy_cluster
    running = podman_exec(NODE, "uname -r").stdout.strip()
    kernel = {f"linux-image-{running}", f"linux-headers-{running}", "linux-image-amd64",
              "linux-headers-amd64"}
    plan = tmp_path / "plan.yml"
    assert cli("plan", "--inventory", str(inv), "-o", str(plan)).returncode == 0
    # An administrator's own holds: on one of the kernel's packages, and on another package.
    mine = {"linux-headers-amd64", "openssh-server"}
    assert podman_exec(NODE, "apt-mark hold " + " ".join(sorted(mine))).returncode == 0
    try:
        on = driver_roles(inv, plan, tmp_path, "-e", "nvidia_driver_hold_kernel=true")
        assert on.returncode == 0, on.stdout[-3000:]
        assert kernel | mine <= held()
        record = podman_exec(NODE, "cat /var/lib/gpu-cluster-provisioner/kernel-held").stdout
        assert set(record.split()) == kernel - mine  # the role's own holds only
        again = driver_roles(inv, plan, tmp_path, "-e", "nvidia_driver_hold_kernel=true")
        assert re.search(rf"^{NODE}\s+: ok=\d+\s+changed=0 ", again.stdout, re.M), \
            again.stdout[-3000:]
        # A hold the role did not make stays when the option goes off.
        off = driver_roles(inv, plan, tmp_path)
        assert off.returncode == 0, off.stdout[-3000:]
        assert held() & (kernel | mine) == mine
        assert podman_exec(NODE, "test -e /var/lib/gpu-cluster-provisioner/kernel-held"
                           ).returncode != 0
        rerun = driver_roles(inv, plan, tmp_path)
        assert re.search(rf"^{NODE}\s+: ok=\d+\s+changed=0 ", rerun.stdout, re.M), \
            rerun.stdout[-3000:]
    finally:
        podman_exec(NODE, "apt-mark unhold " + " ".join(sorted(mine)))
        driver_roles(inv, plan, tmp_path)

