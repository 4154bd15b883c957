"""`provisioner health` through the real entry point, ansible-runner and playbooks/health.yml on
local hosts whose gpuc-health answers from simulated nodes: one table, exit = worst node."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from provisioner.sim.bundle import tool_script
from tests.health.conftest import LIB, PROGRAM, Node
from tests.integration.test_cli import BIN


def install(prefix: Path, node: Node) -> None:
    """gpuc-health under PREFIX/sbin, pointed at the simulated node (a test shim: the role
    installs the program itself with the expectations at their real path)."""
    node.write()
    (prefix / "sbin").mkdir(parents=True)
    args = [sys.executable, str(PROGRAM), "--expectations", str(node.root / "expected.json"),
            "--kernel-log", str(node.root / "dmesg"), "--ib-sysfs-root", str(node.root / "ib"),
            "--cuda-root", str(node.root / "cuda"), "--nccl-header", str(node.root / "nccl.h")]
    shim = prefix / "sbin" / "gpuc-health"
    shim.write_text(
        "#!/bin/sh\n"
        f"export GPU_SIM_ROOT={shlex.quote(str(node.root))} "
        f"GPUC_HEALTH_LIB={shlex.quote(str(LIB))} PATH={shlex.quote(str(node.bin))}:$PATH\n"
        f"exec {shlex.join(args)} \"$@\"\n")
    shim.chmod(0o755)


def test_health_table_and_worst_exit(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    for module, name, params in (("nvidia_smi", "nvidia-smi", {}),
                                 ("dcgmi", "dcgmi", {"version": "4.2.3"})):
        (tools / name).write_bytes(tool_script(module, **params))
        (tools / name).chmod(0o755)
    prefixes = {}
    for name, faults in (("gpu-a", []), ("gpu-b", ["gpu3-nvlink-down"]), ("gpu-c", None)):
        prefix = tmp_path / name
        prefix.mkdir()
        prefixes[name] = prefix
        if faults is None:
            continue  # gpuc-health not installed there
        bin_dir = tmp_path / f"{name}-bin"
        bin_dir.mkdir()
        for tool in tools.iterdir():
            (bin_dir / tool.name).symlink_to(tool)
        install(prefix, Node(root=tmp_path / f"{name}-node", bin=bin_dir, faults=faults))
    hosts = "".join(f"        {name}: {{gpu_profile: sim-h100-8gpu, node_health_prefix: {p}}}\n"
                    for name, p in prefixes.items())
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        f"  children:\n    gpu_nodes:\n      hosts:\n{hosts}")
    env = {**os.environ, "PROVISIONER_RUNS_DIR": str(tmp_path / "runs")}
    done = subprocess.run([BIN, "health", "--inventory", str(inventory), "--json"],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    data = json.loads(done.stdout)
    by = {n["host"]: n for n in data["nodes"]}
    assert by["gpu-a"]["status_name"] == "healthy", by["gpu-a"]
    assert by["gpu-b"]["status_name"] == "unhealthy"
    assert set(by["gpu-b"]["failing"]) == {"gpu3_nvlink", "dcgm_health"}
    assert "all NVLinks inactive" in by["gpu-b"]["detail"]
    assert by["gpu-c"]["status"] == 3 and "not installed" in by["gpu-c"]["detail"]

    table = subprocess.run([BIN, "health", "--inventory", str(inventory), "--limit",
                            "gpu-a,gpu-b"], capture_output=True, text=True, timeout=300,
                           env=env, check=False)
    assert table.returncode == 2, table.stdout + table.stderr
    assert "gpu3_nvlink" in table.stdout and "worst: unhealthy (exit 2)" in table.stdout
    assert "gpu-c" not in table.stdout
