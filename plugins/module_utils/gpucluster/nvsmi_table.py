"""Parse the plain ``nvidia-smi`` table (no options) into per-GPU facts.

Shapes handled: the 89-column table of driver 530 and later and the 79-column table of older
drivers, with or without the timestamp line, the ``MIG devices`` and ``Processes`` sections
(ignored), and GPU names nvidia-smi cut short (``NVIDIA RTX 6000 Ada Gene...``; then
``name_truncated`` is true, since the name is not the model's). Placeholders (``N/A``,
``ERR!``) become ``None``::

    |   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |
    | N/A   27C    P0             72W /  700W |       1MiB /  81559MiB |      0%      Default |

``power_cap_w`` is the limit the driver enforces now (``Pwr:Usage/Cap``), not the default one.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re
from typing import Any

from .nvsmi_xml import normalize_bus_id
from .values import ParseError, clean, strip_ansi, to_int, to_number

_HEADER = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s*(?P<driver>\S+)"
    r"(?:\s+CUDA Version:\s*(?P<cuda>\S+))?"
)
_NAME_CELL = re.compile(r"^\s*(?P<index>\d+)\s+(?P<name>.*?)\s+(?P<persistence>On|Off)\s*$")
_BUS_CELL = re.compile(
    r"^\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+(?P<disp>\S+)\s*$"
)
_POWER = re.compile(r"(?P<draw>\S+)\s*/\s*(?P<cap>\S+)\s*$")
_MEMORY = re.compile(r"(?P<used>\S+?)\s*/\s*(?P<total>\S+?)\s*$")
_TEMP = re.compile(r"^(?P<value>-?\d+)C$")
_PERF = re.compile(r"^P\d{1,2}$")
_SECTION = re.compile(r"^\|\s*(MIG devices|Processes)\s*:", re.IGNORECASE)


def _cells(line: str) -> list[str] | None:
    """The cells of a table row ``| a | b | c |``; ``None`` for a rule or another line."""
    text = line.strip()
    if not text.startswith("|") or not text.endswith("|"):
        return None
    return text[1:-1].split("|")


def _status_cell(text: str) -> dict[str, Any]:
    """``N/A   27C    P0             72W /  700W`` -> fan, temperature, perf, draw and cap."""
    out: dict[str, Any] = {"fan_percent": None, "temperature_c": None, "perf_state": None,
                           "power_draw_w": None, "power_cap_w": None}
    power = _POWER.search(text)
    rest = (text[:power.start()] if power else text).split()
    if power:
        out["power_draw_w"] = to_number(power.group("draw"))
        out["power_cap_w"] = to_number(power.group("cap"))
    for token in rest:
        if token.endswith("%") and out["fan_percent"] is None:
            out["fan_percent"] = to_int(token)
        elif _TEMP.match(token):
            out["temperature_c"] = int(token[:-1])
        elif _PERF.match(token):
            out["perf_state"] = token
    return out


def _memory_cell(text: str) -> dict[str, Any]:
    match = _MEMORY.search(text.strip())
    if not match:
        return {"memory_used_mib": None, "memory_total_mib": None}
    used, total = match.group("used"), match.group("total")
    return {
        "memory_used_mib": to_int(used) if used.endswith("MiB") else None,
        "memory_total_mib": to_int(total) if total.endswith("MiB") else None,
    }


def parse_nvidia_smi_table(text: str) -> dict[str, Any]:
    """Facts from the plain ``nvidia-smi`` table.

    Returns ``driver_version``, ``cuda_version``, ``gpu_count`` (GPUs listed) and ``gpus``:
    ``index``, ``name``, ``name_truncated``, ``persistence_mode``, ``bus_id`` (lspci form),
    ``bus_id_raw``, ``fan_percent``, ``temperature_c``, ``perf_state``, ``power_draw_w``,
    ``power_cap_w``, ``memory_used_mib``, ``memory_total_mib``.
    Raises ``ParseError`` when no GPU row is found.
    """
    lines = [strip_ansi(line).rstrip() for line in text.splitlines()]
    header = next((m for m in map(_HEADER.search, lines) if m), None)
    gpus: list[dict[str, Any]] = []
    expect_status = False
    for line in lines:
        if _SECTION.match(line.strip()):
            break
        cells = _cells(line)
        if cells is None:
            expect_status = False
            continue
        if expect_status and gpus:
            expect_status = False
            gpus[-1].update(_status_cell(cells[0]))
            if len(cells) > 1:
                gpus[-1].update(_memory_cell(cells[1]))
            continue
        if len(cells) < 2:
            continue
        name, bus = _NAME_CELL.match(cells[0]), _BUS_CELL.match(cells[1])
        if not name or not bus:
            continue
        gpu_name = clean(name.group("name"))
        gpus.append({
            "index": int(name.group("index")),
            "name": gpu_name,
            "name_truncated": bool(gpu_name and gpu_name.endswith("...")),
            "persistence_mode": name.group("persistence") == "On",
            "bus_id": normalize_bus_id(bus.group("bus")),
            "bus_id_raw": bus.group("bus"),
            "fan_percent": None, "temperature_c": None, "perf_state": None,
            "power_draw_w": None, "power_cap_w": None,
            "memory_used_mib": None, "memory_total_mib": None,
        })
        expect_status = True
    if not gpus:
        raise ParseError("no GPU row found (expected a line like "
                         "'|   0  NVIDIA H100 80GB HBM3   On  |   00000000:19:00.0 Off |')")
    return {
        "driver_version": header.group("driver") if header else None,
        "cuda_version": clean(header.group("cuda")) if header and header.group("cuda") else None,
        "gpu_count": len(gpus),
        "gpus": gpus,
    }
