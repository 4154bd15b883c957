"""Precompiled kernel modules on an imitated Rocky 9 GPU node (a cluster of its own: one H100
NVL GPU node on Ethernet and one login node): `nvidia_driver_module_source: precompiled` installs the driver from
the branch's precompiled stream `nvidia-driver:<B>` with NVIDIA's per-kernel signed package
`kmod-nvidia-<driver>-<kernel>` (the simulated mirror builds them as NVIDIA's
yum-packaging-precompiled-kmod does: modules in /lib/modules/<kernel>/extra/drivers/video/nvidia,
signed with a SIMULATED stand-in of NVIDIA's key), no DKMS build and no headers. Then:
1. A rerun changes nothing.
2. A newer kernel the stream has no package for is installed on the node: `up` fails in the
   driver's install, naming that kernel and its missing package, before changing the driver.
3. Secure Boot on: the modules' signer (NVIDIA's key) is not enrolled, so the signature check
   fails and, with the certificate from the repository's root named in
   nvidia_driver_mok_certificates and the console password's hash, the role requests its
   enrolment; the console confirms it at the next boot, and `up` passes with every module
   signed by the enrolled key.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.sim.rpmrepo import precompiled_certificate
from tests.e2e.conftest import eventually, newest_report, node_diagnostics, podman_exec
from tests.e2e.test_secure_boot_e2e import CONSOLE_HASH  # the one-time console password's hash

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = [pytest.mark.e2e]

NODE = "sim-gpu-1"
# An Ethernet node: on an RDMA fabric the plan refuses precompiled modules (no nvidia-peermem
# in NVIDIA's package, no dma_buf in the proprietary modules: no GPUDirect RDMA path).
PROFILE = "pcie-h100nvl-1gpu"
CERT_ON_NODE = "/etc/pki/nvidia/NVIDIA2019-public_key.der"
NEWER_KERNEL = "9.9.0-1.el9_9.x86_64"


def sim_up(cli: Cli, inv: Path, *faults: str, fresh: bool = False) -> None:
    out = cli("sim", "up", "--os", "rocky9", "--nodes", "2", "--profile", PROFILE,
              "--inventory-dir", str(inv),
              *[arg for name in faults for arg in ("--fault", f"{NODE}:{name}")],
              *(["--recreate"] if fresh else []))
    assert out.returncode == 0, out.stderr + out.stdout


def write_override(inv: Path, **extra: Any) -> None:
    host = {"nvidia_driver_module_source": "precompiled",
            "nvidia_driver_module_flavor": "proprietary", **extra}
    (inv / "precompiled-e2e.yml").write_text(yaml.safe_dump({"all": {"hosts": {NODE: host}}}))


def up(cli: Cli, inv: Path) -> subprocess.CompletedProcess[str]:
    return cli("up", "--inventory", str(inv), "--yes", "--skip-smoke")


def signature_check(report: dict[str, Any], kernel: str) -> dict[str, Any]:
    [check] = [c for c in report["checks"]
               if c["host"] == NODE and c["name"] == f"module_signatures:{kernel}"]
    return check


def reboot() -> None:
    restart = subprocess.run(["podman", "restart", "--time", "20", NODE], capture_output=True,
                             text=True, timeout=120, check=False)
    assert restart.returncode == 0, restart.stderr
    eventually("sshd back on the rebooted node",
               lambda: podman_exec(NODE, "systemctl is-active sshd").stdout.strip() == "active"
               or None, timeout=60)


@pytest.fixture(scope="module")
def cluster(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    inv = tmp_path_factory.mktemp("inv-rocky9-precompiled")
    sim_up(cli, inv, fresh=True)
    write_override(inv)
    yield inv


def test_precompiled_modules_then_a_kernel_without_one_then_secure_boot(
        cli: Cli, cluster: Path, runs_dir: Path) -> None:
    kernel = podman_exec(NODE, "uname -r").stdout.strip()
    out = up(cli, cluster)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr + node_diagnostics()
    report = newest_report(runs_dir)
    rpms = podman_exec(NODE, "rpm -qa --qf '%{NAME}\\n'").stdout.split()
    kmods = [r for r in rpms if r.startswith("kmod-nvidia")]
    assert len(kmods) == 1 and re.fullmatch(r"kmod-nvidia-\d+\.\d+\.\d+-" + re.escape(kernel),
                                            kmods[0]), kmods
    assert "kmod-nvidia-latest-dkms" not in rpms and "kmod-nvidia-open-dkms" not in rpms
    enabled = podman_exec(NODE, "dnf -q module list --enabled nvidia-driver").stdout
    assert re.search(r"^nvidia-driver\s+\d+\s", enabled, re.M), enabled
    ko = f"/lib/modules/{kernel}/extra/drivers/video/nvidia/nvidia.ko"
    signer = podman_exec(NODE, f"modinfo -F signer {ko}").stdout.strip()
    assert "SIMULATED" in signer and "NVIDIA" in signer, signer
    assert podman_exec(NODE, f"ls /lib/modules/{kernel}/updates/dkms 2>/dev/null").stdout == ""
    check = signature_check(report, kernel)
    assert check["status"] != "fail", check

    # 1. A rerun changes nothing.
    out = up(cli, cluster)
    assert out.returncode == 0, out.stdout[-3000:]
    changed = {p["name"]: p["changed"] for p in newest_report(runs_dir)["phases"]}
    assert set(changed.values()) == {0}, changed

    # 2. A newer kernel with no precompiled package: refused, naming it; nothing installed.
    made = podman_exec(NODE, f"touch /boot/vmlinuz-{NEWER_KERNEL}")
    assert made.returncode == 0, made.stderr
    try:
        out = up(cli, cluster)
        assert out.returncode != 0, out.stdout[-3000:]
        missing = f"kmod-nvidia-{kmods[0].split('-')[2]}-9.9.0-1"
        said = " ".join(out.stdout.split())  # the console wraps long lines
        assert f"has no precompiled kernel module for kernel {NEWER_KERNEL}" in said, \
            out.stdout[-3000:]
        assert f"({missing} not in the repository)" in said, out.stdout[-3000:]
        after = podman_exec(NODE, "rpm -qa --qf '%{NAME}\\n'").stdout.split()
        assert sorted(after) == sorted(rpms)
    finally:
        podman_exec(NODE, f"rm -f /boot/vmlinuz-{NEWER_KERNEL}")

    # 3. Secure Boot: NVIDIA's key not enrolled; the role requests it; the console confirms.
    # The operator fetches the certificate from the repository's root onto the node.
    assert podman_exec(NODE, "mkdir -p /etc/pki/nvidia").returncode == 0
    copied = subprocess.run(["podman", "cp", str(precompiled_certificate()),
                             f"{NODE}:{CERT_ON_NODE}"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert copied.returncode == 0, copied.stderr
    write_override(cluster, preflight_secure_boot_ok=True,
                   nvidia_driver_mok_import_hash=CONSOLE_HASH,
                   nvidia_driver_mok_certificates=[CERT_ON_NODE])
    sim_up(cli, cluster, "secure-boot")
    reboot()
    out = up(cli, cluster)
    assert out.returncode != 0, out.stdout[-3000:]
    check = signature_check(newest_report(runs_dir), kernel)
    assert check["status"] == "fail", check
    assert "whose enrolment is pending" in check["detail"], check
    listed = podman_exec(NODE, "mokutil --list-new").stdout
    assert "SIMULATED" in listed and "NVIDIA" in listed, listed

    sim_up(cli, cluster, "secure-boot", "mok-enrolled")
    reboot()
    out = up(cli, cluster)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    check = signature_check(newest_report(runs_dir), kernel)
    assert check["status"] == "pass", check
    assert "(enrolled)" in check["detail"], check
