"""Run the node's gpuc-health program as the node_health role installs it: the program file plus
the collection's module_utils/gpucluster package as its library, against the simulator's
stand-in nvidia-smi and dcgmi (bundled as the simulated packages install them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from provisioner.profiles import load_profiles
from provisioner.sim.bundle import tool_script
from provisioner.sim.faults import kernel_log as sim_kernel_log
from provisioner.sim.faults import parse_faults
from provisioner.sim.sysfs import write_ib_sysfs, write_pci_sysfs

PROJECT = Path(__file__).resolve().parents[2]
PROGRAM = PROJECT / "roles" / "node_health" / "files" / "gpuc_health.py"
LIB = PROJECT / "plugins" / "module_utils"
PROFILE = load_profiles()["sim-h100-8gpu"]
STACK = {"name": "cuda-13.0", "driver_version": "580.95.05", "cuda_version": "13.0",
         "nccl_version": "2.27.7"}


@dataclass
class Node:
    """A simulated node under ``root`` and the program's options pointing at it."""

    root: Path
    bin: Path
    faults: list[str] = field(default_factory=list)
    fabricmanager: str = "active"
    expected: dict[str, Any] = field(default_factory=dict)
    stack: dict[str, Any] = field(default_factory=lambda: dict(STACK))

    def write(self) -> None:
        data = dict(PROFILE.sim_json(), hostname="node-a")
        (self.root / "etc/gpu-sim").mkdir(parents=True, exist_ok=True)
        (self.root / "usr/lib/gpu-sim").mkdir(parents=True, exist_ok=True)
        (self.root / "etc/gpu-sim/profile.json").write_text(json.dumps(data))
        (self.root / "etc/gpu-sim/faults").write_text("".join(f + "\n" for f in self.faults))
        (self.root / "usr/lib/gpu-sim/driver-version").write_text("580.95.05\n")
        (self.root / "usr/lib/gpu-sim/cuda-version").write_text("13.0\n")
        # Persistence on, as nvidia-persistenced leaves it on a node after bring-up.
        (self.root / "var/lib/gpu-sim").mkdir(parents=True, exist_ok=True)
        (self.root / "var/lib/gpu-sim/persistence").write_text("Enabled\n")
        faults = parse_faults(self.faults)
        (self.root / "dmesg").write_text(sim_kernel_log(faults))
        ib, pci = self.root / "ib", self.root / "pci"
        if not ib.exists():  # written once: a test edits a counter between two runs
            write_pci_sysfs(pci, data, self.faults)
            write_ib_sysfs(ib, data, self.faults, pci_root=pci)
        cuda = self.root / "cuda"
        cuda.mkdir(exist_ok=True)
        (cuda / "version.json").write_text('{"cuda": {"name": "CUDA SDK", "version": "13.0.2"}}')
        (self.root / "nccl.h").write_text("#define NCCL_MAJOR 2\n#define NCCL_MINOR 27\n"
                                          "#define NCCL_PATCH 7\n")
        systemctl = self.bin / "systemctl"
        systemctl.write_text(f"#!/bin/sh\necho {self.fabricmanager}\n"
                             f"[ {self.fabricmanager} = active ]\n")
        systemctl.chmod(0o755)
        expected = {**PROFILE.sim_json(), **self.expected}
        (self.root / "expected.json").write_text(json.dumps({"expected": expected,
                                                            "stack": self.stack}))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        self.write()
        env = {**os.environ, "GPU_SIM_ROOT": str(self.root), "GPUC_HEALTH_LIB": str(LIB),
               "PATH": f"{self.bin}:{os.environ['PATH']}"}
        return subprocess.run(
            [sys.executable, str(PROGRAM), "--expectations", str(self.root / "expected.json"),
             "--state", str(self.root / "state/state.json"),
             "--kernel-log", str(self.root / "dmesg"), "--ib-sysfs-root", str(self.root / "ib"),
             "--pci-sysfs-root", str(self.root / "pci"),
             "--cuda-root", str(self.root / "cuda"), "--nccl-header", str(self.root / "nccl.h"),
             *args],
            env=env, capture_output=True, text=True, timeout=60, check=False)

    def json(self, *args: str) -> tuple[int, dict[str, Any]]:
        done = self.run("--json", *args)
        assert done.stderr == "", done.stderr
        return done.returncode, json.loads(done.stdout)


@pytest.fixture(scope="session")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nvidia-smi and dcgmi as the simulated driver and DCGM packages install them."""
    out = tmp_path_factory.mktemp("bin")
    for module, name, params in (("nvidia_smi", "nvidia-smi", {}),
                                 ("dcgmi", "dcgmi", {"version": "4.2.3"})):
        (out / name).write_bytes(tool_script(module, **params))
        (out / name).chmod(0o755)
    return out


@pytest.fixture
def sim_node(tmp_path: Path, tools: Path) -> Callable[..., Node]:
    def make(*faults: str, **kw: Any) -> Node:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        for tool in tools.iterdir():
            target = bin_dir / tool.name
            if not target.exists():
                target.symlink_to(tool)
        return Node(root=tmp_path / "node", bin=bin_dir, faults=list(faults), **kw)

    return make
