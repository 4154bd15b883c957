"""Write a hardware profile from a machine's saved tool outputs.

:func:`detect_profile` reads files saved on one machine (``nvidia-smi -q -x``, the plain
``nvidia-smi`` table, ``nvidia-smi nvlink -s``, ``nvidia-smi topo -m``, ``ibstat``,
``ibv_devinfo``, a flattened ``/sys/class/infiniband``), recognised by content and parsed by
:mod:`provisioner.inspect` (the parsers the Ansible modules use), and returns the profile fields
they show, where each came from, and the fields they do not show. :func:`render_profile_yaml`
writes them as a profiles.yml document (``provisioner.profiles.load_profiles`` reads it) with
each measured field's source beside it.

Nothing is guessed: a field the inputs do not show is listed as missing, and a measured field the
Profile model only accepts together with a fact no input shows (``nvswitch: true`` needs
``nvswitch_generation``; ``fabric: infiniband`` needs ``ib_hcas``) is left out of the YAML and
listed too. Performance floors are never written: they come from a measured healthy node or a
cited source, not from the hardware's description.
"""

from __future__ import annotations

import json
import re
import textwrap
import typing
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import InputError
from provisioner.inspect import (
    IB_SYSFS_FLAT,
    IBSTAT,
    IBV_DEVINFO,
    NVIDIA_SMI_NVLINK,
    NVIDIA_SMI_PLAIN,
    NVIDIA_SMI_TOPO,
    NVIDIA_SMI_XML,
    inspect_file,
)
from provisioner.profiles import HARDWARE_FIELDS, Architecture, Profile

# The tool output each usable format is, as the sources name it; the order is the order inputs
# are read in (a field the first shows is checked against, never replaced by, a later one).
TOOLS: dict[str, str] = {
    NVIDIA_SMI_XML: "nvidia-smi -q -x",
    NVIDIA_SMI_PLAIN: "nvidia-smi",
    NVIDIA_SMI_NVLINK: "nvidia-smi nvlink -s",
    NVIDIA_SMI_TOPO: "nvidia-smi topo -m",
    IBSTAT: "ibstat",
    IB_SYSFS_FLAT: "/sys/class/infiniband dump",
    IBV_DEVINFO: "ibv_devinfo",
}

# The profile fields the inputs can show, in profiles.yml's order.
DETECTED_FIELDS: tuple[str, ...] = (*HARDWARE_FIELDS, "fabric")
# Where a missing field can be read.
_SHOWN_BY = {
    "gpu_model": "nvidia-smi -q -x or nvidia-smi",
    "gpu_count": "nvidia-smi -q -x, nvidia-smi or nvidia-smi topo -m",
    "architecture": "nvidia-smi -q -x",
    "pci_device_ids": "nvidia-smi -q -x",
    "memory_mib": "nvidia-smi -q -x or nvidia-smi",
    "power_limit_w": "nvidia-smi -q -x or nvidia-smi",
    "pcie_gen": "nvidia-smi -q -x",
    "pcie_width": "nvidia-smi -q -x",
    "nvlink_links_per_gpu": "nvidia-smi nvlink -s",
    "nvlink_link_speed_gbps": "nvidia-smi nvlink -s",
    "nvswitch": "nvidia-smi topo -m, with nvidia-smi nvlink -s,",
    "ib_hcas": "ibstat, ibv_devinfo or a /sys/class/infiniband dump",
    "ib_rate_gbps": "ibstat, ibv_devinfo -v or a /sys/class/infiniband dump",
    "fabric": "ibstat, ibv_devinfo or a /sys/class/infiniband dump",
}
# Never written: they must come from a measured healthy node or a cited source.
FLOOR_FIELDS: tuple[str, ...] = (
    "busbw_floor_intra_gbps", "busbw_floor_inter_gbps", "ib_write_bw_floor_gbps",
    "copy_h2d_gbps_min", "copy_d2h_gbps_min", "copy_d2d_gbps_min", "burn_tflops_min",
)
# Optional fields no tool output shows (a datasheet, NVIDIA's release notes).
DATASHEET_FIELDS: tuple[str, ...] = ("min_driver", "memory_bandwidth_gbps")

_NVSWITCH_GENERATION = ("nvswitch_generation: the NVSwitch chip generation (2: HGX A100, "
                        "3: HGX H100/H200, 4: HGX B200; NVIDIA's Fabric Manager user guide), "
                        "which no tool output read here shows")
# A GPU has at most this many NVLinks (Profile.nvlink_links_per_gpu): more links to its peers
# together than this cannot be direct links, so they go through NVSwitch.
_MAX_LINKS: int = next(m.le for m in Profile.model_fields["nvlink_links_per_gpu"].metadata
                       if getattr(m, "le", None) is not None)
_ARCHITECTURES: tuple[str, ...] = typing.get_args(Architecture)
# product_architecture as nvidia-smi -q -x prints it -> the profile's architecture.
_XML_ARCHITECTURE = {"volta": "volta", "turing": "turing", "ampere": "ampere",
                     "ada lovelace": "ada", "ada": "ada", "hopper": "hopper",
                     "blackwell": "blackwell"}
# The model name -> architecture, where the XML does not say (older drivers, the plain table).
_MODEL_ARCHITECTURE = (
    (re.compile(r"\bG?B[123]00\b|\bBlackwell\b", re.IGNORECASE), "blackwell"),
    (re.compile(r"\bG?H(?:100|200|800|20)\b", re.IGNORECASE), "hopper"),
    (re.compile(r"\bAda\b|\bL(?:4|20|40S?)\b|\bRTX 40[5-9]0\b", re.IGNORECASE), "ada"),
    (re.compile(r"\bA(?:2|10G?|16|30|40|100|800)\b|\bRTX A\d{4}\b|\bRTX 30[5-9]0\b",
                re.IGNORECASE), "ampere"),
    (re.compile(r"\bT4\b|\bQuadro RTX\b|\bTITAN RTX\b|\bRTX 20[6-8]0\b", re.IGNORECASE),
     "turing"),
    (re.compile(r"\bV100S?\b|\bTITAN V\b", re.IGNORECASE), "volta"),
)
_PCI_DEVICE_ID = re.compile(r"^(?:0x)?(?P<device>[0-9a-fA-F]{4})(?P<vendor>[0-9a-fA-F]{4})$")
_NV = re.compile(r"^NV(\d+)$")
# PCI vendor ids of Mellanox (NVIDIA networking) as ibv_devinfo prints them.
_MELLANOX_VENDOR_IDS = (0x02C9, 0x15B3)
# Plain words YAML reads as something other than a string.
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null", "y", "n"})


@dataclass
class Detected:
    """What a machine's saved tool outputs show of its hardware profile."""

    # Profile fields measured, in the profile's units (DETECTED_FIELDS).
    facts: dict[str, Any] = field(default_factory=dict)
    # field -> the file (its name) and the tool output it came from, and what in it:
    # "h200.xml (nvidia-smi -q -x, default_power_limit)".
    sources: dict[str, str] = field(default_factory=dict)
    # Profile fields the written profile lacks and a person must add: those the inputs do not
    # show, nvswitch_generation where NVSwitch was seen, and the withheld ones.
    missing: list[str] = field(default_factory=list)
    # field -> why it is missing (what the inputs said, or which tool output shows it).
    reasons: dict[str, str] = field(default_factory=dict)
    # Measured (in facts) but left out of the written profile, since the Profile model accepts
    # it only with a fact no input shows: field -> why.
    withheld: dict[str, str] = field(default_factory=dict)
    # Each input used: "h200.xml (nvidia-smi -q -x)".
    inputs: list[str] = field(default_factory=list)
    # Inputs recognised but saying nothing of a profile (nccl-tests, dmesg, dcgmi diag).
    unused: list[str] = field(default_factory=list)


class _Collector:
    """Facts as the inputs show them, in reading order; a later input agreeing with an earlier
    one adds nothing, one contradicting it means the files are not of one machine."""

    def __init__(self) -> None:
        self.facts: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.reasons: dict[str, str] = {}

    def put(self, key: str, value: Any, where: str, detail: str = "",
            compare: bool = True) -> None:
        source = f"{where}, {detail})" if detail else f"{where})"
        if key in self.facts:
            if compare and self.facts[key] != value:
                raise InputError(f"{key}: {self.sources[key]} shows {self.facts[key]!r} but "
                                 f"{source} shows {value!r}; are the files of one machine?")
            return
        self.facts[key] = value
        self.sources[key] = source
        self.reasons.pop(key, None)

    def unknown(self, key: str, why: str) -> None:
        if key not in self.facts:
            self.reasons.setdefault(key, why)


def _same(values: Iterable[Any], what: str) -> tuple[Any, str | None]:
    """The one value every GPU shows, or None and why not."""
    shown = [v for v in values if v is not None]
    if not shown:
        return None, f"{what} not shown"
    distinct = sorted({str(v) for v in shown})
    if len(distinct) > 1:
        return None, f"the GPUs show different {what}: {', '.join(distinct)}"
    return shown[0], None


def _put_same(out: _Collector, key: str, values: Iterable[Any], what: str, where: str,
              detail: str = "", compare: bool = True) -> Any:
    value, why = _same(values, what)
    if value is None:
        out.unknown(key, f"{where}): {why}")
    else:
        out.put(key, value, where, detail, compare)
    return value


def architecture_of_model(model: str) -> str | None:
    """The profile's architecture for a GPU model name (``None``: not one known here)."""
    for pattern, architecture in _MODEL_ARCHITECTURE:
        if pattern.search(model):
            return architecture
    return None


def _pci_id(raw: Any) -> str | None:
    """``233510DE`` (nvidia-smi: device then vendor) -> ``10de:2335``."""
    match = _PCI_DEVICE_ID.match(str(raw or "").strip())
    if not match:
        return None
    return f"{match.group('vendor').lower()}:{match.group('device').lower()}"


# --------------------------------------------------------------------------- GPUs


def _from_xml(out: _Collector, facts: dict[str, Any], where: str) -> None:
    gpus = facts.get("gpus") or []
    attached = facts.get("gpu_count")
    count = attached if attached is not None else len(gpus)
    if count:
        detail = (f"attached_gpus {attached}, {len(gpus)} <gpu> in the file"
                  if attached is not None and attached != len(gpus) else "")
        out.put("gpu_count", count, where, detail)
    if not gpus:
        for key in ("gpu_model", "architecture", "pci_device_ids", "memory_mib",
                    "power_limit_w", "pcie_gen", "pcie_width"):
            out.unknown(key, f"{where}): no <gpu> element")
        return
    model = _put_same(out, "gpu_model", (g.get("name") for g in gpus), "product_name", where)
    printed, why = _same((g.get("product_architecture") for g in gpus), "product_architecture")
    if printed is not None:
        architecture = _XML_ARCHITECTURE.get(str(printed).strip().lower())
        if architecture is None:
            out.unknown("architecture", f"{where}): product_architecture {printed} is not one "
                                        f"the profiles know ({', '.join(_ARCHITECTURES)})")
        else:
            out.put("architecture", architecture, where, f"product_architecture {printed}")
    elif model is not None and (by_model := architecture_of_model(str(model))):
        out.put("architecture", by_model, where, f"from the model name; {why}")
    else:
        out.unknown("architecture", f"{where}): {why}, and the model name does not say")
    ids = [_pci_id(g.get("pci_device_id")) for g in gpus]
    if all(ids):
        out.put("pci_device_ids", list(dict.fromkeys(str(i) for i in ids)), where,
                "pci_device_id")
    else:
        out.unknown("pci_device_ids", f"{where}): pci_device_id not shown for every GPU")
    _put_same(out, "memory_mib", (g.get("memory_total_mib") for g in gpus),
              "fb_memory_usage total", where, "fb_memory_usage total")
    powers = [g.get("power") or {} for g in gpus]
    default, _why = _same((p.get("default_limit_w") for p in powers), "default_power_limit")
    if default is not None:
        out.put("power_limit_w", round(default), where, "default_power_limit")
    else:
        _put_same(out, "power_limit_w",
                  (round(p["limit_w"]) if p.get("limit_w") is not None else None
                   for p in powers), "power limit", where,
                  "the enforced power limit; no default_power_limit shown")
    pcie = [g.get("pcie") or {} for g in gpus]
    _put_same(out, "pcie_gen", (p.get("gen_max") for p in pcie), "max_link_gen", where,
              "max_link_gen")
    width, why = _same((p.get("width_max") for p in pcie), "max_link_width")
    if width in (1, 2, 4, 8, 16):
        out.put("pcie_width", width, where, "max_link_width")
    else:
        out.unknown("pcie_width", f"{where}): {why or f'max_link_width {width}x'}")


def _from_table(out: _Collector, facts: dict[str, Any], where: str) -> None:
    gpus = facts.get("gpus") or []
    out.put("gpu_count", len(gpus), where, "GPUs listed")
    cut = sorted({str(g.get("name")) for g in gpus if g.get("name_truncated")})
    if cut:
        out.unknown("gpu_model", f"{where}): the name is cut short ({', '.join(cut)}); "
                                 "nvidia-smi -q -x shows it whole")
        model = None
    else:
        model = _put_same(out, "gpu_model", (g.get("name") for g in gpus), "names", where)
    names = [str(g.get("name") or "") for g in gpus]
    by_model = {architecture_of_model(n) for n in names}
    if len(by_model) == 1 and None not in by_model:
        out.put("architecture", by_model.pop(), where,
                f"from the model name {model or names[0]!r}", compare=False)
    _put_same(out, "memory_mib", (g.get("memory_total_mib") for g in gpus), "memory totals",
              where, "Memory-Usage total")
    _put_same(out, "power_limit_w", (g.get("power_cap_w") for g in gpus), "power caps", where,
              "Pwr:Usage/Cap: the enforced limit, not the default", compare=False)


# --------------------------------------------------------------------------- NVLink, NVSwitch


_NVLINK_STATUS = {
    "all_inactive": "all NVLinks inactive (fabric manager down, or a fault); save it with the "
                    "links up",
    "mig_unsupported": "nvlink -s does not answer for GPUs in MIG mode",
    "unsupported": "NVLink queries not supported",
    "no_links_listed": "no link listed",
    "error": "an error instead of the links",
}


def _from_nvlink(out: _Collector, facts: dict[str, Any], where: str) -> None:
    gpus = facts.get("gpus") or []
    keys = ("nvlink_links_per_gpu", "nvlink_link_speed_gbps")
    if not gpus:
        for key in keys:
            out.unknown(key, f"{where}): no GPU listed")
        return
    statuses = Counter(str(g.get("status")) for g in gpus)
    if set(statuses) == {"no_nvlink"}:
        out.put("nvlink_links_per_gpu", 0, where, "no NVLink on any GPU")
        out.put("nvlink_link_speed_gbps", 0.0, where, "no NVLink on any GPU")
        return
    if set(statuses) != {"ok"}:
        why = "; ".join(f"{n} GPU(s): {_NVLINK_STATUS.get(s, s)}" for s, n in
                        sorted(statuses.items()) if s != "ok")
        for key in keys:
            out.unknown(key, f"{where}): {why}")
        return
    ups = [int(g.get("links_up") or 0) for g in gpus]
    links, differ = _same(ups, "numbers of links up")
    if not links:
        for key in keys:
            out.unknown(key, f"{where}): {differ or 'no link up'}")
        return
    out.put("nvlink_links_per_gpu", links, where,
            f"{links} links up on each GPU listed ({len(gpus)})")
    speeds = [link.get("speed_gbps") for g in gpus for link in g.get("links") or []
              if link.get("state") == "up"]
    _put_same(out, "nvlink_link_speed_gbps", speeds, "link speeds", where, "GB/s per link")


def _nvswitch(gpus: list[str], matrix: dict[str, Any], links: int | None
              ) -> tuple[bool | None, str]:
    """Whether the GPUs reach each other through NVSwitch (None: cannot tell), and why."""
    if len(gpus) == 1:
        return False, "one GPU, no GPU pair to join"
    pairs: dict[tuple[str, str], int | None] = {}
    for position, left in enumerate(gpus):
        for right in gpus[position + 1:]:
            match = _NV.match(str((matrix.get(left) or {}).get(right) or ""))
            pairs[(left, right)] = int(match.group(1)) if match else None
    joined = {pair: n for pair, n in pairs.items() if n is not None}
    if not joined:
        return False, "no GPU pair joined by NVLink"
    if len(joined) < len(pairs):
        peers = Counter(gpu for pair in joined for gpu in pair)
        if max(peers.values()) == 1:
            return False, "NVLink joins GPUs in pairs (bridges), not every GPU pair"
        return None, ("NVLink joins some GPU pairs only: a direct mesh, or NVSwitch with links "
                      "down; cannot tell")
    counts = set(joined.values())
    if len(counts) > 1:
        return None, f"GPU pairs joined by different numbers of links ({sorted(counts)})"
    each = counts.pop()
    seen = f"NV{each} between every GPU pair"
    peers_n = len(gpus) - 1
    if links is None:
        if each * peers_n > _MAX_LINKS:
            return True, f"{seen}: more links than a GPU has, so through NVSwitch"
        return None, (f"{seen}; without nvidia-smi nvlink -s a direct mesh cannot be told from "
                      "NVSwitch")
    if peers_n == 1:
        return None, f"{seen} of two: an NVLink bridge or NVSwitch; cannot tell"
    if each == links:
        return True, f"{seen}, all {links} links of each GPU: through NVSwitch"
    if each * peers_n <= links:
        return False, f"{seen}, {links} links a GPU: direct links, no NVSwitch"
    return None, f"{seen} but {links} links up a GPU; cannot tell"


def _from_topo(out: _Collector, facts: dict[str, Any], where: str) -> None:
    gpus = [str(g) for g in facts.get("gpus") or []]
    if not gpus:
        out.unknown("nvswitch", f"{where}): no GPU column")
        return
    out.put("gpu_count", len(gpus), where, "GPU columns")
    links = out.facts.get("nvlink_links_per_gpu")
    nvswitch, why = _nvswitch(gpus, facts.get("matrix") or {}, links)
    if nvswitch is None:
        out.unknown("nvswitch", f"{where}): {why}")
    else:
        out.put("nvswitch", nvswitch, where, why)


# --------------------------------------------------------------------------- RDMA


def _mellanox(device: dict[str, Any]) -> bool:
    name = str(device.get("name") or "")
    kind = str(device.get("type") or device.get("hca_type") or "")
    vendor = str(device.get("vendor_id") or "")
    try:
        vendor_id = int(vendor, 16) if vendor else None
    except ValueError:
        vendor_id = None
    return name.startswith("mlx") or kind.startswith("MT") or vendor_id in _MELLANOX_VENDOR_IDS


def _rdma_devices(fmt: str, facts: dict[str, Any]) -> list[dict[str, Any]]:
    """Devices in one shape: ``name``, ``mellanox`` and ``ports`` (``number``, ``state``
    upper-case, ``rate_gbps``, ``link_layer``)."""
    devices = facts.get("cas") if fmt == IBSTAT else facts.get("devices")
    out = []
    for device in devices or []:
        ports = [{"number": p.get("number"), "state": str(p.get("state") or "").upper(),
                  "rate_gbps": p.get("rate_gbps"), "link_layer": p.get("link_layer")}
                 for p in device.get("ports") or []]
        out.append({"name": device.get("name"), "mellanox": _mellanox(device), "ports": ports})
    return out


def _from_rdma(out: _Collector, fmt: str, facts: dict[str, Any], where: str) -> None:
    devices = _rdma_devices(fmt, facts)
    ports = [(d, p) for d in devices for p in d["ports"]]
    infiniband = [(d, p) for d, p in ports if p["link_layer"] == "InfiniBand"]
    roce = [(d, p) for d, p in ports if p["link_layer"] == "Ethernet" and d["mellanox"]]
    if infiniband:
        layer, fabric, chosen = "InfiniBand", "infiniband", infiniband
    elif roce:
        layer, fabric, chosen = "Ethernet", "roce", roce
    else:
        why = (f"{where}): no InfiniBand port and no Ethernet port of a Mellanox/NVIDIA "
               f"(mlx) device among {len(ports)} port(s)")
        for key in ("ib_hcas", "ib_rate_gbps", "fabric"):
            out.unknown(key, why)
        return
    out.put("fabric", fabric, where, f"link layer {layer}")
    active = [(d, p) for d, p in chosen if p["state"] == "ACTIVE"]
    others = len(ports) - len(chosen)
    if not active:
        why = f"{where}): none of the {len(chosen)} {layer} port(s) is ACTIVE"
        out.unknown("ib_hcas", why)
        out.unknown("ib_rate_gbps", why)
        return
    rates = [p["rate_gbps"] for _d, p in active if p["rate_gbps"] is not None]
    top = max(rates) if rates else None
    counted = [(d, p) for d, p in active if top is None or p["rate_gbps"] == top]
    left = len(chosen) - len(counted)
    what = f"{len(counted)} ACTIVE {layer} port(s)" + (f" at {top:g} Gb/s" if top else "")
    if left:
        what += f"; {left} more {layer} port(s) down or slower, not counted"
    if others:
        what += f"; {others} port(s) of another link layer or vendor, not counted"
    out.put("ib_hcas", len(counted), where, what)
    if top is None:
        out.unknown("ib_rate_gbps", f"{where}): no port rate shown (ibv_devinfo shows it "
                                    "with -v)")
    elif top != int(top):
        out.unknown("ib_rate_gbps", f"{where}): rate {top:g} Gb/s is not a whole number")
    else:
        out.put("ib_rate_gbps", int(top), where, f"rate of the {len(counted)} port(s)")


# --------------------------------------------------------------------------- detect


def _read(paths: Sequence[Path]) -> tuple[list[tuple[str, str, dict[str, Any]]], list[str]]:
    """(format, "name (tool", facts) of each usable input, in reading order; the unusable."""
    order = list(TOOLS)
    usable: list[tuple[str, str, dict[str, Any]]] = []
    unused: list[str] = []
    for path in paths:
        if Path(path).is_file() and Path(path).stat().st_size == 0:
            # A tool that printed nothing (nvidia-smi nvlink -s on a GPU without NVLink): what
            # printed it cannot be told from the content, so it shows nothing here.
            unused.append(f"{Path(path).name} (empty file)")
            continue
        result = inspect_file(Path(path))
        fmt = str(result["format"])
        if fmt in TOOLS:
            usable.append((fmt, f"{Path(path).name} ({TOOLS[fmt]}", result["facts"]))
        else:
            unused.append(f"{Path(path).name} ({fmt})")
    usable.sort(key=lambda item: order.index(item[0]))
    return usable, unused


def check_name(name: str) -> None:
    """A profile needs a name (checked before anything is read, on a node or from files)."""
    if not name or not name.strip():
        raise InputError("detect: the profile needs a name")


def _from_silence(out: _Collector, fmt: str, where: str) -> None:
    """What a live node shows by a tool that answered and printed nothing: ``nvidia-smi nvlink
    -s`` exits 0 silent where no GPU lists an NVLink (a PCIe card, or one SXM GPU passed through
    alone, as a lent H200 showed); no RDMA device under /sys/class/infiniband (no adapter, or
    its driver not loaded) leaves the GPUs' traffic between nodes to TCP."""
    if fmt == NVIDIA_SMI_NVLINK and out.facts.get("gpu_count"):
        out.put("nvlink_links_per_gpu", 0, where, "no GPU lists an NVLink")
        out.put("nvlink_link_speed_gbps", 0.0, where, "no GPU lists an NVLink")
    elif fmt == IB_SYSFS_FLAT:
        out.put("ib_hcas", 0, where, "no RDMA device")
        out.put("ib_rate_gbps", 0, where, "no RDMA device")
        out.put("fabric", "ethernet", where, "no RDMA device: traffic between nodes over TCP")


def detect_profile(paths: Sequence[Path], name: str,
                   silent: Mapping[str, str] | None = None) -> Detected:
    """The hardware profile ``name`` as the saved tool outputs ``paths`` of one machine show it.

    ``silent`` (the live path): format -> where, for a tool that answered and printed nothing,
    which shows an absence (:func:`_from_silence`); read after every file, so a file that
    shows the fact wins.

    Raises ``InputError`` (one line) for a file that is missing, unreadable or not a tool output
    recognised here, when no file shows hardware facts, and when two files contradict each
    other (not of one machine).
    """
    check_name(name)
    if not paths:
        raise InputError("detect: no input files; give saved outputs of nvidia-smi -q -x, "
                         "nvidia-smi nvlink -s, nvidia-smi topo -m, ibstat...")
    usable, unused = _read(paths)
    if not usable:
        raise InputError(f"detect: {', '.join(unused)} show(s) nothing of a hardware profile; "
                         f"give saved outputs of {', '.join(TOOLS.values())}")
    out = _Collector()
    for fmt, where, facts in usable:
        if fmt == NVIDIA_SMI_XML:
            _from_xml(out, facts, where)
        elif fmt == NVIDIA_SMI_PLAIN:
            _from_table(out, facts, where)
        elif fmt == NVIDIA_SMI_NVLINK:
            _from_nvlink(out, facts, where)
        elif fmt == NVIDIA_SMI_TOPO:
            _from_topo(out, facts, where)
        else:
            _from_rdma(out, fmt, facts, where)
    inputs = [f"{where})" for _fmt, where, _facts in usable]
    for fmt, where in (silent or {}).items():
        before = len(out.facts)
        _from_silence(out, fmt, where)
        if len(out.facts) > before:
            inputs.append(f"{where})")
    detected = Detected(facts=dict(out.facts), sources=dict(out.sources), inputs=inputs,
                        unused=unused)
    _consistent(detected, out.reasons)
    return detected


def _consistent(detected: Detected, reasons: dict[str, str]) -> None:
    """Missing fields and why; measured fields the Profile model only accepts with a fact the
    inputs do not show are withheld (left out of the YAML, listed as missing)."""
    facts = detected.facts
    if facts.get("nvswitch") is True:
        detected.withheld["nvswitch"] = (
            "nvswitch: true needs nvswitch_generation, which no input shows; add both")
        reasons["nvswitch_generation"] = _NVSWITCH_GENERATION
        if facts.get("nvlink_links_per_gpu") == 0 or facts.get("gpu_count", 2) < 2:
            detected.withheld["nvswitch"] += (" (and it contradicts nvlink_links_per_gpu "
                                              f"{facts.get('nvlink_links_per_gpu')} / "
                                              f"gpu_count {facts.get('gpu_count')})")
    if facts.get("fabric") in ("infiniband", "roce") and not facts.get("ib_hcas"):
        detected.withheld["fabric"] = (f"fabric: {facts['fabric']} needs ib_hcas > 0, which "
                                       "no input shows")
    for key in DETECTED_FIELDS:
        if key not in facts:
            reasons.setdefault(key, f"no input shows it ({_SHOWN_BY[key]} does)")
    missing = [key for key in DETECTED_FIELDS if key not in facts or key in detected.withheld]
    if "nvswitch_generation" in reasons:
        missing.insert(missing.index("nvswitch") + 1 if "nvswitch" in missing else
                       len(missing), "nvswitch_generation")
    for key, why in detected.withheld.items():
        reasons[key] = why
    detected.missing = missing
    detected.reasons = {key: reasons[key] for key in missing}


# --------------------------------------------------------------------------- YAML


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if re.fullmatch(r"[a-z]+", str(value)) and str(value) not in _YAML_WORDS:
        return str(value)  # architecture, fabric: plain words, as profiles.yml writes them
    return json.dumps(str(value))


def _comment(text: str) -> str:
    return " ".join(str(text).split())


def _key(name: str) -> str:
    """``name`` as a YAML mapping key that reads back as the same string."""
    try:
        plain = yaml.safe_load(f"{name}: 0")
    except yaml.YAMLError:
        plain = None
    if isinstance(plain, dict) and list(plain) == [name]:
        return name
    return json.dumps(name)


def _wrapped(pad: str, text: str) -> list[str]:
    """``text`` as comment lines indented by ``pad``, within the project's line length."""
    return [f"{pad}# {line}" for line in textwrap.wrap(text, width=100 - len(pad) - 2)]


def render_profile_yaml(detected: Detected, name: str, simulated: bool = False) -> str:
    """A profiles.yml document (schema_version 1) holding the one profile ``name``: each
    measured field with its source beside it, missing and withheld fields as comments saying
    why, no performance floors (a comment says where they must come from), ``simulated:
    false`` and the input files as ``sources``. Loads with ``yaml.safe_load``; with the
    missing fields added, with ``provisioner.profiles.load_profiles``. ``simulated``: the outputs
    are a simulated node's, and the profile says so (``simulated: true``)."""
    check_name(name)
    facts, pad = detected.facts, "    "
    lines = [
        f"# Hardware profile {_comment(name)}, written from saved tool outputs of one machine:",
        *(f"#   {_comment(item)}" for item in detected.inputs),
        "# Units as in the packaged profiles.yml (provisioner/data/profiles.yml); each measured",
        "# field names its source. Fields marked MISSING are not shown by these outputs: add",
        "# them (from the machine, its datasheet or its vendor) before using the profile.",
        "schema_version: 1",
        "",
        "profiles:",
        f"  {_key(name)}:",
        f"{pad}# description: \"...\"  (optional; one line on what the machine is)",
    ]
    for key in DETECTED_FIELDS:
        if key in facts and key not in detected.withheld:
            lines.append(f"{pad}{key}: {_scalar(facts[key])}  "
                         f"# {_comment(detected.sources.get(key, ''))}")
        elif key in facts:
            lines.append(f"{pad}# {key}: {_scalar(facts[key])}  # LEFT OUT, measured by "
                         f"{_comment(detected.sources.get(key, ''))}: "
                         f"{_comment(detected.withheld[key])}")
        else:
            why = detected.reasons.get(key, "no input shows it")
            if key == "nvswitch":
                why += "; with nvswitch: true, add nvswitch_generation too"
            lines.append(f"{pad}# {key}: MISSING  # {_comment(why)}")
        if key == "nvswitch" and "nvswitch_generation" in detected.missing:
            lines.append(f"{pad}# nvswitch_generation: MISSING  # "
                         f"{_comment(detected.reasons['nvswitch_generation'])}")
    lines += _wrapped(pad, f"Performance floors left out: {', '.join(FLOOR_FIELDS)}. They "
                           "must come from a measured healthy node or a cited source (see the "
                           "packaged profiles.yml's header), never from this machine's "
                           "description; until then smoke and inspect report busbw without "
                           "judging it.")
    lines += _wrapped(pad, "Optional, from a datasheet or NVIDIA's release notes: "
                           f"{', '.join(DATASHEET_FIELDS)}.")
    if simulated:
        lines.append(f"{pad}# SIMULATED: read from a simulated node; it measures no real hardware.")
    lines += [f"{pad}simulated: {'true' if simulated else 'false'}", f"{pad}sources:"]
    for item in detected.inputs:
        # An input is "name (tool)"; the sources it gave begin "name (tool" (a detail may follow).
        fields = [key for key in DETECTED_FIELDS
                  if detected.sources.get(key, "").startswith(item.removesuffix(")"))]
        lines.append(f"{pad}  - {json.dumps(item + (': ' + ', '.join(fields) if fields else ''))}")
    return "\n".join(lines) + "\n"
