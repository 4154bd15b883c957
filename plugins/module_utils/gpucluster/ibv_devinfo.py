"""Parse ``ibv_devinfo`` (rdma-core / libibverbs) into per-device, per-port facts.

Handles tab- or space-indented output, with or without the ``Device ports:`` line, and the
verbose form (``-v``), whose capability flag lists and unknown keys are skipped. Devices come in
the shape ``ib_sysfs.read_ib_sysfs`` returns: per port ``state`` (``"PORT_ACTIVE (4)"`` ->
``"ACTIVE"``), ``physical_state``, ``link_layer`` and ``rate_gbps`` in Gb/s (gigaBITS per
second): ``active_width`` times ``active_speed`` (4X at 14.0 Gbps -> 56), shown only by ``-v``,
``None`` otherwise.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re
from typing import Any

from .values import ParseError, clean, strip_ansi, to_float, to_int

_HCA = re.compile(r"^hca_id:\s*(?P<name>\S+)\s*$")
_PORT = re.compile(r"^port:\s*(?P<number>\d+)\s*$")
_PAIR = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_]*):\s*(?P<value>.*?)\s*$")
_CODED = re.compile(r"^(?P<name>.*?)\s*\((?P<code>\d+)\)$")
_WIDTH = re.compile(r"^(?P<lanes>\d+)X\b", re.IGNORECASE)

_DEVICE_KEYS = ("transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id",
                "vendor_part_id", "hw_ver", "board_id", "phys_port_cnt")
_PORT_KEYS = ("state", "max_mtu", "active_mtu", "sm_lid", "port_lid", "port_lmc", "link_layer",
              "active_width", "active_speed", "phys_state")
_INT_KEYS = frozenset({"vendor_part_id", "phys_port_cnt", "sm_lid", "port_lid"})


def _coded(value: str | None) -> tuple[str | None, int | None]:
    """``"PORT_ACTIVE (4)"`` -> ``("PORT_ACTIVE", 4)``."""
    text = clean(value)
    if text is None:
        return None, None
    match = _CODED.match(text)
    if not match:
        return text, None
    return match.group("name"), int(match.group("code"))


def _port(number: int, raw: dict[str, str]) -> dict[str, Any]:
    state, state_code = _coded(raw.get("state"))
    if state and state.upper().startswith("PORT_"):
        state = state[len("PORT_"):]
    phys_state, phys_code = _coded(raw.get("phys_state"))
    width = _WIDTH.match(clean(raw.get("active_width")) or "")
    speed = to_float(_coded(raw.get("active_speed"))[0])
    rate = None
    if width and speed is not None:
        rate = round(int(width.group("lanes")) * speed, 3)
        rate = int(rate) if rate == int(rate) else rate
    return {
        "number": number,
        "state": state.upper() if state else None,
        "state_code": state_code,
        "physical_state": phys_state,
        "physical_state_code": phys_code,
        "link_layer": clean(raw.get("link_layer")),
        "active_width": clean(raw.get("active_width")),
        "active_speed_gbps": speed,
        "rate_gbps": rate,
        "max_mtu": to_int(_coded(raw.get("max_mtu"))[0]),
        "active_mtu": to_int(_coded(raw.get("active_mtu"))[0]),
        "sm_lid": to_int(raw.get("sm_lid")),
        "port_lid": to_int(raw.get("port_lid")),
    }


def _device(name: str, raw: dict[str, str], ports: list[tuple[int, dict[str, str]]]
            ) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name}
    for key in _DEVICE_KEYS:
        value = raw.get(key)
        device[key] = to_int(value) if key in _INT_KEYS else clean(value)
    device["ports"] = [_port(number, values) for number, values in ports]
    return device


def parse_ibv_devinfo(text: str) -> dict[str, Any]:
    """Facts from ``ibv_devinfo`` (or ``ibv_devinfo -v``): ``{"devices": [...], "errors": []}``.

    Each device has ``name``, ``transport``, ``fw_ver``, ``node_guid``, ``sys_image_guid``,
    ``vendor_id``, ``vendor_part_id`` (int), ``hw_ver``, ``board_id``, ``phys_port_cnt`` and
    ``ports``. Lines before the first ``hca_id:`` go to ``errors``. Raises ``ParseError`` when
    there is no ``hca_id:`` line.
    """
    devices: list[dict[str, Any]] = []
    errors: list[str] = []
    name: str | None = None
    raw: dict[str, str] = {}
    ports: list[tuple[int, dict[str, str]]] = []
    for line in (strip_ansi(line).strip() for line in text.splitlines()):
        if not line:
            continue
        header = _HCA.match(line)
        if header:
            if name is not None:
                devices.append(_device(name, raw, ports))
            name, raw, ports = header.group("name"), {}, []
            continue
        if name is None:
            errors.append(line)
            continue
        port = _PORT.match(line)
        if port:
            ports.append((int(port.group("number")), {}))
            continue
        pair = _PAIR.match(line)
        if not pair:
            continue  # capability flags listed one a line, "Device ports:", comments
        key, value = pair.group("key"), pair.group("value")
        if ports and key in _PORT_KEYS:
            ports[-1][1].setdefault(key, value)
        elif not ports and key in _DEVICE_KEYS:
            raw.setdefault(key, value)
    if name is not None:
        devices.append(_device(name, raw, ports))
    if not devices:
        raise ParseError("no 'hca_id:' line found (expected ibv_devinfo output)")
    return {"devices": devices, "errors": errors}
