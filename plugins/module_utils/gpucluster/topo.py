"""Parse ``nvidia-smi topo -m`` (and ``topo -mp``) into a device connection matrix.

Handles tab- or space-separated output, ANSI escapes around the header (newer drivers underline
it), NIC columns named ``NIC<n>`` (with a ``NIC Legend``) or directly ``mlx5_<n>`` (older
drivers), a header wrapped over several lines, matrix rows wrapped over several lines, and the
``Legend:`` block, which is ignored apart from the NIC legend.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re
from typing import Any

from .values import ParseError, clean, strip_ansi

# Connection types nvidia-smi prints ("SOC" is the pre-2018 spelling of SYS).
_CONNECTION = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|N/A)$")
_NVLINK = re.compile(r"^NV(\d+)$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_GPU_NAME = re.compile(r"^GPU\d+$")
# Where the matrix ends: "Legend:", "NIC Legend:", a legend entry ("  X    = Self",
# "  NIC0: mlx5_0") even when the paste lost the block's title. Never a matrix row.
_LEGEND_LINE = re.compile(r"^\s*(?:(?:NIC\s+)?legend\s*:?\s*$|\S+\s+=\s|NIC\d+\s*:)", re.IGNORECASE)

# Column labels after the device columns, in the order nvidia-smi prints them.
_LABELS = (
    (("CPU", "Affinity"), "cpu_affinity"),
    (("NUMA", "Affinity"), "numa_affinity"),
    (("GPU", "NUMA", "ID"), "gpu_numa_id"),
)


def _split_header(tokens: list[str]) -> tuple[list[str], list[str]]:
    """Device column names and affinity column keys from the header tokens."""
    devices: list[str] = []
    labels: list[str] = []
    position = 0
    while position < len(tokens):
        for words, key in _LABELS:
            if tuple(tokens[position : position + len(words)]) == words:
                labels.append(key)
                position += len(words)
                break
        else:
            devices.append(tokens[position])
            position += 1
    return devices, labels


def _is_row_start(tokens: list[str]) -> bool:
    return (
        len(tokens) >= 2 and not _CONNECTION.match(tokens[0]) and bool(_CONNECTION.match(tokens[1]))
    )


def _kind(name: str) -> str:
    if _GPU_NAME.match(name):
        return "gpu"
    if name.startswith("CPU"):
        return "cpu"
    return "nic"


def parse_topo_matrix(text: str) -> dict[str, Any]:
    """Facts from ``nvidia-smi topo -m``.

    Returns ``devices`` (column order), ``gpus``/``nics`` (names), ``matrix``
    (``{"GPU0": {"GPU1": "NV12", ...}}``), ``affinity`` per GPU (``cpu_affinity``,
    ``numa_affinity``, ``gpu_numa_id`` as printed, ``None`` for ``N/A``), ``nic_legend``
    (``{"NIC0": "mlx5_0"}``), ``nvlink_pairs`` (NVLink count per GPU pair) and ``errors``.
    Raises ``ParseError`` when no matrix header is found.
    """
    lines = [strip_ansi(line).rstrip() for line in text.splitlines()]
    legend_at = next((i for i, line in enumerate(lines) if _LEGEND_LINE.match(line)), len(lines))
    table = [line.split() for line in lines[:legend_at]]
    first_row = next((i for i, tokens in enumerate(table) if _is_row_start(tokens)), None)
    if first_row is None:
        raise ParseError("no topology matrix found (expected a row like 'GPU0  X  NV12 ...')")
    header_tokens = [token for tokens in table[:first_row] for token in tokens]
    devices, labels = _split_header(header_tokens)
    if not devices:
        raise ParseError(
            "topology header has no device columns (the line 'GPU0  GPU1 ...' above the "
            "matrix is missing from the paste)"
        )

    rows: list[list[str]] = []
    for tokens in table[first_row:]:
        if not tokens:
            continue
        if _is_row_start(tokens) or not rows:
            rows.append(list(tokens))
        else:
            rows[-1].extend(tokens)  # a row wrapped onto the next line

    matrix: dict[str, dict[str, str | None]] = {}
    affinity: dict[str, dict[str, str | None]] = {}
    errors: list[str] = []
    for tokens in rows:
        name, cells = tokens[0], tokens[1:]
        if len(cells) < len(devices):
            errors.append(f"{name}: {len(cells)} cells for {len(devices)} columns")
        matrix[name] = {
            device: (cells[i] if i < len(cells) else None) for i, device in enumerate(devices)
        }
        extra = cells[len(devices) :]
        if extra:
            affinity[name] = {
                label: (clean(extra[i]) if i < len(extra) else None)
                for i, label in enumerate(labels)
            }

    nic_legend: dict[str, str] = {}
    for line in lines[legend_at:]:
        match = _NIC_LEGEND.match(line)
        if match:
            nic_legend[match.group(1)] = match.group(2)

    gpus = [device for device in devices if _kind(device) == "gpu"]
    nvlink_pairs: dict[str, int] = {}
    for position, left in enumerate(gpus):
        for right in gpus[position + 1 :]:
            link = _NVLINK.match(matrix.get(left, {}).get(right) or "")
            if link:
                nvlink_pairs[f"{left}-{right}"] = int(link.group(1))

    return {
        "devices": devices,
        "gpus": gpus,
        "nics": [device for device in devices if _kind(device) == "nic"],
        "matrix": matrix,
        "affinity": affinity,
        "nic_legend": nic_legend,
        "nvlink_pairs": nvlink_pairs,
        "errors": errors,
    }
