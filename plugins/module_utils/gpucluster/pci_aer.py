# -*- coding: utf-8 -*-
"""Read the PCIe AER counters the kernel keeps per PCI function.

``/sys/bus/pci/devices/<bdf>/aer_dev_correctable``, ``aer_dev_fatal`` and ``aer_dev_nonfatal``
(Linux Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats; written by
``aer_stats_dev_attr`` in drivers/pci/pcie/aer.c) each hold one ``NAME COUNT`` line per error
type the kernel names (``RxErr 0``, ``BadTLP 0``, ...; older kernels print longer names with
spaces: ``Receiver Error 2``), a ``dev_cor_errs_bit[N] COUNT`` line for a non-zero
bit it has no name for, then ``TOTAL_ERR_COR``, ``TOTAL_ERR_FATAL`` or ``TOTAL_ERR_NONFATAL``:
the number of error messages the function sent. The counters are 64-bit, start at 0 when the
kernel enumerates the function (every boot) and are never cleared while it runs.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import os
import re
from typing import Any

DEFAULT_ROOT = "/sys/bus/pci/devices"

# kind -> (file, its total line)
AER_FILES = {
    "correctable": ("aer_dev_correctable", "TOTAL_ERR_COR"),
    "fatal": ("aer_dev_fatal", "TOTAL_ERR_FATAL"),
    "nonfatal": ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
}
TOTAL = "total"
_LINE = re.compile(r"^(?P<name>\S.*?)\s+(?P<count>\d+)\s*$")
PCI_ADDRESS = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def parse_aer(text: str, total_name: str) -> dict[str, int]:
    """``{"total": TOTAL_ERR_*, NAME: COUNT, ...}`` of one aer_dev_* file, the named error
    types only where their count is not 0 (a reading stays small; an absent name is 0).
    ``total`` is missing when the file has no total line."""
    out: dict[str, int] = {}
    for raw in (text or "").splitlines():
        match = _LINE.match(raw.strip())
        if not match:
            continue
        name, count = match.group("name"), int(match.group("count"))
        if name == total_name:
            out[TOTAL] = count
        elif count:
            out[name] = count
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_aer(directory: str) -> dict[str, dict[str, int]] | None:
    """The AER counters of the PCI function at ``directory`` by kind (correctable, fatal,
    nonfatal), or None when it has none of the files (no AER capability, or a kernel without
    AER statistics)."""
    out: dict[str, dict[str, int]] = {}
    for kind, (name, total) in AER_FILES.items():
        text = _read(os.path.join(directory, name))
        if text is not None:
            counts = parse_aer(text, total)
            if TOTAL in counts:
                out[kind] = counts
    return out or None


def pci_address(directory: str) -> str | None:
    """The PCI address of a device directory that is (or links to) a PCI function's sysfs
    directory, as ``/sys/class/infiniband/<dev>/device`` does; None otherwise."""
    name = os.path.basename(os.path.realpath(directory)).lower()
    return name if PCI_ADDRESS.match(name) else None


def read_functions(functions: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``{label: directory}`` -> ``{pci address: {"device": label, kind: counts...}}`` for
    the functions that have AER counters. A directory whose address cannot be told is keyed
    by its label."""
    out: dict[str, dict[str, Any]] = {}
    for label in sorted(functions):
        directory = functions[label]
        counts = read_aer(directory)
        if counts is None:
            continue
        key = pci_address(directory) or label
        out[key] = dict(counts, device=label)
    return out
