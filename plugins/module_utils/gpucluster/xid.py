"""Find NVIDIA Xid events in kernel logs and classify them.

Accepts the ``NVRM: Xid (PCI:0000:9b:00): 119, pid=..., name=..., <message>`` lines wherever
they appear: plain ``dmesg`` (``[ 3606.832215]``), ``dmesg -T`` (``[Sun Feb 23 16:24:18 2025]``),
``dmesg --time-format iso`` and ``--decode`` (``kern  :warn  : 2025-01-21T02:21:33,498559+00:00``),
syslog/journal lines, or embedded in another tool's message (a health-check log).

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .values import clean

# Xids after which the GPU must not take new work until it is reset (or the node rebooted).
# Source: NVIDIA's Xid catalog, "Analyzing Xid Errors with the Xid Catalog"
# (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), whose "Resolution
# Bucket (Immediate Action)" for these is RESET_GPU / REBOOT_NODE, or which leave a memory
# repair pending that only a reset applies:
#   48  double-bit (uncorrectable) ECC error in framebuffer memory.
#   62  internal micro-controller halt: the GPU's firmware stopped; it will not recover alone.
#   63  ECC page retirement / row-remapping recording event: a repair is pending and takes
#       effect only after a GPU reset; until then the bad row is still in service.
#   64  ECC page retirement / row-remapper recording FAILURE: the repair itself failed.
#   74  NVLink error: a link dropped or failed training; it retrains only on reset.
#   79  GPU has fallen off the bus: the device is gone from PCIe; node reboot at least.
#   92  high single-bit ECC error rate: memory is degrading; drain before it turns into 48/95.
#   94  contained uncorrectable ECC error: the affected job was killed and a row remap is
#       pending (comes with 63); reset before the GPU is trusted with new work.
#   95  uncontained uncorrectable ECC error: every process on the GPU is affected.
#   119 GSP RPC timeout and 120 GSP error: the GPU System Processor firmware is unresponsive.
#   140 unrecovered ECC error (Hopper and later).
#   154 recovery action changed: the driver itself reports "GPU Reset Required" or
#       "Node Reboot Required".
# Everything else (13, 31, 43, 45: application faults; 8 and 109: timeouts after an app hang)
# is reported as "warning": it says the job failed, not that the GPU is bad.
FATAL_XIDS = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154})

_XID = re.compile(
    r"NVRM:\s*Xid\s*\((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
    r"(?:\.[0-7])?)\)\s*:\s*(?P<xid>\d+)\s*,?\s*(?P<rest>.*)$"
)
_PID = re.compile(r"^pid\s*=\s*(?P<pid>'[^']*'|[^,]*)\s*,\s*")
_NAME = re.compile(r"^name\s*=\s*(?P<name>[^,]*?)\s*,\s*")
_DECODE = re.compile(r"^\s*(?P<facility>[a-z]+)\s*:\s*(?P<level>[a-z]+)\s*:")
_TIMESTAMPS = (
    re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"),
    re.compile(r"\[\s*([A-Z][a-z]{2} [^\]]*\d{4})\s*\]"),  # dmesg -T
    re.compile(r"\b[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\b"),  # syslog
    re.compile(r"\[\s*(\d+\.\d+)\s*\]"),  # plain dmesg: seconds since boot
)


def _timestamp(prefix: str) -> str | None:
    for pattern in _TIMESTAMPS:
        match = pattern.search(prefix)
        if match:
            return match.group(match.lastindex or 0)
    return None


def _unquote(value: str | None) -> str | None:
    text = clean((value or "").strip("'\""))
    if text is None or text.lower() in ("<unknown>", "unknown"):
        return None
    return text


def parse_xid(text: str) -> list[dict[str, Any]]:
    """Every Xid event in ``text``, in order.

    Each: ``{"pci": "0000:9b:00", "xid": 119, "pid": int | None, "process": str | None,
    "message": str, "timestamp": str | None (as printed), "level": str | None (--decode),
    "line": int (1-based)}``.
    """
    events = []
    for number, raw in enumerate(text.splitlines(), start=1):
        match = _XID.search(raw)
        if not match:
            continue
        rest = match.group("rest").strip()
        pid = _PID.match(rest)
        if pid:
            rest = rest[pid.end() :]
        name = _NAME.match(rest)
        if name:
            rest = rest[name.end() :]
        pid_text = _unquote(pid.group("pid")) if pid else None
        prefix = raw[: match.start()]
        decoded = _DECODE.match(prefix)
        events.append(
            {
                # Xid lines name the GPU as domain:bus:device; drop a function suffix if present
                # so the same GPU groups under one key.
                "pci": match.group("pci").lower().split(".")[0],
                "xid": int(match.group("xid")),
                "pid": int(pid_text) if pid_text and pid_text.isdigit() else None,
                "process": _unquote(name.group("name")) if name else None,
                "message": rest,
                "timestamp": _timestamp(prefix),
                "level": decoded.group("level") if decoded else None,
                "line": number,
            }
        )
    return events


def classify(xids: Iterable[int | dict[str, Any]]) -> dict[str, Any]:
    """Summarise Xid codes (ints) or events from :func:`parse_xid`.

    ``verdict`` is ``"fatal"`` when any code is in :data:`FATAL_XIDS`, ``"warning"`` when there
    are only other Xids, ``"clean"`` when there is none. ``counts`` is keyed by the code as a
    string (JSON keys); ``gpus`` groups events by PCI address when events carry one.
    """
    counts: dict[int, int] = {}
    gpus: dict[str, set[int]] = {}
    for item in xids:
        code = int(item["xid"]) if isinstance(item, dict) else int(item)
        counts[code] = counts.get(code, 0) + 1
        pci = item.get("pci") if isinstance(item, dict) else None
        if pci:
            gpus.setdefault(pci, set()).add(code)
    fatal = sorted(code for code in counts if code in FATAL_XIDS)
    other = sorted(code for code in counts if code not in FATAL_XIDS)
    verdict = "fatal" if fatal else ("warning" if other else "clean")
    return {
        "verdict": verdict,
        "total": sum(counts.values()),
        "counts": {str(code): counts[code] for code in sorted(counts)},
        "fatal_xids": fatal,
        "other_xids": other,
        "gpus": {
            pci: {"xids": sorted(codes), "fatal": any(code in FATAL_XIDS for code in codes)}
            for pci, codes in sorted(gpus.items())
        },
    }
