"""A simulated ``/sys/class/infiniband`` tree for the simulated cluster's HCAs, the
``/sys/bus/pci/devices`` entries of its GPUs and HCAs (their PCIe AER counters) and, on a RoCE
profile, the ``/sys/class/net`` entries of the HCAs' network interfaces (their ECN enable files).

The files hold exactly the text the mlx5 driver and the kernel's AER statistics expose, so the
fact gathering and checks read them unchanged. Each device also carries a ``SIMULATED`` marker
file (real devices have none), and an HCA's ``board_id`` says SIMULATED too.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.errors import InputError
from provisioner.sim.faults import SYMBOL_ERRORS, parse_faults, roce_lossless_priorities
from provisioner.sim.tools.node import gpu_bus

MARKER_NAME = "SIMULATED"
MARKER_TEXT = "SIMULATED: written by gpu-cluster-provisioner; this HCA does not exist.\n"

# Per-lane signalling names the kernel appends to ``rate`` ("400 Gb/sec (4X NDR)").
_LANE_SPEEDS: dict[int, str] = {200: "XDR", 100: "NDR", 50: "HDR", 25: "EDR", 14: "FDR", 10: "QDR"}
_PORT_WIDTH = 4
# What mlx5 ports whose link is down report (ibstat then shows "Rate: 40").
_DOWN_RATE = "40 Gb/sec (4X QDR)"
# A down IB port keeps polling for its peer; a down Ethernet (RoCE) port reads Disabled.
_DOWN_PHYS_STATE = {"InfiniBand": "2: Polling", "Ethernet": "3: Disabled"}
# The error counters of an mlx5 port's counters/ directory (the PMA's PortCounters); all zero
# on a healthy port.
_ERROR_COUNTERS = (
    "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
    "local_link_integrity_errors", "port_rcv_constraint_errors", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors", "port_xmit_discards", "symbol_error", "VL15_dropped",
)
# ConnectX generation (firmware major, PCI device id) by port rate.
_ADAPTERS: dict[int, tuple[str, str]] = {
    800: ("40.43.1014", "MT4131"),
    400: ("28.41.1000", "MT4129"),
    200: ("20.39.1002", "MT4123"),
    100: ("16.35.2000", "MT4119"),
}
_FABRIC_LINK_LAYER = {"infiniband": "InfiniBand", "roce": "Ethernet"}
# The lines of aer_dev_correctable and of aer_dev_fatal / aer_dev_nonfatal, in the kernel's order
# (drivers/pci/pcie/aer.c: aer_correctable_error_string, aer_uncorrectable_error_string), each
# file ending with its TOTAL_ERR_* line (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats).
_AER_CORRECTABLE = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr",
                    "CorrIntErr", "HeaderOF")
_AER_UNCORRECTABLE = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt",
                      "UnxCmplt", "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol",
                      "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr",
                      "PoisonTLPBlocked")
_AER_FILES = (("aer_dev_correctable", _AER_CORRECTABLE, "ERR_COR"),
              ("aer_dev_fatal", _AER_UNCORRECTABLE, "ERR_FATAL"),
              ("aer_dev_nonfatal", _AER_UNCORRECTABLE, "ERR_NONFATAL"))
# What gpuN-aer-nonfatal counts: one completion timeout, reported as ERR_NONFATAL.
_AER_NONFATAL_FAULT = {"aer_dev_nonfatal": {"CmpltTO": 1}}
_PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


@dataclass(frozen=True)
class _Port:
    state: str
    phys_state: str
    rate: str
    link_layer: str


def _rate_text(rate_gbps: int, width: int) -> str:
    lane = rate_gbps // _PORT_WIDTH
    speed = _LANE_SPEEDS.get(lane)
    if speed is None:
        raise InputError(
            f"ib_rate_gbps {rate_gbps} is not an InfiniBand 4X rate "
            f"(use one of {sorted(lane * _PORT_WIDTH for lane in _LANE_SPEEDS)})"
        )
    return f"{lane * width} Gb/sec ({width}X {speed})"


def _parse_faults(faults: Iterable[str], target: str = "hca") -> dict[int, set[str]]:
    """Fault kinds by HCA number (``hca-down``, ``hca-half-rate``...), or with ``target``
    "gpu" by GPU slot; every other line (other faults, junk) is ignored."""
    out: dict[int, set[str]] = {}
    for fault in parse_faults(faults):
        number = fault.hca if target == "hca" else fault.gpu
        if number is not None:
            out.setdefault(number, set()).add(fault.kind.key)
    return out


def hca_address(number: int) -> str:
    """The PCI address the simulation gives HCA ``mlx5_<number>``: one function on a bus of
    its own, clear of the GPUs' bus numbers (tools/node.py HGX_BUS_NUMBERS)."""
    return f"0000:{0xA0 + number:02x}:00.0"


def roce_netdev(number: int) -> str:
    """The network interface of RoCE HCA ``mlx5_<number>``: udev's PCI path form, en +
    p<bus>s<slot>f<function> (systemd.net-naming-scheme(7), ID_NET_NAME_PATH) on the bus of
    hca_address, then "np0", the port suffix ConnectX interface names are often seen with (its
    source is not confirmed here). Which name a real host gives depends on its udev and naming
    scheme; the simulation claims none."""
    return f"enp{0xA0 + number}s0f0np0"


def gpu_address(profile: Mapping[str, Any], slot: int) -> str:
    """The PCI address of the GPU in ``slot``, as /sys/bus/pci/devices names it: the
    profile's ``pci_bus_ids`` entry, else the bus the simulated nvidia-smi reports."""
    bus_ids = profile.get("pci_bus_ids")
    if isinstance(bus_ids, list) and slot < len(bus_ids):
        domain, bus, rest = str(bus_ids[slot]).lower().split(":", 2)
        return f"{int(domain, 16):04x}:{bus}:{rest}"
    return f"0000:{gpu_bus(slot):02x}:00.0"


def _int_field(profile: Mapping[str, Any], key: str, default: int) -> int:
    value: object = profile.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"profile field {key} must be a non-negative integer, got {value!r}")
    return value


def _port(link_layer: str, rate_gbps: int, faults: set[str]) -> _Port:
    if "hca-down" in faults:
        return _Port("1: DOWN", _DOWN_PHYS_STATE[link_layer], _DOWN_RATE, link_layer)
    # A half-rate link trained on two of its four lanes: same signalling, half the width.
    width = _PORT_WIDTH // 2 if "hca-half-rate" in faults else _PORT_WIDTH
    return _Port("4: ACTIVE", "5: LinkUp", _rate_text(rate_gbps, width), link_layer)


def _write_if_changed(path: Path, text: str) -> None:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _link_if_changed(path: Path, target: str) -> None:
    if path.is_symlink() and os.readlink(path) == target:
        return
    if path.is_symlink() or path.exists():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _hca_count(profile: Mapping[str, Any]) -> int:
    fabric = str(profile.get("fabric", "infiniband")).lower()
    return _int_field(profile, "ib_hcas", 0) if fabric in _FABRIC_LINK_LAYER else 0


def write_ib_sysfs(root: Path, profile: Mapping[str, Any], faults: Iterable[str],
                   pci_root: Path | None = None) -> None:
    """Write ``<root>/mlx5_N/...`` for the profile's HCAs, with the HCA faults applied.

    ``root`` plays ``/sys/class/infiniband``. Files are only rewritten when their text
    changes, and simulated devices beyond the profile's HCA count are removed. A profile
    without an IB or RoCE fabric gets no devices. With ``pci_root`` (playing
    ``/sys/bus/pci/devices``, written by write_pci_sysfs) each device's ``device`` is the
    kernel's link to its PCI function there.
    """
    fabric = str(profile.get("fabric", "infiniband")).lower()
    hcas = _int_field(profile, "ib_hcas", 0)
    rate_gbps = _int_field(profile, "ib_rate_gbps", 400)
    if fabric not in _FABRIC_LINK_LAYER:
        hcas = 0
    elif hcas:
        _rate_text(rate_gbps, _PORT_WIDTH)  # validate before writing anything
    fw_ver, hca_type = _ADAPTERS.get(rate_gbps, _ADAPTERS[400])
    by_hca = _parse_faults(faults)
    host = str(profile.get("hostname", ""))
    for number in range(hcas):
        device = root / f"mlx5_{number}"
        hca_faults = by_hca.get(number, set())
        port = _port(_FABRIC_LINK_LAYER[fabric], rate_gbps, hca_faults)
        # NVIDIA's OUI (94:6d:ae), then bytes unique per host and device, as real GUIDs are.
        tail = hashlib.sha256(f"{host}:mlx5_{number}".encode()).hexdigest()[:6]
        guid = f"946d:ae03:00{tail[:2]}:{tail[2:]}"
        files = {
            MARKER_NAME: MARKER_TEXT,
            "fw_ver": f"{fw_ver}\n",
            "node_type": "1: CA\n",
            "hca_type": f"{hca_type}\n",
            "board_id": f"SIMULATED_{number:04d}\n",
            "node_guid": f"{guid}\n",
            "ports/1/state": f"{port.state}\n",
            "ports/1/phys_state": f"{port.phys_state}\n",
            "ports/1/rate": f"{port.rate}\n",
            "ports/1/link_layer": f"{port.link_layer}\n",
        }
        if port.link_layer == "Ethernet":
            files.update(_gid_table(host, number, "hca-no-ipv4-gid" in hca_faults))
        for counter in _ERROR_COUNTERS:
            # A link that went down once counts it, as link_downed does on real ports.
            value = 1 if counter == "link_downed" and "hca-down" in hca_faults else 0
            if counter == "symbol_error" and "hca-symbol-errors" in hca_faults:
                value = SYMBOL_ERRORS
            files[f"ports/1/counters/{counter}"] = f"{value}\n"
        for relative, text in files.items():
            _write_if_changed(device / relative, text)
        if pci_root is not None:
            _link_if_changed(device / "device",
                             os.path.relpath(pci_root / hca_address(number), device))
    _remove_stale_devices(root, hcas)


def _aer_files(counts: Mapping[str, Mapping[str, int]]) -> dict[str, str]:
    out = {}
    for name, lines, total in _AER_FILES:
        mine = counts.get(name, {})
        text = "".join(f"{line} {mine.get(line, 0)}\n" for line in lines)
        out[name] = f"{text}TOTAL_{total} {sum(mine.values())}\n"
    return out


def _identity(profile: Mapping[str, Any], gpu: bool) -> dict[str, str]:
    """A function's ``vendor``, ``device`` and ``class`` files (hex, as the kernel prints them):
    a GPU is NVIDIA's (0x10de) 3D controller (class 0x0302, programming interface 00) with the
    profile's first PCI device id; an HCA is Mellanox's (0x15b3) InfiniBand (0x0207) or, on a
    RoCE fabric, Ethernet (0x0200) controller whose device id is its board number's (MT4129 is
    0x1021, the ConnectX-7)."""
    if gpu:
        ids = list(profile.get("pci_device_ids") or ["10de:2330"])
        device = str(ids[0]).split(":")[-1].lower()
        return {"vendor": "0x10de\n", "device": f"0x{device}\n", "class": "0x030200\n"}
    rate = _int_field(profile, "ib_rate_gbps", 400)
    board = _ADAPTERS.get(rate, _ADAPTERS[400])[1]
    roce = str(profile.get("fabric", "infiniband")).lower() == "roce"
    return {"vendor": "0x15b3\n", "device": f"0x{int(board.removeprefix('MT')):04x}\n",
            "class": "0x020000\n" if roce else "0x020700\n"}


def write_pci_sysfs(root: Path, profile: Mapping[str, Any], faults: Iterable[str]) -> None:
    """Write ``<root>/<pci address>/`` for the profile's GPUs and HCAs: ``vendor``, ``device``,
    ``class`` (what lspci reads) and ``aer_dev_{correctable,fatal,nonfatal}`` with the AER
    faults applied; a GPU that fell off the bus (gpuN-missing) has no entry. ``root`` plays
    ``/sys/bus/pci/devices``. Files are only rewritten when their text changes; simulated
    functions the profile no longer has are removed."""
    gpus = _int_field(profile, "gpu_count", 0)
    by_gpu = _parse_faults(faults, "gpu")
    wanted: dict[str, dict[str, dict[str, int]]] = {}
    for slot in range(gpus):
        gpu_faults = by_gpu.get(slot, set())
        if "missing" in gpu_faults:
            continue
        wanted[gpu_address(profile, slot)] = (
            dict(_AER_NONFATAL_FAULT) if "aer-nonfatal" in gpu_faults else {})
    for number in range(_hca_count(profile)):
        wanted[hca_address(number)] = {}
    gpu_functions = {gpu_address(profile, slot) for slot in range(gpus)}
    for address, counts in wanted.items():
        function = root / address
        _write_if_changed(function / MARKER_NAME, MARKER_TEXT)
        files = {**_identity(profile, address in gpu_functions), **_aer_files(counts)}
        for name, text in files.items():
            _write_if_changed(function / name, text)
    if root.is_dir():
        for function in root.iterdir():
            if (_PCI_ADDRESS.fullmatch(function.name) and function.name not in wanted
                    and (function / MARKER_NAME).is_file()):
                shutil.rmtree(function)


# A RoCE port's GID table as mlx5 fills it for an interface with one IPv4 address: the
# link-local entry as RoCE v1 and v2, then the IPv4-mapped one as v1 and v2 (so the RoCE v2 IPv4
# entry is index 3, the usual NCCL_IB_GID_INDEX). The rest of the 256-entry table stays zero.
_GID_TYPES = ("IB/RoCE v1", "RoCE v2")
GID_TABLE_SIZE = 8


def _gid_table(host: str, number: int, no_ipv4: bool) -> dict[str, str]:
    """The port's gids/N, gid_attrs/types/N and gid_attrs/ndevs/N ("the net-device's name
    associated with the GID", kernel Documentation/ABI/stable/sysfs-class-infiniband: the
    port's interface, roce_netdev); without IPv4 only the link-local pair."""
    mac = hashlib.sha256(f"{host}:mlx5_{number}:mac".encode()).hexdigest()[:12]
    link_local = "fe80:0000:0000:0000:{}{}:{}ff:fe{}:{}".format(
        f"{int(mac[0:2], 16) ^ 2:02x}", mac[2:4], mac[4:6], mac[6:8], mac[8:12])
    octet = int(mac[:2], 16) % 250 + 2
    ipv4 = f"0000:0000:0000:0000:0000:ffff:0ac8:{number:02x}{octet:02x}"  # 10.200.N.x
    entries = [link_local, link_local] + ([] if no_ipv4 else [ipv4, ipv4])
    files: dict[str, str] = {}
    for index in range(GID_TABLE_SIZE):
        gid = entries[index] if index < len(entries) else "0000:" * 7 + "0000"
        files[f"ports/1/gids/{index}"] = f"{gid}\n"
        if index < len(entries):
            files[f"ports/1/gid_attrs/types/{index}"] = f"{_GID_TYPES[index % 2]}\n"
            files[f"ports/1/gid_attrs/ndevs/{index}"] = f"{roce_netdev(number)}\n"
    return files


# The two ends of ECN congestion control, one directory each under <interface>/ecn/, with one
# enable file per priority 0..7 (NVIDIA MLNX_OFED documentation, "Explicit Congestion
# Notification (ECN)"; the mlx5 driver prints each as "%d\n": module_utils roce_qos).
_ECN_POINTS = ("roce_np", "roce_rp")
_PRIORITIES = range(8)


def write_net_sysfs(root: Path, profile: Mapping[str, Any], faults: Iterable[str]) -> None:
    """Write ``<root>/<interface>/ecn/{roce_np,roce_rp}/enable/<0..7>`` for the interface of
    each HCA of a RoCE profile (roce_netdev): 1 on faults.ROCE_PRIORITY, 0 elsewhere, 0
    everywhere with mlx5_N-ecn-off. ``root`` plays ``/sys/class/net``; each interface carries
    the SIMULATED marker. Files are only rewritten when their text changes; simulated interfaces
    the profile no longer has are removed. Other profiles get none."""
    roce = str(profile.get("fabric", "infiniband")).lower() == "roce"
    hcas = _hca_count(profile) if roce else 0
    parsed = parse_faults(faults)
    wanted = set()
    for number in range(hcas):
        netdev = roce_netdev(number)
        wanted.add(netdev)
        _write_if_changed(root / netdev / MARKER_NAME, MARKER_TEXT)
        on = roce_lossless_priorities(parsed, number, "ecn")
        for point in _ECN_POINTS:
            for prio in _PRIORITIES:
                _write_if_changed(root / netdev / "ecn" / point / "enable" / str(prio),
                                  "1\n" if prio in on else "0\n")
    if root.is_dir():
        for interface in root.iterdir():
            if interface.name not in wanted and (interface / MARKER_NAME).is_file():
                shutil.rmtree(interface)


def _remove_stale_devices(root: Path, hcas: int) -> None:
    if not root.is_dir():
        return
    for device in root.iterdir():
        match = re.fullmatch(r"mlx5_(\d+)", device.name)
        # Only devices this module wrote (they carry the marker) are ever removed.
        if match and int(match.group(1)) >= hcas and (device / MARKER_NAME).is_file():
            shutil.rmtree(device)
