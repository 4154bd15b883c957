"""The faults the simulated cluster can inject: every fault is defined once, here.

``provisioner sim up --fault FAULT`` injects FAULT on every GPU node, ``--fault NODE:FAULT`` on
one. The spec is parsed and checked against the hardware profile and the node names before
anything starts (``validate``); an unknown, misspelled or out-of-range fault is an
``InputError``. Each GPU node then gets its faults, one per line, in ``/etc/gpu-sim/faults``:

- the stand-in tools (nvidia-smi, nvidia-ctk, dcgmi, nvcc, nvbandwidth) read that file on the
  node through ``read_fault_file`` (this module is bundled into them, see
  ``provisioner.sim.bundle``), so an edit of the file on a running node takes effect at their
  next call;
- the controller turns the Xid faults into the node's kernel log (``kernel_log``) and the HCA
  and AER faults into its sysfs trees (``provisioner.sim.sysfs``) when the node is created, and
  rewrites them when ``sim up`` gives a running node other faults.

Version mismatches of the headers (``/usr/include/nccl.h``, ``cudnn_version*.h``) have no fault:
the header *is* the installed state, so a test edits it on a running node (for example
``podman exec sim-gpu-1 sed -i 's/NCCL_MINOR .*/NCCL_MINOR 99/' /usr/include/nccl.h``).

Standard library only (besides ``provisioner.errors`` and ``provisioner.sim.tools.node``, both
stdlib-only too): it runs inside the stand-ins on the node's python3.
"""

from __future__ import annotations

import difflib
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from provisioner.errors import InputError
from provisioner.sim.tools.node import (
    EFI_GLOBAL_GUID,
    FAULTS_FILE,
    IB_SYSFS,
    KERNEL_LOG,
    PCI_SYSFS,
    efivar_path,
    gpu_bus,
)

Target = Literal["gpu", "hca", "node", "mirror"]
# The package mirror's fault file, on the controller under the simulation's state directory,
# mounted read-only into the mirror's container at MIRROR_FAULTS (tools/mirror_server.py).
MIRROR_FAULTS = "/etc/gpu-sim-mirror/faults"
# What the kernel faults put on the node (K2: newer_kernel of the running one), and what a node
# without them must not have.
KERNEL_FILES = ("/boot/vmlinuz-K2", "/lib/modules/K2", "/usr/src/linux-headers-K2")
# The module signing lines of the kernel config the simulated headers carry (``build/.config``,
# what dkms reads CONFIG_MODULE_SIG_HASH from before it signs a module; tools/dkms.py). Debian
# 12's and RHEL 9's kernels sign modules with SHA-256 (CONFIG_MODULE_SIG_SHA256; unconfirmed
# here for every kernel flavour).
HEADERS_CONFIG = (b"# SIMULATED kernel config (gpu-cluster-provisioner): module signing only\n"
                  b"CONFIG_MODULE_SIG=y\nCONFIG_MODULE_SIG_ALL=y\nCONFIG_MODULE_SIG_SHA256=y\n"
                  b'CONFIG_MODULE_SIG_HASH="sha256"\n')
# Every simulated node's interface has a line rate, as a real NIC has: a token bucket (tc tbf) on
# its eth0, so what a pair of nodes measures is set by the network and not by how busy this
# machine's CPUs are (unshaped, two containers on a loaded 2-core machine measured anywhere from
# 5.4 to 13 Gbit/s for the same healthy pair). net-slow and net-slow-Nmbit lower that rate.
NET_SLOW_DEVICE = "eth0"
LINE_RATE_MBIT = 2000
NET_SLOW_RATE = "200mbit"
# The rate the node's interface has, read at every boot (gpu-sim-boot: a container that restarts
# gets a fresh network namespace without the bucket).
LINK_RATE_FILE = "/etc/gpu-sim/eth0-rate-mbit"
# Where a simulated node keeps its RoCE ports' network interfaces (what /sys/class/net holds on a
# real node: their ECN enable files), beside IB_SYSFS.
NET_SYSFS = "/var/lib/gpu-sim/sysfs/class/net"
# The priority the simulated RoCE ports carry their lossless traffic on, with PFC and ECN both on
# there: 3, the priority RoCE set-ups commonly make lossless (the simulation's choice; no NVIDIA
# default is claimed).
ROCE_PRIORITY = 3
# What mlx5_N-symbol-errors puts in its port's symbol_error counter: far over validate's
# threshold for any interval shorter than 100 hours, well below the counter's 16-bit maximum.
SYMBOL_ERRORS = 1000


def net_slow_rate(faults: Iterable[Fault]) -> str | None:
    """The rate net-slow (NET_SLOW_RATE) or net-slow-Nmbit (N Mbit/s) gives the node's
    interface; None without either (the last one given wins)."""
    rate = None
    for fault in faults:
        if fault.kind.key == "net-slow":
            rate = NET_SLOW_RATE
        elif fault.kind.key == "net-slow-mbit" and fault.mbit:
            rate = f"{fault.mbit}mbit"
    return rate


def link_rate_mbit(faults: Iterable[Fault]) -> int:
    """What the node's eth0 sends at most, in Mbit/s: the line rate, or a slow fault's rate."""
    rate = net_slow_rate(faults)
    return LINE_RATE_MBIT if rate is None else int(rate.removesuffix("mbit"))


def tc_command(mbit: int | str) -> str:
    """The token bucket of ``mbit`` Mbit/s on the node's interface (a number, or a shell
    expansion of one). The bucket holds at least 4 ms of the rate (tbf needs a burst of at least
    rate/HZ; 4 ms covers HZ=250 and up): rate/2 kilobytes, never under 256."""
    burst = (f"$(( {mbit} / 2 > 256 ? {mbit} / 2 : 256 ))" if isinstance(mbit, str)
             else str(max(256, mbit * 4 // 8)))  # kbit per ms = Mbit/s; 4 ms, in kilobytes
    return (f"tc qdisc replace dev {NET_SLOW_DEVICE} root tbf rate {mbit}mbit "
            f"burst {burst}kb latency 100ms")


def net_slow_script(faults: Iterable[Fault]) -> str:
    """The shell that gives the node's interface its rate now and at every boot: the rate of
    net-slow, or the line rate again (a healed node sends at the network's own speed)."""
    mbit = link_rate_mbit(faults)
    return f"echo {mbit} > {LINK_RATE_FILE}; {tc_command(mbit)}"


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault. ``template`` is how help and errors spell it (N: GPU or HCA index,
    K: NVLink index, NN: Xid code); ``pattern`` matches it with named groups ``gpu``,
    ``link``, ``hca``, ``xid``."""

    key: str
    template: str
    pattern: str
    target: Target
    description: str
    node_files: tuple[str, ...]  # what it changes on the node
    read_by: tuple[str, ...]  # which stand-in or node file shows it


FAULT_KINDS: tuple[FaultKind, ...] = (
    FaultKind("missing", "gpuN-missing", r"gpu(?P<gpu>\d+)-missing", "gpu",
              "GPU N fell off the bus: nvidia-smi and the CDI spec omit it, the others "
              "re-enumerate", (FAULTS_FILE,), ("nvidia-smi", "nvidia-ctk")),
    FaultKind("nvlink-down", "gpuN-nvlink-down", r"gpu(?P<gpu>\d+)-nvlink-down", "gpu",
              "every NVLink of GPU N is inactive", (FAULTS_FILE,), ("nvidia-smi",)),
    FaultKind("nvlink-link-down", "gpuN-nvlink-linkK-down",
              r"gpu(?P<gpu>\d+)-nvlink-link(?P<link>\d+)-down", "gpu",
              "NVLink K of GPU N is inactive", (FAULTS_FILE,), ("nvidia-smi",)),
    # Multi-node NVLink profiles only: the GPU has not registered with the NVLink fabric (the
    # NVLink switch trays or the fabric manager have not finished setting up its routes).
    FaultKind("fabric-in-progress", "gpuN-fabric-in-progress",
              r"gpu(?P<gpu>\d+)-fabric-in-progress", "gpu",
              "GPU N's NVLink fabric registration is still In Progress (no clique ID or cluster "
              "UUID): it is not in the multi-node NVLink domain", (FAULTS_FILE,), ("nvidia-smi",)),
    FaultKind("ecc-uncorrectable", "gpuN-ecc-uncorrectable",
              r"gpu(?P<gpu>\d+)-ecc-uncorrectable", "gpu",
              "GPU N has uncorrectable DRAM ECC errors and a row remap pending; dcgmi diag "
              "fails", (FAULTS_FILE,), ("nvidia-smi", "dcgmi")),
    FaultKind("pcie-downgrade", "gpuN-pcie-downgrade", r"gpu(?P<gpu>\d+)-pcie-downgrade", "gpu",
              "GPU N's PCIe link trained one generation lower at half width", (FAULTS_FILE,),
              ("nvidia-smi",)),
    # What nvidia-smi's --help-query-gpu calls HW Slowdown: "reducing the core clocks by a
    # factor of 2 or more" (power brake, thermal protection, a failing power supply).
    FaultKind("hw-slowdown", "gpuN-hw-slowdown", r"gpu(?P<gpu>\d+)-hw-slowdown", "gpu",
              "GPU N's clocks are held down by the hardware: nvidia-smi reports the clock event "
              "reason hw_slowdown Active and its SM clock at half its maximum", (FAULTS_FILE,),
              ("nvidia-smi",)),
    FaultKind("xid", "gpuN-xid-NN", r"gpu(?P<gpu>\d+)-xid-(?P<xid>\d+)", "gpu",
              "the kernel log holds an Xid NN event of GPU N", (KERNEL_LOG,), ("dmesg",)),
    FaultKind("hca-down", "mlx5_N-down", r"mlx5_(?P<hca>\d+)-down", "hca",
              "the port of HCA mlx5_N is down (link_downed counted)", (IB_SYSFS,),
              ("InfiniBand sysfs",)),
    FaultKind("hca-half-rate", "mlx5_N-half-rate", r"mlx5_(?P<hca>\d+)-half-rate", "hca",
              "the port of HCA mlx5_N trained at half width", (IB_SYSFS,), ("InfiniBand sysfs",)),
    # RoCE only: the port's network interface has no IPv4 address, so its GID table has no
    # IPv4-mapped entry and NCCL cannot reach peers over RoCE v2/IPv4 through it.
    FaultKind("hca-no-ipv4-gid", "mlx5_N-no-ipv4-gid", r"mlx5_(?P<hca>\d+)-no-ipv4-gid", "hca",
              "the RoCE port of HCA mlx5_N has no IPv4-mapped GID (its interface has no IPv4 "
              "address): only the link-local entries are in its GID table", (IB_SYSFS,),
              ("InfiniBand sysfs",)),
    # RoCE only: what the node shows of a port's congestion handling (validate's roce_qos
    # check): ECN off is the interface's ECN enable files reading 0 for every priority, PFC off
    # is `dcb pfc show` (the stand-in) reporting every priority off. With both, validate warns.
    FaultKind("hca-ecn-off", "mlx5_N-ecn-off", r"mlx5_(?P<hca>\d+)-ecn-off", "hca",
              "ECN is off on every priority of the RoCE port of HCA mlx5_N: its interface's "
              "ecn/roce_np and ecn/roce_rp enable files read 0", (NET_SYSFS,),
              ("network interface sysfs (ECN)",)),
    FaultKind("hca-pfc-off", "mlx5_N-pfc-off", r"mlx5_(?P<hca>\d+)-pfc-off", "hca",
              "PFC is off on every priority of the RoCE port of HCA mlx5_N: dcb pfc show "
              "reports prio-pfc off everywhere", (FAULTS_FILE,), ("dcb",)),
    # Counters are judged by their rise between two readings: injected into a running node
    # (`sim up --fault` on a running cluster), the count rises between two runs of validate or
    # gpuc-health; on a new node it is the first reading, a baseline.
    FaultKind("hca-symbol-errors", "mlx5_N-symbol-errors", r"mlx5_(?P<hca>\d+)-symbol-errors",
              "hca", f"the port of HCA mlx5_N has counted {SYMBOL_ERRORS} symbol errors (a "
              "marginal cable or transceiver); injected into a running node, its count rises "
              "between two readings", (IB_SYSFS,), ("InfiniBand sysfs",)),
    FaultKind("aer-nonfatal", "gpuN-aer-nonfatal", r"gpu(?P<gpu>\d+)-aer-nonfatal", "gpu",
              "GPU N's PCI function has counted an uncorrectable non-fatal PCIe error (a "
              "completion timeout) in its AER counters; injected into a running node, the count "
              "rises between two readings", (PCI_SYSFS,), ("PCIe AER sysfs",)),
    FaultKind("nvcc-other-version", "nvcc-other-version", r"nvcc-other-version", "node",
              "nvcc --version reports a CUDA release one minor version above the installed "
              "toolkit's", (FAULTS_FILE,), ("nvcc",)),
    FaultKind("driver-other-version", "driver-other-version", r"driver-other-version", "node",
              "nvidia-smi reports a driver one branch above the installed one", (FAULTS_FILE,),
              ("nvidia-smi",)),
    FaultKind("reboot-no-return", "reboot-no-return", r"reboot-no-return", "node",
              "the node does not come back from its next reboot: it hangs before sshd starts "
              "(sim up without the fault starts its sshd again)", (FAULTS_FILE,),
              ("the node's boot (gpu-sim-boot)",)),
    # Secure Boot on: the node's SecureBoot EFI variable says 1 (node_preflight reads it, and
    # the driver role's module signature check; mokutil --sb-state answers from it).
    FaultKind("secure-boot", "secure-boot", r"secure-boot", "node",
              "Secure Boot is on: the node's SecureBoot EFI variable is 1 (mokutil --sb-state "
              "says SecureBoot enabled), so every NVIDIA module must be signed by an enrolled "
              "key", (efivar_path("SecureBoot", EFI_GLOBAL_GUID),), ("EFI variables", "mokutil")),
    # The one step of a MOK enrolment no program can take: a person confirming it at the
    # MokManager console during the boot after `mokutil --import`.
    FaultKind("mok-enrolled", "mok-enrolled", r"mok-enrolled", "node",
              "at the node's next boot a person confirms the pending MOK enrolment request "
              "(mokutil --import) at the MokManager console: its keys join the MOK list; "
              "without it a request stays pending", (FAULTS_FILE,),
              ("the node's boot (gpu-sim-boot)", "mokutil")),
    FaultKind("kernel-newer-unbuilt", "kernel-newer-unbuilt", r"kernel-newer-unbuilt", "node",
              "a newer kernel is installed (not booted) with its headers, and no NVIDIA "
              "module was built for it (its DKMS hook failed)", KERNEL_FILES, ("dkms",)),
    FaultKind("kernel-newer-no-headers", "kernel-newer-no-headers", r"kernel-newer-no-headers",
              "node", "a newer kernel is installed (not booted) without its headers, which no "
              "repository offers", KERNEL_FILES, ("dkms",)),
    # A slow network, slowed for real: tc's token bucket on the node's interface, below the
    # line rate every node has, so every transfer from the node (the pairs of `provisioner
    # certify`, gloo, SSH) measures it.
    FaultKind("net-slow", "net-slow", r"net-slow", "node",
              f"the node's network is slow: its eth0 sends at most {NET_SLOW_RATE} (tc tbf "
              "qdisc on the interface), so every transfer from it is slow in fact",
              (NET_SLOW_DEVICE,), ("every transfer from the node",)),
    # The same, at a rate of the test's choosing: a node slower than its peers yet above a
    # floor (certify's outlier and drift judging), e.g. net-slow-1400mbit.
    FaultKind("net-slow-mbit", "net-slow-Nmbit", r"net-slow-(?P<mbit>\d+)mbit", "node",
              f"the node's eth0 sends at most N Mbit/s, below every node's line rate of "
              f"{LINE_RATE_MBIT} (tc tbf qdisc, as net-slow)",
              (NET_SLOW_DEVICE,), ("every transfer from the node",)),
    # The cluster's, not a node's: an overloaded mirror or caching proxy. The count is per file,
    # so a client that retries gets the file on try N+1; a large N is a mirror that stays down.
    FaultKind("mirror-503", "mirror-503xN", r"mirror-503x(?P<count>\d+)", "mirror",
              "the package mirror answers 503 Service Unavailable to the first N requests for "
              "each package file (.deb, .rpm); indexes are served", (MIRROR_FAULTS,),
              ("the package mirror",)),
    # An attacker on the network path (or a compromised caching proxy) swapping the smoke job's
    # wheels: same names and sizes, other bytes, so only the hashed requirements catch it.
    FaultKind("mirror-tampered-wheels", "mirror-tampered-wheels", r"mirror-tampered-wheels",
              "mirror", "an attacker between the package mirror and the nodes swaps the Python "
              "wheels in transit: every .whl arrives with its size but other bytes (its sha256 "
              "no longer matches); other files are served untouched", (MIRROR_FAULTS,),
              ("the package mirror",)),
)


@dataclass(frozen=True)
class Fault:
    """One fault on one node, e.g. ``gpu3-nvlink-link2-down``."""

    text: str
    kind: FaultKind
    gpu: int | None = None
    link: int | None = None
    hca: int | None = None
    xid: int | None = None
    count: int | None = None
    mbit: int | None = None


@dataclass(frozen=True)
class FaultSpec:
    """A ``--fault`` value: a fault for every GPU node (``node`` None) or for one."""

    node: str | None
    fault: Fault

    @property
    def text(self) -> str:
        return f"{self.node}:{self.fault.text}" if self.node else self.fault.text


def parse_fault(text: str) -> Fault | None:
    """The fault ``text`` names, or None when it names none."""
    for kind in FAULT_KINDS:
        match = re.fullmatch(kind.pattern, text)
        if match:
            numbers = {key: int(value) for key, value in match.groupdict().items()}
            return Fault(text=text, kind=kind, **numbers)
    return None


def parse_faults(lines: Iterable[str]) -> list[Fault]:
    """The faults of a node's fault lines, ``#`` comments and blank lines skipped. Lines naming
    no fault are skipped too (``sim up`` writes only valid ones; a hand-edited faults file must
    not break the node's tools)."""
    out: list[Fault] = []
    for raw in lines:
        fault = parse_fault(raw.split("#", 1)[0].strip())
        if fault is not None:
            out.append(fault)
    return out


def read_fault_file(text: str) -> list[Fault]:
    """The faults of a node's ``/etc/gpu-sim/faults`` (its text), one per line."""
    return parse_faults(text.splitlines())


def fault_file_text(faults: Iterable[str]) -> str:
    """The node's ``/etc/gpu-sim/faults``."""
    return "".join(f"{fault}\n" for fault in faults)


# ---------------------------------------------------------------------------------------------
# What the faults change (shared by the stand-ins and the controller)
# ---------------------------------------------------------------------------------------------


def has_fault(faults: Iterable[Fault], key: str) -> bool:
    return any(fault.kind.key == key for fault in faults)


def roce_lossless_priorities(faults: Iterable[Fault], hca: int, mechanism: str) -> list[int]:
    """The priorities the RoCE port of HCA ``hca`` has ``mechanism`` ("pfc" or "ecn") on:
    ROCE_PRIORITY, or none when the HCA has the mechanism's fault (mlx5_N-pfc-off,
    mlx5_N-ecn-off)."""
    key = f"hca-{mechanism}-off"
    off = any(fault.kind.key == key and fault.hca == hca for fault in faults)
    return [] if off else [ROCE_PRIORITY]


def other_driver_version(version: str) -> str:
    """The driver ``driver-other-version`` reports: one branch up (550.54.15 -> 551.54.15)."""
    branch, sep, rest = version.partition(".")
    return f"{int(branch) + 1}{sep}{rest}" if branch.isdigit() else f"{version}.1"


def other_cuda_version(version: str) -> str:
    """The CUDA version ``nvcc-other-version`` reports: one minor up (12.4 -> 12.5,
    12.4.1 -> 12.5.1)."""
    parts = version.split(".")
    if len(parts) < 2 or not parts[1].isdigit():
        return f"{version}.1"
    parts[1] = str(int(parts[1]) + 1)
    return ".".join(parts)


def newer_kernel(kernel: str) -> str:
    """The release of the kernel the kernel faults install: the running one's with its patch
    level one up (6.1.0-18-amd64 -> 6.1.1-18-amd64)."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(.*)", kernel)
    if match is None:
        return f"{kernel}.newer"
    major, minor, patch, rest = match.groups()
    return f"{major}.{minor}.{int(patch) + 1}{rest}"


def kernel_files(faults: Iterable[Fault], kernel: str) -> list[tuple[str, bytes | None, int]]:
    """(path, content, mode) the kernel faults add (relative to /; content None: a directory,
    mode -1: a symlink to the content): the newer kernel's image and module directory, and
    with ``kernel-newer-unbuilt`` its headers (``build`` pointing at them)."""
    keys = {fault.kind.key for fault in faults}
    if not keys & {"kernel-newer-unbuilt", "kernel-newer-no-headers"}:
        return []
    newer = newer_kernel(kernel)
    marker = b"SIMULATED kernel file (gpu-cluster-provisioner fault)\n"
    out: list[tuple[str, bytes | None, int]] = [
        ("boot", None, 0o755), (f"boot/vmlinuz-{newer}", marker, 0o644),
        (f"lib/modules/{newer}", None, 0o755)]
    if "kernel-newer-unbuilt" in keys:
        hdr = f"usr/src/linux-headers-{newer}"
        out += [(hdr, None, 0o755), (f"{hdr}/SIMULATED", marker, 0o644),
                (f"{hdr}/.config", HEADERS_CONFIG, 0o644),
                (f"lib/modules/{newer}/build", f"/{hdr}".encode(), -1)]
    return out


def kernel_log(faults: Iterable[Fault]) -> str:
    """The node's kernel log: a line in dmesg's format for each Xid fault."""
    lines = []
    for fault in faults:
        if fault.kind.key == "xid" and fault.gpu is not None:
            gpu = fault.gpu
            lines.append(f"[  412.{gpu:06d}] NVRM: Xid (PCI:0000:{gpu_bus(gpu):02x}:00): "
                         f"{fault.xid}, pid=0, name=python3, SIMULATED fault injected by "
                         "gpu-cluster-provisioner")
    return "".join(f"{line}\n" for line in lines)


# ---------------------------------------------------------------------------------------------
# --fault on the controller
# ---------------------------------------------------------------------------------------------


def _shape(text: str, template: bool = False) -> str:
    """Numbers and placeholders alike, so a misspelling is matched against the templates."""
    if template:
        text = re.sub(r"NN|N|K", "#", text)
    return re.sub(r"\d+", "#", text.lower())


def parse_spec(text: str) -> FaultSpec:
    """Parse a ``--fault`` value, ``FAULT`` or ``NODE:FAULT``; InputError when unknown."""
    node, sep, name = text.rpartition(":")
    fault = parse_fault(name)
    if fault is None or (sep and not node):
        shapes = {_shape(kind.template, template=True): kind.template for kind in FAULT_KINDS}
        close = difflib.get_close_matches(_shape(name), list(shapes), n=1, cutoff=0.6)
        hint = (f"did you mean {shapes[close[0]]}?" if close else
                f"the faults are {', '.join(kind.template for kind in FAULT_KINDS)}")
        raise InputError(f"sim up: unknown fault {text!r}: {hint} "
                         "(`provisioner sim up --help` describes them)")
    return FaultSpec(node=node or None, fault=fault)


def _profile_int(profile: Mapping[str, Any], key: str) -> int:
    value = profile.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# The faults only a RoCE port can have, and what of the port each one changes.
_ROCE_ONLY = {
    "hca-no-ipv4-gid": "a GID table's IPv4 entry",
    "hca-ecn-off": "ECN on an HCA port",
    "hca-pfc-off": "PFC on an HCA port",
}


def _check_in_profile(spec: FaultSpec, profile: Mapping[str, Any]) -> None:
    fault = spec.fault
    where = f"sim up: fault {spec.text!r}: profile {profile.get('name', '?')}"
    gpus = _profile_int(profile, "gpu_count")
    if fault.gpu is not None and fault.gpu >= gpus:
        raise InputError(f"{where} has {gpus} GPUs (gpu0..gpu{gpus - 1})")
    links = _profile_int(profile, "nvlink_links_per_gpu")
    if fault.kind.key in ("nvlink-down", "nvlink-link-down") and links == 0:
        raise InputError(f"{where} has no NVLink")
    if fault.link is not None and fault.link >= links:
        raise InputError(f"{where} has {links} NVLinks per GPU (link0..link{links - 1})")
    if fault.hca is not None:
        fabric = str(profile.get("fabric", "infiniband")).lower()
        hcas = _profile_int(profile, "ib_hcas") if fabric in ("infiniband", "roce") else 0
        if fault.hca >= hcas:
            span = f" (mlx5_0..mlx5_{hcas - 1})" if hcas else ""
            raise InputError(f"{where} has {hcas} HCAs{span}")
    roce_only = _ROCE_ONLY.get(fault.kind.key)
    if roce_only and str(profile.get("fabric", "")).lower() != "roce":
        raise InputError(f"{where}'s fabric is {profile.get('fabric', 'infiniband')}: "
                         f"{roce_only} is a RoCE port's")
    if fault.kind.key == "fabric-in-progress" and not profile.get("multi_node_nvlink"):
        raise InputError(f"{where} has no multi-node NVLink: its GPUs register with no NVLink "
                         "domain")
    if fault.mbit is not None and not 0 < fault.mbit < LINE_RATE_MBIT:
        raise InputError(f"sim up: fault {spec.text!r}: a rate is a positive number of Mbit/s "
                         f"below the simulated line rate ({LINE_RATE_MBIT} Mbit/s)")
    if fault.xid is not None and fault.xid < 1:
        raise InputError(f"sim up: fault {spec.text!r}: an Xid code is a positive number")


def validate(raw: Iterable[str], profile: Mapping[str, Any], gpu_nodes: Sequence[str],
             other_nodes: Sequence[str] = ()) -> tuple[FaultSpec, ...]:
    """Every ``--fault`` value parsed and checked against the profile (GPU, NVLink and HCA
    indexes) and the cluster's node names; the first bad one raises InputError."""
    specs = []
    for text in raw:
        spec = parse_spec(text)
        if spec.node is not None and spec.fault.kind.target == "mirror":
            raise InputError(f"sim up: fault {text!r}: {spec.fault.kind.template} is the package "
                             f"mirror's, not a node's: give it without a node "
                             f"(--fault {spec.fault.text})")
        if spec.node is not None and spec.node not in gpu_nodes:
            what = ("is not a GPU node" if spec.node in other_nodes
                    else "is not a node of this cluster")
            raise InputError(f"sim up: fault {text!r}: {spec.node} {what}; the GPU nodes are "
                             f"{', '.join(gpu_nodes)}")
        _check_in_profile(spec, profile)
        specs.append(spec)
    return tuple(specs)


def for_node(node: str, raw: Iterable[str]) -> list[str]:
    """The faults of one node (its ``/etc/gpu-sim/faults`` lines) among ``--fault`` values."""
    specs = [parse_spec(text) for text in raw]
    return [spec.fault.text for spec in specs
            if spec.node in (None, node) and spec.fault.kind.target != "mirror"]


# The line of ``mirror-tampered-wheels`` in the mirror's fault file: mirror_server.TAMPER_WHEELS,
# spelled again because the server runs alone on the mirror container (no package to import).
MIRROR_TAMPER_WHEELS = "tamper-wheels"


def mirror_fault_text(raw: Iterable[str]) -> str:
    """The package mirror's fault file (MIRROR_FAULTS) for ``--fault`` values, one line per
    mirror fault: ``STATUS COUNT`` for ``mirror-503xN`` (``503 2``), ``tamper-wheels`` for
    ``mirror-tampered-wheels``; empty when there is none."""
    lines: list[str] = []
    tamper = f"{MIRROR_TAMPER_WHEELS}\n"
    for spec in (parse_spec(text) for text in raw):
        if spec.fault.kind.key == "mirror-503":
            lines.append(f"503 {spec.fault.count}\n")
        elif spec.fault.kind.key == "mirror-tampered-wheels" and tamper not in lines:
            lines.append(tamper)
    return "".join(lines)


def help_text(width: int = 79) -> str:
    """The fault list of ``provisioner sim up --help``, wrapped at ``width`` columns."""
    column = max(len(kind.template) for kind in FAULT_KINDS) + 4
    lines = textwrap.wrap("faults (--fault FAULT: on every GPU node; --fault NODE:FAULT: on one, "
                          "e.g. sim-gpu-2:gpu3-nvlink-down; mirror-* ones are the package "
                          "mirror's):", width, break_on_hyphens=False)
    for kind in FAULT_KINDS:
        lines += textwrap.wrap(kind.description, width, initial_indent=f"  {kind.template}".ljust(
            column), subsequent_indent=" " * column)
    lines += textwrap.wrap("N and K count from 0 within the profile (GPU, HCA, NVLink), except "
                           "in mirror-503xN, a number of requests; NN is an Xid code. Header "
                           "mismatches (nccl.h, cudnn_version*.h) are no "
                           "fault: edit the installed header on a running node.", width)
    return "\n".join(lines) + "\n"
