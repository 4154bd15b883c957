"""Parsers against real outputs in ../shared/captures (see its SOURCES.tsv for provenance).

The captures are read in place and never copied into this repository. Every value asserted here
was checked by reading the capture itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpucluster.dcgm import parse_dcgmi_diag
from gpucluster.ib_sysfs import parse_ib_sysfs_flat
from gpucluster.ibstat import parse_ibstat
from gpucluster.nccl_tests import parse_nccl_tests
from gpucluster.nvlink import parse_nvlink_status
from gpucluster.nvsmi_xml import parse_nvidia_smi_xml
from gpucluster.topo import parse_topo_matrix
from gpucluster.xid import classify, parse_xid

from provisioner.errors import InputError
from provisioner.inspect import inspect_file
from tests.conftest import CAPTURES  # ../shared/captures, or GPUC_CAPTURES

# capture directory -> the format provisioner.inspect must detect
SUPPORTED = {
    "nvidia-smi-xml": "nvidia-smi-xml",
    "nvidia-smi-nvlink": "nvidia-smi-nvlink",
    "nvidia-smi-topo": "nvidia-smi-topo",
    "ibstat": "ibstat",
    "infiniband-sysfs": "ib-sysfs-flat",
    "nccl-tests": "nccl-tests",
    "dmesg-xid": "dmesg-xid",
    "dcgmi-diag": "dcgmi-diag",
    "nvidia-smi-plain": "nvidia-smi-plain",
    "ibv_devinfo": "ibv-devinfo",
}
# outputs we have no parser for (yet): inspect must refuse them, not misread them
UNSUPPORTED = ("lspci-nvidia", "nvidia-smi-query-csv")


def _files(kinds: Any) -> list[Path]:
    if not CAPTURES.is_dir():
        return []
    return sorted(path for kind in kinds for path in (CAPTURES / kind).glob("*") if path.is_file())


def read(kind: str, name: str) -> str:
    path = CAPTURES / kind / name
    if not path.is_file():
        pytest.skip(f"capture {kind}/{name} not present")
    return path.read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def _captures_present() -> None:
    if not CAPTURES.is_dir():
        pytest.skip(f"{CAPTURES} not present")


# --------------------------------------------------------------------------- every file


@pytest.mark.parametrize("path", _files(SUPPORTED), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_inspect_detects_and_parses_every_capture(path: Path) -> None:
    result = inspect_file(path)
    assert result["format"] == SUPPORTED[path.parent.name]
    assert result["facts"]


@pytest.mark.parametrize("path", _files(UNSUPPORTED), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_inspect_refuses_outputs_it_has_no_parser_for(path: Path) -> None:
    with pytest.raises(InputError, match="unrecognised format"):
        inspect_file(path)


# --------------------------------------------------------------------------- nvidia-smi -q -x


def test_xml_v100s_pcie_8gpu() -> None:
    facts = parse_nvidia_smi_xml(read("nvidia-smi-xml", "v100s-pcie-8gpu-460.xml"))
    assert (facts["driver_version"], facts["cuda_version"]) == ("460.73.01", "11.2")
    assert facts["gpu_count"] == 8
    gpus = facts["gpus"]
    assert len(gpus) == 8
    assert [gpu["bus_id"] for gpu in gpus] == [f"0000:00:{n:02x}.0" for n in range(0x0D, 0x15)]
    assert gpus[0]["bus_id_raw"] == "00000000:00:0D.0"
    assert gpus[0]["uuid"] == "GPU-76098dc1-d3bc-9a1b-7ea6-f7b48837829e"
    assert gpus[7]["uuid"] == "GPU-1d955959-c95b-4f40-2cac-100d3006ffe2"
    assert {gpu["name"] for gpu in gpus} == {"Tesla V100S-PCIE-32GB"}
    assert [gpu["temperature_c"] for gpu in gpus] == [66, 58, 57, 61, 59, 64, 61, 57]
    assert gpus[0]["power"]["draw_w"] == 232.8
    assert gpus[0]["power_limit_w"] == 250.0
    assert gpus[0]["memory_total_mib"] == 32510
    assert gpus[0]["clocks"]["sm_max_mhz"] == 1597
    assert all(gpu["ecc"]["aggregate_uncorrectable"] == 0 for gpu in gpus)
    assert all(gpu["mig_mode"] is None for gpu in gpus)  # "N/A" on Volta


def test_xml_a100_80gb_mig_lists_fewer_gpus_than_attached() -> None:
    facts = parse_nvidia_smi_xml(read("nvidia-smi-xml", "a100-sxm4-80gb-mig-535.xml"))
    # Quirk: attached_gpus says 4 but the test fixture kept only one <gpu> element.
    assert facts["gpu_count"] == 4
    assert len(facts["gpus"]) == 1
    gpu = facts["gpus"][0]
    assert (gpu["minor_number"], gpu["bus_id"]) == (1, "0000:01:00.0")
    assert gpu["mig_mode"] is True
    assert len(gpu["mig_devices"]) == 4
    assert {(d["memory_total_mib"], d["sm_count"]) for d in gpu["mig_devices"]} == {(19968, 14)}
    assert [d["gpu_instance_id"] for d in gpu["mig_devices"]] == [3, 4, 5, 6]
    assert gpu["power_limit_w"] == 500.0  # gpu_power_readings/current_power_limit
    assert gpu["remapped_rows"] is None
    assert gpu["retired_pages"]["double_bit"] is None
    assert gpu["ecc"]["volatile_uncorrectable"] == 0


def test_xml_a100_40gb_mig_volatile_ecc_not_available() -> None:
    facts = parse_nvidia_smi_xml(read("nvidia-smi-xml", "a100-sxm4-40gb-mig-510.xml"))
    gpu = facts["gpus"][0]
    assert gpu["bus_id"] == "0000:00:04.0"
    assert len(gpu["mig_devices"]) == 2
    assert gpu["ecc"]["volatile_uncorrectable"] is None
    assert gpu["ecc"]["aggregate_uncorrectable"] == 0
    assert gpu["power_limit_w"] == 400.0  # v11 power_readings with MIG


def test_xml_p100_single_bit_history() -> None:
    gpu = parse_nvidia_smi_xml(read("nvidia-smi-xml", "tesla-p100-pcie-510.xml"))["gpus"][0]
    assert gpu["name"] == "Tesla P100-PCIE-16GB"
    assert gpu["ecc"]["aggregate_correctable"] == 3
    assert gpu["ecc"]["aggregate_uncorrectable"] == 0
    assert gpu["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    assert gpu["memory_total_mib"] == 16384


def test_xml_t4_runs_at_half_pcie_width() -> None:
    gpu = parse_nvidia_smi_xml(read("nvidia-smi-xml", "tesla-t4-515.xml"))["gpus"][0]
    assert gpu["bus_id"] == "0000:00:1e.0"
    assert (gpu["pcie"]["width_current"], gpu["pcie"]["width_max"]) == (8, 16)
    assert gpu["power_limit_w"] == 70.0
    assert gpu["clocks"]["mem_max_mhz"] == 5001


def test_xml_rtx4090_no_ecc_no_serial() -> None:
    gpu = parse_nvidia_smi_xml(read("nvidia-smi-xml", "rtx-4090-535.xml"))["gpus"][0]
    assert gpu["serial"] is None
    assert gpu["ecc"]["mode"] is False
    assert gpu["ecc"]["aggregate_uncorrectable"] is None
    assert gpu["pcie"]["gen_current"] == 1
    assert (gpu["pcie"]["gen_max"], gpu["pcie"]["gen_max_device"]) == (3, 4)
    assert (gpu["power_limit_w"], gpu["power"]["max_limit_w"]) == (450.0, 600.0)
    assert gpu["remapped_rows"] == {
        "correctable": 0,
        "uncorrectable": 0,
        "pending": False,
        "failure": False,
    }


def test_xml_v13_tab_indented() -> None:
    facts = parse_nvidia_smi_xml(read("nvidia-smi-xml", "rtx-4000-sff-ada-595-v13.xml"))
    assert (facts["driver_version"], facts["cuda_version"]) == ("595.84", "13.2")
    gpu = facts["gpus"][0]
    assert gpu["name"] == "NVIDIA RTX 4000 SFF Ada Generation"
    assert gpu["persistence_mode"] is True
    assert gpu["power_limit_w"] == 70.0
    assert gpu["power"]["draw_w"] == 8.81  # average_power_draw (v13 has no power_draw)
    assert gpu["memory_total_mib"] == 20475
    assert gpu["clocks"]["graphics_max_mhz"] == 3105
    assert gpu["ecc"]["aggregate_uncorrectable"] is None


# --------------------------------------------------------------------------- nvlink -s


def test_nvlink_a100_8gpu_all_links_up() -> None:
    facts = parse_nvlink_status(read("nvidia-smi-nvlink", "a100-sxm4-80gb-8gpu-status.txt"))
    gpus = facts["gpus"]
    assert len(gpus) == 8
    assert all((gpu["links_up"], gpu["links_total"]) == (12, 12) for gpu in gpus)
    assert {link["speed_gbps"] for gpu in gpus for link in gpu["links"]} == {25.0}
    assert gpus[7]["uuid"] == "GPU-754035b4-4708-efcd-b261-623aea38bcad"


def test_nvlink_gpu6_all_inactive() -> None:
    (gpu,) = parse_nvlink_status(read("nvidia-smi-nvlink", "a100-sxm4-80gb-all-inactive.txt"))[
        "gpus"
    ]
    assert (gpu["index"], gpu["status"], gpu["links_up"]) == (6, "all_inactive", 0)
    assert gpu["uuid"] == "GPU-9667d95e-6d22-0c22-1f57-c481f13e7c44"


def test_nvlink_gpu7_tab_indented() -> None:
    (gpu,) = parse_nvlink_status(read("nvidia-smi-nvlink", "a100-sxm4-80gb-gpu7-status.txt"))[
        "gpus"
    ]
    assert (gpu["index"], gpu["status"], gpu["links_up"]) == (7, "ok", 12)


def test_nvlink_h100_18_links() -> None:
    (gpu,) = parse_nvlink_status(read("nvidia-smi-nvlink", "h100-sxm-590-status.txt"))["gpus"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["links_total"] == 18
    assert gpu["links"][17] == {"link": 17, "state": "up", "speed_gbps": 26.562}


def test_nvlink_mig_and_pcie_messages() -> None:
    (mig,) = parse_nvlink_status(read("nvidia-smi-nvlink", "h200-mig-unsupported.txt"))["gpus"]
    assert (mig["name"], mig["status"]) == ("NVIDIA H200", "mig_unsupported")
    (pcie,) = parse_nvlink_status(read("nvidia-smi-nvlink", "l40s-no-nvlink.txt"))["gpus"]
    assert (pcie["name"], pcie["status"], pcie["links"]) == ("NVIDIA L40S", "no_nvlink", [])


# --------------------------------------------------------------------------- topo -m


def test_topo_h100_nvswitch_two_numa() -> None:
    facts = parse_topo_matrix(read("nvidia-smi-topo", "h100-8gpu-nv18-no-nics-2numa.txt"))
    assert facts["nics"] == []
    assert len(facts["nvlink_pairs"]) == 28
    assert set(facts["nvlink_pairs"].values()) == {18}
    assert facts["affinity"]["GPU4"] == {"cpu_affinity": "52-103,156-207", "numa_affinity": "1"}
    assert facts["affinity"]["GPU3"]["cpu_affinity"] == "0-51,104-155"


def test_topo_h100_nvl_bridge_pairs_and_nics() -> None:
    facts = parse_topo_matrix(read("nvidia-smi-topo", "h100-nvl-8gpu-2nic.txt"))
    assert facts["nvlink_pairs"] == {
        "GPU0-GPU1": 12,
        "GPU2-GPU3": 12,
        "GPU4-GPU5": 12,
        "GPU6-GPU7": 12,
    }
    assert facts["nic_legend"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert facts["matrix"]["GPU1"]["NIC0"] == "PHB"  # the only GPU on the NICs' host bridge
    assert facts["matrix"]["GPU0"]["NIC0"] == "NODE"
    assert facts["matrix"]["NIC0"]["NIC1"] == "PIX"
    assert facts["affinity"]["GPU7"] == {
        "cpu_affinity": "64-127,192-255",
        "numa_affinity": "1",
        "gpu_numa_id": None,
    }


def test_topo_single_gpu_with_ansi_header() -> None:
    facts = parse_topo_matrix(read("nvidia-smi-topo", "h100-single-gpu-ansi.txt"))
    assert facts["devices"] == ["GPU0"]
    assert facts["matrix"] == {"GPU0": {"GPU0": "X"}}
    assert facts["affinity"]["GPU0"] == {
        "cpu_affinity": "0-19",
        "numa_affinity": "0",
        "gpu_numa_id": None,
    }


def test_topo_rtx6000ada_4gpu_4nic() -> None:
    facts = parse_topo_matrix(read("nvidia-smi-topo", "rtx6000ada-4gpu-4nic-no-nvlink.txt"))
    assert facts["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert facts["nic_legend"]["NIC3"] == "mlx5_3"
    assert facts["nvlink_pairs"] == {}
    assert facts["matrix"]["GPU2"]["NIC2"] == "NODE"
    assert facts["matrix"]["NIC2"]["NIC3"] == "PIX"
    assert facts["affinity"]["GPU2"]["cpu_affinity"] == "32-63"


def test_topo_mp_pcie_only() -> None:
    facts = parse_topo_matrix(read("nvidia-smi-topo", "rtxpro6000-blackwell-2gpu-pix-topo-mp.txt"))
    assert facts["matrix"]["GPU0"]["GPU1"] == "PIX"
    assert facts["affinity"]["GPU1"]["cpu_affinity"] == "0-47"


# --------------------------------------------------------------------------- ibstat


def _ports(facts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {ca["name"]: ca["ports"][0] for ca in facts["cas"]}


def test_ibstat_h100_ndr_plus_bluefield_bond() -> None:
    facts = parse_ibstat(read("ibstat", "h100-8x-cx7-ndr-plus-bf3-bond.txt"))
    ports = _ports(facts)
    assert len(ports) == 9
    assert "mlx5_2" not in ports  # names skip 2 and 3 on this host
    bond = ports["mlx5_bond_0"]
    assert (bond["link_layer"], bond["rate_gbps"]) == ("Ethernet", 200)
    assert facts["cas"][-1]["type"] == "MT41692"
    ib = [port for name, port in ports.items() if name != "mlx5_bond_0"]
    assert {(port["rate_gbps"], port["link_layer"], port["state"]) for port in ib} == {
        (400, "InfiniBand", "Active")
    }
    assert facts["errors"] == []


def test_ibstat_h100_three_ethernet_ports_down() -> None:
    ports = _ports(parse_ibstat(read("ibstat", "h100-12ca-ib-some-down.txt")))
    down = {name: port for name, port in ports.items() if port["state"] != "Active"}
    assert sorted(down) == ["mlx5_2", "mlx5_7", "mlx5_8"]
    assert {(p["physical_state"], p["rate_gbps"], p["link_layer"]) for p in down.values()} == {
        ("Disabled", 40, "Ethernet")
    }
    assert ports["mlx5_0"]["sm_lid"] == 334
    assert ports["mlx5_0"]["base_lid"] == 75


def test_ibstat_roce_all_active() -> None:
    ports = _ports(parse_ibstat(read("ibstat", "h100-12ca-roce-all-active.txt")))
    assert len(ports) == 12
    assert {port["link_layer"] for port in ports.values()} == {"Ethernet"}
    rates = sorted(port["rate_gbps"] for port in ports.values())
    assert rates == [100] * 4 + [400] * 8


def test_ibstat_roce_two_down() -> None:
    ports = _ports(parse_ibstat(read("ibstat", "h100-12ca-roce-two-down.txt")))
    assert sorted(name for name, port in ports.items() if port["state"] == "Down") == [
        "mlx5_11",
        "mlx5_5",
    ]


def test_ibstat_a100_hdr_plus_one_ethernet() -> None:
    facts = parse_ibstat(read("ibstat", "a100-9ca-hdr-ib-plus-eth.txt"))
    ports = _ports(facts)
    assert ports["mlx5_0"]["link_layer"] == "Ethernet"
    assert sum(port["link_layer"] == "InfiniBand" for port in ports.values()) == 8
    assert {ca["type"] for ca in facts["cas"]} == {"MT4126"}
    assert {port["rate_gbps"] for port in ports.values()} == {200}


def test_ibstat_ibpanic_is_recorded() -> None:
    facts = parse_ibstat(read("ibstat", "a100-azure-ndv4-8ca-hdr-ibpanic.txt"))
    assert len(facts["cas"]) == 8
    assert facts["cas"][7]["name"] == "mlx5_7"
    assert facts["cas"][7]["node_guid"] == "0x00155dfffe3411f2"
    assert facts["errors"] == [
        "ibpanic: [1400444] main: stat of IB device 'mlx5_8' failed: No such file or directory"
    ]


def test_ibstat_connectx3_dual_port_fdr() -> None:
    facts = parse_ibstat(read("ibstat", "cx3-mlx4-2ca-2port-fdr56.txt"))
    assert [ca["name"] for ca in facts["cas"]] == ["mlx4_0", "mlx4_1"]
    assert [port["rate_gbps"] for ca in facts["cas"] for port in ca["ports"]] == [56] * 4
    assert facts["cas"][1]["ports"][1]["port_guid"] == "0xf45214030033b852"


# --------------------------------------------------------------------------- /sys/class/infiniband


def _devices(name: str) -> dict[str, dict[str, Any]]:
    facts = parse_ib_sysfs_flat(read("infiniband-sysfs", name))
    return {device["name"]: device for device in facts["devices"]}


def test_sysfs_gpud_h100() -> None:
    devices = _devices("gpud-h100-8x-ndr-plus-bf3-bond.txt")
    assert len(devices) == 9
    port = devices["mlx5_0"]["ports"][0]
    assert (port["state"], port["physical_state"], port["rate_gbps"]) == ("ACTIVE", "LinkUp", 400)
    assert port["rate_detail"] == "4X NDR"
    bond = devices["mlx5_bond_0"]["ports"][0]
    assert (bond["link_layer"], bond["rate_gbps"], bond["rate_detail"]) == (
        "Ethernet",
        200,
        "2X NDR",
    )
    assert devices["mlx5_bond_0"]["fw_ver"] == "32.38.3056"
    # Quirk: link_downed reads 255 on mlx5_1 (8-bit counter pegged in the fixture).
    assert devices["mlx5_1"]["ports"][0]["counters"]["link_downed"] == 255
    assert devices["mlx5_0"]["ports"][0]["counters"]["port_rcv_errors"] == 14


def test_sysfs_node_exporter_iwarp_and_connectx3() -> None:
    devices = _devices("node-exporter-i40iw-mlx4.txt")
    iwarp = devices["i40iw0"]["ports"][0]
    assert (iwarp["rate_gbps"], iwarp["rate_detail"]) == (10, "4X")
    assert iwarp["counters"]["link_downed"] is None  # "N/A (no PMA)"
    mlx4 = devices["mlx4_0"]
    assert [(p["number"], p["rate_gbps"], p["rate_detail"]) for p in mlx4["ports"]] == [
        (1, 40, "4X QDR"),
        (2, 40, "4X QDR"),
    ]
    assert mlx4["ports"][0]["counters"]["port_xmit_wait"] == 4294967295


def test_sysfs_procfs_omnipath_mlx4_mlx5() -> None:
    devices = _devices("procfs-hfi1-mlx4-mlx5.txt")
    assert sorted(devices) == ["hfi1_0", "mlx4_0", "mlx5_0"]
    assert devices["hfi1_0"]["hca_type"] is None
    assert devices["hfi1_0"]["ports"][0]["rate_gbps"] == 100
    # Quirk: the flattened value keeps a literal "\n"; it must not leak into the link layer.
    assert devices["mlx4_0"]["ports"][1]["link_layer"] == "InfiniBand"
    mlx5 = devices["mlx5_0"]
    assert mlx5["node_guid"] == "0a7f:bc12:45ef:d23b"
    assert (mlx5["ports"][0]["rate_gbps"], mlx5["ports"][0]["rate_detail"]) == (25, "1X EDR")
    # Quirk: this fixture's phys_state is "4: ACTIVE" rather than "5: LinkUp".
    assert mlx5["ports"][0]["physical_state"] == "ACTIVE"


# --------------------------------------------------------------------------- nccl-tests


def test_nccl_a100_allreduce_with_injected_info_line() -> None:
    facts = parse_nccl_tests(read("nccl-tests", "a100-sxm4-40gb-8gpu-allreduce.txt"))
    assert facts["avg_busbw_gbps"] == 68.4048
    assert facts["row_count"] == 34
    assert facts["skipped_rows"] == 0
    assert facts["has_redop"] is True
    assert facts["error_column"] == "error"
    assert [rank["host"] for rank in facts["ranks"]] == ["localhost"] * 8
    assert facts["config"]["ngpus"] == 8
    last = facts["rows"][-1]
    assert (last["size_bytes"], last["out_of_place"]["busbw_gbps"]) == (8589934592, 235.26)
    assert last["in_place"]["busbw_gbps"] == 235.03
    assert last["out_of_place"]["wrong"] is None  # N/A: validation off
    assert facts["max_busbw_gbps"] == 235.26


def test_nccl_a100_allgather_without_redop_column() -> None:
    facts = parse_nccl_tests(read("nccl-tests", "a100-sxm4-40gb-8gpu-allgather-no-redop-col.txt"))
    assert facts["has_redop"] is False
    assert facts["avg_busbw_gbps"] == 58.2651
    assert facts["row_count"] == 34
    assert facts["rows"][-1]["redop"] is None
    assert facts["rows"][-1]["in_place"]["busbw_gbps"] == 230.07


def test_nccl_aws_efa_with_nccl_info_inside_table() -> None:
    facts = parse_nccl_tests(
        read("nccl-tests", "aws-g7e-rtxpro6000-2node-efa-allreduce-ncclinfo.txt")
    )
    assert facts["collective"] == "all_reduce_perf"
    assert facts["avg_busbw_gbps"] == 4.26966
    assert facts["row_count"] == 28
    assert facts["rows"][0]["size_bytes"] == 8
    assert facts["rows"][-1]["size_bytes"] == 1073741824
    assert facts["max_busbw_gbps"] == 12.39
    assert [(r["host"], r["bus"]) for r in facts["ranks"]] == [
        ("gpu-st-ml-1", "0000:30:00"),
        ("gpu-st-ml-2", "0000:30:00"),
    ]
    assert facts["config"]["validation"] == 1
    assert facts["rows"][5]["out_of_place"]["wrong"] == 0


def test_nccl_dgx_a100_4node() -> None:
    facts = parse_nccl_tests(read("nccl-tests", "dgx-a100-4node-32gpu-allreduce-ib.txt"))
    assert facts["avg_busbw_gbps"] == 113.289
    assert facts["row_count"] == 13
    assert facts["ranks"] == []
    assert facts["max_busbw_gbps"] == 191.56
    assert facts["rows"][0]["out_of_place"]["wrong"] == 7e-07


def test_nccl_dgx_a100_2node_k8s_wide_columns() -> None:
    facts = parse_nccl_tests(read("nccl-tests", "dgx-a100-2node-k8s-allreduce-ib.txt"))
    assert facts["avg_busbw_gbps"] == 53.7098
    assert facts["row_count"] == 30
    assert facts["rows"][-1]["size_bytes"] == 4294967296
    assert facts["rows"][-1]["in_place"]["busbw_gbps"] == 188.70


def test_nccl_dgx1_roce() -> None:
    facts = parse_nccl_tests(read("nccl-tests", "dgx1-v100-2node-roce-allreduce.txt"))
    assert facts["avg_busbw_gbps"] == 7.76739
    assert facts["row_count"] == 29
    assert facts["rows"][-1]["out_of_place"]["busbw_gbps"] == 22.92


def test_nccl_gcp_tcpx_markdown_indented() -> None:
    facts = parse_nccl_tests(read("nccl-tests", "gcp-a3-high-h100-2node-allgather-tcpx.txt"))
    assert facts["avg_busbw_gbps"] == 30.9622
    assert facts["row_count"] == 10
    first = facts["rows"][0]
    assert (first["redop"], first["root"], first["out_of_place"]["wrong"]) == ("none", -1, None)
    assert facts["rows"][-1]["in_place"]["busbw_gbps"] == 71.35


def test_nccl_gcp_tcpxo_misaligned_rows() -> None:
    facts = parse_nccl_tests(read("nccl-tests", "gcp-a3-mega-h100-2node-allgather-tcpxo.txt"))
    assert facts["avg_busbw_gbps"] == 53.8932
    assert facts["row_count"] == 31
    assert facts["skipped_rows"] == 0
    by_size = {row["size_bytes"]: row for row in facts["rows"]}
    assert by_size[1073741824]["out_of_place"]["busbw_gbps"] == 182.00
    assert by_size[8589934592]["in_place"]["busbw_gbps"] == 188.90
    assert facts["max_busbw_gbps"] == 188.90


# --------------------------------------------------------------------------- dmesg Xid


def test_xid_azure_nhc_line_embedded_in_health_log() -> None:
    (event,) = parse_xid(read("dmesg-xid", "azure-nhc-health-log-xid119.txt"))
    assert (event["pci"], event["xid"], event["pid"], event["process"]) == (
        "0002:00:00",
        119,
        67769,
        "nvidia-smi",
    )
    assert event["timestamp"] == "3606.832215"
    assert event["message"].startswith("Timeout waiting for RPC from GSP1!")
    assert classify([event])["verdict"] == "fatal"


def test_xid_dbe_row_remap_contained() -> None:
    events = parse_xid(read("dmesg-xid", "gpu-dbe-rowremap-xid48-63-94.txt"))
    summary = classify(events)
    assert summary["counts"] == {"48": 1, "63": 1, "94": 9}
    assert summary["fatal_xids"] == [48, 63, 94]
    assert list(summary["gpus"]) == ["0000:19:00"]
    assert events[0]["pid"] is None  # pid='<unknown>'
    assert events[0]["timestamp"] == "2024-11-15T12:02:03,470068+00:00"
    assert "physAddr 0x12bac1c3e0" in events[0]["message"]
    assert (events[3]["pid"], events[3]["process"]) == (1248209, "python3.10")


def test_xid_gsp_timeouts_dmesg_T() -> None:
    events = parse_xid(read("dmesg-xid", "h100-xe9680-xid119-gsp-timeout.txt"))
    assert [event["xid"] for event in events] == [119] * 5
    assert {event["pci"] for event in events} == {"0000:9b:00"}
    assert [event["process"] for event in events] == [
        "nvidia-smi",
        "nvidia-smi",
        "nvidia-smi",
        "cache_mgr_main",
        "gpud",
    ]
    assert events[0]["timestamp"] == "Sun Feb 23 16:24:18 2025"
    assert events[-1]["timestamp"] == "Sun Feb 23 16:30:13 2025"


def test_xid_sm_exceptions_decode_iso_are_warnings() -> None:
    events = parse_xid(read("dmesg-xid", "xid13-xid43-sm-exceptions-iso.txt"))
    summary = classify(events)
    assert summary["counts"] == {"13": 629, "43": 7}
    assert summary["verdict"] == "warning"
    assert {event["level"] for event in events} == {"warn"}
    assert events[0]["timestamp"] == "2025-01-21T02:21:33,498559+00:00"
    xid43 = next(event for event in events if event["xid"] == 43)
    assert (xid43["pid"], xid43["process"]) == (2815167, "pt_main_thread")


def test_xid_dmesg_T_azure_domain() -> None:
    events = parse_xid(read("dmesg-xid", "xid31-xid48-dmesg-T.txt"))
    assert [(event["pci"], event["xid"], event["pid"]) for event in events] == [
        ("000d:00:00", 31, 3234),
        ("000d:00:00", 48, 3234),
    ]
    # Quirk: this (synthetic, upstream test) line pairs Xid 48 with an SM exception text;
    # classification goes by the code, so it is fatal.
    assert classify(events)["verdict"] == "fatal"
    assert events[1]["timestamp"] == "Fri Oct 14 14:56:49 2022"


# --------------------------------------------------------------------------- dcgmi diag


def test_dcgm_old_deployment_pass_without_footer() -> None:
    facts = parse_dcgmi_diag(read("dcgmi-diag", "dcgm1x-r1-deployment-pass-no-footer.txt"))
    assert facts["passed"] is True
    assert len(facts["results"]) == 9
    assert facts["results"]["Blacklist"] == "Pass"
    assert facts["results"]["Page Retirement"] == "Pass"
    assert facts["metadata"] == {}


def test_dcgm_fragment_gpu0_memory_fail_with_wrapped_warning() -> None:
    facts = parse_dcgmi_diag(read("dcgmi-diag", "h100-node-r2-fragment-gpu0-memory-fail.txt"))
    assert facts["passed"] is False
    memory = facts["tests"]["GPU Memory"]
    assert memory["result"] == "Fail"
    assert memory["gpus"]["0"] == "Fail"
    assert sorted(gpu for gpu, result in memory["gpus"].items() if result == "Pass") == [
        str(n) for n in range(1, 8)
    ]
    (warning,) = memory["warnings"]
    assert warning.startswith("GPU 0 Thermal violations totaling 13.3 seconds started at 9.7")
    assert warning.endswith("and any other components.")
    assert facts["runs"] == 0


def test_dcgm_r3_printed_twice_by_srun_all_skipped() -> None:
    facts = parse_dcgmi_diag(read("dcgmi-diag", "rtxpro6000-blackwell-2gpu-r3-all-skip.txt"))
    assert facts["runs"] == 2
    assert facts["metadata"]["dcgm_version"] == "3.3.9"
    assert facts["metadata"]["driver_version_detected"] == "570.172.08"
    assert facts["skipped_tests"] == [
        "PCIe",
        "GPU Memory",
        "Targeted Stress",
        "Targeted Power",
        "Memory Bandwidth",
        "EUD Test",
    ]
    assert facts["tests"]["EUD Test"]["section"] == "Stress"
    assert facts["results"]["Page Retirement/Row Remap"] == "Pass"
    assert facts["passed"] is True
