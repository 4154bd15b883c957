"""The simulated node's own files, shared by the controller (which writes them) and the
stand-in tools (which read them on the node).

Standard library only: it is bundled into the stand-ins (see ``provisioner.sim.bundle``), which
run on the node's python3. ``GPU_SIM_ROOT`` (default ``/``) relocates every path, so tests run
the stand-ins against a temporary directory.
"""

from __future__ import annotations

import json
import os
from typing import Any

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
# MIG mode of each GPU: "<slot> Enabled|Disabled" lines. An A100 keeps it on the GPU ("MIG mode is
# persistent across system reboots (there is a status bit stored in the GPU InfoROM)"), Hopper and
# later GPUs do not ("MIG mode is no longer persistent across system reboots"; unloading the
# driver disables it): NVIDIA's MIG user guide, "Getting Started with MIG". So Ampere's mode is
# kept in MIG_MODE_FILE, later GPUs' under /run (MIG_MODE_VOLATILE_FILE), which a reboot empties
# as it does the GPU and compute instances (MIG_INSTANCES_FILE: "the created MIG devices are not
# persistent across system reboots").
MIG_MODE_FILE = "/var/lib/gpu-sim/mig-mode"
MIG_MODE_VOLATILE_FILE = "/run/gpu-sim/mig-mode"
# Architectures whose MIG mode survives a reboot (InfoROM).
MIG_MODE_KEPT = ("ampere",)
# The GPU instances and their compute instances: {"<slot>": [GPU instance...]}, each
# {"id", "profile_id", "start", "slices", "memory_slices", "compute_instances": [{"id",
# "profile_id", "start", "slices"}]} (start and slices of a compute instance count compute slices
# inside its GPU instance).
MIG_INSTANCES_FILE = "/run/gpu-sim/mig-instances.json"
# What the loaded module exposes for MIG (a container's /proc cannot hold it): the capability
# minors /proc/driver/nvidia-caps/mig-minors lists, and the dynamic character major the driver
# registered as "nvidia-caps" (/proc/devices).
MIG_MINORS_FILE = "/run/gpu-sim/proc/driver/nvidia-caps/mig-minors"
PROC_DEVICES_FILE = "/run/gpu-sim/proc/devices"
# A dynamic major: the one NVIDIA's MIG user guide shows for /dev/nvidia-caps ("Device Nodes and
# Capabilities": `ls -l /dev/nvidia-caps` lists "508,  1 ... nvidia-cap1"; another host's may
# differ, the driver takes whatever the kernel hands out).
NVIDIA_CAPS_MAJOR = 508
# The capability table is fixed, whatever is installed: config 1, monitor 2, then for each of the
# driver's 32 possible GPU minors, 15 GPU instance IDs (0-14) of one access minor followed by
# 8 compute instance minors, so gpuN/giM/access = 3 + 135*N + 9*M and its ciK = that + 1 + K.
# NVIDIA's MIG user guide, "Device Nodes and Capabilities", prints the file from "gpu0/gi0/access
# 3" to "gpu31/gi14/ci7/access 4322"; the same formula gives the gi2/gi3/gi9 minors (21, 30, 84)
# a real A100 of driver 580 showed under /dev/nvidia-caps.
MIG_MAX_GPUS = 32
MIG_MAX_GPU_INSTANCES = 15
MIG_MAX_COMPUTE_INSTANCES = 8
MIG_MINORS_PER_GPU = MIG_MAX_GPU_INSTANCES * (1 + MIG_MAX_COMPUTE_INSTANCES)

# The node's EFI variables, as efivarfs shows them under /sys/firmware/efi/efivars (a container
# has none of its own): one file per variable, named <Name>-<vendor GUID>, holding 4 bytes of
# attributes then the value. Secure Boot is the global SecureBoot and SetupMode variables; the
# MOK list and a pending enrolment request are shim's MokListRT and MokNew (EFI_SIGNATURE_LIST
# entries, as mokutil writes and reads them: lcp/mokutil @ 9ae73db, src/mokutil.c).
EFIVARS = "/var/lib/gpu-sim/efivars"
EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
SHIM_LOCK_GUID = "605dab50-e046-4300-abb6-3dd810dd8b23"
EFI_CERT_X509_GUID = "a5c059a1-94e4-4aa7-87b5-ab155c2bf072"
# EFI_VARIABLE_NON_VOLATILE 1, BOOTSERVICE_ACCESS 2, RUNTIME_ACCESS 4 (UEFI specification).
EFI_ATTR_BS_RT = b"\x06\x00\x00\x00"
EFI_ATTR_NV_BS_RT = b"\x07\x00\x00\x00"


def efivar_path(name: str, guid: str) -> str:
    """The node path of EFI variable ``name`` of vendor ``guid``."""
    return f"{EFIVARS}/{name}-{guid}"


def secure_boot_vars(enabled: bool) -> list[tuple[str, bytes]]:
    """(node path, content) of SecureBoot and SetupMode: Secure Boot on or off, user mode (a
    platform key enrolled), as a machine from its vendor has them."""
    return [(efivar_path("SecureBoot", EFI_GLOBAL_GUID), EFI_ATTR_BS_RT + bytes([int(enabled)])),
            (efivar_path("SetupMode", EFI_GLOBAL_GUID), EFI_ATTR_BS_RT + b"\x00")]


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


def mig_minor(gpu: int, gpu_instance: int, compute_instance: int | None = None) -> int:
    """The capability minor of ``gpu<gpu>/gi<gpu_instance>/access`` (or, with
    ``compute_instance``, of its ``ci<compute_instance>/access``), as mig-minors lists it."""
    access = 3 + MIG_MINORS_PER_GPU * gpu + (1 + MIG_MAX_COMPUTE_INSTANCES) * gpu_instance
    return access if compute_instance is None else access + 1 + compute_instance


def _mig_minors_py() -> str:
    """A python3 -c program that prints mig-minors (python3 is on every simulated node: the
    stand-ins run on it; a shell loop over 4,322 lines would be slower)."""
    per_gi = 1 + MIG_MAX_COMPUTE_INSTANCES
    access = f"{{3+{MIG_MINORS_PER_GPU}*g+{per_gi}*i}}"
    ci = f"{{4+{MIG_MINORS_PER_GPU}*g+{per_gi}*i+c}}"
    return (
        r'print("config 1\nmonitor 2");'
        f'[print(f"gpu{{g}}/gi{{i}}/access {access}", *(f"gpu{{g}}/gi{{i}}/ci{{c}}/access {ci}"'
        f' for c in range({MIG_MAX_COMPUTE_INSTANCES})), sep="\\n")'
        f" for g in range({MIG_MAX_GPUS}) for i in range({MIG_MAX_GPU_INSTANCES})]"
    )


# What the kernel logs when Secure Boot's lockdown refuses a module that is unsigned or signed by
# a key it does not trust (security/lockdown/lockdown.c: "Lockdown: %s: %s is restricted; see man
# kernel_lockdown.7", the reason of LOCKDOWN_MODULE_SIGNATURE being "unsigned module loading";
# kernels that enforce signatures outright print "Loading of unsigned module is rejected" or
# "Loading of module with unavailable key is rejected" instead, kernel/module/signing.c).
LOCKDOWN_REFUSAL = ("Lockdown: modprobe: unsigned module loading is restricted; "
                    "see man kernel_lockdown.7")


# Where the running kernel's nvidia.ko can be, in the order modprobe prefers them: the DKMS
# build under updates/ (tools/dkms.py), then NVIDIA's precompiled one under extra/ (sim/
# precompiled_kmod.py, kmod-nvidia.spec's kmod_module_path). depmod ranks updates/ first: "By
# default, depmod will give a higher priority to a directory with the name updates using this
# built-in search string: "updates built-in"" (kmod, depmod.d(5)), extra/ being built-in's.
NVIDIA_KO_PATHS = ("updates/dkms/nvidia.ko", "extra/drivers/video/nvidia/nvidia.ko")


def _secure_boot_refusal_sh() -> list[str]:
    """Shell lines setting ``refused`` (empty: the module may load): with the SecureBoot
    variable 1, the running kernel's nvidia.ko that modprobe would load (NVIDIA_KO_PATHS, the
    first present) must be signed by a key in the MOK list (its signer, as ``modinfo -F
    signer`` reads it, the commonName of a certificate ``mokutil --list-enrolled`` prints)."""
    secure_boot = f"{EFIVARS}/SecureBoot-{EFI_GLOBAL_GUID}"
    first, *others = NVIDIA_KO_PATHS
    return [
        "refused=",
        f'if [ "$(od -An -tu1 -j4 -N1 {secure_boot} 2>/dev/null | tr -d " \\n")" = 1 ]; then',
        f"  ko=/lib/modules/$(uname -r)/{first}",
        *(f'  [ -e "$ko" ] || ko=/lib/modules/$(uname -r)/{path}' for path in others),
        '  signer=$(PATH="$PATH:/sbin:/usr/sbin" modinfo -F signer "$ko" 2>/dev/null)',
        '  if [ -z "$signer" ] || ! PATH="$PATH:/usr/local/bin" mokutil --list-enrolled '
        '2>/dev/null | grep -qF "CN = $signer"; then',
        f'    refused="{LOCKDOWN_REFUSAL}"',
        "  fi",
        "fi",
    ]


def load_module_sh(indent: str = "") -> str:
    """Shell lines that load the installed driver's module: its version, and its banner in the
    two formats real drivers print (open: "NVIDIA UNIX Open Kernel Module for x86_64  580.159.04
    Release Build", as a lent H200 showed; proprietary: "NVIDIA UNIX x86_64 Kernel Module
    535.161.08  <build date>"); and what it exposes for MIG: the capability minors of all 32
    possible GPUs (MIG_MINORS_FILE; the real driver lists them whatever the GPU count) and its
    "nvidia-caps" major (PROC_DEVICES_FILE, only that line of /proc/devices).

    With Secure Boot on (the node's SecureBoot EFI variable), a module not signed by a key in
    the MOK list is refused: nothing loads, and the kernel log says why (LOCKDOWN_REFUSAL)."""
    dirs = (MODULE_VERSION_FILE, PROC_VERSION_FILE, MIG_MINORS_FILE)
    load = [
        "mkdir -p " + " ".join(path.rsplit("/", 1)[0] for path in dirs),
        f"cp {DRIVER_VERSION_FILE} {MODULE_VERSION_FILE}",
        f"v=$(cat {DRIVER_VERSION_FILE}); m=$(uname -m)",
        f'if [ "$(cat {MODULE_FLAVOR_FILE} 2>/dev/null)" = open ]; then',
        '  b="NVIDIA UNIX Open Kernel Module for $m  $v  Release Build  (SIMULATED)"',
        "else",
        '  b="NVIDIA UNIX $m Kernel Module  $v  SIMULATED"',
        "fi",
        f'printf "NVRM version: %s\\nGCC version:  SIMULATED\\n" "$b" > {PROC_VERSION_FILE}',
        f"python3 -c '{_mig_minors_py()}' > {MIG_MINORS_FILE}",
        f'printf "Character devices:\\n%s nvidia-caps\\n" {NVIDIA_CAPS_MAJOR} '
        f"> {PROC_DEVICES_FILE}",
    ]
    lines = [*_secure_boot_refusal_sh(),
             'if [ -n "$refused" ]; then',
             f'  echo "[    4.000000] $refused" >> {KERNEL_LOG}',
             "else",
             *(f"  {line}" for line in load),
             "fi"]
    return "".join(f"{indent}{line}\n" for line in lines)


def mig_mode_file(arch_key: str) -> str:
    """Where the MIG mode of a GPU of ``arch_key`` is kept (see MIG_MODE_FILE)."""
    return MIG_MODE_FILE if arch_key in MIG_MODE_KEPT else MIG_MODE_VOLATILE_FILE


def read_mig_modes(arch_key: str = "hopper") -> dict[int, bool]:
    """The MIG mode of each GPU slot mig_mode_file(arch_key) names (absent: disabled)."""
    modes: dict[int, bool] = {}
    for line in (read_text(mig_mode_file(arch_key)) or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            modes[int(parts[0])] = parts[1].lower() in ("enabled", "1", "on")
    return modes


def write_mig_modes(modes: dict[int, bool], arch_key: str = "hopper") -> None:
    """Write mig_mode_file(arch_key) (raises OSError, PermissionError for a non-root user)."""
    path = sim_path(mig_mode_file(arch_key))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{slot} {'Enabled' if on else 'Disabled'}\n"
                          for slot, on in sorted(modes.items()))


def read_mig_instances() -> dict[int, list[dict[str, Any]]]:
    """The GPU instances of each slot (MIG_INSTANCES_FILE); entries that are not well formed
    are left out, an unreadable file reads as none (a reboot empties it anyway)."""
    try:
        data = json.loads(read_text(MIG_INSTANCES_FILE) or "{}")
    except ValueError:
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    if not isinstance(data, dict):
        return out
    keys = ("id", "profile_id", "start", "slices", "memory_slices")
    for slot, gpu_instances in data.items():
        if not str(slot).isdigit() or not isinstance(gpu_instances, list):
            continue
        kept = []
        for gi in gpu_instances:
            if not isinstance(gi, dict) or not all(isinstance(gi.get(k), int) for k in keys):
                continue
            cis = [ci for ci in gi.get("compute_instances") or [] if isinstance(ci, dict) and all(
                isinstance(ci.get(k), int) for k in ("id", "profile_id", "start", "slices"))]
            kept.append({**{k: gi[k] for k in keys}, "compute_instances": cis})
        out[int(slot)] = kept
    return out


def write_mig_instances(instances: dict[int, list[dict[str, Any]]]) -> None:
    """Write MIG_INSTANCES_FILE (raises OSError, PermissionError for a non-root user)."""
    path = sim_path(MIG_INSTANCES_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = {str(slot): gis for slot, gis in sorted(instances.items()) if gis}
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
