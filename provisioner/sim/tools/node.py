"""The simulated node's own files, shared by the controller (which writes them) and the
stand-in tools (which read them on the node).

Standard library only: it is bundled into the stand-ins (see ``provisioner.sim.bundle``), which
run on the node's python3. ``GPU_SIM_ROOT`` (default ``/``) relocates every path, so tests run
the stand-ins against a temporary directory.
"""

from __future__ import annotations

import os

PROFILE_FILE = "/etc/gpu-sim/profile.json"
FAULTS_FILE = "/etc/gpu-sim/faults"
KERNEL_LOG = "/var/lib/gpu-sim/dmesg"
IB_SYSFS = "/var/lib/gpu-sim/sysfs/class/infiniband"
# The PCI functions of the GPUs and HCAs (their PCIe AER counters), as /sys/bus/pci/devices.
PCI_SYSFS = "/var/lib/gpu-sim/sysfs/bus/pci/devices"
DRIVER_VERSION_FILE = "/usr/lib/gpu-sim/driver-version"
# The version of the NVIDIA module the node's kernel has loaded (what /sys/module/nvidia/version
# says on a real node): volatile like sysfs, so a reboot loads the installed driver's module.
# The driver package loads it at install when none is loaded; a driver change on a node whose
# module is loaded leaves the old one until the next boot (gpu-sim-boot).
MODULE_VERSION_FILE = "/run/gpu-sim/module/nvidia/version"
# The loaded module's banner, what /proc/driver/nvidia/version says on a real node (a container's
# /proc cannot hold it): written with MODULE_VERSION_FILE when the module loads, in the flavour
# the installed kernel module package names (MODULE_FLAVOR_FILE) at that moment.
PROC_VERSION_FILE = "/run/gpu-sim/proc/driver/nvidia/version"
MODULE_FLAVOR_FILE = "/usr/lib/gpu-sim/module-flavor"
CUDA_VERSION_FILE = "/usr/lib/gpu-sim/cuda-version"
PERSISTENCE_FILE = "/var/lib/gpu-sim/persistence"
# Every GPU reset (nvidia-smi -r) the node took: "<unix time> <PCI bus id>" lines, so a test can
# tell that a reset happened and when.
RESET_LOG = "/var/lib/gpu-sim/resets"
# Load the stand-in dcgm-exporter reports: "<gpu index|all> util=95 temp=88 fb_used=70000
# power=650" lines (tests write it to drive the alerts).
GPU_LOAD_FILE = "/var/lib/gpu-sim/gpu-load"

# Bus numbers of the GPU baseboard on common 8-GPU HGX servers, in enumeration order; GPUs past
# the eighth get 0xE0 + slot. The simulated lspci, kernel log and nvidia-smi all use them.
HGX_BUS_NUMBERS = (0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB)


def gpu_bus(slot: int) -> int:
    """The PCI bus number of the GPU in physical slot ``slot``."""
    return HGX_BUS_NUMBERS[slot] if slot < len(HGX_BUS_NUMBERS) else 0xE0 + slot


def sim_path(path: str) -> str:
    """``path`` (absolute on the node) under ``GPU_SIM_ROOT``."""
    return os.path.join(os.environ.get("GPU_SIM_ROOT") or "/", path.lstrip("/"))


def read_text(path: str) -> str | None:
    """The text of a node file, or None when it does not exist."""
    try:
        with open(sim_path(path), encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def load_module_sh(indent: str = "") -> str:
    """Shell lines that load the installed driver's module: its version, and its banner in the
    two formats real drivers print (open: "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04
    Release Build", as a lent H200 showed; proprietary: "NVIDIA UNIX x86_64 Kernel Module
    535.161.08  <build date>")."""
    lines = [
        f"mkdir -p {MODULE_VERSION_FILE.rsplit('/', 1)[0]} {PROC_VERSION_FILE.rsplit('/', 1)[0]}",
        f"cp {DRIVER_VERSION_FILE} {MODULE_VERSION_FILE}",
        f"v=$(cat {DRIVER_VERSION_FILE}); m=$(uname -m)",
        f'if [ "$(cat {MODULE_FLAVOR_FILE} 2>/dev/null)" = open ]; then',
        '  b="NVIDIA UNIX Open Kernel Module for $m  $v  Release Build  (SIMULATED)"',
        "else",
        '  b="NVIDIA UNIX $m Kernel Module  $v  SIMULATED"',
        "fi",
        f'printf "NVRM version: %s\\nGCC version:  SIMULATED\\n" "$b" > {PROC_VERSION_FILE}',
    ]
    return "".join(f"{indent}{line}\n" for line in lines)
