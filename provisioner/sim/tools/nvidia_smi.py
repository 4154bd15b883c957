"""SIMULATED nvidia-smi for gpu-cluster-provisioner's simulated cluster (no GPU is present).

Installed as /usr/bin/nvidia-smi by a simulated driver package (bundled with the modules it
imports into one stdlib-only script, see provisioner.sim.bundle). It answers from the node's
hardware profile so that the real parsers, checks and reports run against realistic output:

  $GPU_SIM_ROOT/etc/gpu-sim/profile.json     the simulated hardware (GPU model, count, NVLink...)
  $GPU_SIM_ROOT/etc/gpu-sim/faults           injected faults, one per line (optional)
  $GPU_SIM_ROOT/usr/lib/gpu-sim/driver-version, cuda-version   written by the driver package;
                                             absent means "driver not loaded" (exit 9)
  $GPU_SIM_ROOT/var/lib/gpu-sim/persistence  persistence mode state (written by -pm)
  $GPU_SIM_ROOT/var/lib/gpu-sim/mig-mode     MIG mode of each A100 (-mig; kept over a reboot;
                                             later GPUs' under /run/gpu-sim, lost at a reboot)
  $GPU_SIM_ROOT/run/gpu-sim/mig-instances.json  GPU and compute instances (nvidia-smi mig;
                                             gone after a reboot, like on a real GPU)

MIG: the profile's "mig_profiles" list (GPU instance profiles: name, id, slices,
memory_slices, memory_mib, instances, placements, multiprocessors) is what -lgip offers on a
MIG-capable GPU; -mig 1 enables the mode, "nvidia-smi mig" creates, lists and destroys GPU and
compute instances, and -L, -q -x, the summary table and --query-gpu show the MIG devices.

GPU_SIM_ROOT defaults to "/". Faults (defined in provisioner.sim.faults) name GPUs by physical
slot (gpu3 is the fourth GPU of the profile); when a GPU is missing, the others are
re-enumerated like the real driver does. The driver-other-version fault makes it report a
driver one branch above the installed one.
Human-readable outputs say SIMULATED; machine-readable ones keep the real tool's exact format.
Standard library only: it runs on the nodes' own python3.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import sys
from typing import Any, NoReturn

from provisioner.sim.faults import Fault, has_fault, other_driver_version, read_fault_file
from provisioner.sim.tools.node import (
    CUDA_VERSION_FILE,
    DRIVER_VERSION_FILE,
    FAULTS_FILE,
    PERSISTENCE_FILE,
    PROFILE_FILE,
    RESET_LOG,
    gpu_bus,
    read_mig_instances,
    read_mig_modes,
    read_text,
    sim_path,
    write_mig_instances,
    write_mig_modes,
)

SIM_MARKER = "SIMULATED: gpu-cluster-provisioner simulated GPU node, no real GPU present"

EXIT_OK = 0
EXIT_INVALID_ARGUMENT = 2
# nvidia-smi(1), RETURN VALUE: "3 - The requested operation is not available on target device".
EXIT_NOT_SUPPORTED = 3
EXIT_NO_PERMISSION = 4
EXIT_NOT_FOUND = 6
EXIT_DRIVER_NOT_LOADED = 9
# nvidia-smi(1), RETURN VALUE: "15 - The GPU has fallen off the bus or has otherwise become
# inaccessible".
EXIT_GPU_IS_LOST = 15
# nvidia-smi(1), RETURN VALUE: "255 - Other error or internal driver error occurred": what the MIG
# commands exit with on an NVML error such as Insufficient Resources or In use by another client
# (a real `mig -lgip` failing with "Unknown Error" exited 255).
EXIT_OTHER_ERROR = 255

DRIVER_FAILURE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)

# PCI subsystem device ids of the baseboard variants (else the device id is reported).
SUBSYSTEM_IDS = {"2330": "16C1"}

# Per-architecture constants the real tool reports (clocks in MHz).
ARCHITECTURES: dict[str, dict[str, Any]] = {
    "hopper": {
        "display": "Hopper", "compute_cap": "9.0", "mig": True, "vbios": "96.00.89.00.01",
        "sm_max": 1980, "mem_max": 2619, "video_max": 1545, "sm_idle": 1980,
    },
    "ampere": {
        "display": "Ampere", "compute_cap": "8.0", "mig": True, "vbios": "92.00.45.00.03",
        "sm_max": 1410, "mem_max": 1593, "video_max": 1290, "sm_idle": 1410,
    },
    "blackwell": {
        "display": "Blackwell", "compute_cap": "10.0", "mig": True, "vbios": "97.00.5B.00.01",
        "sm_max": 1965, "mem_max": 3996, "video_max": 1545, "sm_idle": 1965,
    },
    "ada": {
        "display": "Ada Lovelace", "compute_cap": "8.9", "mig": False, "vbios": "95.04.29.00.06",
        "sm_max": 2040, "mem_max": 6251, "video_max": 1770, "sm_idle": 2040,
    },
}
ARCHITECTURE_ALIASES = {"ada lovelace": "ada", "ada-lovelace": "ada", "lovelace": "ada"}

# The legend `topo -m` prints after the matrix, verbatim.
TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501  (the real tool's lines are this long)

HELP_TEXT = """NVIDIA System Management Interface -- v{driver}

{marker}
This simulator answers from /etc/gpu-sim/profile.json; it supports:

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.

  LIST OPTIONS:

    -L,   --list-gpus           Display a list of GPUs connected to the system.

  SUMMARY OPTIONS:

    <no arguments>              Show a summary of GPUs connected to the system.
    -i,   --id=                 Target a specific GPU.

  QUERY OPTIONS:

    -q,   --query               Display GPU info (the simulator answers only with -x).
    -x,   --xml-format          Produce XML output.
    -i,   --id=                 Target a specific GPU.

  SELECTIVE QUERY OPTIONS:

          --query-gpu=          Information about GPU.
          --query-compute-apps= List of currently active compute processes (always none).
          --format=             Comma separated list of format options:
                                  csv - comma separated values (MANDATORY)
                                  noheader - skip the first line with column headers
                                  nounits - don't print units for numerical values

  DEVICE MODIFICATION OPTIONS:

    -pm,  --persistence-mode=   Set persistence mode: 0/DISABLED, 1/ENABLED
    -mig, --multi-instance-gpu= Enable or disable Multi Instance GPU: 0/DISABLED, 1/ENABLED
    -r,   --gpu-reset           Reset the GPUs (all, or those of -i). Requires root.

    mig                         Multi Instance GPU management ("nvidia-smi mig -h").

    nvlink                      Display NvLink information ("nvidia-smi nvlink -s").
    topo                        Display topological information ("nvidia-smi topo -m").
"""


# The clock event reasons, in the order nvidia-smi -q -x lists them (clocks_event_reasons on
# r535 and later, clocks_throttle_reasons before).
CLOCK_REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
                 "hw_thermal_slowdown", "hw_power_brake_slowdown", "sync_boost",
                 "sw_thermal_slowdown", "display_clocks_setting")
# --query-gpu takes each as clocks_event_reasons.NAME (r535 on) or clocks_throttle_reasons.NAME,
# which r535 and later still accept ("clocks_event_reasons.hw_slowdown" or
# "clocks_throttle_reasons.hw_slowdown", nvidia-smi --help-query-gpu); display_clocks_setting
# is no query field.
QUERY_CLOCK_REASONS = CLOCK_REASONS[:-1]
EVENT_REASONS_DRIVER = 535


class UsageError(Exception):
    """Bad command line: the real tool prints a message and exits 2."""


# ---------------------------------------------------------------------------------------------
# Reading the simulated node
# ---------------------------------------------------------------------------------------------


def die(message: str, code: int, stream: Any = None) -> NoReturn:
    (stream or sys.stdout).write(message)
    sys.exit(code)


def load_profile() -> dict[str, Any] | None:
    text = read_text(PROFILE_FILE)
    if text is None:
        return None
    try:
        profile = json.loads(text)
    except ValueError as exc:
        die(f"SIMULATED nvidia-smi: {sim_path(PROFILE_FILE)} is not valid "
            f"JSON ({exc}): rewrite it from the hardware profile\n", 1, sys.stderr)
    if not isinstance(profile, dict) or "gpu_model" not in profile or "gpu_count" not in profile:
        die(f"SIMULATED nvidia-smi: {sim_path(PROFILE_FILE)} needs at least "
            "gpu_model and gpu_count\n", 1, sys.stderr)
    return profile


def load_faults() -> list[Fault]:
    """The node's injected faults (``/etc/gpu-sim/faults``)."""
    return read_fault_file(read_text(FAULTS_FILE) or "")


def load_persistence(count: int) -> dict[int, bool]:
    """Per-slot persistence mode; the file holds "<slot> Enabled|Disabled" lines (or one word)."""
    state = dict.fromkeys(range(count), False)
    for line in (read_text(PERSISTENCE_FILE) or "").splitlines():
        parts = line.split()
        if len(parts) == 1:
            state = dict.fromkeys(range(count), parts[0].lower() in ("enabled", "1", "on"))
        elif len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in state:
            state[int(parts[0])] = parts[1].lower() in ("enabled", "1", "on")
    return state


def host_numa_nodes() -> list[tuple[int, str]]:
    """The container host's real NUMA nodes and CPU lists, so reported affinities are usable."""
    base = "/sys/devices/system/node"
    nodes: list[tuple[int, str]] = []
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    for name in sorted(names):
        match = re.fullmatch(r"node(\d+)", name)
        if not match:
            continue
        try:
            with open(os.path.join(base, name, "cpulist"), encoding="utf-8") as handle:
                cpus = handle.read().strip()
        except OSError:
            continue
        if cpus:
            nodes.append((int(match.group(1)), cpus))
    if not nodes:
        nodes = [(0, f"0-{max((os.cpu_count() or 1) - 1, 0)}")]
    return sorted(nodes)


def _uuid_and_serial(hostname: str, slot: int) -> tuple[str, str]:
    """Return the UUID and serial number of the GPU in ``slot`` of ``hostname``: made up, but
    the same on every call."""
    digest = hashlib.sha256(f"{hostname}:gpu{slot}".encode()).hexdigest()
    uuid = (f"GPU-{digest[0:8]}-{digest[8:12]}-{digest[12:16]}-"
            f"{digest[16:20]}-{digest[20:32]}")
    serial = str(1650000000000 + int(digest[32:40], 16) % 10**9)
    return uuid, serial


def _bus_id(profile: dict[str, Any], slot: int) -> tuple[str, int]:
    """Return the PCI bus id of the GPU in ``slot`` and its bus number: the profile's
    pci_bus_ids where it lists one, else the HGX board's."""
    bus_ids = profile.get("pci_bus_ids")
    if isinstance(bus_ids, list) and slot < len(bus_ids):
        bus_id = str(bus_ids[slot]).upper()
        return bus_id, int(bus_id.split(":")[1], 16)
    bus = gpu_bus(slot)
    return f"00000000:{bus:02X}:00.0", bus


def _pci_ids(profile: dict[str, Any]) -> tuple[str, str]:
    """Return the PCI device id and subsystem id every GPU reports, as nvidia-smi writes them
    (device then vendor)."""
    # Every GPU reports the first id, as the simulated lspci (sim/cluster.py) does.
    device_ids = profile.get("pci_device_ids") or ["10de:2330"]
    vendor, device = str(device_ids[0]).lower().split(":")
    sub_device = SUBSYSTEM_IDS.get(device.upper(), device.upper())
    return f"{device.upper()}{vendor.upper()}", f"{sub_device}{vendor.upper()}"


def _nvlinks(profile: dict[str, Any], faults: list[Fault]) -> list[bool]:
    """Return whether each NVLink of a GPU is active: every one unless a fault takes it (or
    all of them) down."""
    links = int(profile.get("nvlink_links_per_gpu", 0))
    down = {fault.link for fault in faults if fault.kind.key == "nvlink-link-down"}
    all_down = has_fault(faults, "nvlink-down")
    return [not (all_down or link in down) for link in range(links)]


class MigProfile:
    """One GPU instance profile of the profile's ``mig_profiles`` (what -lgip lists)."""

    ENGINES = ("copy_engine_count", "encoder_count", "decoder_count", "ofa_count", "jpg_count")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.name = str(raw["name"])
        self.id = int(raw["id"])
        self.slices = int(raw["slices"])
        self.memory_slices = int(raw["memory_slices"])
        self.memory_mib = int(raw["memory_mib"])
        self.instances = int(raw.get("instances", 1))
        self.placements = sorted({int(start) for start in raw.get("placements") or [0]})
        # None when the profile leaves it out: parse_mig_profiles estimates it.
        sms = raw.get("multiprocessors")
        self.multiprocessors = int(sms) if sms is not None else 0
        self.sm_known = sms is not None
        if min(self.slices, self.memory_slices, self.instances) < 1 or not self.placements:
            raise ValueError(f"MIG profile {self.name}: slices and instances must be positive")
        # The engines a GPU instance of the profile holds (overridable per profile, under the
        # names nvidia-smi -q -x gives them); set by parse_mig_profiles.
        self.engines: dict[str, int] = dict.fromkeys(self.ENGINES, 0)
        self.raw = raw

    @property
    def full_name(self) -> str:
        return f"MIG {self.name}"


def _default_engines(arch_key: str, profile: MigProfile, max_slices: int) -> dict[str, int]:
    """The copy engines, encoders, decoders, OFAs and JPEG decoders of a GPU instance, as
    -lgip and the MIG devices table show them: Hopper (an H100 80GB HBM3's -lgip) one decoder
    and one JPEG decoder per compute slice, 8 copy engines for the whole GPU, the OFA in the
    +me and full-GPU profiles; Ampere (A100 -lgip) decoders 0/1/2/2/5 for 1/2/3/4/7 slices
    (1 for the one-slice profiles with two memory slices or the media extension), JPEG and
    OFA only in +me and the full GPU."""
    media = "+me" in profile.name
    full = profile.slices >= max_slices
    slices = profile.slices
    if arch_key == "ampere":
        one_slice = 1 if media or profile.memory_slices >= 2 else 0
        decoders = {1: one_slice, 2: 1, 3: 2, 4: 2}.get(slices, 5)
        return {"copy_engine_count": slices, "encoder_count": 0, "decoder_count": decoders,
                "ofa_count": int(media or full), "jpg_count": int(media or full)}
    return {"copy_engine_count": slices + 1 if full else slices, "encoder_count": 0,
            "decoder_count": slices, "ofa_count": int(media or full), "jpg_count": slices}


def parse_mig_profiles(profile: dict[str, Any], arch_key: str) -> list[MigProfile]:
    """The GPU instance profiles of ``mig_profiles`` in the order given (-lgip's order); an
    absent or malformed list means none, a malformed entry is left out."""
    raw_list = profile.get("mig_profiles")
    profiles: list[MigProfile] = []
    for raw in raw_list if isinstance(raw_list, list) else []:
        try:
            profiles.append(MigProfile(raw))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    max_slices = max((p.slices for p in profiles), default=1)
    known = [mig for mig in profiles if mig.sm_known]
    for mig in profiles:
        if not mig.sm_known:
            # Not in the profile: the SMs of a profile with as many compute slices, else the
            # fewest known per slice. A stand-in's estimate: a real H100's -lgip gives 4g.40gb
            # 64 SMs (as estimated from 1g.10gb's 16), but 1g.20gb 26 (estimated 16).
            same = [other.multiprocessors for other in known if other.slices == mig.slices]
            per_slice = min((other.multiprocessors // other.slices for other in known), default=0)
            mig.multiprocessors = same[0] if same else per_slice * mig.slices
        mig.engines = _default_engines(arch_key, mig, max_slices)
        for key in MigProfile.ENGINES:
            if isinstance(mig.raw.get(key), int):
                mig.engines[key] = mig.raw[key]
    return profiles


# The frame buffer a GPU instance's own structures take, by memory slices, as the H100 capture's
# MIG devices show it idle (1 slice 9 MiB, 2: 17, 4: 26); other sizes are a guess.
MIG_RESERVED_MIB = {1: 9, 2: 17, 4: 26}


def mig_used_mib(memory_slices: int) -> int:
    return MIG_RESERVED_MIB.get(memory_slices, 6 * memory_slices + 3)


class Gpu:
    """One simulated GPU as the driver would report it."""

    def __init__(self, node: Node, slot: int, index: int, faults: list[Fault]) -> None:
        profile = node.profile
        self.slot = slot
        self.index = index
        self.faults = faults
        self.name = str(profile["gpu_model"])
        self.uuid, self.serial = _uuid_and_serial(node.hostname, slot)
        self.bus_id, self.bus = _bus_id(profile, slot)
        self.pci_device_id, self.pci_sub_system_id = _pci_ids(profile)
        arch = node.arch
        self.arch_display = arch["display"]
        self.compute_cap = arch["compute_cap"]
        self.mig_capable = bool(profile.get("mig_capable", arch["mig"]))
        self.vbios = arch["vbios"]
        self.sm_max, self.mem_max = arch["sm_max"], arch["mem_max"]
        self.video_max = arch["video_max"]
        self.sm_clock = arch["sm_idle"]
        self.persistence = node.persistence.get(slot, False)
        self.ecc_enabled = bool(profile.get("ecc", True))
        self.memory_total = int(profile.get("memory_mib", 81559))
        self.memory_reserved = max(256, self.memory_total // 148)
        self.memory_used = 0
        self.power_limit = float(profile.get("power_limit_w", 700))
        self.power_draw = 60.0 + (slot * 7) % 15 + 0.25 * (slot % 4)
        self.temperature = 28 + (slot * 5) % 9
        self.numa = slot * node.numa_count // max(node.gpu_count, 1)
        # PCIe: a downgraded link trains one generation lower at half width.
        self.pcie_gen_max = int(profile.get("pcie_gen", 5))
        self.pcie_width_max = int(profile.get("pcie_width", 16))
        self.pcie_gen = self.pcie_gen_max
        self.pcie_width = self.pcie_width_max
        if has_fault(faults, "pcie-downgrade"):
            self.pcie_gen = max(1, self.pcie_gen_max - 1)
            self.pcie_width = max(1, self.pcie_width_max // 2)
        # HW Slowdown "reduc[es] the core clocks by a factor of 2 or more" (nvidia-smi
        # --help-query-gpu, clocks_event_reasons.hw_slowdown): the SM clock at half its maximum.
        self.hw_slowdown = has_fault(faults, "hw-slowdown")
        if self.hw_slowdown:
            self.sm_clock = self.sm_max // 2
        # ECC: an uncorrectable DRAM error also leaves a row remap pending until reset.
        self.dram_uncorrectable = 0
        self.remap_unc = 0
        self.remap_pending = False
        if has_fault(faults, "ecc-uncorrectable") and self.ecc_enabled:
            self.dram_uncorrectable = 2
            self.remap_unc = 1
            self.remap_pending = True
        self.nvlinks = _nvlinks(profile, faults)
        # MIG: the mode lives on the GPU (its physical slot), the instances until a reboot.
        self.mig_profiles = node.mig_profiles if self.mig_capable else []
        self.mig_enabled = self.mig_capable and node.mig_modes.get(slot, False)
        known = {mig.id for mig in self.mig_profiles}
        self.gpu_instances: list[dict[str, Any]] = [
            gi for gi in node.mig_instances.get(slot, []) if gi["profile_id"] in known
        ] if self.mig_enabled else []
        self.memory_used = sum(mig_used_mib(gi["memory_slices"]) for gi in self.gpu_instances)

    @property
    def active_links(self) -> int:
        return sum(self.nvlinks)

    def clock_reason(self, name: str) -> str:
        """One clock event reason as nvidia-smi prints it: "Active" or "Not Active"."""
        active = name == "gpu_idle" or (name == "hw_slowdown" and self.hw_slowdown)
        return "Active" if active else "Not Active"


class Node:
    """The simulated node: driver, profile, faults and the GPUs that enumerate."""

    def __init__(self, profile: dict[str, Any], driver: str, cuda: str,
                 faults: list[Fault]) -> None:
        self.profile = profile
        self.driver = driver
        self.cuda = cuda
        major = re.match(r"\d+", driver)
        self.driver_major = int(major.group(0)) if major else 0
        self.hostname = str(profile.get("hostname") or os.uname().nodename)
        arch_key = str(profile.get("architecture", "hopper")).strip().lower()
        arch_key = ARCHITECTURE_ALIASES.get(arch_key, arch_key)
        unknown = dict(ARCHITECTURES["hopper"], display=arch_key.title(), mig=False)
        self.arch = ARCHITECTURES.get(arch_key, unknown)
        self.arch_key = arch_key
        self.gpu_count = int(profile["gpu_count"])
        self.numa_count = int(profile.get("numa_nodes", 2 if self.gpu_count > 1 else 1))
        self.persistence = load_persistence(self.gpu_count)
        self.mig_profiles = parse_mig_profiles(profile, arch_key)
        self.mig_modes = read_mig_modes(arch_key)
        self.mig_instances = read_mig_instances()
        self.gpus: list[Gpu] = []
        for slot in range(self.gpu_count):
            slot_faults = [fault for fault in faults if fault.gpu == slot]
            if not has_fault(slot_faults, "missing"):
                self.gpus.append(Gpu(self, slot, len(self.gpus), slot_faults))
        self.nvswitch = bool(profile.get("nvswitch", False))
        # Multi-node NVLink (a GB200 NVL72 rack's compute trays): the domain's name, the same on
        # every node of it (its clique ID and cluster UUID derive from it).
        self.multi_node_nvlink = bool(profile.get("multi_node_nvlink", False))
        self.nvlink_domain = str(profile.get("nvlink_domain") or "default")
        fabric = str(profile.get("fabric", "infiniband")).lower()
        self.nic_count = int(profile.get("ib_hcas", 0)) if fabric in ("infiniband", "roce") else 0

    def select(self, ids: str | None) -> list[Gpu]:
        """GPUs named by -i (indexes, UUIDs or PCI bus ids, comma separated)."""
        if ids is None:
            return list(self.gpus)
        chosen: list[Gpu] = []
        for token in (part.strip() for part in ids.split(",")):
            for gpu in self.gpus:
                if token in (str(gpu.index), gpu.uuid) or token.upper() in (
                    gpu.bus_id, gpu.bus_id[4:], gpu.bus_id[8:]
                ):
                    chosen.append(gpu)
                    break
            else:
                die("No devices were found\n", EXIT_NOT_FOUND)
        return chosen


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


def timestamp_text() -> str:
    now = datetime.datetime.now()
    return f"{now:%a %b} {now.day:2d} {now:%H:%M:%S %Y}"


def render_list(node: Node, gpus: list[Gpu]) -> str:
    """-L: each GPU, and under a MIG-enabled one its MIG devices ("  MIG 3g.40gb     Device  0:
    (UUID: MIG-...)", as real ones list them)."""
    lines = []
    for gpu in gpus:
        lines.append(f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})")
        if gpu.mig_enabled:
            for index, (gi, ci) in enumerate(mig_devices(gpu)):
                name = mig_device_view(gpu, gi, ci)["name"][len("MIG "):]
                lines.append(f"  MIG {name:<11} Device {index:>2}: "
                             f"(UUID: {mig_uuid(node, gpu, gi, ci)})")
    return "".join(f"{line}\n" for line in lines)


def render_table(node: Node, gpus: list[Gpu]) -> str:
    rule = "+" + "-" * 89 + "+"
    cells = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    lines = [
        f"{timestamp_text()}       ",
        rule,
        f"| NVIDIA-SMI {node.driver:<23}Driver Version: {node.driver:<15}"
        f"CUDA Version: {node.cuda:<9}|",
        f"| {SIM_MARKER:<88}|",
        "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
        "| GPU  Name                 Persistence-M "
        "| Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap "
        "|           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         "
        "|                        |               MIG M. |",
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for gpu in gpus:
        ecc = str(gpu.dram_uncorrectable) if gpu.ecc_enabled else "Off"
        mig = "Disabled" if gpu.mig_capable else "N/A"
        utilization = "0%"
        if gpu.mig_enabled:
            # In MIG mode the ECC cell shows the mode and utilization N/A (H100 capture, 590).
            ecc = "On" if gpu.ecc_enabled else "Off"
            mig, utilization = "Enabled", "N/A"
        persistence = "On" if gpu.persistence else "Off"
        lines += [
            f"| {gpu.index:>3}  {gpu.name:<31}{persistence:<3} |   {gpu.bus_id} Off |{ecc:>21} |",
            f"| {'N/A':>3}{gpu.temperature:>5}C{'P0':>6}{round(gpu.power_draw):>15}W /"
            f"{round(gpu.power_limit):>5}W |{gpu.memory_used:>8}MiB / {gpu.memory_total:>6}MiB |"
            f"{utilization:>8}{'Default':>13} |",
            f"|{'':41}|{'':24}|{mig:>21} |",
            cells,
        ]
    if any(gpu.mig_enabled for gpu in gpus):
        lines += ["", *render_mig_table(node, gpus)]
    lines += [
        "",
        rule,
        "| Processes:" + " " * 78 + "|",
        "|  GPU   GI   CI        PID   Type   Process name"
        "                              GPU Memory |",
        "|        ID   ID"
        "                                                               Usage      |",
        "|" + "=" * 89 + "|",
        "|  No running processes found" + " " * 61 + "|",
        rule,
    ]
    return "\n".join(lines) + "\n"


def render_version(node: Node) -> str:
    nvml = ".".join(node.driver.split(".")[:2])
    return (f"NVIDIA-SMI version  : {node.driver}\nNVML version        : {nvml}\n"
            f"DRIVER version      : {node.driver}\nCUDA Version        : {node.cuda}\n")


def xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


XmlTree = list[tuple[str, "str | XmlTree"]]


def xml_lines(tree: XmlTree, depth: int) -> list[str]:
    out: list[str] = []
    pad = "\t" * depth
    for tag, value in tree:
        if isinstance(value, str):
            out.append(f"{pad}<{tag}>{xml_escape(value)}</{tag}>")
        else:
            out.append(f"{pad}<{tag}>")
            out.extend(xml_lines(value, depth + 1))
            out.append(f"{pad}</{tag}>")
    return out


def na(*tags: str) -> XmlTree:
    return [(tag, "N/A") for tag in tags]


def ecc_scope(gpu: Gpu, node: Node, aggregate: bool) -> XmlTree:
    if not gpu.ecc_enabled:
        counts = dict.fromkeys(("sram_c", "sram_u", "dram_c", "dram_u"), "N/A")
    else:
        counts = {"sram_c": "0", "sram_u": "0", "dram_c": "0",
                  "dram_u": str(gpu.dram_uncorrectable)}
    tree: XmlTree = [("sram_correctable", counts["sram_c"])]
    if node.driver_major >= 550:
        # r550 split SRAM uncorrectable errors into parity and SEC-DED counters.
        tree += [("sram_uncorrectable_parity", counts["sram_u"]),
                 ("sram_uncorrectable_secded", counts["sram_u"])]
    else:
        tree.append(("sram_uncorrectable", counts["sram_u"]))
    tree += [("dram_correctable", counts["dram_c"]), ("dram_uncorrectable", counts["dram_u"])]
    if aggregate and node.driver_major >= 550:
        tree.append(("sram_threshold_exceeded", "No" if gpu.ecc_enabled else "N/A"))
    return tree


def _identity_xml(node: Node, gpu: Gpu) -> XmlTree:
    """Return the GPU's identity elements, product_name through ibmnpu, in the real order."""
    mig = ("Enabled" if gpu.mig_enabled else "Disabled") if gpu.mig_capable else "N/A"
    return [
        ("product_name", gpu.name),
        ("product_brand", "NVIDIA"),
        ("product_architecture", gpu.arch_display),
        ("display_mode", "Disabled"),
        ("display_active", "Disabled"),
        ("persistence_mode", "Enabled" if gpu.persistence else "Disabled"),
        ("addressing_mode", "None"),
        ("mig_mode", [("current_mig", mig), ("pending_mig", mig)]),
        ("mig_devices", mig_devices_xml(node, gpu) if gpu.mig_enabled else "None"),
        ("accounting_mode", "Disabled"),
        ("accounting_mode_buffer_size", "4000"),
        ("driver_model", na("current_dm", "pending_dm")),
        ("serial", gpu.serial),
        ("uuid", gpu.uuid),
        ("minor_number", str(gpu.slot)),
        ("vbios_version", gpu.vbios),
        ("multigpu_board", "No"),
        ("board_id", f"0x{gpu.bus << 8:x}"),
        ("board_part_number", "SIMULATED"),
        ("gpu_part_number", f"{gpu.pci_device_id[:4]}-885-A1"),
        ("gpu_fru_part_number", "N/A"),
        ("gpu_module_id", str(gpu.slot + 1)),
        ("inforom_version", [("img_version", "G520.0200.00.05"), ("oem_object", "2.1"),
                             ("ecc_object", "7.16"), ("pwr_object", "N/A")]),
        ("inforom_bbx_flush", na("latest_timestamp", "latest_duration")),
        ("gpu_operation_mode", na("current_gom", "pending_gom")),
        ("c2c_mode", "N/A"),
        ("gpu_virtualization_mode", [("virtualization_mode", "None"),
                                     ("host_vgpu_mode", "N/A"),
                                     ("vgpu_heterogeneous_mode", "N/A")]),
        ("gpu_reset_status", [("reset_required", "No"),
                              ("drain_and_reset_recommended", "No")]),
        ("gsp_firmware_version", node.driver),
        ("ibmnpu", na("relaxed_ordering_mode")),
    ]


def _pci_xml(gpu: Gpu) -> XmlTree:
    """Return the children of the GPU's pci element: ids, link generation and width, counters."""
    return [
        ("pci_bus", f"{gpu.bus:02X}"),
        ("pci_device", "00"),
        ("pci_domain", "0000"),
        ("pci_base_class", "3"),
        ("pci_sub_class", "2"),
        ("pci_device_id", gpu.pci_device_id),
        ("pci_bus_id", gpu.bus_id),
        ("pci_sub_system_id", gpu.pci_sub_system_id),
        ("pci_gpu_link_info", [
            ("pcie_gen", [
                ("max_link_gen", str(gpu.pcie_gen_max)),
                ("current_link_gen", str(gpu.pcie_gen)),
                ("device_current_link_gen", str(gpu.pcie_gen)),
                ("max_device_link_gen", str(gpu.pcie_gen_max)),
                ("max_host_link_gen", str(gpu.pcie_gen_max)),
            ]),
            ("link_widths", [
                ("max_link_width", f"{gpu.pcie_width_max}x"),
                ("current_link_width", f"{gpu.pcie_width}x"),
            ]),
        ]),
        ("pci_bridge_chip", na("bridge_chip_type", "bridge_chip_fw")),
        ("replay_counter", "0"),
        ("replay_rollover_counter", "0"),
        ("tx_util", "0 KB/s"),
        ("rx_util", "0 KB/s"),
        ("atomic_caps_inbound", "N/A"),
        ("atomic_caps_outbound", "N/A"),
    ]


def _memory_xml(node: Node, gpu: Gpu) -> XmlTree:
    """Return the elements fan_speed through remapped_rows: clock event reasons, memory usage,
    utilization and the ECC counters."""
    ecc = "Enabled" if gpu.ecc_enabled else "Disabled"
    # r535 renamed the clock throttle reasons to clock event reasons.
    reason = "clocks_event_reason" if node.driver_major >= 535 else "clocks_throttle_reason"
    reasons = f"{reason}s"
    free = gpu.memory_total - gpu.memory_reserved - gpu.memory_used
    return [
        ("fan_speed", "N/A"),
        ("performance_state", "P0"),
        (reasons, [(f"{reason}_{name}", gpu.clock_reason(name)) for name in CLOCK_REASONS]),
        ("sparse_operation_mode", "N/A"),
        ("fb_memory_usage", [("total", f"{gpu.memory_total} MiB"),
                             ("reserved", f"{gpu.memory_reserved} MiB"),
                             ("used", f"{gpu.memory_used} MiB"), ("free", f"{free} MiB")]),
        ("bar1_memory_usage", [("total", "131072 MiB"), ("used", "1 MiB"),
                               ("free", "131071 MiB")]),
        ("cc_protected_memory_usage", [("total", "0 MiB"), ("used", "0 MiB"),
                                       ("free", "0 MiB")]),
        ("compute_mode", "Default"),
        # In MIG mode the whole-GPU utilization is N/A (A100 captures of 510 and 535).
        ("utilization", [(name, "N/A" if gpu.mig_enabled else "0 %") for name in (
            "gpu_util", "memory_util", "encoder_util", "decoder_util", "jpeg_util", "ofa_util")]),
        ("encoder_stats", [("session_count", "0"), ("average_fps", "0"),
                           ("average_latency", "0")]),
        ("fbc_stats", [("session_count", "0"), ("average_fps", "0"), ("average_latency", "0")]),
        ("ecc_mode", [("current_ecc", ecc), ("pending_ecc", ecc)]),
        ("ecc_errors", [("volatile", ecc_scope(gpu, node, aggregate=False)),
                        ("aggregate", ecc_scope(gpu, node, aggregate=True))]),
        ("retired_pages", [
            ("multiple_single_bit_retirement", na("retired_count", "retired_pagelist")),
            ("double_bit_retirement", na("retired_count", "retired_pagelist")),
            ("pending_blacklist", "N/A"),
            ("pending_retirement", "N/A"),
        ]),
        # In MIG mode the row remapper is not reported (A100 captures of 510 and 535: N/A).
        ("remapped_rows", "N/A" if gpu.mig_enabled else [
            ("remapped_row_corr", "0"),
            ("remapped_row_unc", str(gpu.remap_unc)),
            ("remapped_row_pending", "Yes" if gpu.remap_pending else "No"),
            ("remapped_row_failure", "No"),
            ("row_remapper_histogram", [
                ("row_remapper_histogram_max", f"{2560 - gpu.remap_unc} bank(s)"),
                ("row_remapper_histogram_high", f"{gpu.remap_unc} bank(s)"),
                ("row_remapper_histogram_partial", "0 bank(s)"),
                ("row_remapper_histogram_low", "0 bank(s)"),
                ("row_remapper_histogram_none", "0 bank(s)"),
            ]),
        ]),
    ]


def _temperature_xml(node: Node, gpu: Gpu) -> XmlTree:
    """Return the children of the temperature element; r555 renamed its thresholds."""
    if node.driver_major >= 555:
        return [("gpu_temp", f"{gpu.temperature} C"), ("gpu_temp_tlimit", "N/A"),
                ("gpu_temp_max_tlimit_threshold", "-5 C"),
                ("gpu_temp_slow_tlimit_threshold", "-2 C"),
                ("gpu_temp_max_gpu_tlimit_threshold", "0 C"),
                ("gpu_target_temperature", "N/A"), ("memory_temp", "N/A"),
                ("gpu_temp_max_mem_tlimit_threshold", "N/A")]
    return [("gpu_temp", f"{gpu.temperature} C"), ("gpu_temp_tlimit", "N/A"),
            ("gpu_temp_max_threshold", "92 C"), ("gpu_temp_slow_threshold", "89 C"),
            ("gpu_temp_max_gpu_threshold", "87 C"), ("gpu_target_temperature", "N/A"),
            ("memory_temp", f"{gpu.temperature + 4} C"),
            ("gpu_temp_max_mem_threshold", "95 C")]


def _power_xml(node: Node, gpu: Gpu) -> XmlTree:
    """Return the elements temperature through module_power_readings; r560 reports the power
    draw as an average and an instant reading instead of one power_draw."""
    limit = f"{gpu.power_limit:.2f} W"
    if node.driver_major >= 560:
        draw: XmlTree = [("average_power_draw", f"{gpu.power_draw:.2f} W"),
                         ("instant_power_draw", f"{gpu.power_draw:.2f} W")]
    else:
        draw = [("power_draw", f"{gpu.power_draw:.2f} W")]
    return [
        ("temperature", _temperature_xml(node, gpu)),
        ("supported_gpu_target_temp", na("gpu_target_temp_min", "gpu_target_temp_max")),
        ("gpu_power_readings", [
            ("power_state", "P0"),
            *draw,
            ("current_power_limit", limit),
            ("requested_power_limit", limit),
            ("default_power_limit", limit),
            ("min_power_limit", f"{gpu.power_limit * 2 / 7:.2f} W"),
            ("max_power_limit", limit),
        ]),
        ("gpu_memory_power_readings", na(*[tag for tag, _ in draw])),
        ("module_power_readings", [
            ("power_state", "P0"),
            *na(*[tag for tag, _ in draw]),
            *na("current_power_limit", "requested_power_limit", "default_power_limit",
                "min_power_limit", "max_power_limit"),
        ]),
    ]


# The <fabric> block by driver generation, as real outputs print it: R535 (a captured A100 of
# 535) only state and status; R580 (our H200 capture of 580.159.04, and a GB200 tray's of
# 580.173.02) also cliqueId, clusterUuid and seven health fields, which a registered GPU's
# reads as below. Branches between 535 and 580 print the R580 shape here (not verified).
FABRIC_HEALTH_FIELDS = ("summary", "bandwidth", "route_recovery_in_progress", "route_unhealthy",
                        "access_timeout_recovery", "incorrect_configuration",
                        "partition_assigned")
FABRIC_HEALTHY: XmlTree = [
    ("summary", "Healthy"), ("bandwidth", "Full"), ("route_recovery_in_progress", "False"),
    ("route_unhealthy", "False"), ("access_timeout_recovery", "False"),
    *na("incorrect_configuration", "partition_assigned")]


def _fabric_xml(node: Node, gpu: Gpu) -> XmlTree:
    """The GPU's NVLink fabric registration. On a multi-node NVLink profile every GPU of the
    domain reports one clique ID and cluster UUID (derived from the node's nvlink_domain, the
    same on every node of it), unless gpuN-fabric-in-progress holds its registration back; an
    NVSwitch baseboard registers with its own fabric manager (no cluster UUID)."""
    if node.multi_node_nvlink and has_fault(gpu.faults, "fabric-in-progress"):
        block: XmlTree = [("state", "In Progress"), *na("status", "cliqueId", "clusterUuid"),
                          ("health", na(*FABRIC_HEALTH_FIELDS))]
    elif node.multi_node_nvlink:
        digest = hashlib.sha256(f"nvlink-domain:{node.nvlink_domain}".encode()).hexdigest()
        uuid = f"{digest[0:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        block = [("state", "Completed"), ("status", "Success"),
                 ("cliqueId", str(int(digest[32:36], 16) % 32768)), ("clusterUuid", uuid),
                 ("health", FABRIC_HEALTHY)]
    elif node.nvswitch and node.arch_key != "ampere":
        # Hopper and later NVSwitch baseboards register with their fabric manager; an HGX A100
        # reads N/A (the captured A100 of 535).
        block = [("state", "Completed"), ("status", "Success"), ("cliqueId", "0"),
                 ("clusterUuid", "N/A"), ("health", FABRIC_HEALTHY)]
    else:
        block = [*na("state", "status", "cliqueId", "clusterUuid"),
                 ("health", na(*FABRIC_HEALTH_FIELDS))]
    return block if node.driver_major >= 550 else block[:2]


def _clocks_xml(node: Node, gpu: Gpu) -> XmlTree:
    """Return the elements clocks through supported_clocks, the NVSwitch fabric's state
    among them."""
    fabric = _fabric_xml(node, gpu)
    mhz = "{} MHz".format
    return [
        ("clocks", [("graphics_clock", mhz(gpu.sm_clock)), ("sm_clock", mhz(gpu.sm_clock)),
                    ("mem_clock", mhz(gpu.mem_max)), ("video_clock", mhz(gpu.video_max))]),
        ("applications_clocks", [("graphics_clock", mhz(gpu.sm_max)),
                                 ("mem_clock", mhz(gpu.mem_max))]),
        ("default_applications_clocks", [("graphics_clock", mhz(gpu.sm_max)),
                                         ("mem_clock", mhz(gpu.mem_max))]),
        ("deferred_clocks", na("mem_clock")),
        ("max_clocks", [("graphics_clock", mhz(gpu.sm_max)), ("sm_clock", mhz(gpu.sm_max)),
                        ("mem_clock", mhz(gpu.mem_max)), ("video_clock", mhz(gpu.video_max))]),
        ("max_customer_boost_clocks", [("graphics_clock", mhz(gpu.sm_max))]),
        ("clock_policy", na("auto_boost", "auto_boost_default")),
        ("voltage", [("graphics_volt", "670.000 mV")]),
        ("fabric", fabric),
        ("supported_clocks", [("supported_mem_clock", [
            ("value", mhz(gpu.mem_max)),
            ("supported_graphics_clock", mhz(gpu.sm_max)),
            ("supported_graphics_clock", mhz(gpu.sm_max // 2)),
            ("supported_graphics_clock", mhz(345)),
        ])]),
    ]


def gpu_xml(node: Node, gpu: Gpu) -> XmlTree:
    return [
        *_identity_xml(node, gpu),
        ("pci", _pci_xml(gpu)),
        *_memory_xml(node, gpu),
        *_power_xml(node, gpu),
        *_clocks_xml(node, gpu),
        ("processes", []),
        ("accounted_processes", []),
    ]


def render_xml(node: Node, gpus: list[Gpu]) -> str:
    lines = [
        '<?xml version="1.0" ?>',
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">',
        f"<!-- {SIM_MARKER} -->",
        "<nvidia_smi_log>",
        f"\t<timestamp>{timestamp_text()}</timestamp>",
        f"\t<driver_version>{xml_escape(node.driver)}</driver_version>",
        f"\t<cuda_version>{xml_escape(node.cuda)}</cuda_version>",
        f"\t<attached_gpus>{len(node.gpus)}</attached_gpus>",
    ]
    for gpu in gpus:
        lines.append(f'\t<gpu id="{gpu.bus_id}">')
        lines.extend(xml_lines(gpu_xml(node, gpu), 2))
        lines.append("\t</gpu>")
    lines += ["", "</nvidia_smi_log>"]
    return "\n".join(lines) + "\n"


def render_nvlink_status(node: Node, gpus: list[Gpu]) -> str:
    speed = f"{float(node.profile.get('nvlink_link_speed_gbps', 26.562)):.3f} GB/s"
    out: list[str] = []
    for gpu in gpus:
        out.append(f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})")
        if gpu.mig_enabled:
            # An H200 in MIG mode (capture nvidia-smi-nvlink/h200-mig-unsupported.txt).
            out.append("Nvlink queries are not supported for Devices in MIG mode")
            continue
        if gpu.nvlinks and not any(gpu.nvlinks):
            # With no link trained, NVML refuses the per-link query altogether.
            out.append("NVML: Unable to retrieve NVLink information as all links are inActive")
            continue
        for link, active in enumerate(gpu.nvlinks):
            out.append(f"\t Link {link}: {speed if active else '<inactive>'}")
    return "\n".join(out) + "\n" if out else ""


def pcie_relation(numa_a: int, numa_b: int) -> str:
    return "NODE" if numa_a == numa_b else "SYS"


def render_topology(node: Node) -> str:
    gpus = node.gpus
    nic_gpu_slot = [nic * node.gpu_count // node.nic_count for nic in range(node.nic_count)]
    nic_numa = [slot * node.numa_count // max(node.gpu_count, 1) for slot in nic_gpu_slot]
    host_nodes = host_numa_nodes()
    with_gpu_numa_id = node.driver_major >= 535
    trailer = 4 if with_gpu_numa_id else 2

    def gpu_gpu(a: Gpu, b: Gpu) -> str:
        if a is b:
            return " X "
        # Without NVSwitch, NVLink bridges pair GPUs 0-1, 2-3...
        if node.nvswitch or a.slot // 2 == b.slot // 2:
            bonded = min(a.active_links, b.active_links)
        else:
            bonded = 0
        return f"NV{bonded}" if bonded else pcie_relation(a.numa, b.numa)

    def gpu_nic(gpu: Gpu, nic: int) -> str:
        if nic_gpu_slot[nic] == gpu.slot:
            return "PIX"
        return pcie_relation(gpu.numa, nic_numa[nic])

    def nic_nic(a: int, b: int) -> str:
        if a == b:
            return " X "
        if nic_gpu_slot[a] == nic_gpu_slot[b]:
            return "PIX"
        return pcie_relation(nic_numa[a], nic_numa[b])

    labels = [f"GPU{g.index}" for g in gpus] + [f"NIC{n}" for n in range(node.nic_count)]
    tail = ["CPU Affinity", "NUMA Affinity"] + (["GPU NUMA ID"] if with_gpu_numa_id else [])
    # The real tool underlines the header with ANSI escapes even when writing to a pipe.
    lines = ["\t\x1b[4m" + "\t".join(labels + tail) + "\x1b[0m"]
    for gpu in gpus:
        # Affinity is reported against the host's real NUMA nodes so that binding works.
        host_node, cpus = host_nodes[min(gpu.numa, len(host_nodes) - 1)]
        cells = [gpu_gpu(gpu, other) for other in gpus]
        cells += [gpu_nic(gpu, nic) for nic in range(node.nic_count)]
        affinity = [cpus, str(host_node)] + (["", "N/A"] if with_gpu_numa_id else [])
        lines.append("\t".join([f"GPU{gpu.index}", *cells, *affinity]))
    for nic in range(node.nic_count):
        cells = [gpu_nic(gpu, nic) for gpu in gpus]
        cells += [nic_nic(nic, other) for other in range(node.nic_count)]
        lines.append("\t".join([f"NIC{nic}", *cells]) + "\t" * trailer)
    text = "\n".join(lines) + "\n" + TOPO_LEGEND
    if node.nic_count:
        text += "\nNIC Legend:\n\n"
        text += "".join(f"  NIC{nic}: mlx5_{nic}\n" for nic in range(node.nic_count)) + "\n"
    return text


# ---------------------------------------------------------------------------------------------
# --query-gpu
# ---------------------------------------------------------------------------------------------


def _ecc_count(kind: str) -> Any:
    """Return a getter(node, gpu) of the GPU's ``kind`` ECC error count ("corrected" or
    "uncorrected"), "[N/A]" where ECC is off."""
    def get(_node: Node, g: Gpu) -> str:
        if not g.ecc_enabled:
            return "[N/A]"
        return str(g.dram_uncorrectable if kind == "uncorrected" else 0)
    return get


def _device_fields() -> dict[str, tuple[str, Any]]:
    """Return the --query-gpu fields of identity, PCIe, modes, memory and utilization, each
    name -> (unit, getter(node, gpu) -> str)."""
    return {
        "timestamp": ("", lambda _n, _g: datetime.datetime.now().strftime(
            "%Y/%m/%d %H:%M:%S.%f")[:-3]),
        "driver_version": ("", lambda n, _g: n.driver),
        "count": ("", lambda n, _g: str(len(n.gpus))),
        "index": ("", lambda _n, g: str(g.index)),
        "name": ("", lambda _n, g: g.name),
        "serial": ("", lambda _n, g: g.serial),
        "uuid": ("", lambda _n, g: g.uuid),
        "pci.bus_id": ("", lambda _n, g: g.bus_id),
        "pci.domain": ("", lambda _n, _g: "0x0000"),
        "pci.bus": ("", lambda _n, g: f"0x{g.bus:02X}"),
        "pci.device": ("", lambda _n, _g: "0x00"),
        "pci.device_id": ("", lambda _n, g: f"0x{g.pci_device_id}"),
        "pci.sub_device_id": ("", lambda _n, g: f"0x{g.pci_sub_system_id}"),
        "pcie.link.gen.current": ("", lambda _n, g: str(g.pcie_gen)),
        "pcie.link.gen.max": ("", lambda _n, g: str(g.pcie_gen_max)),
        "pcie.link.gen.hostmax": ("", lambda _n, g: str(g.pcie_gen_max)),
        "pcie.link.width.current": ("", lambda _n, g: str(g.pcie_width)),
        "pcie.link.width.max": ("", lambda _n, g: str(g.pcie_width_max)),
        "persistence_mode": ("", lambda _n, g: "Enabled" if g.persistence else "Disabled"),
        "display_mode": ("", lambda _n, _g: "Disabled"),
        "compute_mode": ("", lambda _n, _g: "Default"),
        "compute_cap": ("", lambda _n, g: g.compute_cap),
        "pstate": ("", lambda _n, _g: "P0"),
        "fan.speed": ("%", lambda _n, _g: "[N/A]"),
        "vbios_version": ("", lambda _n, g: g.vbios),
        "memory.total": ("MiB", lambda _n, g: str(g.memory_total)),
        "memory.reserved": ("MiB", lambda _n, g: str(g.memory_reserved)),
        "memory.used": ("MiB", lambda _n, g: str(g.memory_used)),
        "memory.free": ("MiB", lambda _n, g: str(
            g.memory_total - g.memory_reserved - g.memory_used)),
        # In MIG mode: [N/A] (the H100 MIG capture of 590).
        "utilization.gpu": ("%", lambda _n, g: "[N/A]" if g.mig_enabled else "0"),
        "utilization.memory": ("%", lambda _n, g: "[N/A]" if g.mig_enabled else "0"),
    }


def _health_fields() -> dict[str, tuple[str, Any]]:
    """Return the --query-gpu fields of ECC, temperature, power, clocks, remapped rows and MIG,
    each name -> (unit, getter(node, gpu) -> str)."""
    def mig(_node: Node, g: Gpu) -> str:
        return ("Enabled" if g.mig_enabled else "Disabled") if g.mig_capable else "[N/A]"

    def remapped(value: Any) -> Any:
        # Not reported in MIG mode (the H100 MIG capture of 590: [N/A]).
        return lambda n, g: "[N/A]" if g.mig_enabled else value(n, g)

    return {
        "ecc.mode.current": ("", lambda _n, g: "Enabled" if g.ecc_enabled else "Disabled"),
        "ecc.mode.pending": ("", lambda _n, g: "Enabled" if g.ecc_enabled else "Disabled"),
        "ecc.errors.corrected.volatile.total": ("", _ecc_count("corrected")),
        "ecc.errors.corrected.aggregate.total": ("", _ecc_count("corrected")),
        "ecc.errors.uncorrected.volatile.total": ("", _ecc_count("uncorrected")),
        "ecc.errors.uncorrected.aggregate.total": ("", _ecc_count("uncorrected")),
        "ecc.errors.uncorrected.volatile.dram": ("", _ecc_count("uncorrected")),
        "ecc.errors.uncorrected.aggregate.dram": ("", _ecc_count("uncorrected")),
        "temperature.gpu": ("", lambda _n, g: str(g.temperature)),
        "power.draw": ("W", lambda _n, g: f"{g.power_draw:.2f}"),
        "power.limit": ("W", lambda _n, g: f"{g.power_limit:.2f}"),
        "enforced.power.limit": ("W", lambda _n, g: f"{g.power_limit:.2f}"),
        "power.default_limit": ("W", lambda _n, g: f"{g.power_limit:.2f}"),
        "power.max_limit": ("W", lambda _n, g: f"{g.power_limit:.2f}"),
        "power.min_limit": ("W", lambda _n, g: f"{g.power_limit * 2 / 7:.2f}"),
        "clocks.sm": ("MHz", lambda _n, g: str(g.sm_clock)),
        "clocks.gr": ("MHz", lambda _n, g: str(g.sm_clock)),
        "clocks.mem": ("MHz", lambda _n, g: str(g.mem_max)),
        "clocks.max.sm": ("MHz", lambda _n, g: str(g.sm_max)),
        "clocks.max.gr": ("MHz", lambda _n, g: str(g.sm_max)),
        "clocks.max.mem": ("MHz", lambda _n, g: str(g.mem_max)),
        "retired_pages.pending": ("", lambda _n, _g: "[N/A]"),
        "remapped_rows.correctable": ("", remapped(lambda _n, _g: "0")),
        "remapped_rows.uncorrectable": ("", remapped(lambda _n, g: str(g.remap_unc))),
        "remapped_rows.pending": ("", remapped(
            lambda _n, g: "Yes" if g.remap_pending else "No")),
        "remapped_rows.failure": ("", remapped(lambda _n, _g: "No")),
        "mig.mode.current": ("", mig),
        "mig.mode.pending": ("", mig),
    }


def _fields() -> dict[str, tuple[str, Any]]:
    """Field name -> (unit shown in the header and after values, getter(node, gpu) -> str)."""
    fields: dict[str, tuple[str, Any]] = {**_device_fields(), **_health_fields()}
    aliases = {
        "gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid",
        "gpu_bus_id": "pci.bus_id", "pcie.link.gen.gpucurrent": "pcie.link.gen.current",
        "pcie.link.gen.gpumax": "pcie.link.gen.max", "clocks.current.sm": "clocks.sm",
        "clocks.current.graphics": "clocks.gr", "clocks.graphics": "clocks.gr",
        "clocks.current.memory": "clocks.mem", "clocks.memory": "clocks.mem",
        "clocks.max.graphics": "clocks.max.gr", "clocks.max.memory": "clocks.max.mem",
        "ecc.errors.uncorrected.volatile.device_memory": "ecc.errors.uncorrected.volatile.dram",
        "ecc.errors.uncorrected.aggregate.device_memory": "ecc.errors.uncorrected.aggregate.dram",
    }
    for alias, target in aliases.items():
        fields.setdefault(alias, fields[target])
    for prefix in ("clocks_event_reasons", "clocks_throttle_reasons"):
        for reason in QUERY_CLOCK_REASONS:
            fields[f"{prefix}.{reason}"] = ("", lambda _n, g, r=reason: g.clock_reason(r))
    return fields


FIELDS = _fields()

# --query-compute-apps fields (field -> unit). No process ever runs on a simulated GPU, so only
# the header can be printed; the names still have to be valid ones.
APP_FIELDS = {
    "timestamp": "", "gpu_name": "", "gpu_bus_id": "", "gpu_serial": "", "gpu_uuid": "",
    "pid": "", "process_name": "", "name": "", "used_gpu_memory": "MiB", "used_memory": "MiB",
}


def render_query(node: Node, gpus: list[Gpu], query: str, fmt: str,
                 apps: bool = False) -> str:
    names = [name.strip() for name in query.split(",") if name.strip()]
    for name in names:
        renamed = name.startswith("clocks_event_reasons.")
        if name not in (APP_FIELDS if apps else FIELDS) or (
                renamed and not apps and node.driver_major < EVENT_REASONS_DRIVER):
            die(f'Field "{name}" is not a valid field to query.\n\n', EXIT_INVALID_ARGUMENT)
    options = [option.strip() for option in fmt.split(",")]
    if "csv" not in options or not set(options) <= {"csv", "noheader", "nounits"}:
        die(f'"{fmt}" is not a valid format.\nPlease run \'nvidia-smi -h\' for help.\n',
            EXIT_INVALID_ARGUMENT)
    units = "nounits" not in options
    lines: list[str] = []
    if "noheader" not in options:
        header = []
        for name in names:
            unit = APP_FIELDS[name] if apps else FIELDS[name][0]
            header.append(f"{name} [{unit}]" if unit else name)
        lines.append(", ".join(header))
    if apps:
        return "".join(f"{line}\n" for line in lines)
    for gpu in gpus:
        values = []
        for name in names:
            unit, getter = FIELDS[name]
            value = getter(node, gpu)
            if units and unit and not value.startswith("["):
                value = f"{value} {unit}"
            values.append(value)
        lines.append(", ".join(values))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# MIG
# ---------------------------------------------------------------------------------------------

# Drivers from this branch print the wider -lgip (81 columns) and -lgi (59) tables, a Placement
# column in -lci and a BAR1 share in proportion to a GPU instance's memory (a real A100 of
# 580.126.09, an RTX PRO 6000 Blackwell on R575 or later and a Jetson Thor on 580 show them; an
# A100 of 515, NVIDIA's MIG user guide and the A100 XML captures of 510 and 535 show the older
# layout and a 32767 MiB BAR1). Where between 535 and 575 the change came is not known.
MIG_NEW_LAYOUT_DRIVER = 560

# Compute instance profile IDs by compute slice count (nvml.h, NVML_COMPUTE_INSTANCE_PROFILE_
# 1_SLICE 0, 2_SLICE 1, 3_SLICE 2, 4_SLICE 3, 7_SLICE 4, 8_SLICE 5, 6_SLICE 6).
CI_PROFILE_IDS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

# The real tables, header lines verbatim (from NVIDIA's MIG user guide and real A100, H100 and
# RTX PRO 6000 Blackwell sessions), then each field's column: (column, "<" left-aligned from it
# or ">" right-aligned to end there).
LGIP_HEADER = {
    False: ("+-----------------------------------------------------------------------------+",
            "| GPU instance profiles:                                                      |",
            "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |",
            "|                              Free/Total   GiB              CE    JPEG  OFA  |",
            "|=============================================================================|"),
    True: ("+-------------------------------------------------------------------------------+",
           "| GPU instance profiles:                                                        |",
           "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
           "|                                Free/Total   GiB              CE    JPEG  OFA  |",
           "|===============================================================================|"),
}
LGIP_COLUMNS = {
    False: ((5, ">"), (7, "<"), (27, ">"), (32, "<"), (43, "<"), (54, "<"), (61, "<"),
            (68, "<"), (74, "<")),
    True: ((5, ">"), (7, "<"), (29, ">"), (34, "<"), (45, "<"), (56, "<"), (63, "<"),
           (70, "<"), (76, "<")),
}
LGIP_SECOND_ROW = {False: ((62, "<"), (68, "<"), (74, "<")),
                   True: ((64, "<"), (70, "<"), (76, "<"))}
LGI_HEADER = {
    False: ("+-------------------------------------------------------+",
            "| GPU instances:                                        |",
            "| GPU   Name             Profile  Instance   Placement  |",
            "|                          ID       ID       Start:Size |",
            "|=======================================================|"),
    True: ("+---------------------------------------------------------+",
           "| GPU instances:                                          |",
           "| GPU   Name               Profile  Instance   Placement  |",
           "|                            ID       ID       Start:Size |",
           "|=========================================================|"),
}
LGI_COLUMNS = {False: ((5, ">"), (7, "<"), (29, ">"), (38, ">"), (48, "<")),
               True: ((5, ">"), (7, "<"), (31, ">"), (40, ">"), (50, "<"))}
LCI_HEADER = {
    False: ("+-------------------------------------------------------+",
            "| Compute instances:                                    |",
            "| GPU     GPU       Name             Profile   Instance |",
            "|       Instance                       ID        ID     |",
            "|         ID                                            |",
            "|=======================================================|"),
    True: ("+--------------------------------------------------------------------+",
           "| Compute instances:                                                 |",
           "| GPU     GPU       Name             Profile   Instance   Placement  |",
           "|       Instance                       ID        ID       Start:Size |",
           "|         ID                                                         |",
           "|====================================================================|"),
}
LCI_COLUMNS = ((5, ">"), (12, ">"), (19, "<"), (41, ">"), (51, ">"), (61, "<"))
LCIP_HEADER = (
    "+--------------------------------------------------------------------------------------+",
    "| Compute instance profiles:                                                           |",
    "| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |",
    "|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |",
    "|         ID                                                          CE    JPEG       |",
    "|======================================================================================|",
)
LCIP_COLUMNS = ((5, ">"), (12, ">"), (19, "<"), (40, "<"), (47, "<"), (63, ">"), (72, ">"),
                (78, ">"), (84, ">"))
LCIP_SECOND_ROW = ((72, ">"), (78, ">"))
# The summary table's MIG devices block (H100 capture, driver 590).
MIG_TABLE_HEADER = (
    "+-----------------------------------------------------------------------------------------+",
    "| MIG devices:                                                                            |",
    "+------------------+----------------------------------+-----------+-----------------------+",
    "| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |",
    "|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
    "|                  |                                  |        ECC|                       |",
    "|==================+==================================+===========+=======================|",
)
MIG_TABLE_RULE = MIG_TABLE_HEADER[2]

NO_MIG_ENABLED = "No MIG-enabled devices found.\n"
# A real RTX PRO 6000 Blackwell whose MIG prerequisites were not met (driver 580.65.06).
NO_MIG_SUPPORTED = "No MIG-supported devices found.\n"
# What the listings print when a MIG-enabled GPU has nothing to list. Not seen in a capture:
# forum answers and tools that parse nvidia-smi quote these lines; the exit status is a guess.
NO_GPU_INSTANCES = "No GPU instances found.\n"
NO_COMPUTE_INSTANCES = "No compute instances found.\n"
PERSISTENCE_WARNING = (
    "\nWarning: persistence mode is disabled on device {bus_id}. See the Known Issues section "
    "of the nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get "
    "more information on how to enable persistence mode.\n")


class MigError(Exception):
    """A MIG command refused: the lines printed so far, and the exit status."""

    def __init__(self, output: str, code: int) -> None:
        super().__init__(output)
        self.output = output
        self.code = code


def table_row(width: int, columns: tuple[tuple[int, str], ...], values: list[str]) -> str:
    """A ``width``-wide table row ("|" at both ends) with each value at its column."""
    cells = [" "] * width
    for (column, align), value in zip(columns, values, strict=True):
        start = column - len(value) if align == ">" else column
        cells[start:start + len(value)] = value
    return "|" + "".join(cells)[1:width - 1] + "|"


def mig_profile(gpu: Gpu, profile_id: int) -> MigProfile | None:
    return next((mig for mig in gpu.mig_profiles if mig.id == profile_id), None)


def mig_geometry(gpu: Gpu) -> tuple[int, int]:
    """(memory slots, compute slices) of the whole GPU: those of its largest profile."""
    return (max((mig.memory_slices for mig in gpu.mig_profiles), default=8),
            max((mig.slices for mig in gpu.mig_profiles), default=7))


def gpu_instance_id(gpu: Gpu, size: int, start: int) -> int:
    """The GPU instance ID of a GPU instance of ``size`` memory slots placed at ``start``:
    numbered from the largest size down, each size's instances in placement order (on 8 slots:
    8 at 0 -> 0; 4 at 0, 4 -> 1, 2; 2 at 0..6 -> 3..6; 1 at k -> 7 + k), the IDs NVIDIA's MIG user
    guide shows its A100 creating (examples 2 and 3 of "Creating GPU Instances") and the H100
    capture's 3g.40gb, 2g.20gb and two 1g.10gb (IDs 2, 3, 9, 10). An imitation: other drivers
    number some sizes from the upper half of the GPU."""
    total = mig_geometry(gpu)[0]
    sizes = {mig.memory_slices for mig in gpu.mig_profiles}
    halving = total
    while True:
        sizes.add(halving)
        if halving % 2:
            break
        halving //= 2
    base = 0
    for candidate in sorted(sizes, reverse=True):
        if candidate == size:
            break
        base += total // candidate
    return base + start // size


def placement_preference(start: int, size: int, total: int) -> tuple[int, int, int]:
    """The order in which a new GPU instance takes a free placement: the upper half of the GPU
    first, there the block of twice its size nearest the top first (lowest start inside it),
    then the lower half from its start. An imitation that reproduces NVIDIA's MIG user guide
    (A100: -cgi 9,9 makes GPU instances 2 then 1; -cgi 9,19,14,19 makes 2, 7, 4, 8; -cgi
    14,19,19,19,19,19 makes 5, 13, 7, 8, 9, 10; -cgi 19,19,14,9 makes 13, 11, 3 and then finds
    no room for the 3g) and the H100 capture's geometry created as 3g.40gb, 2g.20gb, 1g.10gb,
    1g.10gb (GPU instances 2, 3, 9, 10). Boards with other placement grids (the RTX PRO 6000
    Blackwell fills its quarters from the start) are not imitated."""
    if start >= total // 2:
        return (0, -(start // (2 * size)), start)
    return (1, 0, start)


def occupied_slots(gpu: Gpu) -> set[int]:
    return {slot for gi in gpu.gpu_instances
            for slot in range(gi["start"], gi["start"] + gi["memory_slices"])}


def free_placements(gpu: Gpu, mig: MigProfile, taken: set[int] | None = None) -> list[int]:
    total = mig_geometry(gpu)[0]
    taken = occupied_slots(gpu) if taken is None else taken
    return [start for start in mig.placements if start + mig.memory_slices <= total
            and not taken & set(range(start, start + mig.memory_slices))]


def free_instances(gpu: Gpu, mig: MigProfile) -> int:
    """How many more GPU instances of ``mig`` fit (-lgip's Free): the placements still free,
    packed from the lowest, within the profile's instance count and the free compute slices."""
    taken = occupied_slots(gpu)
    fit = 0
    for start in free_placements(gpu, mig, taken):
        slots = set(range(start, start + mig.memory_slices))
        if not taken & slots:
            taken |= slots
            fit += 1
    left = mig.instances - sum(int(gi["profile_id"] == mig.id) for gi in gpu.gpu_instances)
    compute = mig_geometry(gpu)[1] - sum(int(gi["slices"]) for gi in gpu.gpu_instances)
    return max(0, min(fit, left, compute // mig.slices))


def ci_profiles(mig: MigProfile) -> list[tuple[int, int, str]]:
    """The compute instance profiles of a GPU instance of ``mig``: (compute slices, profile ID,
    name). As real GPUs offer them: 1 and 2 slices in any larger GPU instance, 3 and 4 only in
    the full GPU, and the whole GPU instance (named like it; a 3g.40gb's 1-slice one is "MIG
    1c.3g.40gb")."""
    out = []
    for size in sorted(CI_PROFILE_IDS):
        if size == mig.slices or (size < mig.slices and (
                size in (1, 2) or (size in (3, 4) and mig.slices == 7))):
            name = mig.full_name if size == mig.slices else f"MIG {size}c.{mig.name}"
            out.append((size, CI_PROFILE_IDS[size], name))
    return out


def ci_name(mig: MigProfile, slices: int) -> str:
    return mig.full_name if slices == mig.slices else f"MIG {slices}c.{mig.name}"


def ci_free_starts(gi: dict[str, Any], size: int) -> list[int]:
    """The starts (in compute slices) where a compute instance of ``size`` still fits."""
    taken = {slot for ci in gi["compute_instances"]
             for slot in range(ci["start"], ci["start"] + ci["slices"])}
    return [start for start in range(0, gi["slices"] - size + 1, size)
            if not taken & set(range(start, start + size))]


def mig_devices(gpu: Gpu) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The GPU's MIG devices (its compute instances with their GPU instances), in the order
    nvidia-smi numbers them: by GPU instance ID, then compute instance ID."""
    return [(gi, ci) for gi in sorted(gpu.gpu_instances, key=lambda g: g["id"])
            for ci in sorted(gi["compute_instances"], key=lambda c: c["id"])]


def mig_uuid(node: Node, gpu: Gpu, gi: dict[str, Any], ci: dict[str, Any]) -> str:
    """A MIG device's UUID: made up like the GPU's, the same for the same GPU, GPU instance and
    compute instance; shaped like real ones (version 5 name-based, RFC 4122 variant)."""
    digest = hashlib.sha256(f"{node.hostname}:gpu{gpu.slot}:gi{gi['id']}:ci{ci['id']}"
                            .encode()).hexdigest()
    variant = "89ab"[int(digest[16], 16) % 4]
    return (f"MIG-{digest[0:8]}-{digest[8:12]}-5{digest[13:16]}-{variant}{digest[17:20]}-"
            f"{digest[20:32]}")


def mig_bar1_mib(node: Node, gpu: Gpu, memory_slices: int) -> int:
    """A GPU instance's BAR1: on newer drivers its share by memory slices, scaled from the H100
    capture (4 of 8 slices of an 81559 MiB GPU: 24739 MiB; an A100 of 580 shows the same
    proportion); older ones report 32767 MiB for every instance (A100 captures of 510, 535)."""
    if node.driver_major < MIG_NEW_LAYOUT_DRIVER:
        return 32767
    return memory_slices * gpu.memory_total * 24739 // (4 * 81559)


def mig_device_view(gpu: Gpu, gi: dict[str, Any], ci: dict[str, Any]) -> dict[str, Any]:
    """What the outputs show of a MIG device: name, SMs, memory, engines."""
    mig = mig_profile(gpu, gi["profile_id"])
    assert mig is not None  # Gpu keeps only the GPU instances of known profiles
    return {"name": ci_name(mig, ci["slices"]),
            "sm": mig.multiprocessors * ci["slices"] // gi["slices"],
            "memory": mig.memory_mib, "used": mig_used_mib(gi["memory_slices"]),
            "engines": mig.engines}


def render_mig_table(node: Node, gpus: list[Gpu]) -> list[str]:
    """The summary table's "MIG devices:" block, as the H100 capture (driver 590) prints it."""
    lines = list(MIG_TABLE_HEADER)
    devices = [(gpu, gi, ci) for gpu in gpus if gpu.mig_enabled for gi, ci in mig_devices(gpu)]
    if not devices:
        return [*lines, f"|  {'No MIG devices found':<87}|", MIG_TABLE_HEADER[0]]
    numbering: dict[int, int] = {}
    for gpu, gi, ci in devices:
        index = numbering[gpu.slot] = numbering.get(gpu.slot, -1) + 1
        view = mig_device_view(gpu, gi, ci)
        bar1 = mig_bar1_mib(node, gpu, gi["memory_slices"])
        engines = view["engines"]
        ecc = "0" if gpu.ecc_enabled else "N/A"
        lines += [
            f"|{gpu.index:>3}{gi['id']:>5}{ci['id']:>4}{index:>4}  |"
            f"{view['used']:>16}MiB / {view['memory']:>5}MiB    | {view['sm']:<3}{ecc:>6} |"
            f"{engines['copy_engine_count']:>3}{engines['encoder_count']:>4}"
            f"{engines['decoder_count']:>5}{engines['ofa_count']:>5}{engines['jpg_count']:>5} |",
            f"|{'':18}|{0:>16}MiB / {bar1:>5}MiB    |{'':11}|{'':23}|",
            MIG_TABLE_RULE,
        ]
    return lines


def mig_devices_xml(node: Node, gpu: Gpu) -> XmlTree | str:
    """<mig_devices>, shaped like the A100 captures' (510, 535)."""
    devices: XmlTree = []
    for index, (gi, ci) in enumerate(mig_devices(gpu)):
        view = mig_device_view(gpu, gi, ci)
        bar1 = f"{mig_bar1_mib(node, gpu, gi['memory_slices'])} MiB"
        engines = view["engines"]
        # A real MIG device reports one MiB less free than total minus used (A100, 510 and 535).
        free = view["memory"] - view["used"] - 1
        devices.append(("mig_device", [
            ("index", str(index)),
            ("gpu_instance_id", str(gi["id"])),
            ("compute_instance_id", str(ci["id"])),
            ("device_attributes", [("shared", [
                ("multiprocessor_count", str(view["sm"])),
                *[(key, str(engines[key])) for key in MigProfile.ENGINES],
            ])]),
            ("ecc_error_count", [("volatile_count", [
                ("sram_uncorrectable", "0" if gpu.ecc_enabled else "N/A")])]),
            ("fb_memory_usage", [("total", f"{view['memory']} MiB"), ("reserved", "0 MiB"),
                                 ("used", f"{view['used']} MiB"), ("free", f"{free} MiB")]),
            ("bar1_memory_usage", [("total", bar1), ("used", "0 MiB"), ("free", bar1)]),
        ]))
    return devices or "None"


def mig_gpus(gpus: list[Gpu]) -> list[Gpu]:
    """The MIG-enabled GPUs among ``gpus``; MigError (with the real message) when none."""
    enabled = [gpu for gpu in gpus if gpu.mig_enabled]
    if enabled:
        return enabled
    if not any(gpu.mig_capable for gpu in gpus):
        raise MigError(NO_MIG_SUPPORTED, EXIT_NOT_FOUND)
    raise MigError(NO_MIG_ENABLED, EXIT_NOT_FOUND)


def render_lgip(node: Node, gpus: list[Gpu]) -> str:
    wide = node.driver_major >= MIG_NEW_LAYOUT_DRIVER
    header = LGIP_HEADER[wide]
    width = len(header[0])
    lines = list(header)
    for gpu in mig_gpus(gpus):
        for mig in gpu.mig_profiles:
            engines = mig.engines
            lines += [
                table_row(width, LGIP_COLUMNS[wide], [
                    str(gpu.index), mig.full_name, str(mig.id),
                    f"{free_instances(gpu, mig)}/{mig.instances}", f"{mig.memory_mib / 1024:.2f}",
                    "No", str(mig.multiprocessors), str(engines["decoder_count"]),
                    str(engines["encoder_count"])]),
                table_row(width, LGIP_SECOND_ROW[wide], [
                    str(engines["copy_engine_count"]), str(engines["jpg_count"]),
                    str(engines["ofa_count"])]),
                header[0],
            ]
    return "\n".join(lines) + "\n"


def render_lgipp(gpus: list[Gpu]) -> str:
    """-lgipp: every placement the profile allows (used or not), as "{start,...}:size"."""
    out = []
    for gpu in mig_gpus(gpus):
        for mig in gpu.mig_profiles:
            starts = ",".join(str(start) for start in mig.placements)
            label = "Placements:" if len(mig.placements) > 1 else "Placement :"
            out.append(f"GPU {gpu.index:>2} Profile ID {mig.id:>2} {label} "
                       f"{{{starts}}}:{mig.memory_slices}")
    return "\n".join(out) + "\n"


def listed_gpu_instances(gpu: Gpu, wanted: set[int] | None) -> list[dict[str, Any]]:
    """The GPU's instances in -lgi's order: by profile (-lgip's order), then by ID."""
    order = {mig.id: position for position, mig in enumerate(gpu.mig_profiles)}
    return sorted((gi for gi in gpu.gpu_instances if wanted is None or gi["id"] in wanted),
                  key=lambda gi: (order[gi["profile_id"]], gi["id"]))


def render_lgi(node: Node, gpus: list[Gpu], wanted: set[int] | None) -> str:
    wide = node.driver_major >= MIG_NEW_LAYOUT_DRIVER
    header = LGI_HEADER[wide]
    width = len(header[0])
    lines = list(header)
    for gpu in mig_gpus(gpus):
        for gi in listed_gpu_instances(gpu, wanted):
            mig = mig_profile(gpu, gi["profile_id"])
            assert mig is not None
            lines += [table_row(width, LGI_COLUMNS[wide], [
                str(gpu.index), mig.full_name, str(mig.id), str(gi["id"]),
                f"{gi['start']}:{gi['memory_slices']}"]), header[0]]
    if len(lines) == len(header):
        raise MigError(NO_GPU_INSTANCES, EXIT_NOT_FOUND)
    return "\n".join(lines) + "\n"


def render_lci(node: Node, gpus: list[Gpu], wanted_gi: set[int] | None,
               wanted_ci: set[int] | None) -> str:
    wide = node.driver_major >= MIG_NEW_LAYOUT_DRIVER
    header = LCI_HEADER[wide]
    width = len(header[0])
    columns = LCI_COLUMNS if wide else LCI_COLUMNS[:-1]
    lines = list(header)
    for gpu in mig_gpus(gpus):
        for gi in listed_gpu_instances(gpu, wanted_gi):
            mig = mig_profile(gpu, gi["profile_id"])
            assert mig is not None
            for ci in sorted(gi["compute_instances"], key=lambda c: c["id"]):
                if wanted_ci is not None and ci["id"] not in wanted_ci:
                    continue
                values = [str(gpu.index), str(gi["id"]), ci_name(mig, ci["slices"]),
                          str(ci["profile_id"]), str(ci["id"]), f"{ci['start']}:{ci['slices']}"]
                lines += [table_row(width, columns, values[:len(columns)]), header[0]]
    if len(lines) == len(header):
        raise MigError(NO_COMPUTE_INSTANCES, EXIT_NOT_FOUND)
    return "\n".join(lines) + "\n"


def render_lcip(gpus: list[Gpu], wanted: set[int] | None) -> str:
    """-lcip: the compute instance profiles of each GPU instance ("*" marks the default)."""
    width = len(LCIP_HEADER[0])
    lines = list(LCIP_HEADER)
    for gpu in mig_gpus(gpus):
        for gi in listed_gpu_instances(gpu, wanted):
            mig = mig_profile(gpu, gi["profile_id"])
            assert mig is not None
            engines = mig.engines
            for size, profile_id, name in ci_profiles(mig):
                total = gi["slices"] // size
                free = len(ci_free_starts(gi, size))
                default = "*" if size == mig.slices else ""
                lines += [
                    table_row(width, LCIP_COLUMNS, [
                        str(gpu.index), str(gi["id"]), name, f"{profile_id}{default}",
                        f"{free}/{total}", str(mig.multiprocessors * size // gi["slices"]),
                        str(engines["decoder_count"]), str(engines["encoder_count"]),
                        str(engines["ofa_count"])]),
                    table_row(width, LCIP_SECOND_ROW, [
                        str(engines["copy_engine_count"]), str(engines["jpg_count"])]),
                    LCIP_HEADER[0],
                ]
    if len(lines) == len(LCIP_HEADER):
        raise MigError(NO_GPU_INSTANCES, EXIT_NOT_FOUND)
    return "\n".join(lines) + "\n"


def find_gi_profile(gpu: Gpu, token: str) -> MigProfile | None:
    """A GPU instance profile by ID, short name (3g.40gb) or full name (MIG 3g.40gb)."""
    token = token.strip()
    for mig in gpu.mig_profiles:
        if token in (str(mig.id), mig.name, mig.full_name):
            return mig
    return None


def find_ci_profile(mig: MigProfile, token: str | None) -> tuple[int, int, str] | None:
    """A compute instance profile of a GPU instance of ``mig`` by ID or name; the default
    (the whole GPU instance) when ``token`` is None."""
    for size, profile_id, name in ci_profiles(mig):
        if (size == mig.slices) if token is None else token.strip() in (
                str(profile_id), name, name[len("MIG "):]):
            return size, profile_id, name
    return None


def save_mig_instances(node: Node, gpu: Gpu) -> None:
    node.mig_instances[gpu.slot] = gpu.gpu_instances
    write_mig_instances(node.mig_instances)


def save_or_fail(node: Node, gpu: Gpu, out: str, what: str) -> None:
    """save_mig_instances; a user without the right fails as the real tool does:
    ``Failed to <what>: Insufficient Permissions`` after what ``out`` already said."""
    try:
        save_mig_instances(node, gpu)
    except PermissionError:
        raise MigError(out + f"Failed to {what}: Insufficient Permissions\n",
                       EXIT_NO_PERMISSION) from None


def add_compute_instance(gpu: Gpu, gi: dict[str, Any], size: int, profile_id: int) -> int | None:
    """Create a compute instance of ``size`` slices in ``gi`` (lowest free start, lowest free
    ID); its ID, or None when it does not fit."""
    starts = ci_free_starts(gi, size)
    used = {ci["id"] for ci in gi["compute_instances"]}
    ids = [i for i in range(8) if i not in used]
    if not starts or not ids:
        return None
    gi["compute_instances"].append(
        {"id": ids[0], "profile_id": profile_id, "start": starts[0], "slices": size})
    return ids[0]


def ci_created_line(gpu: Gpu, gi: dict[str, Any], ci_id: int, name: str, profile_id: int) -> str:
    return (f"Successfully created compute instance ID {ci_id:>2} on GPU {gpu.index:>2} GPU "
            f"instance ID {gi['id']:>2} using profile {name} (ID {profile_id:>2})\n")


def gi_failure(out: str, gpu: Gpu, token: str, error: str, code: int) -> MigError:
    """A -cgi failure as the real tool prints it (MIG user guide: "Unable to create a GPU
    instance on GPU  0 using profile 9: Insufficient Resources" then "Failed to create GPU
    instances: Insufficient Resources"), after what was already created."""
    return MigError(out + f"Unable to create a GPU instance on GPU {gpu.index:>2} using profile "
                    f"{token.strip()}: {error}\nFailed to create GPU instances: {error}\n", code)


def create_gpu_instances(node: Node, gpus: list[Gpu], tokens: list[str],
                         default_ci: bool) -> str:
    """-cgi (with -C, each GPU instance's default compute instance): on every MIG-enabled GPU
    named, the profiles in order. A profile with no free placement stops there, as on a real
    GPU, keeping what was created before it."""
    out = ""
    for gpu in mig_gpus(gpus):
        for token in tokens:
            mig = find_gi_profile(gpu, token)
            if mig is None:
                # An unknown profile: plausible wording and status, not seen in a capture.
                raise gi_failure(out, gpu, token, "Not Found", EXIT_NOT_FOUND)
            starts = free_placements(gpu, mig)
            if not starts or free_instances(gpu, mig) == 0:
                raise gi_failure(out, gpu, token, "Insufficient Resources", EXIT_OTHER_ERROR)
            total = mig_geometry(gpu)[0]
            start = min(starts, key=lambda s: placement_preference(s, mig.memory_slices, total))
            gi: dict[str, Any] = {
                "id": gpu_instance_id(gpu, mig.memory_slices, start), "profile_id": mig.id,
                "start": start, "slices": mig.slices, "memory_slices": mig.memory_slices,
                "compute_instances": []}
            gpu.gpu_instances.append(gi)
            lines = (f"Successfully created GPU instance ID {gi['id']:>2} on GPU {gpu.index:>2} "
                     f"using profile {mig.full_name} (ID {mig.id:>2})\n")
            if default_ci:
                _size, ci_profile, name = find_ci_profile(mig, None) or (0, 0, "")
                ci_id = add_compute_instance(gpu, gi, mig.slices, ci_profile)
                assert ci_id is not None  # a new GPU instance has room for its default
                lines += ci_created_line(gpu, gi, ci_id, name, ci_profile)
            try:
                save_mig_instances(node, gpu)
            except PermissionError:
                gpu.gpu_instances.remove(gi)
                raise gi_failure(out, gpu, token, "Insufficient Permissions",
                                 EXIT_NO_PERMISSION) from None
            out += lines
    return out


def selected_gpu_instances(gpu: Gpu, wanted: set[int] | None, what: str) -> list[dict[str, Any]]:
    """The GPU instances -gi names (all without it); MigError when one named is absent."""
    if wanted is None:
        return sorted(gpu.gpu_instances, key=lambda gi: gi["id"])
    present = {gi["id"]: gi for gi in gpu.gpu_instances}
    for gi_id in sorted(wanted):
        if gi_id not in present:
            # Plausible wording, not seen in a capture.
            raise MigError(f"Unable to {what} on GPU {gpu.index:>2} GPU instance ID "
                           f"{gi_id:>2}: Not Found\n", EXIT_NOT_FOUND)
    return [present[gi_id] for gi_id in sorted(wanted)]


def create_compute_instances(node: Node, gpus: list[Gpu], tokens: list[str] | None,
                             wanted: set[int] | None) -> str:
    """-cci [profiles] [-gi IDs]: compute instances in the GPU instances named (all without
    -gi); without profiles, each one's default (the whole GPU instance)."""
    out = ""
    for gpu in mig_gpus(gpus):
        try:
            gpu_instances = selected_gpu_instances(gpu, wanted, "create a compute instance")
        except MigError as exc:
            raise MigError(out + exc.output + "Failed to create compute instances: Not Found\n",
                           exc.code) from None
        for gi in gpu_instances:
            mig = mig_profile(gpu, gi["profile_id"])
            assert mig is not None
            wanted_profiles: list[str | None] = list(tokens) if tokens else [None]
            for token in wanted_profiles:
                found = find_ci_profile(mig, token)
                ci_id = None if found is None else add_compute_instance(gpu, gi, *found[:2])
                if found is None or ci_id is None:
                    # The wording of the GPU instance failure, applied to compute instances.
                    error = "Not Found" if found is None else "Insufficient Resources"
                    shown = token if token is not None else str(CI_PROFILE_IDS.get(mig.slices))
                    raise MigError(
                        out + f"Unable to create a compute instance on GPU {gpu.index:>2} GPU "
                        f"instance ID {gi['id']:>2} using profile {shown}: {error}\n"
                        f"Failed to create compute instances: {error}\n",
                        EXIT_NOT_FOUND if found is None else EXIT_OTHER_ERROR)
                save_or_fail(node, gpu, out, "create compute instances")
                out += ci_created_line(gpu, gi, ci_id, found[2], found[1])
    return out


def destroy_compute_instances(node: Node, gpus: list[Gpu], wanted_gi: set[int] | None,
                              wanted_ci: set[int] | None) -> str:
    """-dci [-gi IDs] [-ci IDs]: every compute instance named (all without them)."""
    out = ""
    destroyed = 0
    for gpu in mig_gpus(gpus):
        try:
            gpu_instances = selected_gpu_instances(gpu, wanted_gi, "destroy a compute instance")
        except MigError as exc:
            raise MigError(out + exc.output + "Failed to destroy compute instances: Not Found\n",
                           exc.code) from None
        for gi in gpu_instances:
            for ci in sorted(gi["compute_instances"], key=lambda c: c["id"]):
                if wanted_ci is not None and ci["id"] not in wanted_ci:
                    continue
                gi["compute_instances"].remove(ci)
                save_or_fail(node, gpu, out, "destroy compute instances")
                destroyed += 1
                out += (f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU "
                        f"{gpu.index:>2} GPU instance ID {gi['id']:>2}\n")
    if not destroyed:
        # Nothing to destroy: plausible wording and status, not seen in a capture.
        raise MigError(NO_COMPUTE_INSTANCES, EXIT_NOT_FOUND)
    return out


def destroy_gpu_instances(node: Node, gpus: list[Gpu], wanted: set[int] | None) -> str:
    """-dgi [-gi IDs]: every GPU instance named (all without -gi). One that still holds a
    compute instance stops there with the real "In use by another client"."""
    out = ""
    destroyed = 0
    for gpu in mig_gpus(gpus):
        try:
            gpu_instances = selected_gpu_instances(gpu, wanted, "destroy a GPU instance")
        except MigError as exc:
            raise MigError(out + exc.output + "Failed to destroy GPU instances: Not Found\n",
                           exc.code) from None
        for gi in gpu_instances:
            if gi["compute_instances"]:
                raise MigError(out + f"Unable to destroy GPU instance ID {gi['id']:>2} from GPU "
                               f"{gpu.index:>2}: In use by another client\n"
                               "Failed to destroy GPU instances: In use by another client\n",
                               EXIT_OTHER_ERROR)
            gpu.gpu_instances.remove(gi)
            save_or_fail(node, gpu, out, "destroy GPU instances")
            destroyed += 1
            out += f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {gpu.index:>2}\n"
    if not destroyed:
        raise MigError(NO_GPU_INSTANCES, EXIT_NOT_FOUND)
    return out


def set_mig_mode(node: Node, gpus: list[Gpu], value: str, all_gpus: bool) -> str:
    """-mig 0|1 on the GPUs named (all without -i). As the real tool: "Enabled MIG Mode for GPU
    <bus id>" per GPU (with its warning when persistence mode is off) and "All done."; a GPU
    without MIG is "Not Supported", a warning when no -i named it, else the end; MIG cannot be
    disabled while GPU instances exist ("In use by another client", what a real GPU answers
    when it cannot leave MIG mode; that GPU instances alone cause it is an assumption)."""
    wanted = value.strip().upper()
    if wanted not in ("0", "1", "ENABLED", "DISABLED"):
        raise UsageError(f'Invalid MIG mode value "{value}". '
                         "Please run 'nvidia-smi -h' for help.")
    enable = wanted in ("1", "ENABLED")
    verb = "enable" if enable else "disable"
    out = ""
    modes = dict(node.mig_modes)
    for gpu in gpus:
        error = None
        if not gpu.mig_capable:
            error, code = "Not Supported", EXIT_NOT_SUPPORTED
        elif not enable and gpu.gpu_instances:
            error, code = "In use by another client", EXIT_OTHER_ERROR
        if error:
            out += f"Unable to {verb} MIG Mode for GPU {gpu.bus_id}: {error}\n"
            if error == "Not Supported" and all_gpus:
                out += "Treating as warning and moving on.\n"
                continue
            raise MigError(out + "Terminating early due to previous errors.\n", code)
        modes[gpu.slot] = enable
        try:
            write_mig_modes(modes, node.arch_key)
        except PermissionError:
            raise MigError(out + f"Unable to {verb} MIG Mode for GPU {gpu.bus_id}: Insufficient "
                           "Permissions\nTerminating early due to previous errors.\n",
                           EXIT_NO_PERMISSION) from None
        node.mig_modes = modes
        out += f"{verb.title()}d MIG Mode for GPU {gpu.bus_id}\n"
        if not gpu.persistence:
            out += PERSISTENCE_WARNING.format(bus_id=gpu.bus_id)
    return out + "All done.\n"


def run_mig(node: Node, gpus: list[Gpu], request: dict[str, Any]) -> str:
    """``nvidia-smi mig ...``: the output, or MigError."""
    op = request["op"]
    if op == "lgip":
        return render_lgip(node, gpus)
    if op == "lgipp":
        return render_lgipp(gpus)
    if op == "lgi":
        return render_lgi(node, gpus, request.get("gi"))
    if op == "lci":
        return render_lci(node, gpus, request.get("gi"), request.get("ci"))
    if op == "lcip":
        return render_lcip(gpus, request.get("gi"))
    if op == "cgi":
        return create_gpu_instances(node, gpus, request["profiles"], request.get("default_ci",
                                                                                 False))
    if op == "cci":
        return create_compute_instances(node, gpus, request.get("profiles"), request.get("gi"))
    if op == "dci":
        return destroy_compute_instances(node, gpus, request.get("gi"), request.get("ci"))
    return destroy_gpu_instances(node, gpus, request.get("gi"))



# ---------------------------------------------------------------------------------------------
# -pm
# ---------------------------------------------------------------------------------------------


def set_persistence(node: Node, gpus: list[Gpu], value: str) -> str:
    wanted = value.strip().upper()
    if wanted not in ("0", "1", "ENABLED", "DISABLED"):
        raise UsageError(f'Invalid persistence mode value "{value}". '
                         "Please run 'nvidia-smi -h' for help.")
    enable = wanted in ("1", "ENABLED")
    state = dict(node.persistence)
    for gpu in gpus:
        state[gpu.slot] = enable
    path = sim_path(PERSISTENCE_FILE)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(f"{slot} {'Enabled' if on else 'Disabled'}\n"
                              for slot, on in sorted(state.items()))
    except PermissionError:
        first = gpus[0].bus_id if gpus else "?"
        die(f"Unable to set persistence mode for GPU {first}: Insufficient Permissions\n"
            "Terminating early due to previous errors.\n", EXIT_NO_PERMISSION)
    verb = "Enabled" if enable else "Disabled"
    return "".join(f"{verb} Legacy persistence mode for GPU {g.bus_id}.\n" for g in gpus) + \
        "All done.\n"


# ---------------------------------------------------------------------------------------------
# -r
# ---------------------------------------------------------------------------------------------


def reset(node: Node, gpus: list[Gpu]) -> str:
    """Reset the GPUs as nvidia-smi(1) describes -r: root only, every GPU named (all without
    -i). A GPU whose kernel log holds Xid 79 (fallen off the bus) cannot be reset: exit 15 and
    nothing is reset. Each reset is appended to RESET_LOG; the faults stay (a reset does not
    mend hardware)."""
    if os.geteuid() != 0:
        die("SIMULATED: GPU reset requires root.\n", EXIT_NO_PERMISSION)
    lost = [g for g in gpus if any(f.kind.key == "xid" and f.xid == 79 for f in g.faults)]
    if lost:
        die(f"SIMULATED: unable to reset GPU {lost[0].bus_id}: the GPU has fallen off the bus "
            "or has otherwise become inaccessible.\n", EXIT_GPU_IS_LOST)
    path = sim_path(RESET_LOG)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    now = int(datetime.datetime.now().timestamp())
    with open(path, "a", encoding="utf-8") as handle:
        handle.writelines(f"{now} {g.bus_id}\n" for g in gpus)
    # A reset GPU comes back in its MIG mode without GPU instances (MIG user guide: MIG
    # devices must be recreated "if the GPU or system is reset").
    if any(g.gpu_instances for g in gpus):
        for gpu in gpus:
            node.mig_instances.pop(gpu.slot, None)
        write_mig_instances(node.mig_instances)
    return "".join(f"SIMULATED: GPU {g.bus_id} was reset.\n" for g in gpus) + "All done.\n"


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def take_value(args: list[str], position: int, option: str) -> tuple[str, int]:
    """The value of ``--opt=value`` or ``--opt value`` / ``-o value``; returns (value, next)."""
    arg = args[position]
    if "=" in arg and arg.startswith("--"):
        return arg.split("=", 1)[1], position + 1
    if position + 1 >= len(args):
        raise UsageError(f"Option {option} requires a value. Please run 'nvidia-smi -h'.")
    return args[position + 1], position + 2


# nvidia-smi mig: its operations (one per call) and their long names.
MIG_OPERATIONS = {
    "-lgip": "lgip", "--list-gpu-instance-profiles": "lgip",
    "-lgipp": "lgipp", "--list-gpu-instance-possible-placements": "lgipp",
    "-lgi": "lgi", "--list-gpu-instances": "lgi",
    "-lcip": "lcip", "--list-compute-instance-profiles": "lcip",
    "-lci": "lci", "--list-compute-instances": "lci",
    "-cgi": "cgi", "--create-gpu-instance": "cgi",
    "-cci": "cci", "--create-compute-instance": "cci",
    "-dci": "dci", "--destroy-compute-instance": "dci",
    "-dgi": "dgi", "--destroy-gpu-instance": "dgi",
}
MIG_USAGE = "Invalid combination of input arguments. Please run 'nvidia-smi mig -h' for help."

MIG_HELP_TEXT = """    mig -- Multi Instance GPU management.

{marker}

    Usage: nvidia-smi mig [options]

    Options include:
    [-h | --help]: Display help information
    [-i | --id]: Enumeration index, PCI bus ID or UUID. Provide comma
                 separated values for more than one device
    [-gi | --gpu-instance-id]: GPU instance ID. Provide comma separated
                               values for more than one GPU instance
    [-ci | --compute-instance-id]: Compute instance ID. Provide comma
                                   separated values for more than one compute instance
    [-lgip | --list-gpu-instance-profiles]: List supported GPU instance profiles.
    [-lgipp | --list-gpu-instance-possible-placements]: List possible GPU instance
                                    placements in the following format, {{}}:<Placement Size>
    [-C | --default-compute-instance]: Create compute instance with default profile when used
                                       with the "-cgi" option.
    [-cgi | --create-gpu-instance]: Create GPU instances for the given profile tuples. A profile
                                    is a profile name or ID, comma separated.
    [-dgi | --destroy-gpu-instance]: Destroy GPU instances.
    [-lgi | --list-gpu-instances]: List GPU instances.
    [-lcip | --list-compute-instance-profiles]: List supported compute instance profiles.
    [-cci | --create-compute-instance]: Create compute instance for the given profile names or
                                        IDs (the default profile when none is given).
    [-dci | --destroy-compute-instance]: Destroy compute instances.
    [-lci | --list-compute-instances]: List compute instances.
"""


def _instance_ids(value: str, option: str) -> set[int]:
    try:
        return {int(part) for part in value.split(",") if part.strip()}
    except ValueError:
        raise UsageError(f'Invalid value "{value}" for {option}. '
                         "Please run 'nvidia-smi mig -h' for help.") from None


def parse_mig(args: list[str]) -> dict[str, Any]:
    """``nvidia-smi mig ...``: one operation, -i, -gi, -ci and -C; raises UsageError."""
    request: dict[str, Any] = {"action": "mig", "id": None, "op": None}
    position = 0
    while position < len(args):
        arg = args[position]
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if name in ("-h", "--help"):
            return {"action": "mig_help"}
        if name in ("-i", "--id"):
            request["id"], position = take_value(args, position, name)
            continue
        if name in ("-gi", "--gpu-instance-id", "-ci", "--compute-instance-id"):
            value, position = take_value(args, position, name)
            request["gi" if name in ("-gi", "--gpu-instance-id") else "ci"] = \
                _instance_ids(value, name)
            continue
        if name in ("-C", "--default-compute-instance"):
            request["default_ci"] = True
        elif name in MIG_OPERATIONS:
            if request["op"] is not None:
                raise UsageError(MIG_USAGE)
            request["op"] = MIG_OPERATIONS[name]
            has_value = "=" in arg or (position + 1 < len(args)
                                       and not args[position + 1].startswith("-"))
            if request["op"] == "cgi" or (request["op"] == "cci" and has_value):
                value, position = take_value(args, position, name)
                request["profiles"] = [part for part in value.split(",") if part.strip()]
                continue
        else:
            raise UsageError(f"ERROR: Option {arg} is not recognized. Please run "
                             "'nvidia-smi mig -h'.")
        position += 1
    if request["op"] is None or (request.get("default_ci") and request["op"] != "cgi"):
        raise UsageError(MIG_USAGE)
    return request


def parse(args: list[str]) -> dict[str, Any]:
    """Parse like the real tool: returns the action and its options, or raises UsageError."""
    if args and args[0] == "mig":
        return parse_mig(args[1:])
    request: dict[str, Any] = {"action": "table", "id": None}
    rest = args
    if args and args[0] in ("nvlink", "topo"):
        request["action"] = args[0]
        rest = args[1:]
        request["sub"] = None
    position = 0
    while position < len(rest):
        arg = rest[position]
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if name in ("-h", "--help"):
            return {"action": "help"}
        if name in ("-i", "--id"):
            request["id"], position = take_value(rest, position, name)
            continue
        if request["action"] == "nvlink" and name in ("-s", "--status"):
            request["sub"] = "status"
        elif request["action"] == "topo" and name in ("-m", "--matrix"):
            request["sub"] = "matrix"
        elif request["action"] in ("nvlink", "topo"):
            raise UsageError(f"ERROR: Option {arg} is not recognized. Please run "
                             f"'nvidia-smi {request['action']} -h'.")
        elif name == "--version":
            request["action"] = "version"
        elif name in ("-L", "--list-gpus"):
            request["action"] = "list"
        elif name in ("-q", "--query"):
            request["query"] = True
        elif name in ("-x", "--xml-format"):
            request["xml"] = True
        elif name == "--query-gpu":
            request["query_gpu"], position = take_value(rest, position, name)
            continue
        elif name == "--query-compute-apps":
            request["query_apps"], position = take_value(rest, position, name)
            continue
        elif name == "--format":
            request["format"], position = take_value(rest, position, name)
            continue
        elif name in ("-pm", "--persistence-mode"):
            request["pm"], position = take_value(rest, position, name)
            continue
        elif name in ("-mig", "--multi-instance-gpu"):
            request["mig"], position = take_value(rest, position, name)
            continue
        elif name in ("-r", "--gpu-reset"):
            request["reset"] = True
        else:
            raise UsageError(f"ERROR: Option {arg} is not recognized. Please run 'nvidia-smi -h'.")
        position += 1
    _check_combination(request)
    return request


def _check_combination(request: dict[str, Any]) -> None:
    """Raise UsageError when the options parsed into ``request`` do not go together (a
    subcommand without its one option, a query without --format, -x without -q); return
    None when they do."""
    if request["action"] in ("nvlink", "topo") and request["sub"] is None:
        raise UsageError("SIMULATED nvidia-smi supports only 'nvlink -s' and 'topo -m'.")
    queries = ("query_gpu" in request) + ("query_apps" in request)
    if queries > 1 or (queries == 1) != ("format" in request):
        raise UsageError("Invalid combination of input arguments. "
                         "Please run 'nvidia-smi -h' for help.")
    if request.get("xml") and not request.get("query"):
        raise UsageError("Invalid combination of input arguments. "
                         "Please run 'nvidia-smi -h' for help.")
    if request.get("query") and not request.get("xml"):
        raise UsageError("SIMULATED nvidia-smi supports -q only together with -x (XML).")


def main(argv: list[str]) -> int:
    try:
        request = parse(argv)
    except UsageError as exc:
        die(f"{exc}\n\n", EXIT_INVALID_ARGUMENT)
    driver = (read_text(DRIVER_VERSION_FILE) or "").strip()
    cuda = (read_text(CUDA_VERSION_FILE) or "").strip()
    faults = load_faults()
    if driver and has_fault(faults, "driver-other-version"):
        driver = other_driver_version(driver)
    if request["action"] == "help":
        sys.stdout.write(HELP_TEXT.format(driver=driver or "unknown", marker=SIM_MARKER))
        return EXIT_OK
    if request["action"] == "mig_help":
        sys.stdout.write(MIG_HELP_TEXT.format(marker=SIM_MARKER))
        return EXIT_OK
    if not driver:
        die(DRIVER_FAILURE + "\n", EXIT_DRIVER_NOT_LOADED)
    profile = load_profile()
    node = Node(profile or {"gpu_model": "", "gpu_count": 0}, driver, cuda or "N/A", faults)
    if request["action"] == "version":
        sys.stdout.write(render_version(node))
        return EXIT_OK
    if not node.gpus:
        die("No devices were found\n", EXIT_NOT_FOUND)
    gpus = node.select(request.get("id"))
    if request["action"] == "mig" or "mig" in request:
        try:
            if request["action"] == "mig":
                sys.stdout.write(run_mig(node, gpus, request))
            else:
                sys.stdout.write(set_mig_mode(node, gpus, request["mig"], request["id"] is None))
        except UsageError as exc:
            die(f"{exc}\n\n", EXIT_INVALID_ARGUMENT)
        except MigError as exc:
            die(exc.output, exc.code)
    elif request.get("reset"):
        sys.stdout.write(reset(node, gpus))
    elif "pm" in request:
        try:
            sys.stdout.write(set_persistence(node, gpus, request["pm"]))
        except UsageError as exc:
            die(f"{exc}\n\n", EXIT_INVALID_ARGUMENT)
    elif request["action"] == "list":
        sys.stdout.write(render_list(node, gpus))
    elif request["action"] == "nvlink":
        sys.stdout.write(render_nvlink_status(node, gpus))
    elif request["action"] == "topo":
        sys.stdout.write(render_topology(node))
    elif "query_gpu" in request:
        sys.stdout.write(render_query(node, gpus, request["query_gpu"], request["format"]))
    elif "query_apps" in request:
        sys.stdout.write(render_query(node, gpus, request["query_apps"], request["format"],
                                      apps=True))
    elif request.get("xml"):
        sys.stdout.write(render_xml(node, gpus))
    else:
        sys.stdout.write(render_table(node, gpus))
    return EXIT_OK
