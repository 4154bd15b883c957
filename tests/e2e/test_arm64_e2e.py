"""An aarch64 GPU node: one emulated arm64 node (qemu-user-static under podman, Debian 12
userland) with the GB200 compute tray's profile, its own cluster. `up` (without the smoke job:
the wheelhouse serves no simulated aarch64 build) installs the stack from NVIDIA's sbsa
repository layout, and validate passes against the profile. Emulated Ansible runs several
times slower than on an amd64 node: extended tier."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import newest_report, node_diagnostics, podman_exec

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e

NODE = "sim-gpu-1"
PROFILE = "sim-gb200-4gpu"


@pytest.fixture(scope="module")
def arm64(cli: Cli, tmp_path_factory: pytest.TempPathFactory) -> Path:
    inv = tmp_path_factory.mktemp("inv-arm64")
    out = cli("sim", "up", "--arch", "arm64", "--profile", PROFILE, "--nodes", "1",
              "--inventory-dir", str(inv), "--recreate")
    assert out.returncode == 0, out.stderr + out.stdout
    return inv


def test_the_node_is_an_aarch64_machine(arm64: Path) -> None:
    out = podman_exec(NODE, "uname -m; dpkg --print-architecture")
    assert out.stdout.split() == ["aarch64", "arm64"], out.stdout + out.stderr


def test_up_installs_from_the_sbsa_repository_and_validates(cli: Cli, arm64: Path,
                                                           runs_dir: Path) -> None:
    out = cli("up", "--inventory", str(arm64), "--yes", "--skip-smoke")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr + node_diagnostics()
    report = newest_report(runs_dir)
    [arch] = [c for c in report["checks"] if c["host"] == NODE and c["name"] == "architecture"]
    assert (arch["status"], arch["measured"]) == ("pass", "aarch64"), arch
    # The driver role holds the arm64 kernel flavour's metapackages with the running kernel's.
    held = report["hosts"][NODE]["facts"]["nvidia_driver"]["kernel_hold_wanted"]
    assert "linux-image-arm64" in held, held
    sources = podman_exec(NODE, "cat /etc/apt/sources.list.d/* 2>/dev/null").stdout
    assert "/cuda/debian12/sbsa/" in sources, sources
    arches = podman_exec(NODE, "dpkg-query -W -f='${Package} ${Architecture}\\n' "
                         "cuda-drivers* nvidia-container-toolkit-base 2>/dev/null").stdout
    assert arches and all(line.split()[-1] in ("arm64", "all") for line in arches.splitlines()), \
        arches
    assert report["outcome"] == "passed", report["outcome"]
    gpu = [c for c in report["checks"] if c["host"] == NODE and c["phase"] == "gpu_validate"]
    assert len([c for c in gpu if c["status"] == "pass"]) >= 4, gpu  # e.g. gpu_count, each GPU
    assert not [c for c in gpu if c["status"] == "fail"], gpu
