"""Parse ``ibstat`` (infiniband-diags) into per-CA, per-port facts.

Indentation may be tabs or spaces. Lines that are neither a ``CA '<name>'`` header nor a
``Key: value`` pair inside one (``ibpanic: ...`` when a device vanished mid-run, error text) are
kept in ``errors`` rather than raising.

``rate_gbps`` is the port rate ibstat prints, in Gb/s (gigaBITS per second): 400 for NDR 4x,
200 for HDR 4x, 56 for FDR 4x, 2.5 for SDR 1x.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re
from typing import Any

from .values import clean, to_int, to_number

_CA = re.compile(r"^CA\s+'(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^Port\s+(?P<number>\d+)\s*:\s*$")
_PAIR = re.compile(r"^(?P<key>[A-Za-z][A-Za-z ]*?)\s*:\s*(?P<value>.*)$")

_CA_KEYS = {
    "CA type": "type",
    "Number of ports": "num_ports",
    "Firmware version": "fw",
    "Hardware version": "hw_version",
    "Node GUID": "node_guid",
    "System image GUID": "system_image_guid",
}
_PORT_KEYS = {
    "State": "state",
    "Physical state": "physical_state",
    "Rate": "rate_gbps",
    "Base lid": "base_lid",
    "LMC": "lmc",
    "SM lid": "sm_lid",
    "Capability mask": "capability_mask",
    "Port GUID": "port_guid",
    "Link layer": "link_layer",
}
_INT_FIELDS = frozenset({"num_ports", "base_lid", "lmc", "sm_lid"})


def _new_ca(name: str) -> dict[str, Any]:
    ca: dict[str, Any] = {"name": name}
    for key in _CA_KEYS.values():
        ca[key] = None
    ca["ports"] = []
    return ca


def _new_port(number: int) -> dict[str, Any]:
    port: dict[str, Any] = {"number": number}
    for key in _PORT_KEYS.values():
        port[key] = None
    return port


def _convert(key: str, value: str) -> Any:
    if key == "rate_gbps":
        return to_number(value)
    if key in _INT_FIELDS:
        return to_int(value)
    return clean(value)


def parse_ibstat(text: str) -> dict[str, Any]:
    """Facts from ``ibstat``: ``{"cas": [...], "errors": [...]}``.

    Each CA has ``name``, ``type``, ``num_ports``, ``fw``, ``hw_version``, ``node_guid``,
    ``system_image_guid`` and ``ports``; each port has ``number``, ``state``,
    ``physical_state``, ``rate_gbps``, ``base_lid``, ``lmc``, ``sm_lid``, ``capability_mask``,
    ``port_guid`` and ``link_layer``.
    """
    cas: list[dict[str, Any]] = []
    errors: list[str] = []
    ca: dict[str, Any] | None = None
    port: dict[str, Any] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        header = _CA.match(line)
        if header:
            ca = _new_ca(header.group("name"))
            cas.append(ca)
            port = None
            continue
        port_header = _PORT.match(line)
        if port_header and ca is not None:
            port = _new_port(int(port_header.group("number")))
            ca["ports"].append(port)
            continue
        pair = _PAIR.match(line)
        key = pair.group("key") if pair else ""
        if pair and ca is not None and port is not None and key in _PORT_KEYS:
            field = _PORT_KEYS[key]
            port[field] = _convert(field, pair.group("value"))
        elif pair and ca is not None and port is None and key in _CA_KEYS:
            field = _CA_KEYS[key]
            ca[field] = _convert(field, pair.group("value"))
        else:
            # "ibpanic: [pid] main: stat of IB device 'mlx5_8' failed: ..." and the like.
            errors.append(line)
    return {"cas": cas, "errors": errors}
