"""Parse NVIDIA nvbandwidth's output (plain text, or ``-j`` JSON) into per-testcase matrices.

The formats are the ones NVIDIA/nvbandwidth writes (v0.8, ``output.cpp`` and
``json_output.cpp``):

- ``-j``: one JSON document ``{"nvbandwidth": {"version", "git_version", "CUDA Runtime
  Version", "Driver Version", "GPU Device list": ["0: NAME (00000000:19:00): (host)", ...],
  "testcases": [{"name", "status" ("Passed", "Waived", "Error"...), "bandwidth_description",
  "bandwidth_matrix": [["53.61", "N/A", ...], ...], "sum", "error"}], "error", "warning"}}``;
  the matrix cells are strings, ``N/A`` where a pair was not measured.
- plain text: ``nvbandwidth Version: v0.8``, ``Device 0: NAME (00000000:19:00)``, then per
  testcase ``Running NAME.``, the description (``memcpy CE CPU(row) -> GPU(column) bandwidth
  (GB/s)``), a header of column ids, one row per source, and ``SUM NAME VALUE``. A waived
  testcase prints ``Waived: `` without its name; an error ``Error: MESSAGE``.

Bandwidths are GB/s (10^9 bytes per second: nvbandwidth scales bytes/s by 1e-9). For the
per-GPU testcases (``host_to_device_memcpy_ce``, ``device_to_host_memcpy_ce``,
``device_local_copy``) the matrix has one row and a column per CUDA device.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .values import ParseError, to_float

# "0: NVIDIA H100 80GB HBM3 (00000000:19:00): (host)" (JSON) or
# "Device 0: NVIDIA H100 80GB HBM3 (00000000:19:00)" (text).
_DEVICE = re.compile(
    r"^(?:Device\s+)?(?P<index>\d+):\s*(?P<name>.*?)\s*\((?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}"
    r":[0-9a-fA-F]{2})\)"
)
_VERSION = re.compile(r"^nvbandwidth Version:\s*(?P<version>\S+)")
_DRIVER = re.compile(r"^Driver Version:\s*(?P<version>\S+)")
_CUDA = re.compile(r"^CUDA Runtime Version:\s*(?P<version>\d+)")
_RUNNING = re.compile(r"^Running\s+(?P<name>\S+?)\.?$")
_SUM = re.compile(r"^SUM\s+(?P<name>\S+)\s+(?P<value>\S+)")
_STATUS = re.compile(r"^(?P<status>Waived|Error|ERROR|Not Found):\s*(?P<message>.*)$")


def _device(text: str) -> dict[str, Any] | None:
    match = _DEVICE.match(text.strip())
    if not match:
        return None
    return {"index": int(match.group("index")), "name": match.group("name"),
            "bus_id": match.group("bus").lower()}


def _cell(text: Any) -> float | None:
    return to_float(str(text)) if text is not None else None


def _parse_json(document: dict[str, Any]) -> dict[str, Any]:
    root = document.get("nvbandwidth")
    if not isinstance(root, dict):
        raise ParseError("no 'nvbandwidth' object in the JSON document")
    testcases = {}
    for case in root.get("testcases") or []:
        if not isinstance(case, dict) or not case.get("name"):
            continue
        matrix = [[_cell(cell) for cell in row] for row in case.get("bandwidth_matrix") or []
                  if isinstance(row, list)]
        testcases[str(case["name"])] = {
            "status": case.get("status"),
            "description": case.get("bandwidth_description"),
            "matrix": matrix,
            "sum": _cell(case.get("sum")),
            "error": case.get("error"),
        }
    devices = [d for d in (_device(str(text)) for text in root.get("GPU Device list") or []) if d]
    errors = [str(root[key]) for key in ("error",) if root.get(key)]
    return {"format": "json", "version": root.get("version"),
            "driver_version": root.get("Driver Version"),
            "cuda_runtime_version": root.get("CUDA Runtime Version"),
            "devices": devices, "testcases": testcases, "errors": errors,
            "warnings": [str(root["warning"])] if root.get("warning") else []}


class _Text:
    def __init__(self) -> None:
        self.out: dict[str, Any] = {"format": "text", "version": None, "driver_version": None,
                                    "cuda_runtime_version": None, "devices": [],
                                    "testcases": {}, "errors": [], "warnings": []}
        self.case: dict[str, Any] | None = None
        self.columns = 0

    def line(self, raw: str) -> None:
        text = raw.strip()
        for pattern, key in ((_VERSION, "version"), (_DRIVER, "driver_version"),
                             (_CUDA, "cuda_runtime_version")):
            match = pattern.match(text)
            if match:
                value = match.group("version")
                self.out[key] = int(value) if key == "cuda_runtime_version" else value
                return
        if text.startswith("Device "):
            device = _device(text)
            if device:
                self.out["devices"].append(device)
            return
        running = _RUNNING.match(text)
        if running:
            self.case = {"status": "Passed", "description": None, "matrix": [], "sum": None,
                         "error": None}
            self.out["testcases"][running.group("name")] = self.case
            return
        self._in_case(text)

    def _in_case(self, text: str) -> None:
        status = _STATUS.match(text)
        if status:
            if self.case is not None and status.group("status") != "Waived":
                self.case["status"], self.case["error"] = "Error", status.group("message")
                self.case = None  # the testcase ends with its error
            elif status.group("status") != "Waived":
                self.out["errors"].append(text)
            return
        summed = _SUM.match(text)
        if summed and summed.group("name") in self.out["testcases"]:
            self.out["testcases"][summed.group("name")]["sum"] = to_float(summed.group("value"))
            self.case = None
            return
        if self.case is None or not text:
            return
        if self.case["description"] is None and "bandwidth" in text.lower():
            self.case["description"] = text
            return
        tokens = text.split()
        if all(token.isdigit() for token in tokens) and not self.case["matrix"]:
            self.columns = len(tokens)  # the header of column ids
            return
        if len(tokens) == self.columns + 1:
            self.case["matrix"].append([_cell(token) for token in tokens[1:]])


def parse_nvbandwidth(text: str) -> dict[str, Any]:
    """Facts from one nvbandwidth run: ``{"format" ("json" | "text"), "version",
    "driver_version", "cuda_runtime_version", "devices": [{"index", "name", "bus_id"
    ("00000000:19:00", lower case)}], "testcases": {NAME: {"status", "description", "matrix"
    (rows of GB/s, None where not measured), "sum", "error"}}, "errors", "warnings"}``.
    Raises ``ParseError`` when the text is neither of nvbandwidth's formats."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            document = json.loads(stripped)
        except ValueError as exc:
            raise ParseError("nvbandwidth -j output is not valid JSON: %s" % exc) from exc
        if not isinstance(document, dict):
            raise ParseError("nvbandwidth -j output is not a JSON object")
        return _parse_json(document)
    parser = _Text()
    for raw in text.splitlines():
        parser.line(raw)
    if parser.out["version"] is None and not parser.out["testcases"]:
        raise ParseError("no nvbandwidth output ('nvbandwidth Version:' or 'Running ...')")
    return parser.out


def per_device(result: dict[str, Any], testcase: str) -> dict[int, float | None] | None:
    """CUDA device ordinal -> GB/s of a one-row testcase (host_to_device_memcpy_ce...);
    None when the run has no such testcase or it measured nothing."""
    case = (result.get("testcases") or {}).get(testcase)
    if not case or not case.get("matrix"):
        return None
    return dict(enumerate(case["matrix"][0]))
