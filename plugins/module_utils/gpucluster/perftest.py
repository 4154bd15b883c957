"""Parse perftest bandwidth output (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``).

The text is the client's (or server's) stdout as perftest prints it: a banner (``RDMA_Write BW
Test``), ``key : value`` settings two to a line (``Device : mlx5_0``, ``Link type :
Ethernet``, ``Mtu : 4096[B]``...), the local/remote QP lines, then a table under
``#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]``. With ``--use_cuda``
perftest prints its CUDA set-up lines (``initializing CUDA``, ``cuMemAlloc() of a ...``) before
the banner. Other lines (CPU frequency warnings, dashes) are ignored; connection failures
(``Couldn't connect to ...``, ``Unable to init the socket connection``) are collected in
``errors``.

Bandwidth comes out in Gb/s whatever the run printed: ``--report_gbits`` prints Gb/sec; without
it perftest prints MB/sec (newer releases MiB/sec), mebibytes per second, converted here.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re
from typing import Any

from .values import ParseError

_BANNER = re.compile(r"^\s*(?P<name>(?:RDMA_Write|RDMA_Read|Send|Atomic)\b.*?BW Test)\s*$")
_SETTING = re.compile(r"([A-Za-z][A-Za-z0-9 .*/_-]*?)\s*:\s*(\S+(?:\[\w+\])?)")
_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(?P<unit>[A-Za-z/]+)\]\s+"
                     r"BW average\[(?P<unit2>[A-Za-z/]+)\]")
_ROW = re.compile(r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>\d+(?:\.\d+)?)\s+"
                  r"(?P<avg>\d+(?:\.\d+)?)(?:\s+(?P<rate>\d+(?:\.\d+)?))?\s*$")
_CUDA = re.compile(r"cuMemAlloc\(\)|initializing CUDA|Picking device No\.|CUDA device \d+:")
_ERRORS = re.compile(r"Couldn't|Unable to|Failed to|failed|Error|ERROR|Conflicting port",
                     re.IGNORECASE)
_NOT_ERRORS = re.compile(r"Conflicting CPU frequency")
# Bits per second in one unit of each bandwidth label perftest prints.
_UNIT_GBPS = {"Gb/sec": 1.0, "MB/sec": 2**20 * 8 / 1e9, "MiB/sec": 2**20 * 8 / 1e9}
_SETTING_KEYS = {
    "Device": "device",
    "Number of qps": "qps",
    "Transport type": "transport",
    "Connection type": "connection",
    "Link type": "link_type",
    "Mtu": "mtu",
    "GID index": "gid_index",
    "Dual-port": "dual_port",
    "TX depth": "tx_depth",
}


def _settings(line: str, out: dict[str, Any]) -> None:
    for chunk in re.split(r"\s{2,}(?=[A-Za-z])", line.strip()):
        match = _SETTING.fullmatch(chunk.strip())
        if not match:
            continue
        key = _SETTING_KEYS.get(match.group(1).strip())
        if key is None:
            continue
        value: Any = match.group(2)
        if key == "mtu":
            value = int(value.split("[")[0]) if value.split("[")[0].isdigit() else None
        elif key in ("qps", "gid_index", "tx_depth"):
            value = int(value) if value.isdigit() else None
        out[key] = value


def parse_ib_write_bw(text: str) -> dict[str, Any]:
    """Facts from one perftest bandwidth run.

    ``{"test", "device", "link_type", "transport", "connection", "qps", "mtu", "gid_index",
    "use_cuda", "unit" (as printed), "rows": [{"bytes", "iterations", "bw_peak_gbps",
    "bw_avg_gbps", "msg_rate_mpps"}], "bw_avg_gbps" (BW average at the largest size),
    "bytes" (that size), "errors"}``. Raises ``ParseError`` when the text is no perftest output.
    """
    result: dict[str, Any] = {
        "test": None, "device": None, "link_type": None, "transport": None,
        "connection": None, "qps": None, "mtu": None, "gid_index": None,
        "use_cuda": False, "unit": None, "rows": [], "bw_avg_gbps": None, "bytes": None,
        "errors": [],
    }
    factor: float | None = None
    seen = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        banner = _BANNER.match(line)
        if banner:
            result["test"], seen = banner.group("name"), True
            continue
        header = _HEADER.match(line)
        if header:
            unit = header.group("unit")
            if unit not in _UNIT_GBPS:
                raise ParseError(f"perftest table in unknown unit {unit!r}")
            result["unit"], factor, seen = unit, _UNIT_GBPS[unit], True
            continue
        if _CUDA.search(line):
            result["use_cuda"] = True
            continue
        row = _ROW.match(line) if factor is not None else None
        if row and factor is not None:
            result["rows"].append({
                "bytes": int(row.group("bytes")),
                "iterations": int(row.group("iters")),
                "bw_peak_gbps": round(float(row.group("peak")) * factor, 4),
                "bw_avg_gbps": round(float(row.group("avg")) * factor, 4),
                "msg_rate_mpps": float(row.group("rate")) if row.group("rate") else None,
            })
            continue
        if " : " in line and "address" not in line:
            _settings(line, result)
            continue
        if _ERRORS.search(line) and not _NOT_ERRORS.search(line):
            result["errors"].append(line.strip())
    if not seen and not result["errors"]:
        raise ParseError("no perftest banner ('RDMA_Write BW Test') or '#bytes' table found")
    if result["rows"]:
        largest = max(result["rows"], key=lambda r: r["bytes"])
        result["bw_avg_gbps"], result["bytes"] = largest["bw_avg_gbps"], largest["bytes"]
    return result
