"""The simulated nvidia-smi as installed (bundled), run as a subprocess against a temporary
GPU_SIM_ROOT."""

from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.sim.conftest import Bundled, run_tool

H100_NODE: dict[str, Any] = {
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "gpu_count": 8,
    "architecture": "hopper",
    "pci_device_ids": ["10de:2330"],
    "memory_mib": 81559,
    "power_limit_w": 700,
    "pcie_gen": 5,
    "pcie_width": 16,
    "nvlink_links_per_gpu": 18,
    "nvlink_link_speed_gbps": 26.562,
    "nvswitch": True,
    "ib_hcas": 8,
    "ib_rate_gbps": 400,
    "fabric": "infiniband",
    "hostname": "sim-gpu-1",
}
HGX_BUS_IDS = [f"00000000:{bus}:00.0" for bus in ("19", "3B", "4C", "5D", "9B", "BB", "CB", "DB")]
DRIVER_FAILURE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)

Smi = Callable[..., subprocess.CompletedProcess[str]]
RunSmi = Callable[..., subprocess.CompletedProcess[str]]


def make_node(root: Path, profile: dict[str, Any], driver: str = "550.54.15",
              cuda: str = "12.4", faults: tuple[str, ...] = ()) -> None:
    (root / "etc/gpu-sim").mkdir(parents=True, exist_ok=True)
    (root / "etc/gpu-sim/profile.json").write_text(json.dumps(profile))
    (root / "etc/gpu-sim/faults").write_text("".join(f"{line}\n" for line in faults))
    (root / "usr/lib/gpu-sim").mkdir(parents=True, exist_ok=True)
    (root / "usr/lib/gpu-sim/driver-version").write_text(f"{driver}\n")
    (root / "usr/lib/gpu-sim/cuda-version").write_text(f"{cuda}\n")


@pytest.fixture
def run_smi(bundled: Bundled) -> RunSmi:
    """``run_smi(root, *args)``: the installed nvidia-smi on the node under ``root``."""

    def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return run_tool(bundled("nvidia_smi"), root, *args)

    return run


@pytest.fixture
def smi(tmp_path: Path, run_smi: RunSmi) -> Smi:
    """nvidia-smi on a healthy 8x H100 node; ``smi(*args, faults=(...))`` injects faults."""

    def call(*args: str, faults: tuple[str, ...] = (),
             profile: dict[str, Any] | None = None,
             driver: str = "550.54.15") -> subprocess.CompletedProcess[str]:
        make_node(tmp_path, profile or H100_NODE, driver=driver, faults=faults)
        return run_smi(tmp_path, *args)

    return call


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def xml_gpus(text: str) -> tuple[ET.Element, list[ET.Element]]:
    root = ET.fromstring(text)
    return root, root.findall("gpu")


def field(gpu: ET.Element, path: str) -> str:
    value = gpu.findtext(path)
    assert value is not None, f"missing <{path}>"
    return value


def query(smi: Smi, fields: str, faults: tuple[str, ...] = ()) -> list[list[str]]:
    out = ok(smi(f"--query-gpu={fields}", "--format=csv,noheader,nounits", faults=faults))
    return [line.split(", ") for line in out.splitlines()]


# --- healthy node --------------------------------------------------------------------------


def test_list_gpus_enumerates_the_profile_with_stable_uuids(smi: Smi) -> None:
    lines = ok(smi("-L")).splitlines()
    assert len(lines) == 8
    pattern = re.compile(
        r"GPU (\d): NVIDIA H100 80GB HBM3 \(UUID: (GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}"
        r"-[0-9a-f]{4}-[0-9a-f]{12})\)"
    )
    matches = [pattern.fullmatch(line) for line in lines]
    assert all(matches), lines
    assert [int(m.group(1)) for m in matches if m] == list(range(8))
    uuids = [m.group(2) for m in matches if m]
    assert len(set(uuids)) == 8
    assert ok(smi("-L")).splitlines() == lines  # deterministic
    other_host = ok(smi("-L", profile=dict(H100_NODE, hostname="sim-gpu-2"))).splitlines()
    assert set(other_host).isdisjoint(lines)


def test_xml_has_the_real_structure_and_profile_values(smi: Smi) -> None:
    text = ok(smi("-q", "-x"))
    assert text.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM '
                           '"nvsmi_device_v12.dtd">\n')
    assert "SIMULATED" in text
    root, gpus = xml_gpus(text)
    assert root.findtext("driver_version") == "550.54.15"
    assert root.findtext("cuda_version") == "12.4"
    assert root.findtext("attached_gpus") == "8"
    assert [gpu.get("id") for gpu in gpus] == HGX_BUS_IDS
    first = gpus[0]
    assert field(first, "product_name") == "NVIDIA H100 80GB HBM3"
    assert field(first, "product_architecture") == "Hopper"
    assert field(first, "uuid").startswith("GPU-")
    assert field(first, "pci/pci_bus_id") == "00000000:19:00.0"
    assert field(first, "pci/pci_device_id") == "233010DE"
    assert field(first, "persistence_mode") == "Disabled"
    assert field(first, "mig_mode/current_mig") == "Disabled"
    assert field(first, "ecc_mode/current_ecc") == "Enabled"
    for scope in ("volatile", "aggregate"):
        for counter in ("dram_correctable", "dram_uncorrectable", "sram_correctable",
                        "sram_uncorrectable_parity", "sram_uncorrectable_secded"):
            assert field(first, f"ecc_errors/{scope}/{counter}") == "0"
    assert field(first, "remapped_rows/remapped_row_pending") == "No"
    assert field(first, "retired_pages/pending_retirement") == "N/A"
    link = "pci/pci_gpu_link_info"
    assert field(first, f"{link}/pcie_gen/max_link_gen") == "5"
    assert field(first, f"{link}/pcie_gen/current_link_gen") == "5"
    assert field(first, f"{link}/link_widths/max_link_width") == "16x"
    assert field(first, f"{link}/link_widths/current_link_width") == "16x"
    assert field(first, "max_clocks/sm_clock") == "1980 MHz"
    assert field(first, "clocks/sm_clock").endswith(" MHz")
    assert field(first, "gpu_power_readings/current_power_limit") == "700.00 W"
    assert re.fullmatch(r"\d+ C", field(first, "temperature/gpu_temp"))
    assert field(first, "fb_memory_usage/total") == "81559 MiB"


def test_xml_sram_counters_follow_the_driver_generation(smi: Smi) -> None:
    _, gpus = xml_gpus(ok(smi("-q", "-x", driver="535.161.08")))
    volatile = gpus[0].find("ecc_errors/volatile")
    assert volatile is not None
    assert [child.tag for child in volatile] == [
        "sram_correctable", "sram_uncorrectable", "dram_correctable", "dram_uncorrectable"]


def test_plain_table_is_marked_simulated_and_keeps_the_real_layout(smi: Smi) -> None:
    lines = ok(smi()).splitlines()
    assert lines[2].startswith("| NVIDIA-SMI 550.54.15 ")
    assert "Driver Version: 550.54.15" in lines[2]
    assert "CUDA Version: 12.4" in lines[2]
    assert lines[3].startswith("| SIMULATED")
    boxed = [line for line in lines[1:] if line]
    assert {len(line) for line in boxed} == {91}
    rows = [line for line in lines if re.match(r"\|\s+\d+\s+NVIDIA H100", line)]
    assert len(rows) == 8
    assert rows[0].split("|")[2].split() == ["00000000:19:00.0", "Off"]
    assert "No running processes found" in lines[-2]


def test_version(smi: Smi) -> None:
    assert ok(smi("--version")).splitlines() == [
        "NVIDIA-SMI version  : 550.54.15",
        "NVML version        : 550.54",
        "DRIVER version      : 550.54.15",
        "CUDA Version        : 12.4",
    ]


def test_help_says_simulated(smi: Smi) -> None:
    out = ok(smi("-h"))
    assert "SIMULATED" in out
    assert "--query-gpu=" in out


# --- --query-gpu -----------------------------------------------------------------------------

ALL_FIELDS = (
    "index,name,uuid,pci.bus_id,driver_version,memory.total,persistence_mode,ecc.mode.current,"
    "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
    "power.limit,temperature.gpu,clocks.max.sm"
)


def test_query_csv_with_header_and_units(smi: Smi) -> None:
    lines = ok(smi(f"--query-gpu={ALL_FIELDS}", "--format=csv")).splitlines()
    assert lines[0] == (
        "index, name, uuid, pci.bus_id, driver_version, memory.total [MiB], persistence_mode, "
        "ecc.mode.current, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, "
        "pcie.link.width.max, power.limit [W], temperature.gpu, clocks.max.sm [MHz]"
    )
    assert len(lines) == 9
    row = lines[1].split(", ")
    assert row[0:2] == ["0", "NVIDIA H100 80GB HBM3"]
    assert row[3:] == ["00000000:19:00.0", "550.54.15", "81559 MiB", "Disabled", "Enabled",
                       "5", "5", "16", "16", "700.00 W", row[13], "1980 MHz"]
    assert row[13].isdigit()


def test_query_csv_noheader_nounits(smi: Smi) -> None:
    out = ok(smi("--query-gpu=index,memory.total,power.limit,clocks.max.sm",
                 "--format=csv,noheader,nounits"))
    assert out.splitlines()[:2] == ["0, 81559, 700.00, 1980", "1, 81559, 700.00, 1980"]
    noheader = ok(smi("--query-gpu=index,memory.total", "--format=csv,noheader"))
    assert noheader.splitlines()[0] == "0, 81559 MiB"
    nounits = ok(smi("--query-gpu=memory.total", "--format=csv,nounits"))
    assert nounits.splitlines()[:2] == ["memory.total [MiB]", "81559"]


def test_query_aliases_and_id_selection(smi: Smi) -> None:
    out = ok(smi("-i", "1", "--query-gpu=gpu_name,gpu_bus_id", "--format=csv,noheader"))
    assert out == "NVIDIA H100 80GB HBM3, 00000000:3B:00.0\n"


def test_unknown_query_field_fails_like_the_real_tool(smi: Smi) -> None:
    result = smi("--query-gpu=index,gpu_frobnication", "--format=csv")
    assert result.returncode == 2
    assert result.stdout == 'Field "gpu_frobnication" is not a valid field to query.\n\n'


def test_query_without_format_is_rejected(smi: Smi) -> None:
    assert smi("--query-gpu=index").returncode == 2


def test_compute_apps_query_lists_no_process(smi: Smi) -> None:
    """The driver role's preflight asks this; a simulated GPU never runs anything."""
    assert ok(smi("--query-compute-apps=pid,process_name", "--format=csv,noheader")) == ""
    out = ok(smi("--query-compute-apps=pid,process_name,used_gpu_memory", "--format=csv"))
    assert out == "pid, process_name, used_gpu_memory [MiB]\n"
    bad = smi("--query-compute-apps=pid,index", "--format=csv")
    assert (bad.returncode, bad.stdout) == (2, 'Field "index" is not a valid field to query.\n\n')


# --- errors ----------------------------------------------------------------------------------


def test_missing_driver_exits_9(tmp_path: Path, run_smi: RunSmi) -> None:
    make_node(tmp_path, H100_NODE)
    (tmp_path / "usr/lib/gpu-sim/driver-version").unlink()
    for args in ((), ("-L",), ("-q", "-x"), ("--query-gpu=index", "--format=csv")):
        result = run_smi(tmp_path, *args)
        assert result.returncode == 9, args
        assert result.stdout.strip() == DRIVER_FAILURE


def test_unknown_option_exits_2(smi: Smi) -> None:
    result = smi("--frobnicate")
    assert result.returncode == 2
    assert "Option --frobnicate is not recognized" in result.stdout
    assert smi("nvlink", "--frobnicate").returncode == 2


def test_no_profile_means_no_devices(tmp_path: Path, run_smi: RunSmi) -> None:
    make_node(tmp_path, H100_NODE)
    (tmp_path / "etc/gpu-sim/profile.json").unlink()
    result = run_smi(tmp_path, "-L")
    assert (result.returncode, result.stdout) == (6, "No devices were found\n")


# --- persistence mode ------------------------------------------------------------------------


def test_persistence_mode_is_stored_per_gpu(tmp_path: Path, run_smi: RunSmi) -> None:
    make_node(tmp_path, H100_NODE)
    out = ok(run_smi(tmp_path, "-pm", "1")).splitlines()
    assert out == [f"Enabled Legacy persistence mode for GPU {bus}." for bus in HGX_BUS_IDS] + [
        "All done."]
    assert ok(run_smi(tmp_path, "-i", "0", "-pm", "0")).splitlines() == [
        "Disabled Legacy persistence mode for GPU 00000000:19:00.0.", "All done."]
    states = ok(run_smi(tmp_path, "--query-gpu=persistence_mode", "--format=csv,noheader"))
    assert states.splitlines() == ["Disabled"] + ["Enabled"] * 7
    _, gpus = xml_gpus(ok(run_smi(tmp_path, "-q", "-x")))
    assert field(gpus[1], "persistence_mode") == "Enabled"
    assert "NVIDIA H100 80GB HBM3          On  |" in ok(run_smi(tmp_path))
    assert run_smi(tmp_path, "-pm", "2").returncode == 2


def test_gpu_reset_resets_every_gpu_or_those_named_and_logs_each(tmp_path: Path,
                                                                 run_smi: RunSmi) -> None:
    make_node(tmp_path, H100_NODE)
    out = ok(run_smi(tmp_path, "--gpu-reset")).splitlines()
    assert out == [f"SIMULATED: GPU {bus} was reset." for bus in HGX_BUS_IDS] + ["All done."]
    assert ok(run_smi(tmp_path, "-r", "-i", "1")).splitlines()[0].endswith(
        f"GPU {HGX_BUS_IDS[1]} was reset.")
    log = (tmp_path / "var/lib/gpu-sim/resets").read_text().splitlines()
    assert [line.split()[1] for line in log] == [*HGX_BUS_IDS, HGX_BUS_IDS[1]]


def test_a_gpu_that_fell_off_the_bus_cannot_be_reset(tmp_path: Path, run_smi: RunSmi) -> None:
    make_node(tmp_path, H100_NODE, faults=("gpu2-xid-79",))
    result = run_smi(tmp_path, "-r")
    assert result.returncode == 15, result.stdout + result.stderr
    assert HGX_BUS_IDS[2] in result.stderr + result.stdout
    assert not (tmp_path / "var/lib/gpu-sim/resets").exists()
    # The other GPUs alone can be reset.
    ok(run_smi(tmp_path, "-r", "-i", "0,1"))


# --- nvlink / topo ---------------------------------------------------------------------------


def nvlink_blocks(text: str) -> dict[int, list[str]]:
    blocks: dict[int, list[str]] = {}
    current = -1
    for line in text.splitlines():
        header = re.match(r"GPU (\d+): ", line)
        if header:
            current = int(header.group(1))
            blocks[current] = []
        else:
            blocks[current].append(line)
    return blocks


def test_nvlink_status_lists_every_link(smi: Smi) -> None:
    blocks = nvlink_blocks(ok(smi("nvlink", "-s")))
    assert sorted(blocks) == list(range(8))
    assert blocks[0] == [f"\t Link {link}: 26.562 GB/s" for link in range(18)]


def topo_rows(text: str) -> tuple[list[str], dict[str, list[str]]]:
    lines = text.split("\n\nLegend:", maxsplit=1)[0].splitlines()
    header = lines[0].replace("\x1b[4m", "").replace("\x1b[0m", "").split("\t")[1:]
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in lines[1:]}
    return header, rows


def test_topology_matrix_with_nvswitch_and_nics(smi: Smi) -> None:
    text = ok(smi("topo", "-m"))
    assert text.startswith("\t\x1b[4mGPU0\t")
    header, rows = topo_rows(text)
    gpus = [f"GPU{i}" for i in range(8)]
    nics = [f"NIC{i}" for i in range(8)]
    assert header == [*gpus, *nics, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert list(rows) == gpus + nics
    for i, gpu in enumerate(gpus):
        cells = rows[gpu]
        assert cells[i] == " X "
        assert [c for j, c in enumerate(cells[:8]) if j != i] == ["NV18"] * 7
        assert cells[8 + i] == "PIX"  # each GPU has its own HCA
        assert cells[16 + 3] == "N/A"
    assert rows["GPU0"][8:16] == ["PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert rows["NIC0"][-4:] == ["", "", "", ""]
    assert "\nNIC Legend:\n\n" + "".join(f"  NIC{i}: mlx5_{i}\n" for i in range(8)) in text


def test_topology_without_hcas_has_no_nic_columns(smi: Smi) -> None:
    text = ok(smi("topo", "-m", profile=dict(H100_NODE, ib_hcas=0)))
    header, rows = topo_rows(text)
    assert not [name for name in header if name.startswith("NIC")]
    assert "NIC Legend" not in text
    assert len(rows) == 8


def test_project_parsers_accept_the_simulated_output(smi: Smi) -> None:
    """The shared parsers (module_utils/gpucluster) read the simulator like real hardware."""
    topo = pytest.importorskip("gpucluster.topo")
    nvlink = pytest.importorskip("gpucluster.nvlink")
    nvsmi_xml = pytest.importorskip("gpucluster.nvsmi_xml")
    faults = ("gpu2-nvlink-down",)
    matrix = topo.parse_topo_matrix(ok(smi("topo", "-m", faults=faults)))
    assert matrix["errors"] == []
    assert matrix["nic_legend"]["NIC7"] == "mlx5_7"
    assert "GPU0-GPU2" not in matrix["nvlink_pairs"]
    assert matrix["nvlink_pairs"]["GPU0-GPU1"] == 18
    links = nvlink.parse_nvlink_status(ok(smi("nvlink", "-s", faults=faults)))
    assert [gpu["links_up"] for gpu in links["gpus"]] == [18, 18, 0, 18, 18, 18, 18, 18]
    assert links["gpus"][2]["status"] == "all_inactive"
    facts = nvsmi_xml.parse_nvidia_smi_xml(ok(smi("-q", "-x", faults=("gpu1-ecc-uncorrectable",))))
    assert facts["gpu_count"] == 8
    assert facts["gpus"][1]["ecc"]["volatile_uncorrectable"] > 0
    assert facts["gpus"][1]["remapped_rows"]["pending"] is True
    assert facts["gpus"][0]["ecc"]["volatile_uncorrectable"] == 0


# --- faults ----------------------------------------------------------------------------------


def test_missing_gpu_disappears_everywhere_and_the_rest_renumber(smi: Smi) -> None:
    faults = ("gpu3-missing",)
    healthy_uuids = [line.split("UUID: ")[1] for line in ok(smi("-L")).splitlines()]
    lines = ok(smi("-L", faults=faults)).splitlines()
    assert len(lines) == 7
    assert [line.split(":")[0] for line in lines] == [f"GPU {i}" for i in range(7)]
    assert [line.split("UUID: ")[1] for line in lines] == healthy_uuids[:3] + healthy_uuids[4:]
    root, gpus = xml_gpus(ok(smi("-q", "-x", faults=faults)))
    assert root.findtext("attached_gpus") == "7"
    assert [gpu.get("id") for gpu in gpus] == HGX_BUS_IDS[:3] + HGX_BUS_IDS[4:]
    assert len(query(smi, "index", faults)) == 7
    assert sorted(nvlink_blocks(ok(smi("nvlink", "-s", faults=faults)))) == list(range(7))
    header, _ = topo_rows(ok(smi("topo", "-m", faults=faults)))
    assert [name for name in header if re.fullmatch(r"GPU\d+", name)] == [
        f"GPU{i}" for i in range(7)]
    assert sum(1 for line in ok(smi(faults=faults)).splitlines() if "NVIDIA H100" in line) == 7


def test_nvlink_down_takes_every_link_of_that_gpu_only(smi: Smi) -> None:
    faults = ("gpu2-nvlink-down",)
    blocks = nvlink_blocks(ok(smi("nvlink", "-s", faults=faults)))
    assert blocks[2] == ["NVML: Unable to retrieve NVLink information as all links are inActive"]
    for gpu in (0, 1, 3, 7):
        assert blocks[gpu] == [f"\t Link {link}: 26.562 GB/s" for link in range(18)]
    _, rows = topo_rows(ok(smi("topo", "-m", faults=faults)))
    assert rows["GPU2"][:8] == ["NODE", "NODE", " X ", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert rows["GPU0"][1] == "NV18"


def test_single_link_down(smi: Smi) -> None:
    faults = ("gpu5-nvlink-link3-down",)
    blocks = nvlink_blocks(ok(smi("nvlink", "-s", faults=faults)))
    assert blocks[5][3] == "\t Link 3: <inactive>"
    assert sum("GB/s" in line for line in blocks[5]) == 17
    _, rows = topo_rows(ok(smi("topo", "-m", faults=faults)))
    assert rows["GPU5"][0] == "NV17"
    assert rows["GPU0"][1] == "NV18"


def test_ecc_uncorrectable_sets_counters_and_a_pending_remap(smi: Smi) -> None:
    faults = ("gpu4-ecc-uncorrectable",)
    _, gpus = xml_gpus(ok(smi("-q", "-x", faults=faults)))
    for scope in ("volatile", "aggregate"):
        assert int(field(gpus[4], f"ecc_errors/{scope}/dram_uncorrectable")) > 0
        assert field(gpus[3], f"ecc_errors/{scope}/dram_uncorrectable") == "0"
    assert field(gpus[4], "remapped_rows/remapped_row_pending") == "Yes"
    assert int(field(gpus[4], "remapped_rows/remapped_row_unc")) > 0
    assert field(gpus[3], "remapped_rows/remapped_row_pending") == "No"
    counts = query(smi, "index,ecc.errors.uncorrected.volatile.total,remapped_rows.pending",
                   faults)
    assert [int(row[1]) > 0 for row in counts] == [False] * 4 + [True] + [False] * 3
    assert [row[2] for row in counts] == ["No"] * 4 + ["Yes"] + ["No"] * 3
    rows = [line for line in ok(smi(faults=faults)).splitlines() if "NVIDIA H100" in line]
    assert rows[4].rstrip(" |").split()[-1] != "0"
    assert rows[3].rstrip(" |").split()[-1] == "0"


def test_pcie_downgrade_lowers_the_current_link_only(smi: Smi) -> None:
    faults = ("gpu6-pcie-downgrade",)
    rows = query(smi, "index,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
                      "pcie.link.width.max", faults)
    assert rows[6] == ["6", "4", "5", "8", "16"]
    assert rows[5] == ["5", "5", "5", "16", "16"]
    _, gpus = xml_gpus(ok(smi("-q", "-x", faults=faults)))
    link = "pci/pci_gpu_link_info"
    assert field(gpus[6], f"{link}/pcie_gen/current_link_gen") == "4"
    assert field(gpus[6], f"{link}/link_widths/current_link_width") == "8x"
    assert field(gpus[6], f"{link}/link_widths/max_link_width") == "16x"


BURN_IN_QUERY = ("index,clocks.sm,clocks_event_reasons.hw_slowdown,"
                 "clocks_event_reasons.hw_thermal_slowdown,"
                 "clocks_event_reasons.hw_power_brake_slowdown,"
                 "clocks_event_reasons.sw_thermal_slowdown,temperature.gpu,power.draw")


def test_hw_slowdown_shows_the_reason_active_and_the_sm_clock_halved(smi: Smi) -> None:
    # The fields certify's burn-in samples (nvidia-smi --help-query-gpu: "HW Slowdown
    # (reducing the core clocks by a factor of 2 or more) is engaged").
    faults = ("gpu2-hw-slowdown",)
    rows = query(smi, BURN_IN_QUERY, faults)
    assert rows[2][:6] == ["2", "990", "Active", "Not Active", "Not Active", "Not Active"]
    assert rows[3][:6] == ["3", "1980", "Not Active", "Not Active", "Not Active", "Not Active"]
    assert all(len(row) == 8 for row in rows)
    _, gpus = xml_gpus(ok(smi("-q", "-x", faults=faults)))
    reasons = "clocks_event_reasons/clocks_event_reason_"
    assert field(gpus[2], f"{reasons}hw_slowdown") == "Active"
    assert field(gpus[3], f"{reasons}hw_slowdown") == "Not Active"
    assert field(gpus[2], "clocks/sm_clock") == "990 MHz"
    assert field(gpus[2], "max_clocks/sm_clock") == "1980 MHz"


def test_clock_reasons_keep_the_names_of_the_driver(smi: Smi) -> None:
    # r535 renamed the throttle reasons and still takes the old names; older drivers take only
    # the old ones.
    old = "index,clocks_throttle_reasons.hw_slowdown"
    assert query(smi, old, ("gpu0-hw-slowdown",))[0] == ["0", "Active"]
    before = smi("--query-gpu=index,clocks_event_reasons.hw_slowdown",
                 "--format=csv,noheader", driver="525.147.05")
    assert before.returncode == 2
    assert 'Field "clocks_event_reasons.hw_slowdown" is not a valid field to query.' in before.stdout
    older = smi(f"--query-gpu={old}", "--format=csv,noheader", driver="525.147.05",
                faults=("gpu0-hw-slowdown",))
    assert ok(older).splitlines()[0] == "0, Active"
    _, gpus = xml_gpus(ok(smi("-q", "-x", driver="525.147.05", faults=("gpu0-hw-slowdown",))))
    assert field(gpus[0], "clocks_throttle_reasons/clocks_throttle_reason_hw_slowdown") == "Active"


def test_faults_meant_for_others_and_junk_change_nothing(smi: Smi) -> None:
    fields = ("index,uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total,"
              "pcie.link.gen.current,pcie.link.width.current")
    ignored = ("gpu1-xid-79", "mlx5_0-down", "mlx5_1-half-rate", "gpu9-missing",
               "not a fault", "# a comment")
    assert query(smi, fields, ignored) == query(smi, fields)
    assert ok(smi("nvlink", "-s", faults=ignored)) == ok(smi("nvlink", "-s"))
    assert ok(smi("topo", "-m", faults=ignored)) == ok(smi("topo", "-m"))
