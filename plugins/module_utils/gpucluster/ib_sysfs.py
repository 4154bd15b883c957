"""Read RDMA device facts from ``/sys/class/infiniband`` (or its flattened text form).

Per device: ``fw_ver``, ``node_type``, ``hca_type``, ``board_id``, ``node_guid`` when present;
per port: ``state`` (``"4: ACTIVE"`` -> ``"ACTIVE"``), ``phys_state`` (``"5: LinkUp"`` ->
``"LinkUp"``), ``rate`` (``"400 Gb/sec (4X NDR)"`` -> ``rate_gbps`` 400, in gigaBITS per second),
``link_layer``, the integer ``counters/`` (``None`` for ``N/A (no PMA)``) and, on an Ethernet
(RoCE) port, ``roce_v2_ipv4_gids``: the indexes of its GID table (``gids/N`` with
``gid_attrs/types/N``) that are RoCE v2 and IPv4-mapped (``::ffff:a.b.c.d``), the entries
NCCL_IB_GID_INDEX must name for RoCE v2 over IPv4 (``None`` on other ports, ``[]`` when the port
has none: its network interface has no IPv4 address).

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

from .values import ParseError, clean, to_int, to_number

DEFAULT_ROOT = "/sys/class/infiniband"

_DEVICE_FILES = ("fw_ver", "node_type", "hca_type", "board_id", "node_guid")
_PORT_FILES = ("state", "phys_state", "rate", "link_layer")
_CODED = re.compile(r"^\s*(?P<code>\d+)\s*:\s*(?P<name>.*?)\s*$")
# An IPv4-mapped GID as sysfs prints it: ::ffff:a.b.c.d in eight groups of four hex digits.
_IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:"
_ROCE_V2 = "roce v2"
_RATE = re.compile(r"^\s*(?P<rate>[\d.]+)\s*Gb/sec(?:\s*\((?P<detail>[^)]*)\))?", re.IGNORECASE)


def _coded(value: str | None) -> tuple[int | None, str | None]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``; a value without a code keeps its text."""
    text = clean(value)
    if text is None:
        return None, None
    match = _CODED.match(text)
    if not match:
        return None, text
    return int(match.group("code")), clean(match.group("name"))


def _rate(value: str | None) -> tuple[int | float | None, str | None]:
    text = clean(value)
    if text is None:
        return None, None
    match = _RATE.match(text)
    if not match:
        return None, None
    return to_number(match.group("rate")), clean(match.group("detail"))


def _port(number: int, files: dict[str, str]) -> dict[str, Any]:
    state_code, state = _coded(files.get("state"))
    phys_code, phys_state = _coded(files.get("phys_state"))
    rate_gbps, rate_detail = _rate(files.get("rate"))
    counters = {
        name[len("counters/") :]: to_int(value)
        for name, value in sorted(files.items())
        if name.startswith("counters/") and "/" not in name[len("counters/") :]
    }
    link_layer = clean(files.get("link_layer"))
    return {
        "number": number,
        "state": state,
        "state_code": state_code,
        "physical_state": phys_state,
        "physical_state_code": phys_code,
        "rate_gbps": rate_gbps,
        "rate_detail": rate_detail,
        "link_layer": link_layer,
        "counters": counters,
        "roce_v2_ipv4_gids": _roce_v2_ipv4_gids(files) if link_layer == "Ethernet" else None,
    }


def _roce_v2_ipv4_gids(files: dict[str, str]) -> list[int] | None:
    """The GID table's RoCE v2, IPv4-mapped entries, by index; None without a table."""
    if not any(name.startswith("gids/") for name in files):
        return None
    found = []
    for name, gid in files.items():
        if not name.startswith("gids/") or not name[len("gids/") :].isdigit():
            continue
        index = name[len("gids/") :]
        kind = (clean(files.get("gid_attrs/types/" + index)) or "").lower()
        if kind == _ROCE_V2 and (clean(gid) or "").lower().startswith(_IPV4_MAPPED):
            found.append(int(index))
    return sorted(found)


def _devices(files: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Build device facts from ``{device: {relative path: content}}``."""
    devices = []
    for name in sorted(files):
        entries = files[name]
        ports: dict[int, dict[str, str]] = {}
        for path, content in entries.items():
            parts = path.split("/", 2)
            if len(parts) == 3 and parts[0] == "ports" and parts[1].isdigit():
                ports.setdefault(int(parts[1]), {})[parts[2]] = content
        device: dict[str, Any] = {"name": name}
        for field in _DEVICE_FILES:
            device[field] = clean(entries.get(field))
        node_code, node_type = _coded(entries.get("node_type"))
        device["node_type"] = node_type
        device["node_type_code"] = node_code
        device["ports"] = [_port(number, ports[number]) for number in sorted(ports)]
        devices.append(device)
    return devices


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None  # some counters refuse reads (EINVAL) on Ethernet ports; treat as absent


def _gid_files(port_dir: str) -> list[str]:
    """A RoCE port's GID table: each non-zero ``gids/N`` with its ``gid_attrs/types/N`` (an
    unused entry is all zeros, and its type refuses to be read)."""
    out: list[str] = []
    try:
        indexes = sorted(os.listdir(os.path.join(port_dir, "gids")), key=lambda n: (len(n), n))
    except OSError:
        return out
    for index in indexes:
        gid = _read(os.path.join(port_dir, "gids", index))
        if gid and gid.strip("0:"):
            out += ["gids/" + index, "gid_attrs/types/" + index]
    if not out and indexes:
        # A table of zeros is still a table (read: no entry), not one that could not be read.
        out.append("gids/" + indexes[0])
    return out


def read_ib_sysfs(root: str = DEFAULT_ROOT) -> dict[str, Any]:
    """Facts for every RDMA device under ``root``; ``{"devices": []}`` when there is none."""
    files: dict[str, dict[str, str]] = {}
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return {"root": root, "devices": []}
    for name in names:
        base = os.path.join(root, name)
        entries: dict[str, str] = {}
        for field in _DEVICE_FILES:
            content = _read(os.path.join(base, field))
            if content is not None:
                entries[field] = content
        ports_dir = os.path.join(base, "ports")
        try:
            port_numbers = sorted(os.listdir(ports_dir))
        except OSError:
            port_numbers = []
        for number in port_numbers:
            port_dir = os.path.join(ports_dir, number)
            wanted = [*_PORT_FILES]
            with contextlib.suppress(OSError):  # Ethernet-only ports may lack counters/
                wanted += [
                    "counters/" + counter
                    for counter in sorted(os.listdir(os.path.join(port_dir, "counters")))
                ]
            if _read(os.path.join(port_dir, "link_layer")) == "Ethernet":
                wanted += _gid_files(port_dir)
            for relative in wanted:
                content = _read(os.path.join(port_dir, relative))
                if content is not None:
                    entries[f"ports/{number}/{relative}"] = content
        files[name] = entries
    return {"root": root, "devices": _devices(files)}


def parse_ib_sysfs_flat(text: str) -> dict[str, Any]:
    """Facts from a flattened sysfs dump: one ``<path>: <content>`` line per file.

    Paths may be relative to ``/sys/class/infiniband`` (``mlx5_0/ports/1/rate``) or carry any
    prefix ending in ``infiniband/``. A literal ``\\n`` at the end of a value (how multi-line
    files were flattened) is dropped. Raises ``ParseError`` when no line has that shape.
    """
    files: dict[str, dict[str, str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (": " not in line and not line.endswith(":")):
            continue
        path, _sep, content = line.partition(":")
        path = path.strip()
        marker = path.rfind("infiniband/")
        if marker >= 0:
            path = path[marker + len("infiniband/") :]
        device, _sep, relative = path.partition("/")
        if not device or not relative or " " in path:
            continue
        value = content.strip()
        while value.endswith("\\n"):
            value = value[:-2].rstrip()
        files.setdefault(device, {})[relative] = value
    if not files:
        raise ParseError("no '<device>/<file>: <content>' lines found")
    return {"root": None, "devices": _devices(files)}


def roce_gid_index(ib: dict[str, Any]) -> dict[str, Any]:
    """The GID index NCCL_IB_GID_INDEX should name on this node (one value for every port):
    the lowest index that is a RoCE v2 IPv4-mapped entry on every RoCE port, from
    read_ib_sysfs's facts. ``{"index": N or None, "ports": {"mlx5_0/1": [3], ...},
    "problem": None or one line}``."""
    ports = {}
    for device in ib.get("devices") or []:
        for port in device.get("ports") or []:
            if port.get("link_layer") == "Ethernet":
                ports["%s/%s" % (device.get("name"), port.get("number"))] = (
                    port.get("roce_v2_ipv4_gids") or [])
    problem = None
    index = None
    if not ports:
        problem = "no RoCE (Ethernet link layer) port under %s" % ib.get("root", DEFAULT_ROOT)
    elif any(not gids for gids in ports.values()):
        bare = sorted(name for name, gids in ports.items() if not gids)
        problem = ("no RoCE v2 IPv4-mapped GID on %s (its network interface has no IPv4 "
                   "address)" % ", ".join(bare))
    else:
        common = set.intersection(*(set(gids) for gids in ports.values()))
        if common:
            index = min(common)
        else:
            problem = "the RoCE ports' RoCE v2 IPv4 GIDs share no index: %s" % "; ".join(
                "%s %s" % (name, ",".join(map(str, gids))) for name, gids in sorted(ports.items()))
    return {"index": index, "ports": ports, "problem": problem}
