"""The plain ``nvidia-smi`` table and ``ibv_devinfo`` parsers: on our own fixtures, on small
texts built here, and on the real captures in ../shared/captures when they are present (read in
place, never copied; every value asserted was read off the capture)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpucluster.ibv_devinfo import parse_ibv_devinfo
from gpucluster.nvsmi_table import parse_nvidia_smi_table
from gpucluster.values import ParseError

from tests.conftest import CAPTURES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def capture(kind: str, name: str) -> str:
    path = CAPTURES / kind / name
    if not path.is_file():
        pytest.skip(f"capture {kind}/{name} not present")
    return path.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- nvidia-smi table


def test_table_fixture_two_gpus_capped() -> None:
    facts = parse_nvidia_smi_table(
        (FIXTURES / "nvidia-smi-plain/l40s-2gpu-535-capped-325w.txt").read_text())
    assert (facts["driver_version"], facts["cuda_version"], facts["gpu_count"]) == (
        "535.161.08", "12.2", 2)
    first, second = facts["gpus"]
    assert first == {
        "index": 0, "name": "NVIDIA L40S", "name_truncated": False, "persistence_mode": True,
        "bus_id": "0000:4a:00.0", "bus_id_raw": "00000000:4A:00.0", "fan_percent": None,
        "temperature_c": 31, "perf_state": "P8", "power_draw_w": 35, "power_cap_w": 325,
        "memory_used_mib": 4, "memory_total_mib": 46068}
    assert (second["index"], second["bus_id"], second["power_draw_w"]) == (1, "0000:61:00.0", 33)


def test_table_without_gpu_rows_is_refused() -> None:
    with pytest.raises(ParseError, match="no GPU row"):
        parse_nvidia_smi_table("| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15 |\n"
                               "No devices were found\n")


def test_table_h100_8gpu_capture() -> None:
    facts = parse_nvidia_smi_table(capture("nvidia-smi-plain", "h100-8gpu-550.txt"))
    assert facts["gpu_count"] == 8
    assert {g["name"] for g in facts["gpus"]} == {"NVIDIA H100 80GB HBM3"}
    assert [g["bus_id"] for g in facts["gpus"]][-1] == "0000:db:00.0"
    assert {(g["memory_total_mib"], g["power_cap_w"]) for g in facts["gpus"]} == {(81559, 700)}


def test_table_old_79_column_layout_with_err_fan() -> None:
    [gpu] = parse_nvidia_smi_table(capture("nvidia-smi-plain", "geforce-err-fan-525.txt"))["gpus"]
    assert gpu["name"] == "NVIDIA GeForce ..." and gpu["name_truncated"] is True
    assert (gpu["fan_percent"], gpu["temperature_c"], gpu["perf_state"]) == (None, 38, "P5")
    assert (gpu["power_draw_w"], gpu["power_cap_w"], gpu["memory_total_mib"]) == (49, 450, 23028)


def test_table_mig_section_is_not_read_as_gpus() -> None:
    facts = parse_nvidia_smi_table(capture("nvidia-smi-plain", "h100-mig-590.txt"))
    assert facts["gpu_count"] == 1 and facts["gpus"][0]["memory_total_mib"] == 81559


def test_table_truncated_names() -> None:
    facts = parse_nvidia_smi_table(capture("nvidia-smi-plain", "rtx6000ada-4gpu-575-ecc-off.txt"))
    assert facts["gpu_count"] == 4
    assert {(g["name"], g["name_truncated"], g["fan_percent"]) for g in facts["gpus"]} == {
        ("NVIDIA RTX 6000 Ada Gene...", True, 30)}


# --------------------------------------------------------------------------- ibv_devinfo


def test_devinfo_fixture_verbose_rate_and_flags_skipped() -> None:
    facts = parse_ibv_devinfo(
        (FIXTURES / "ibv-devinfo/cx7-ndr-ib-plus-eth-down-verbose.txt").read_text())
    ib, eth = facts["devices"]
    assert (ib["name"], ib["vendor_id"], ib["vendor_part_id"], ib["phys_port_cnt"]) == (
        "mlx5_0", "0x02c9", 4129, 1)
    [port] = ib["ports"]
    assert (port["state"], port["state_code"], port["link_layer"], port["rate_gbps"]) == (
        "ACTIVE", 4, "InfiniBand", 400)
    assert (port["physical_state"], port["active_speed_gbps"]) == ("LINK_UP", 100.0)
    [down] = eth["ports"]
    assert (down["state"], down["link_layer"], down["rate_gbps"]) == ("DOWN", "Ethernet", 2.5)
    assert facts["errors"] == []


def test_devinfo_without_hca_is_refused() -> None:
    with pytest.raises(ParseError, match="hca_id"):
        parse_ibv_devinfo("No IB devices found\n")


def test_devinfo_connectx3_two_hcas_no_rate_without_v() -> None:
    facts = parse_ibv_devinfo(capture("ibv_devinfo", "cx3-mlx4-2hca-2port.txt"))
    assert [d["name"] for d in facts["devices"]] == ["mlx4_1", "mlx4_0"]
    assert [(p["number"], p["state"], p["rate_gbps"]) for p in facts["devices"][0]["ports"]] == [
        (1, "ACTIVE", None), (2, "DOWN", None)]


def test_devinfo_verbose_port_polling() -> None:
    [device] = parse_ibv_devinfo(capture("ibv_devinfo", "cx3-mlx4-port2-verbose.txt"))["devices"]
    [port] = device["ports"]
    assert (port["number"], port["state"], port["physical_state"], port["rate_gbps"]) == (
        2, "DOWN", "POLLING", 10)


def test_devinfo_connectx7_ethernet_all_down() -> None:
    facts = parse_ibv_devinfo(capture("ibv_devinfo", "cx7-4hca-ethernet-all-down.txt"))
    assert [d["name"] for d in facts["devices"]] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert {(p["state"], p["link_layer"]) for d in facts["devices"] for p in d["ports"]} == {
        ("DOWN", "Ethernet")}
