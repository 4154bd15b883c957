"""Node-side measurement without a cluster: `gpuc-health --quick` (what Slurm's Prolog runs before
each job) against the full check, as fresh processes, on a simulated 8-GPU node (the
simulator's nvidia-smi and dcgmi, its RDMA and PCI sysfs trees, under a temporary directory).

SIMULATED: the nvidia-smi here is the simulator's Python stand-in; on a real node the time is the
driver's `nvidia-smi -q -x`, which this does not measure.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "roles" / "node_health" / "files" / "gpuc_health.py"
LIB = ROOT / "plugins" / "module_utils"
PROFILE = "sim-h100-8gpu"


def _simulated_node(root: Path) -> tuple[dict[str, str], list[str]]:
    """A simulated healthy node under ``root``: the environment and arguments gpuc-health needs
    to read it."""
    from provisioner.profiles import load_profiles
    from provisioner.sim.bundle import tool_script
    from provisioner.sim.faults import kernel_log
    from provisioner.sim.sysfs import write_ib_sysfs, write_pci_sysfs

    profile = load_profiles()[PROFILE].sim_json()
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    for module, name, params in (("nvidia_smi", "nvidia-smi", {}),
                                 ("dcgmi", "dcgmi", {"version": "4.2.3"})):
        (bin_dir / name).write_bytes(tool_script(module, **params))
        (bin_dir / name).chmod(0o755)
    systemctl = bin_dir / "systemctl"
    systemctl.write_text("#!/bin/sh\necho active\n")
    systemctl.chmod(0o755)
    node = dict(profile, hostname="bench-node")
    for sub, name, text in (("etc/gpu-sim", "profile.json", json.dumps(node)),
                            ("etc/gpu-sim", "faults", ""),
                            ("usr/lib/gpu-sim", "driver-version", "580.95.05\n"),
                            ("usr/lib/gpu-sim", "cuda-version", "13.0\n"),
                            ("var/lib/gpu-sim", "persistence", "Enabled\n")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / name).write_text(text)
    (root / "dmesg").write_text(kernel_log([]))
    write_pci_sysfs(root / "pci", node, [])
    write_ib_sysfs(root / "ib", node, [], pci_root=root / "pci")
    (root / "expected.json").write_text(json.dumps({"expected": profile, "stack": {
        "name": "cuda-13.0", "driver_version": "580.95.05"}}))
    env = {**os.environ, "GPU_SIM_ROOT": str(root), "GPUC_HEALTH_LIB": str(LIB),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    args = ["--json", "--expectations", str(root / "expected.json"), "--state", "",
            "--kernel-log", str(root / "dmesg"), "--ib-sysfs-root", str(root / "ib"),
            "--pci-sysfs-root", str(root / "pci")]
    return env, args


def quick_bench(repeat: int = 5) -> dict[str, Any]:
    """Process wall seconds of each mode (best and median of ``repeat``, alternating), and how
    many checks each judged."""
    with tempfile.TemporaryDirectory(prefix="gpuc-bench-health-") as tmp:
        env, args = _simulated_node(Path(tmp))
        walls: dict[str, list[float]] = {"quick": [], "full": []}
        checks: dict[str, int] = {}
        for _ in range(repeat):
            for mode, extra in (("quick", ["--quick"]), ("full", [])):
                started = time.perf_counter()
                done = subprocess.run([sys.executable, str(PROGRAM), *args, *extra], env=env,
                                      capture_output=True, text=True, timeout=120, check=False)
                walls[mode].append(time.perf_counter() - started)
                result = json.loads(done.stdout)
                if result["status"] != 0:
                    raise RuntimeError(f"gpuc-health {mode} on the simulated node: "
                                       f"{result['status_name']}: {done.stdout[-1000:]}")
                checks[mode] = len(result["checks"])
    return {"profile": PROFILE, "repeat": repeat,
            **{f"{mode}_best_s": round(min(w), 3) for mode, w in walls.items()},
            **{f"{mode}_median_s": round(statistics.median(w), 3) for mode, w in walls.items()},
            **{f"{mode}_checks": n for mode, n in checks.items()}}
