"""Faults a node meets at boot, on the simulated cluster: another process (unattended-upgrades
right after boot, on a real fleet) holds dpkg's frontend lock while `up` has a package to
install. The install must wait for the lock (DPkg::Lock::Timeout in pinned_packages, the apt
module's lock_timeout) instead of failing at once with the last line of apt's stderr."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]

# Pending: written at the end of a session and not run yet on the simulated cluster (the module's
# lock handling is covered by tests/unit/test_pinned_packages_module.py); `make e2e-pending`.
pytestmark = [pytest.mark.e2e, pytest.mark.pending]

NODE = "sim-gpu-1"
HOLD_S = 40
# What unattended-upgrades does: an fcntl write lock on dpkg's frontend lock (apt and dpkg use
# fcntl locks, so python's lockf is the same lock), held for HOLD_S seconds.
HOLDER = (
    "import fcntl, time\n"
    "f = open('/var/lib/dpkg/lock-frontend', 'w')\n"
    "fcntl.lockf(f, fcntl.LOCK_EX)\n"
    "open('/run/gpuc-e2e-lock-held', 'w').write(repr(time.time()))\n"
    f"time.sleep({HOLD_S})\n"
    "open('/run/gpuc-e2e-lock-released', 'w').write(repr(time.time()))\n"
)


def node_sh(script: str, *, detach: bool = False) -> str:
    podman = shutil.which("podman") or "podman"
    cmd = [podman, "exec", *(["-d"] if detach else []), NODE, "sh", "-c", script]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, f"{script!r}: {out.stderr}"
    return out.stdout


def test_a_held_dpkg_lock_is_waited_for(cli: Cli, healthy_cluster: Path, runs_dir: Path) -> None:
    # A package of the stack is missing, so `up` has something to install on this node.
    node_sh("apt-mark unhold libnccl-dev >/dev/null && DEBIAN_FRONTEND=noninteractive "
            "apt-get remove -y -q libnccl-dev >/dev/null && rm -f /run/gpuc-e2e-lock-*")
    node_sh(f"exec python3 -c \"{HOLDER}\"", detach=True)
    deadline = time.monotonic() + 30
    while "held" not in node_sh("test -e /run/gpuc-e2e-lock-held && echo held || true"):
        assert time.monotonic() < deadline, "the lock holder did not start"
        time.sleep(0.5)
    out = cli("up", "--inventory", str(healthy_cluster), "--yes", "--skip-smoke",
              "--limit", NODE)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    released = float(node_sh("cat /run/gpuc-e2e-lock-released"))
    installed = float(node_sh("stat -c %Y /var/lib/dpkg/info/libnccl-dev.list"))
    assert installed >= int(released), (installed, released)
    report = newest_report(runs_dir)
    stack = next(p for p in report["phases"] if p["name"] == "stack")
    assert stack["ok"] and stack["changed"] >= 1
    checks = {(c["host"], c["name"]): c for c in report["checks"] if c["phase"] == "stack"}
    assert checks[(NODE, "nccl")]["status"] == "pass"
