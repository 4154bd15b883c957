"""Secure Boot on a simulated Debian 12 GPU node of the shared cluster: the driver role's verify
reads every NVIDIA module of the node's kernel with the node's real `modinfo` and judges its
signature against Secure Boot and the MOK list (module nvidia_module_signatures).

The node's modules were built by its dkms at the session's first `up` and signed as Debian
12's dkms 3.0.10 signs them: with the key pair it made (/var/lib/dkms/mok.key, "DKMS module
signing key"). Then:
1. Secure Boot is turned on (fault `secure-boot`: the node's SecureBoot EFI variable is 1) and
   one module loses its signature. `up` fails the node's `module_signatures:<kernel>` check,
   naming the kernel and the unsigned module, and saying the signing key is not enrolled.
   With `nvidia_driver_mok_import_hash` (the hash of a one-time console password) the role has
   requested the key's enrolment (`mokutil --import --hash-file`), so the check says it is
   pending: reboot and confirm at the MokManager console.
2. The module gets its signature back, the person at the console confirms the request at the
   next boot (fault `mok-enrolled`), and the node reboots. `up` passes the check: every module
   is signed by an enrolled key.
The cluster is healed at the end (Secure Boot off again).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import FirstUp, eventually, heal, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = [pytest.mark.e2e]

NODE = "sim-gpu-2"
SIGNER = "DKMS module signing key"
UNSIGNED = "nvidia-uvm"
# `openssl passwd -6 -salt gpuce2e mok-console-1`: the one-time password's SHA-512 crypt hash.
CONSOLE_HASH = ("$6$gpuce2e$ks7xefwUOZz3eckmPoG5WgVAcsZgrt4g/orTCW4"
                "g6LaDoxGfZzCdfJ796QARznuzhmvRf8N7MQp6UrZ6L5ohk.")
# Removes the appended signature of a module (what an unsigned build leaves): sign-file's
# marker, the 12-byte struct module_signature whose last 4 bytes are the signature's length.
STRIP = """
import sys
path = sys.argv[1]
data = open(path, "rb").read()
marker = b"~Module signature appended~\\n"
assert data.endswith(marker), "not signed"
size = int.from_bytes(data[-len(marker) - 4:-len(marker)], "big")
open(path, "wb").write(data[:-len(marker) - 12 - size])
"""


def on(*command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", NODE, *command], capture_output=True, text=True,
                          timeout=timeout, check=False)


def faults(cli: Cli, inv: Path, *names: str) -> None:
    out = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(inv),
              *[arg for name in names for arg in ("--fault", f"{NODE}:{name}")])
    assert out.returncode == 0, out.stderr + out.stdout


def signature_check(report: dict[str, Any], kernel: str) -> dict[str, Any]:
    [check] = [c for c in report["checks"]
               if c["host"] == NODE and c["name"] == f"module_signatures:{kernel}"]
    return check


@pytest.fixture(scope="module")
def cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp) -> Iterator[Path]:
    inv = heal(cli, sim_inventory, first_up)
    override = inv / "secure-boot-e2e.yml"
    # Preflight's own Secure Boot check asks the site to say it signs its modules; the console
    # password's hash lets the driver role request the key's enrolment.
    override.write_text(yaml.safe_dump(
        {"all": {"hosts": {NODE: {"preflight_secure_boot_ok": True,
                                  "nvidia_driver_mok_import_hash": CONSOLE_HASH}}}}))
    try:
        yield inv
    finally:
        override.unlink()
        heal(cli, inv, first_up)
        # Secure Boot off again: a boot loads whatever module a failed step left refused.
        reboot()


def reboot() -> None:
    restart = subprocess.run(["podman", "restart", "--time", "20", NODE], capture_output=True,
                             text=True, timeout=120, check=False)
    assert restart.returncode == 0, restart.stderr
    eventually("sshd back on the rebooted node",
               lambda: on("systemctl", "is-active", "ssh").stdout.strip() == "active" or None,
               timeout=60)


def test_an_unsigned_module_then_an_enrolled_key(cli: Cli, cluster: Path,
                                                runs_dir: Path) -> None:
    kernel = on("uname", "-r").stdout.strip()
    module = f"/lib/modules/{kernel}/updates/dkms/{UNSIGNED}.ko"
    signer = on("modinfo", "-F", "signer", module)
    assert signer.stdout.strip() == SIGNER, signer.stdout + signer.stderr

    faults(cli, cluster, "secure-boot")
    assert on("mokutil", "--sb-state").stdout.strip() == "SecureBoot enabled"
    # The module unsigned where dkms built it and where it installed it (an unsigned build:
    # dkms status still says installed, so nothing rebuilds it). The signed files are kept
    # outside the modules' directories.
    built = on("sh", "-c", f"ls /var/lib/dkms/nvidia/*/{kernel}/*/module/{UNSIGNED}.ko")
    assert built.returncode == 0, built.stderr
    copies = {module: "/root/installed.signed", built.stdout.strip(): "/root/built.signed"}
    for path, keep in copies.items():
        assert on("cp", "-p", path, keep).returncode == 0
        stripped = on("python3", "-c", STRIP, path)
        assert stripped.returncode == 0, stripped.stderr
    assert on("modinfo", "-F", "signer", module).stdout.strip() == ""

    out = cli("up", "--inventory", str(cluster), "--yes", "--skip-smoke", "--limit", NODE)
    assert out.returncode != 0, out.stdout[-3000:]
    check = signature_check(newest_report(runs_dir), kernel)
    assert check["status"] == "fail", check
    # measured: "nvidia: <signer>, nvidia-uvm: <signer or nothing>, ..."
    assert f"nvidia: {SIGNER}" in check["measured"], check
    assert f"{UNSIGNED}: {SIGNER}" not in check["measured"], check
    assert f"kernel {kernel}: {UNSIGNED} carries no signature" in check["detail"], check
    # The role asked for the key's enrolment: pending until the console confirms it.
    assert "whose enrolment is pending" in check["detail"], check
    assert "confirm the enrolment at the MokManager console" in check["detail"], check
    listed = on("mokutil", "--list-new").stdout
    assert "CN = DKMS module signing key" in listed, listed
    # The hash is in no file of the run, and the node kept no copy of it.
    leaked = [str(f) for f in runs_dir.rglob("*")
              if f.is_file() and CONSOLE_HASH.encode() in f.read_bytes()]
    assert leaked == [], leaked
    assert on("sh", "-c", "ls /tmp/*.mokhash 2>/dev/null").stdout == ""

    # Signed again; the request confirmed at the console, the node rebooted.
    for path, keep in copies.items():
        assert on("mv", keep, path).returncode == 0
    faults(cli, cluster, "secure-boot", "mok-enrolled")
    reboot()
    tested = on("mokutil", "--test-key", "/var/lib/dkms/mok.pub")
    assert "is already enrolled" in tested.stdout, tested.stdout + tested.stderr

    out = cli("up", "--inventory", str(cluster), "--yes", "--skip-smoke", "--limit", NODE)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    check = signature_check(newest_report(runs_dir), kernel)
    assert check["status"] == "pass", check
    assert check["measured"].count(f": {SIGNER}") == 5, check  # all five modules
    assert "(enrolled)" in check["detail"], check
