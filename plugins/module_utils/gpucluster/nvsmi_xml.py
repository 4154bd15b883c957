"""Parse ``nvidia-smi -q -x`` (XML) into GPU facts.

Handles the ``nvsmi_device_v11``, ``v12`` and ``v13`` DTDs: space- or tab-indented files, the old
``power_readings`` and newer ``gpu_power_readings`` blocks, the old per-structure
``single_bit``/``double_bit`` ECC counters and the newer ``sram_*``/``dram_*`` counters, and
MIG-enabled GPUs. Any value nvidia-smi prints as ``N/A``, ``[Not Supported]``... becomes ``None``.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from .values import ParseError, clean, to_bool, to_float, to_int

_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"\.(?P<fn>[0-7])$"
)


def normalize_bus_id(raw: str | None) -> str | None:
    """``00000000:19:00.0`` -> ``0000:19:00.0`` (the lowercase form lspci and sysfs use)."""
    text = clean(raw)
    if text is None:
        return None
    match = _BUS_ID.match(text)
    if not match:
        return text.lower()
    domain = int(match.group("domain") or "0", 16)
    bus, dev, fn = match.group("bus").lower(), match.group("dev").lower(), match.group("fn")
    return f"{domain:04x}:{bus}:{dev}.{fn}"


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return clean(found.text)


def _int(node: ET.Element | None, path: str) -> int | None:
    return to_int(_text(node, path))


def _sum_counters(node: ET.Element | None, wanted: str) -> int | None:
    """Sum the direct children of ``node`` whose tag matches ``wanted`` ('uncorrectable' or
    'correctable'); ``None`` when every such counter is absent."""
    if node is None:
        return None
    total: int | None = None
    for child in node:
        tag = child.tag
        if wanted == "uncorrectable":
            if "uncorrectable" not in tag:
                continue
        elif not tag.endswith("_correctable"):
            continue
        value = to_int(child.text)
        if value is not None:
            total = (total or 0) + value
    return total


def _ecc_bucket(bucket: ET.Element | None) -> dict[str, int | None]:
    """Correctable/uncorrectable totals of one ``<volatile>`` or ``<aggregate>`` block."""
    if bucket is None:
        return {"correctable": None, "uncorrectable": None}
    double_bit = bucket.find("double_bit")
    if double_bit is not None:
        # v11 and older: per-structure counters under single_bit / double_bit, plus a total.
        single_bit = bucket.find("single_bit")
        return {
            "correctable": _bit_total(single_bit),
            "uncorrectable": _bit_total(double_bit),
        }
    return {
        "correctable": _sum_counters(bucket, "correctable"),
        "uncorrectable": _sum_counters(bucket, "uncorrectable"),
    }


def _bit_total(node: ET.Element | None) -> int | None:
    if node is None:
        return None
    total = _int(node, "total")
    if total is not None:
        return total
    values = [to_int(child.text) for child in node if child.tag != "total"]
    present = [value for value in values if value is not None]
    return sum(present) if present else None


def _ecc(gpu: ET.Element) -> dict[str, Any]:
    errors = gpu.find("ecc_errors")
    volatile = _ecc_bucket(errors.find("volatile") if errors is not None else None)
    aggregate = _ecc_bucket(errors.find("aggregate") if errors is not None else None)
    return {
        "mode": to_bool(_text(gpu, "ecc_mode/current_ecc")),
        "pending_mode": to_bool(_text(gpu, "ecc_mode/pending_ecc")),
        "volatile_correctable": volatile["correctable"],
        "volatile_uncorrectable": volatile["uncorrectable"],
        "aggregate_correctable": aggregate["correctable"],
        "aggregate_uncorrectable": aggregate["uncorrectable"],
    }


def _retired_pages(gpu: ET.Element) -> dict[str, Any]:
    pages = gpu.find("retired_pages")
    return {
        "single_bit": _int(pages, "multiple_single_bit_retirement/retired_count"),
        "double_bit": _int(pages, "double_bit_retirement/retired_count"),
        "pending": to_bool(_text(pages, "pending_retirement")),
    }


def _remapped_rows(gpu: ET.Element) -> dict[str, Any] | None:
    rows = gpu.find("remapped_rows")
    if rows is None or len(rows) == 0:
        return None  # "N/A": the GPU has no row remapper (pre-Ampere) or it is not reported.
    return {
        "correctable": _int(rows, "remapped_row_corr"),
        "uncorrectable": _int(rows, "remapped_row_unc"),
        "pending": to_bool(_text(rows, "remapped_row_pending")),
        "failure": to_bool(_text(rows, "remapped_row_failure")),
    }


def _pcie(gpu: ET.Element) -> dict[str, Any]:
    link = gpu.find("pci/pci_gpu_link_info")
    return {
        "gen_current": _int(link, "pcie_gen/current_link_gen"),
        "gen_max": _int(link, "pcie_gen/max_link_gen"),
        "gen_max_device": _int(link, "pcie_gen/max_device_link_gen"),
        "width_current": _int(link, "link_widths/current_link_width"),
        "width_max": _int(link, "link_widths/max_link_width"),
    }


def _clocks(gpu: ET.Element) -> dict[str, int | None]:
    return {
        "graphics_mhz": _int(gpu, "clocks/graphics_clock"),
        "sm_mhz": _int(gpu, "clocks/sm_clock"),
        "mem_mhz": _int(gpu, "clocks/mem_clock"),
        "graphics_max_mhz": _int(gpu, "max_clocks/graphics_clock"),
        "sm_max_mhz": _int(gpu, "max_clocks/sm_clock"),
        "mem_max_mhz": _int(gpu, "max_clocks/mem_clock"),
    }


def _power(gpu: ET.Element) -> dict[str, float | None]:
    newer = gpu.find("gpu_power_readings")
    if newer is not None:  # v12+ (driver 530 and later)
        draw = _text(newer, "power_draw") or _text(newer, "average_power_draw")
        return {
            "limit_w": to_float(_text(newer, "current_power_limit")),
            "default_limit_w": to_float(_text(newer, "default_power_limit")),
            "max_limit_w": to_float(_text(newer, "max_power_limit")),
            "draw_w": to_float(draw),
        }
    older = gpu.find("power_readings")
    limit = _text(older, "enforced_power_limit") or _text(older, "power_limit")
    return {
        "limit_w": to_float(limit),
        "default_limit_w": to_float(_text(older, "default_power_limit")),
        "max_limit_w": to_float(_text(older, "max_power_limit")),
        "draw_w": to_float(_text(older, "power_draw")),
    }


def _clock_reasons(gpu: ET.Element) -> list[str] | None:
    """Active clock throttle reasons (``hw_slowdown``, ``sw_thermal_slowdown``...), the
    ``clocks_event_reasons`` block of r535+ or the older ``clocks_throttle_reasons``; ``None``
    when neither block is present."""
    for block, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                          ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        node = gpu.find(block)
        if node is None:
            continue
        return sorted(child.tag[len(prefix):] if child.tag.startswith(prefix) else child.tag
                      for child in node if clean(child.text) == "Active")
    return None


def _fabric(gpu: ET.Element) -> dict[str, Any] | None:
    """The GPU's NVLink fabric registration (``<fabric>``, r550+): ``state`` as printed
    ("Completed", "In Progress", "Not Started", "Not Supported"), ``status``, ``clique_id``,
    ``cluster_uuid`` and the ``health`` sub-elements by tag. ``None`` where the block is absent
    (older drivers); values nvidia-smi prints as N/A are ``None``."""
    node = gpu.find("fabric")
    if node is None:
        return None
    health = node.find("health")
    return {
        "state": _text(node, "state"),
        "status": _text(node, "status"),
        "clique_id": _text(node, "cliqueId"),
        "cluster_uuid": _text(node, "clusterUuid"),
        "health": {child.tag: clean(child.text) for child in health}
        if health is not None else {},
    }


def _mig_devices(gpu: ET.Element) -> list[dict[str, Any]]:
    devices = []
    for node in gpu.findall("mig_devices/mig_device"):
        devices.append(
            {
                "index": _int(node, "index"),
                "gpu_instance_id": _int(node, "gpu_instance_id"),
                "compute_instance_id": _int(node, "compute_instance_id"),
                "sm_count": _int(node, "device_attributes/shared/multiprocessor_count"),
                "memory_total_mib": _int(node, "fb_memory_usage/total"),
            }
        )
    return devices


def _gpu(index: int, gpu: ET.Element) -> dict[str, Any]:
    bus_id_raw = _text(gpu, "pci/pci_bus_id") or clean(gpu.get("id"))
    power = _power(gpu)
    return {
        # nvidia-smi lists GPUs in its own index order (PCI bus order), so position == index.
        "index": index,
        "name": _text(gpu, "product_name"),
        # As printed: "Hopper", "Ada Lovelace" (absent before driver ~470: None).
        "product_architecture": _text(gpu, "product_architecture"),
        # As printed: device id then vendor id, "233510DE" (lspci's 10de:2335).
        "pci_device_id": _text(gpu, "pci/pci_device_id"),
        "uuid": _text(gpu, "uuid"),
        "serial": _text(gpu, "serial"),
        "minor_number": _int(gpu, "minor_number"),
        "bus_id": normalize_bus_id(bus_id_raw),
        "bus_id_raw": bus_id_raw,
        "persistence_mode": to_bool(_text(gpu, "persistence_mode")),
        "mig_mode": to_bool(_text(gpu, "mig_mode/current_mig")),
        "mig_devices": _mig_devices(gpu),
        "fabric": _fabric(gpu),
        "ecc": _ecc(gpu),
        "retired_pages": _retired_pages(gpu),
        "remapped_rows": _remapped_rows(gpu),
        "pcie": _pcie(gpu),
        "clocks": _clocks(gpu),
        "clock_reasons": _clock_reasons(gpu),
        "power": power,
        "power_limit_w": power["limit_w"],
        "temperature_c": _int(gpu, "temperature/gpu_temp"),
        "memory_total_mib": _int(gpu, "fb_memory_usage/total"),
    }


def parse_nvidia_smi_xml(text: str) -> dict[str, Any]:
    """Facts from ``nvidia-smi -q -x``.

    ``gpu_count`` is what the driver reports (``attached_gpus``); ``gpus`` lists the ``<gpu>``
    elements actually present, so a caller can compare both with the expected count.
    Raises ``ParseError`` when ``text`` is not nvidia-smi XML.
    """
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise ParseError(f"not well-formed XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"root element is <{root.tag}>, expected <nvidia_smi_log>")
    gpus = [_gpu(index, node) for index, node in enumerate(root.findall("gpu"))]
    return {
        "timestamp": _text(root, "timestamp"),
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "gpu_count": _int(root, "attached_gpus"),
        "gpus": gpus,
    }
