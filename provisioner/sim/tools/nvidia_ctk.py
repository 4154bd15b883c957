"""SIMULATED nvidia-ctk (gpu-cluster-provisioner): the subset the roles call.

``cdi generate --output=F`` writes a CDI spec for the simulated GPUs of /etc/gpu-sim/profile.json
(minus gpuN-missing faults); ``cdi list`` lists the devices of /etc/cdi/nvidia.yaml. Installed as
``/usr/bin/nvidia-ctk`` by a simulated container toolkit package, bundled with its version (see
provisioner.sim.bundle).
"""

from __future__ import annotations

import json
import os
import re
import sys

from provisioner.sim.faults import read_fault_file
from provisioner.sim.tools.node import FAULTS_FILE, PROFILE_FILE, read_text

CDI_SPEC = "/etc/cdi/nvidia.yaml"


def gpus() -> list[int]:
    """The indexes of the GPUs present: the profile's, minus the missing ones."""
    try:
        count = int(json.loads(read_text(PROFILE_FILE) or "").get("gpu_count", 0))
    except (OSError, ValueError):
        return []
    faults = read_fault_file(read_text(FAULTS_FILE) or "")
    missing = {fault.gpu for fault in faults if fault.kind.key == "missing"}
    return [i for i in range(count) if i not in missing]


def spec() -> str:
    lines = ["---", "# SIMULATED CDI spec written by the simulated nvidia-ctk",
             'cdiVersion: "0.5.0"', "kind: nvidia.com/gpu", "devices:"]
    present = gpus()
    for i in present:
        lines += [f'  - name: "{i}"', "    containerEdits:", "      deviceNodes:",
                  f"        - path: /dev/nvidia{i}"]
    lines += ["  - name: all", "    containerEdits:", "      deviceNodes:"]
    lines += [f"        - path: /dev/nvidia{i}" for i in present]
    lines += ["containerEdits:", "  deviceNodes:", "    - path: /dev/nvidiactl",
              "    - path: /dev/nvidia-uvm"]
    return "\n".join(lines) + "\n"


def cdi_generate(args: list[str]) -> int:
    out = None
    for i, arg in enumerate(args):
        if arg.startswith("--output="):
            out = arg.split("=", 1)[1]
        elif arg == "--output" and i + 1 < len(args):
            out = args[i + 1]
    text = spec()
    if out:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0


def cdi_list() -> int:
    try:
        with open(CDI_SPEC, encoding="utf-8") as handle:
            names = re.findall(r'^  - name: "?([^"\n]+)"?$', handle.read(), re.M)
    except OSError:
        names = []
    sys.stdout.write(f"INFO[0000] Found {len(names)} CDI devices\n")
    sys.stdout.writelines(f"nvidia.com/gpu={name}\n" for name in names)
    return 0


def main(argv: list[str], version: str) -> int:
    if not argv or argv[0] in ("-v", "--version"):
        sys.stdout.write(f"NVIDIA Container Toolkit CLI version {version} (SIMULATED)\n")
        return 0
    if argv[:2] == ["cdi", "generate"]:
        return cdi_generate(argv[2:])
    if argv[:2] == ["cdi", "list"]:
        return cdi_list()
    sys.stderr.write(f"nvidia-ctk (SIMULATED): unsupported command: {' '.join(argv)}\n")
    return 2
