"""Parse ``nvidia-smi nvlink -s`` (NVLink status) into per-GPU link facts.

Shapes handled::

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
    <TAB> Link 0: 26.562 GB/s
    <TAB> Link 1: <inactive>
    GPU 6: NVIDIA A100-SXM4-80GB (UUID: GPU-...)
    NVML: Unable to retrieve NVLink information as all links are inActive
    GPU 0: NVIDIA L40S (UUID: GPU-...)
    Device does not have or support Nvlink
    GPU 0: NVIDIA H200 (UUID: GPU-...)
    Nvlink queries are not supported for Devices in MIG mode

``speed_gbps`` is the per-link figure nvidia-smi prints, in GB/s (gigaBYTES per second).

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re
from typing import Any

from .values import clean, strip_ansi, to_float

_GPU = re.compile(r"^GPU\s+(?P<index>\d+):\s*(?P<name>.*?)\s*\(UUID:\s*(?P<uuid>[^)]*)\)\s*$")
_LINK = re.compile(r"^Link\s+(?P<link>\d+)\s*:\s*(?P<value>.*?)\s*$", re.IGNORECASE)
_SPEED = re.compile(r"^(?P<speed>[\d.]+)\s*GB/s$", re.IGNORECASE)

# Whole-GPU messages, matched case-insensitively ("inActive" and "inactive" both occur).
_STATUS_MESSAGES = (
    ("all links are inactive", "all_inactive"),
    ("not supported for devices in mig mode", "mig_unsupported"),
    ("does not have or support nvlink", "no_nvlink"),
    ("not supported", "unsupported"),
)


def _link(number: int, value: str) -> dict[str, Any]:
    speed = _SPEED.match(value)
    if speed:
        return {"link": number, "state": "up", "speed_gbps": to_float(speed.group("speed"))}
    word = clean(value.strip("<>"))
    # nvidia-smi prints "<inactive>" for an untrained link; keep any other word as the state,
    # and report placeholders ("Unknown Error", "N/A") as "unknown".
    state = re.sub(r"\s+", "_", word.lower()) if word else "unknown"
    return {"link": number, "state": state, "speed_gbps": None}


def _message_status(message: str) -> str:
    lowered = message.lower()
    for needle, status in _STATUS_MESSAGES:
        if needle in lowered:
            return status
    return "error"


def parse_nvlink_status(text: str) -> dict[str, Any]:
    """Facts from ``nvidia-smi nvlink -s``.

    Each GPU has ``status``: ``ok`` (links listed), ``all_inactive``, ``no_nvlink``,
    ``mig_unsupported``, ``unsupported`` or ``error`` (with ``message``), and ``links``:
    ``[{"link": 0, "state": "up" | "inactive" | ..., "speed_gbps": float | None}]``.
    Lines before the first GPU header go to ``errors``.
    """
    gpus: list[dict[str, Any]] = []
    errors: list[str] = []
    current: dict[str, Any] | None = None
    for raw in strip_ansi(text).splitlines():
        line = raw.strip()
        if not line:
            continue
        header = _GPU.match(line)
        if header:
            current = {
                "index": int(header.group("index")),
                "name": header.group("name") or None,
                "uuid": header.group("uuid").strip() or None,
                "status": "ok",
                "message": None,
                "links": [],
            }
            gpus.append(current)
            continue
        link = _LINK.match(line)
        if link and current is not None:
            current["links"].append(_link(int(link.group("link")), link.group("value")))
            continue
        if current is None:
            errors.append(line)
            continue
        current["status"] = _message_status(line)
        current["message"] = line
    for gpu in gpus:
        states = [link["state"] for link in gpu["links"]]
        gpu["links_up"] = states.count("up")
        gpu["links_total"] = len(states)
        if gpu["status"] == "ok" and not states:
            gpu["status"] = "no_links_listed"
    return {"gpus": gpus, "errors": errors}
