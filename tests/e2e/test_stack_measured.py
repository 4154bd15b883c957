"""Every stack check compares what a node measures with what the plan decided, and fails on a
node whose installed state differs: headers and tools rewritten in a running node with
`podman exec`, and the simulator's faults for nvcc and the driver. The tests share one 3-node
cluster of the session (one login node, sim-gpu-1, sim-gpu-2); each injection is undone before
the next test.

Not covered here: stack:fabricmanager measures the installed package, which `up` re-converges
before it measures, so a node cannot be left with another fabric manager version (its failure
is covered by the unit tests of the judge)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from provisioner.judge import first_three, upstream
from tests.e2e.conftest import FirstUp, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.e2e

GPU_NODES = ("sim-gpu-1", "sim-gpu-2")
# The checks every GPU node of the sim-h100-8gpu profile (NVSwitch: fabric manager) gets.
STACK_CHECKS = {"driver", "driver_loaded", "driver_kernels", "fabricmanager", "nvcc_release",
                "cuda_toolkit", "cudnn", "nccl", "nccl_consistent", "container_toolkit", "dcgm",
                "cdi_devices"}
CUDNN_HEADER = "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h"


def podman_exec(node: str, script: str) -> None:
    podman = shutil.which("podman") or "podman"
    out = subprocess.run([podman, "exec", node, "sh", "-c", script], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, f"podman exec {node} {script!r}: {out.stderr}"


@contextmanager
def altered(node: str, path: str, change: str) -> Iterator[None]:
    """Keep a copy of `path` on `node`, run `change` (a shell command), restore it after."""
    keep = shlex.quote(path + ".e2e-orig")
    podman_exec(node, f"cp -p {shlex.quote(path)} {keep} && {change}")
    try:
        yield
    finally:
        podman_exec(node, f"mv -f {keep} {shlex.quote(path)}")


def macro(path: str, name: str, value: str) -> str:
    return f"sed -i 's/^#define {name} .*/#define {name} {value}/' {shlex.quote(path)}"


def wrapper(path: str, version_line: str) -> str:
    """Replace a tool by one that answers --version with `version_line` and otherwise runs the
    original (kept next to it by `altered`)."""
    script = (f'#!/bin/sh\nif [ "$1" = --version ]; then echo "{version_line}"; exit 0; fi\n'
              f'exec {path}.e2e-orig "$@"\n')
    return f"printf %s {shlex.quote(script)} > {shlex.quote(path)} && chmod 755 {shlex.quote(path)}"


def stack_checks(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["host"], c["name"]): c for c in report["checks"] if c["phase"] == "stack"}


def planned(report: dict[str, Any], host: str) -> dict[str, str]:
    stack: dict[str, str] = report["hosts"][host]["stack"]
    return stack


@pytest.fixture
def inventory(healthy_cluster: Path) -> Path:
    return healthy_cluster


def test_a_healthy_node_measures_what_the_plan_says(first_up: FirstUp) -> None:
    report = first_up.report
    checks = stack_checks(report)
    for host in GPU_NODES:
        names = {name for h, name in checks if h == host}
        # One module signature check per kernel with NVIDIA modules (the running one here).
        signed = {n for n in names if n.startswith("module_signatures:")}
        assert len(signed) == 1, (host, signed)
        assert names - signed == STACK_CHECKS, host
        assert all(checks[(host, n)]["status"] == "pass" for n in names), checks
        plan = planned(report, host)
        assert checks[(host, "nccl")]["measured"] == upstream(plan["nccl_version"])
        assert checks[(host, "cudnn")]["measured"] == first_three(plan["cudnn_version"])
        assert checks[(host, "nvcc_release")]["measured"] == plan["cuda_version"]
        assert checks[(host, "driver")]["measured"] == plan["nvidia_driver_version"]
        facts = report["hosts"][host]["facts"]
        assert facts["nccl"]["version"] == upstream(plan["nccl_version"])
        assert facts["cuda_toolkit"]["version"] == plan["cuda_toolkit_version"]


# (node, file, change, the check that must fail, measured value from the planned stack).
INJECTIONS: list[tuple[str, str, Callable[[str], str], str, Callable[[dict[str, str]], str]]] = [
    ("sim-gpu-2", "/usr/include/nccl.h", lambda p: macro(p, "NCCL_PATCH", "99"), "nccl",
     lambda plan: ".".join(upstream(plan["nccl_version"]).split(".")[:2]) + ".99"),
    ("sim-gpu-1", CUDNN_HEADER, lambda p: macro(p, "CUDNN_PATCHLEVEL", "99"), "cudnn",
     lambda plan: ".".join(first_three(plan["cudnn_version"]).split(".")[:2]) + ".99"),
    ("sim-gpu-2", "/usr/bin/nvidia-ctk",
     lambda p: wrapper(p, "NVIDIA Container Toolkit CLI version 0.0.99"), "container_toolkit",
     lambda plan: "0.0.99"),
    ("sim-gpu-1", "/usr/bin/dcgmi", lambda p: wrapper(p, "dcgmi  version: 0.0.99"), "dcgm",
     lambda plan: "0.0.99"),
]


@pytest.mark.parametrize(("node", "path", "change", "check", "bad"), INJECTIONS,
                         ids=[i[3] for i in INJECTIONS])
def test_a_node_with_another_version_fails_that_check(
        cli: Cli, inventory: Path, runs_dir: Path, node: str, path: str,
        change: Callable[[str], str], check: str,
        bad: Callable[[dict[str, str]], str]) -> None:
    with altered(node, path, change(path)):
        out = cli("up", "--inventory", str(inventory), "--yes", "--skip-smoke")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr
    report = newest_report(runs_dir)
    checks = stack_checks(report)
    failed = checks[(node, check)]
    plan = planned(report, node)
    assert failed["status"] == "fail", failed
    assert failed["measured"] == bad(plan)
    assert failed["measured"] != failed["expected"]
    other = next(h for h in GPU_NODES if h != node)
    assert checks[(other, check)]["status"] == "pass"
    # The role fails the host too (plain ansible-playbook runs see it), after publishing.
    stack = next(p for p in report["phases"] if p["name"] == "stack")
    assert not stack["ok"] and {f["host"] for f in stack["failures"]} == {node}
    if check == "nccl":
        consistent = checks[(other, "nccl_consistent")]
        assert consistent["status"] == "fail" and bad(plan) in consistent["detail"]


def test_nvcc_and_driver_of_other_versions_fail_their_checks(
        cli: Cli, inventory: Path, runs_dir: Path) -> None:
    out = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(inventory),
              "--fault", "sim-gpu-1:driver-other-version",
              "--fault", "sim-gpu-2:nvcc-other-version")
    assert out.returncode == 0, out.stderr + out.stdout
    out = cli("up", "--inventory", str(inventory), "--yes", "--skip-smoke")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr
    report = newest_report(runs_dir)
    checks = stack_checks(report)
    failed = {(h, n): c for (h, n), c in checks.items() if c["status"] == "fail"}
    driver = [failed[k] for k in (("sim-gpu-1", "driver"), ("sim-gpu-1", "driver_loaded"))
              if k in failed]
    assert driver, checks
    assert all(c["measured"] != c["expected"] for c in driver)
    assert {c["expected"] for c in driver} == {planned(report, "sim-gpu-1")["nvidia_driver_version"]}
    nvcc = [failed[k] for k in (("sim-gpu-2", "nvcc_release"), ("sim-gpu-2", "cuda_toolkit"))
            if k in failed]
    assert nvcc, checks
    assert all(c["measured"] and c["measured"] != c["expected"] for c in nvcc)
    # Each fault is that node's: the other node's checks for the same component pass.
    assert checks[("sim-gpu-2", "driver")]["status"] == "pass"
    assert checks[("sim-gpu-1", "nvcc_release")]["status"] in ("pass", "skip")


def test_a_fourth_generation_nvswitch_node_gets_nvlsm_and_ib_umad(
        cli: Cli, inventory: Path, tmp_path: Path) -> None:
    """The plan of an HGX B200 node asks the fabric manager role for the NVLink subnet manager
    and ib_umad (unit tests prove the plan does). Here sim-gpu-1's plan is given those inputs:
    the role installs nvlsm from the mirror with libibumad and infiniband-diags, lists ib_umad
    for boot (a container cannot load a module into its host's kernel, and says so), and a plan
    without them takes the boot-time file away again."""
    import os
    import sys

    import yaml

    root = Path(__file__).resolve().parents[2]
    playbook = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent))
    assert playbook, "ansible-playbook is not in the virtualenv"
    plan = tmp_path / "plan.yml"
    assert cli("plan", "--inventory", str(inventory), "-o", str(plan)).returncode == 0
    data = yaml.safe_load(plan.read_text())
    host = data["all"]["hosts"]["sim-gpu-1"]
    assert host["nvidia_fabricmanager_nvlsm_enabled"] is False  # the H100 profile's plan
    host["nvidia_fabricmanager_nvlsm_enabled"] = True
    host["nvidia_fabricmanager_nvlsm_packages"] = {
        "apt": ["nvlsm", "libibumad3", "infiniband-diags"],
        "apt_ubuntu": ["nvlsm", "libibumad3", "infiniband-diags"],
        "dnf": ["nvlsm", "libibumad", "infiniband-diags"]}
    host["nvidia_fabricmanager_kernel_modules"] = ["ib_umad"]
    nvl5 = tmp_path / "plan-nvl5.yml"
    nvl5.write_text(yaml.safe_dump(data))

    def stack(plan_file: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [playbook, "-i", str(inventory / "hosts.yml"), "-i", str(plan_file), "--limit",
             "sim-gpu-1", "--tags", "nvidia_repo,nvidia_fabricmanager", "playbooks/stack.yml"],
            cwd=root, capture_output=True, text=True, timeout=1200, check=False,
            env={**os.environ, "ANSIBLE_CONFIG": str(root / "ansible.cfg")})

    podman = shutil.which("podman") or "podman"

    def on_node(script: str) -> str:
        return subprocess.run([podman, "exec", "sim-gpu-1", "sh", "-c", script],
                              capture_output=True, text=True, timeout=120, check=False).stdout

    out = stack(nvl5)
    try:
        assert out.returncode == 0, out.stdout[-4000:]
        assert on_node("dpkg-query -W -f='${Version}' nvlsm") == "2025.06.10-1"
        assert "install ok installed" in on_node("dpkg-query -W -f='${Status}' libibumad3")
        assert "ib_umad" in on_node("cat /etc/modules-load.d/nvidia-fabricmanager.conf")
    finally:
        back = stack(plan)
        on_node("DEBIAN_FRONTEND=noninteractive apt-get remove -y -q nvlsm")
    assert back.returncode == 0, back.stdout[-4000:]
    assert on_node("test -e /etc/modules-load.d/nvidia-fabricmanager.conf || echo gone") == "gone\n"
