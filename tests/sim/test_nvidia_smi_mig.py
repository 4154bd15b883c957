"""MIG on the simulated nvidia-smi (and what dcgmi and the module load make of it), run as the
nodes run it: bundled, against a temporary GPU_SIM_ROOT.

Expected lines quote real outputs where one was found: NVIDIA's MIG user guide, the H100 and
A100 captures (../shared/captures, compared when present), and public sessions cited where used.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from gpucluster.nvlink import parse_nvlink_status
from gpucluster.nvsmi_xml import parse_nvidia_smi_xml

from provisioner.sim.tools.node import (
    MIG_INSTANCES_FILE,
    MIG_MINORS_FILE,
    MIG_MODE_FILE,
    MIG_MODE_VOLATILE_FILE,
    NVIDIA_CAPS_MAJOR,
    PROC_DEVICES_FILE,
    load_module_sh,
    mig_minor,
)
from tests.conftest import CAPTURES
from tests.sim.conftest import Bundled, run_tool, write_node
from tests.sim.test_module_banner import run_load_lines
from tests.sim.test_sim_vs_captures import differences, shape

# H100 80GB HBM3 GPU instance profiles (-lgip order).
H100_MIG_PROFILES: list[dict[str, Any]] = [
    {"name": "1g.10gb", "id": 19, "slices": 1, "memory_slices": 1, "memory_mib": 9984,
     "instances": 7, "placements": [0, 1, 2, 3, 4, 5, 6], "multiprocessors": 16},
    {"name": "1g.20gb", "id": 15, "slices": 1, "memory_slices": 2, "memory_mib": 20096,
     "instances": 4, "placements": [0, 2, 4, 6], "multiprocessors": 26},
    {"name": "2g.20gb", "id": 14, "slices": 2, "memory_slices": 2, "memory_mib": 20096,
     "instances": 3, "placements": [0, 2, 4], "multiprocessors": 32},
    {"name": "3g.40gb", "id": 9, "slices": 3, "memory_slices": 4, "memory_mib": 40448,
     "instances": 2, "placements": [0, 4], "multiprocessors": 60},
    {"name": "4g.40gb", "id": 5, "slices": 4, "memory_slices": 4, "memory_mib": 40448,
     "instances": 1, "placements": [0], "multiprocessors": 64},
    {"name": "7g.80gb", "id": 0, "slices": 7, "memory_slices": 8, "memory_mib": 80896,
     "instances": 1, "placements": [0], "multiprocessors": 132},
]
H100_NODE: dict[str, Any] = {
    "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "architecture": "hopper",
    "pci_device_ids": ["10de:2330"], "memory_mib": 81559, "power_limit_w": 700,
    "nvlink_links_per_gpu": 18, "nvlink_link_speed_gbps": 26.562, "nvswitch": True,
    "ib_hcas": 8, "fabric": "infiniband", "hostname": "sim-gpu-1",
    "mig_profiles": H100_MIG_PROFILES,
}
L40S_NODE: dict[str, Any] = {
    "gpu_model": "NVIDIA L40S", "gpu_count": 2, "architecture": "ada",
    "pci_device_ids": ["10de:26b9"], "memory_mib": 46068, "hostname": "sim-l40s-1",
}
GPU0 = "00000000:19:00.0"
# The H100 capture's geometry, created in this order.
CAPTURE_LAYOUT = "3g.40gb,2g.20gb,1g.10gb,1g.10gb"
MIG_LIST_LINE = re.compile(
    r"  MIG (\S+) +Device +(\d+): \(UUID: (MIG-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-"
    r"[89ab][0-9a-f]{3}-[0-9a-f]{12})\)")


class Node:
    """A simulated node under ``root``: its profile, driver, and the installed tools."""

    def __init__(self, root: Path, bundled: Bundled, profile: dict[str, Any],
                 driver: str = "590.48.01") -> None:
        self.root = root
        self.bundled = bundled
        write_node(root, profile, driver, "13.1")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_tool(self.bundled("nvidia_smi"), self.root, *args)

    def ok(self, *args: str) -> str:
        result = self.run(*args)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def dcgmi(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_tool(self.bundled("dcgmi", version="3.3.9"), self.root, *args)

    def reboot(self) -> None:
        """What a reboot does to the node's files: /run is emptied."""
        shutil.rmtree(self.root / "run", ignore_errors=True)


@pytest.fixture
def h100(tmp_path: Path, bundled: Bundled) -> Node:
    return Node(tmp_path, bundled, H100_NODE)


@pytest.fixture
def mig_h100(h100: Node) -> Node:
    """The H100 node with MIG enabled on GPU 0."""
    h100.ok("-i", "0", "-mig", "1")
    return h100


def capture(kind: str, name: str) -> str:
    path = CAPTURES / kind / name
    if not path.is_file():
        pytest.skip(f"capture {kind}/{name} not present")
    return path.read_text(encoding="utf-8")


def created_gpu_instances(output: str) -> list[int]:
    return [int(m) for m in re.findall(r"Successfully created GPU instance ID +(\d+)", output)]


def table_rows(output: str) -> list[list[str]]:
    """The data rows of a -lgi / -lci table, split on runs of blanks."""
    return [row.strip("|").split() for row in output.splitlines()
            if re.match(r"\| +\d", row)]


# --------------------------------------------------------------------------- MIG mode


def test_enabling_prints_the_real_lines_and_the_mode_shows(h100: Node) -> None:
    out = h100.ok("-i", "0", "-mig", "1")
    # A real RTX PRO 6000 Blackwell (580) prints the warning when persistence mode is off.
    assert out == (
        f"Enabled MIG Mode for GPU {GPU0}\n\n"
        f"Warning: persistence mode is disabled on device {GPU0}. See the Known Issues section "
        "of the nvidia-smi(1) man page for more information. Run with [--help | -h] switch to "
        "get more information on how to enable persistence mode.\nAll done.\n")
    rows = h100.ok("--query-gpu=index,mig.mode.current,mig.mode.pending",
                   "--format=csv,noheader").splitlines()
    assert rows[0] == "0, Enabled, Enabled"
    assert set(rows[1:]) == {f"{i}, Disabled, Disabled" for i in range(1, 8)}
    h100.ok("-pm", "1")
    assert h100.ok("--multi-instance-gpu=1", "-i", "1") == \
        "Enabled MIG Mode for GPU 00000000:3B:00.0\nAll done.\n"
    # An H100's mode is the driver's, under /run (node.mig_mode_file).
    assert not (h100.root / MIG_MODE_FILE.lstrip("/")).exists()
    assert (h100.root / MIG_MODE_VOLATILE_FILE.lstrip("/")).read_text().splitlines()[:2] == \
        ["0 Enabled", "1 Enabled"]


def test_a_gpu_without_mig_is_not_supported(tmp_path: Path, bundled: Bundled) -> None:
    node = Node(tmp_path, bundled, L40S_NODE)
    bus = "00000000:19:00.0"
    # Without -i the real tool moves on (an RTX PRO 6000 whose MIG prerequisites were not met).
    everyone = node.run("-mig", "1")
    assert everyone.returncode == 0
    assert everyone.stdout.startswith(f"Unable to enable MIG Mode for GPU {bus}: Not Supported\n"
                                      "Treating as warning and moving on.\n")
    assert everyone.stdout.endswith("All done.\n")
    named = node.run("-i", "0", "-mig", "1")
    assert named.returncode == 3
    assert named.stdout == (f"Unable to enable MIG Mode for GPU {bus}: Not Supported\n"
                            "Terminating early due to previous errors.\n")
    listing = node.run("mig", "-lgip")
    assert (listing.returncode, listing.stdout) == (6, "No MIG-supported devices found.\n")
    assert node.ok("--query-gpu=mig.mode.current", "--format=csv,noheader") == "[N/A]\n[N/A]\n"


def test_mig_commands_need_the_mode(h100: Node) -> None:
    for args in (["-lgip"], ["-lgi"], ["-cgi", "19", "-C"], ["-i", "0", "-lci"]):
        result = h100.run("mig", *args)
        assert (result.returncode, result.stdout) == (6, "No MIG-enabled devices found.\n"), args
    assert not (h100.root / MIG_INSTANCES_FILE.lstrip("/")).exists()


def test_usage_errors(mig_h100: Node) -> None:
    for args in (["mig"], ["mig", "-lgi", "-lci"], ["mig", "-lgi", "-C"], ["mig", "-cgi"],
                 ["mig", "-lgi", "-gi", "x"], ["mig", "--bogus"], ["-mig", "2"]):
        assert mig_h100.run(*args).returncode == 2, args
    assert "-cgi" in mig_h100.ok("mig", "-h")


# --------------------------------------------------------------------------- profiles


def test_lgip_lists_the_profiles_in_the_real_layouts(tmp_path: Path, bundled: Bundled) -> None:
    node = Node(tmp_path, bundled, H100_NODE, driver="590.48.01")
    node.ok("-mig", "1")
    lines = node.ok("mig", "-i", "0", "-lgip").splitlines()
    assert {len(line) for line in lines} == {81}
    assert lines[:5] == [
        "+" + "-" * 79 + "+",
        "| GPU instance profiles:" + " " * 56 + "|",
        "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
        "|                                Free/Total   GiB              CE    JPEG  OFA  |",
        "|" + "=" * 79 + "|",
    ]
    # A real H100 80GB HBM3's rows (the wide table of recent drivers).
    assert lines[5] == \
        "|   0  MIG 1g.10gb         19     7/7        9.75       No     16     1     0   |"
    assert lines[6] == \
        "|                                                               1     1     0   |"
    assert lines[8] == \
        "|   0  MIG 1g.20gb         15     4/4        19.62      No     26     1     0   |"
    assert lines[-3:] == [
        "|   0  MIG 7g.80gb          0     1/1        79.00      No     132    7     0   |",
        "|                                                               8     7     1   |",
        "+" + "-" * 79 + "+",
    ]
    assert len(lines) == 5 + 3 * len(H100_MIG_PROFILES)


def test_lgip_of_older_drivers_is_narrower(tmp_path: Path, bundled: Bundled) -> None:
    node = Node(tmp_path, bundled, H100_NODE, driver="550.54.15")
    node.ok("-mig", "1")
    lines = node.ok("mig", "-lgip").splitlines()
    assert {len(line) for line in lines} == {79}
    # A real H100's rows in the older layout (stackhpc/ansible-slurm-appliance docs/mig.md).
    assert "|   0  MIG 1g.10gb       19     7/7        9.75       No     16     1     0   |" in lines
    assert "|   3  MIG 3g.40gb        9     2/2        39.50      No     60     3     0   |" in lines
    assert len(lines) == 5 + 3 * len(H100_MIG_PROFILES) * 8


def test_lgipp_lists_every_placement(mig_h100: Node) -> None:
    mig_h100.ok("mig", "-cgi", "3g.40gb")
    # As the MIG user guide prints them (A100, same ids and placements).
    assert mig_h100.ok("mig", "-lgipp").splitlines() == [
        "GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1",
        "GPU  0 Profile ID 15 Placements: {0,2,4,6}:2",
        "GPU  0 Profile ID 14 Placements: {0,2,4}:2",
        "GPU  0 Profile ID  9 Placements: {0,4}:4",
        "GPU  0 Profile ID  5 Placement : {0}:4",
        "GPU  0 Profile ID  0 Placement : {0}:8",
    ]


def test_profiles_without_a_table_or_sm_count(tmp_path: Path, bundled: Bundled) -> None:
    without_sms = [{k: v for k, v in p.items() if k != "multiprocessors" or p["id"] != 5}
                   for p in H100_MIG_PROFILES]
    broken = [*without_sms, {"name": "9g.1gb"}, "junk"]
    node = Node(tmp_path, bundled, dict(H100_NODE, gpu_count=1, mig_profiles=broken))
    node.ok("-mig", "1")
    out = node.ok("mig", "-lgip")
    assert "9g.1gb" not in out
    # 4g.40gb's SMs estimated from 1g.10gb's per slice: 64, what a real H100 reports.
    assert re.search(r"MIG 4g\.40gb +5 +1/1 +39\.50 +No +64 ", out)
    bare = Node(tmp_path / "bare", bundled, {k: v for k, v in H100_NODE.items()
                                             if k != "mig_profiles"})
    bare.ok("-mig", "1")
    assert len(bare.ok("mig", "-i", "0", "-lgip").splitlines()) == 5
    failed = bare.run("mig", "-i", "0", "-cgi", "19")
    assert failed.returncode == 6
    assert failed.stdout.endswith("Failed to create GPU instances: Not Found\n")


# --------------------------------------------------------------------------- creating


def test_the_capture_layout_gets_the_capture_gpu_instance_ids(mig_h100: Node) -> None:
    out = mig_h100.ok("mig", "-i", "0", "-cgi", CAPTURE_LAYOUT, "-C")
    assert created_gpu_instances(out) == [2, 3, 9, 10]
    assert out.splitlines()[:2] == [
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using "
        "profile MIG 3g.40gb (ID  2)",
    ]
    assert out.splitlines()[-1] == ("Successfully created compute instance ID  0 on GPU  0 GPU "
                                    "instance ID 10 using profile MIG 1g.10gb (ID  0)")
    lgi = mig_h100.ok("mig", "-lgi")
    assert {len(line) for line in lgi.splitlines()} == {59}
    assert lgi.splitlines()[2] == "| GPU   Name               Profile  Instance   Placement  |"
    # -lgi's order: by profile (-lgip's order), then by ID.
    assert table_rows(lgi) == [
        ["0", "MIG", "1g.10gb", "19", "9", "2:1"], ["0", "MIG", "1g.10gb", "19", "10", "3:1"],
        ["0", "MIG", "2g.20gb", "14", "3", "0:2"], ["0", "MIG", "3g.40gb", "9", "2", "4:4"],
    ]
    assert "|   0  MIG 3g.40gb            9        2          4:4     |" in lgi.splitlines()
    free = re.findall(r"MIG \S+ +\d+ +(\d+)/\d+", mig_h100.ok("mig", "-lgip"))
    assert free == ["0"] * len(H100_MIG_PROFILES)


def test_the_mig_user_guide_creation_sequences(mig_h100: Node) -> None:
    """The guide's A100 examples (same placements): the IDs it shows, in its order."""
    for layout, ids in (("9,9", [2, 1]), ("9,19,14,19", [2, 7, 4, 8]),
                        ("14,19,19,19,19,19", [5, 13, 7, 8, 9, 10])):
        assert created_gpu_instances(mig_h100.ok("mig", "-cgi", layout)) == ids
        mig_h100.ok("mig", "-dgi")


def test_a_profile_without_a_free_placement_fails_like_the_driver(mig_h100: Node) -> None:
    # The guide's "known issue" sequence: the 3g finds no aligned half left.
    result = mig_h100.run("mig", "-i", "0", "-cgi", "19,19,14,9")
    assert result.returncode == 255
    assert result.stdout.splitlines() == [
        "Successfully created GPU instance ID 13 on GPU  0 using profile MIG 1g.10gb (ID 19)",
        "Successfully created GPU instance ID 11 on GPU  0 using profile MIG 1g.10gb (ID 19)",
        "Successfully created GPU instance ID  3 on GPU  0 using profile MIG 2g.20gb (ID 14)",
        "Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources",
        "Failed to create GPU instances: Insufficient Resources",
    ]
    # What was created before the failure stays.
    assert [row[4] for row in table_rows(mig_h100.ok("mig", "-lgi"))] == ["11", "13", "3"]
    mig_h100.ok("mig", "-dgi")
    seven = mig_h100.ok("mig", "-cgi", ",".join(["1g.10gb"] * 7))
    assert sorted(created_gpu_instances(seven)) == list(range(7, 14))
    eighth = mig_h100.run("mig", "-cgi", "MIG 1g.10gb")
    assert eighth.returncode == 255
    assert "using profile MIG 1g.10gb: Insufficient Resources" in eighth.stdout


def test_compute_instances(mig_h100: Node) -> None:
    mig_h100.ok("mig", "-cgi", "3g.40gb,1g.10gb")
    assert "No compute instances found." in mig_h100.run("mig", "-lci").stdout
    out = mig_h100.ok("mig", "-cci", "1c.3g.40gb,1c.3g.40gb", "-gi", "2")
    assert out.splitlines()[1] == ("Successfully created compute instance ID  1 on GPU  0 GPU "
                                   "instance ID  2 using profile MIG 1c.3g.40gb (ID  0)")
    full = mig_h100.run("mig", "-cci", "-gi", "2")
    assert full.returncode == 255
    assert full.stdout.endswith("Failed to create compute instances: Insufficient Resources\n")
    # The 1g.10gb took the lowest slot left by the 3g.40gb at 4: GPU instance 7.
    mig_h100.ok("mig", "-cci", "-gi", "7")
    lci = mig_h100.ok("mig", "-lci")
    assert {len(line) for line in lci.splitlines()} == {70}
    assert table_rows(lci) == [
        ["0", "7", "MIG", "1g.10gb", "0", "0", "0:1"],
        ["0", "2", "MIG", "1c.3g.40gb", "0", "0", "0:1"],
        ["0", "2", "MIG", "1c.3g.40gb", "0", "1", "1:1"],
    ]
    lcip = mig_h100.ok("mig", "-gi", "2", "-lcip").splitlines()
    assert {len(line) for line in lcip} == {88}
    assert [line.split()[4:7] for line in lcip if "MIG" in line] == [
        ["1c.3g.40gb", "0", "1/3"], ["2c.3g.40gb", "1", "0/1"], ["3g.40gb", "2*", "0/1"]]


def test_older_drivers_list_compute_instances_without_placement(tmp_path: Path,
                                                                 bundled: Bundled) -> None:
    node = Node(tmp_path, bundled, H100_NODE, driver="535.54.03")
    node.ok("-i", "0", "-mig", "1")
    node.ok("mig", "-cgi", "9", "-C")
    lines = node.ok("mig", "-lci").splitlines()
    assert {len(line) for line in lines} == {57}
    assert "|   0      2       MIG 3g.40gb          2         0     |" in lines
    assert {len(line) for line in node.ok("mig", "-lgi").splitlines()} == {57}


# --------------------------------------------------------------------------- the devices


def test_list_gpus_shows_the_mig_devices_under_their_gpu(mig_h100: Node) -> None:
    mig_h100.ok("mig", "-cgi", CAPTURE_LAYOUT, "-C")
    lines = mig_h100.ok("-L").splitlines()
    assert lines[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")
    devices = [MIG_LIST_LINE.fullmatch(line) for line in lines[1:5]]
    assert all(devices), lines
    assert [(m.group(1), m.group(2)) for m in devices if m] == [
        ("3g.40gb", "0"), ("2g.20gb", "1"), ("1g.10gb", "2"), ("1g.10gb", "3")]
    assert lines[1].startswith("  MIG 3g.40gb     Device  0: (UUID: MIG-")
    assert lines[5].startswith("GPU 1: ") and len(lines) == 12
    uuids = [m.group(3) for m in devices if m]
    assert len(set(uuids)) == 4
    assert mig_h100.ok("-L").splitlines() == lines


def test_xml_reports_the_mig_devices(mig_h100: Node) -> None:
    mig_h100.ok("mig", "-cgi", CAPTURE_LAYOUT, "-C")
    text = mig_h100.ok("-q", "-x")
    facts = parse_nvidia_smi_xml(text)
    gpu0, gpu1 = facts["gpus"][:2]
    assert gpu0["mig_mode"] is True and gpu1["mig_mode"] is False
    assert gpu1["mig_devices"] == []
    assert [(d["index"], d["gpu_instance_id"], d["compute_instance_id"], d["sm_count"],
             d["memory_total_mib"]) for d in gpu0["mig_devices"]] == [
        (0, 2, 0, 60, 40448), (1, 3, 0, 32, 20096), (2, 9, 0, 16, 9984), (3, 10, 0, 16, 9984)]
    # MIG mode hides the whole-GPU utilization and row remapper (the A100 captures).
    assert gpu0["remapped_rows"] is None and gpu1["remapped_rows"] is not None
    root = ET.fromstring(text)
    first = root.findall("gpu")[0]
    assert first.findtext("utilization/gpu_util") == "N/A"
    assert first.findtext("mig_devices/mig_device/fb_memory_usage/free") == "40421 MiB"


def _mig_device_paths(device: ET.Element) -> list[str]:
    paths: list[str] = []

    def walk(element: ET.Element, prefix: str) -> None:
        for child in element:
            here = f"{prefix}/{child.tag}"
            paths.append(here)
            walk(child, here)

    walk(device, "")
    return paths


def test_xml_mig_devices_are_shaped_like_the_a100_capture(tmp_path: Path,
                                                          bundled: Bundled) -> None:
    real_text = capture("nvidia-smi-xml", "a100-sxm4-80gb-mig-535.xml")
    node = Node(tmp_path, bundled, H100_NODE, driver="535.54.03")  # the capture's driver
    node.ok("-i", "0", "-mig", "1")
    node.ok("mig", "-cgi", "1g.20gb,1g.20gb,1g.20gb,1g.20gb", "-C")
    sim_text = node.ok("-q", "-x")
    real_devices = ET.fromstring(real_text).findall("gpu/mig_devices/mig_device")
    sim_devices = ET.fromstring(sim_text).findall("gpu/mig_devices/mig_device")
    assert len(sim_devices) == len(real_devices) == 4
    for sim, real in zip(sim_devices, real_devices, strict=True):
        assert _mig_device_paths(sim) == _mig_device_paths(real)
        for path in ("fb_memory_usage/total", "bar1_memory_usage/total"):
            assert (sim.findtext(path) or "").endswith(" MiB")
    sim_facts, real_facts = parse_nvidia_smi_xml(sim_text), parse_nvidia_smi_xml(real_text)
    assert differences(shape(sim_facts["gpus"][0]), shape(real_facts["gpus"][0])) == []
    assert [d["gpu_instance_id"] for d in sim_facts["gpus"][0]["mig_devices"]] == \
        [d["gpu_instance_id"] for d in real_facts["gpus"][0]["mig_devices"]] == [3, 4, 5, 6]


def test_the_summary_table_matches_the_h100_capture(tmp_path: Path, bundled: Bundled) -> None:
    real = capture("nvidia-smi-plain", "h100-mig-590.txt").splitlines()
    node = Node(tmp_path, bundled, dict(H100_NODE, gpu_count=1), driver="590.48.01")
    node.ok("-mig", "1")
    node.ok("mig", "-cgi", CAPTURE_LAYOUT, "-C")
    sim = node.ok().splitlines()

    def block(lines: list[str], title: str) -> list[str]:
        start = next(i for i, line in enumerate(lines) if line.startswith(f"| {title}")) - 1
        end = lines.index("", start)
        return lines[start:end]

    # The MIG devices block: the same lines (this capture's memory, SMs, engines and BAR1).
    assert block(sim, "MIG devices:") == block(real, "MIG devices:")

    # The GPU block: the same frame and the same MIG-mode cells.
    def gpu_block(lines: list[str]) -> list[str]:
        start = next(i for i, line in enumerate(lines) if line.startswith("| GPU  Name"))
        return lines[start:lines.index("", start)]

    sim_gpu, real_gpu = gpu_block(sim), gpu_block(real)
    assert len(sim_gpu) == len(real_gpu)
    for sim_line, real_line in zip(sim_gpu, real_gpu, strict=True):
        assert [i for i, c in enumerate(sim_line) if c in "|+"] == \
            [i for i, c in enumerate(real_line) if c in "|+"], (sim_line, real_line)
    for cell in ("                   On |", "     N/A      Default |", "              Enabled |"):
        assert sum(cell in line for line in sim_gpu) == sum(cell in line for line in real_gpu) == 1

    # The blocks in the capture's order: GPUs, MIG devices, processes.
    def order(lines: list[str]) -> list[str]:
        return [line for line in lines if line.startswith(("| GPU  Name", "| MIG devices:",
                                                           "| Processes:"))]

    assert order(sim) == order(real)


def test_the_summary_table_without_mig_devices(mig_h100: Node) -> None:
    mig_h100.ok("mig", "-cgi", "19")
    lines = mig_h100.ok().splitlines()
    at = lines.index(next(line for line in lines if line.startswith("| MIG devices:")))
    assert lines[at + 6] == "|  No MIG devices found" + " " * 67 + "|"
    assert lines[at + 7] == "+" + "-" * 89 + "+"


def test_query_gpu_matches_the_h100_mig_capture(mig_h100: Node) -> None:
    text = capture("nvidia-smi-query-csv", "h100-mig-590-212fields.csv")
    header, values = list(csv.reader(text.splitlines(), skipinitialspace=True))[:2]
    real = dict(zip(header, values, strict=True))
    mig_h100.ok("mig", "-cgi", CAPTURE_LAYOUT, "-C")
    names = ["mig.mode.current", "mig.mode.pending", "utilization.gpu", "utilization.memory",
             "remapped_rows.correctable", "remapped_rows.uncorrectable",
             "remapped_rows.pending", "remapped_rows.failure", "memory.used"]
    out = mig_h100.ok(f"--query-gpu={','.join(names)}", "--format=csv")
    sim_header, sim_gpu0 = list(csv.reader(out.splitlines(), skipinitialspace=True))[:2]
    sim = dict(zip(sim_header, sim_gpu0, strict=True))
    assert set(sim_header) <= set(header)  # same names, same units
    for key, value in sim.items():
        if key.startswith("memory.used"):
            assert re.fullmatch(r"\d+ MiB", value) and re.fullmatch(r"\d+ MiB", real[key])
        else:
            assert value == real[key], key


def test_nvlink_status_refuses_mig_gpus(mig_h100: Node) -> None:
    text = mig_h100.ok("nvlink", "-s")
    assert text.splitlines()[1] == "Nvlink queries are not supported for Devices in MIG mode"
    statuses = [gpu["status"] for gpu in parse_nvlink_status(text)["gpus"]]
    assert statuses == ["mig_unsupported"] + ["ok"] * 7


# --------------------------------------------------------------------------- lifetime


def test_a_reboot_drops_the_instances_and_an_h100s_mode(mig_h100: Node) -> None:
    mig_h100.ok("mig", "-cgi", CAPTURE_LAYOUT, "-C")
    before = mig_h100.ok("-L").splitlines()
    mig_h100.reboot()
    # Hopper keeps no MIG mode over a reboot (an A100 does, in its InfoROM: below).
    assert mig_h100.ok("--query-gpu=mig.mode.current", "--format=csv,noheader",
                       "-i", "0") == "Disabled\n"
    assert not any("MIG" in line for line in mig_h100.ok("-L").splitlines())
    mig_h100.ok("-i", "0", "-mig", "1")
    result = mig_h100.run("mig", "-lgi")
    assert (result.returncode, result.stdout) == (6, "No GPU instances found.\n")
    # Recreated, the same geometry has the same IDs and device UUIDs.
    mig_h100.ok("mig", "-cgi", CAPTURE_LAYOUT, "-C")
    assert mig_h100.ok("-L").splitlines() == before


def test_an_a100_keeps_its_mode_over_a_reboot(tmp_path: Path, bundled: Bundled) -> None:
    a100 = Node(tmp_path, bundled, dict(H100_NODE, gpu_model="NVIDIA A100-SXM4-80GB",
                                        architecture="ampere"))
    a100.ok("-i", "0", "-mig", "1")
    a100.ok("mig", "-i", "0", "-cgi", "7g.80gb", "-C")
    a100.reboot()
    assert a100.ok("--query-gpu=mig.mode.current", "--format=csv,noheader",
                   "-i", "0") == "Enabled\n"
    result = a100.run("mig", "-lgi")
    assert (result.returncode, result.stdout) == (6, "No GPU instances found.\n")


def test_destroy_then_recreate(mig_h100: Node) -> None:
    mig_h100.ok("mig", "-cgi", CAPTURE_LAYOUT, "-C")
    busy = mig_h100.run("mig", "-dgi", "-gi", "3")
    assert busy.returncode == 255
    assert busy.stdout == ("Unable to destroy GPU instance ID  3 from GPU  0: In use by another "
                           "client\nFailed to destroy GPU instances: In use by another client\n")
    disable = mig_h100.run("-i", "0", "-mig", "0")
    assert disable.returncode == 255
    assert disable.stdout == (f"Unable to disable MIG Mode for GPU {GPU0}: In use by another "
                              "client\nTerminating early due to previous errors.\n")
    assert mig_h100.ok("mig", "-dci", "-gi", "3", "-ci", "0") == \
        "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  3\n"
    assert mig_h100.ok("mig", "-dgi", "-gi", "3") == \
        "Successfully destroyed GPU instance ID  3 from GPU  0\n"
    assert created_gpu_instances(mig_h100.ok("mig", "-cgi", "2g.20gb", "-C")) == [3]
    assert mig_h100.ok("mig", "-dci").count("Successfully destroyed compute instance") == 4
    assert mig_h100.ok("mig", "-dgi").splitlines() == [
        f"Successfully destroyed GPU instance ID {gi:>2} from GPU  0" for gi in (2, 3, 9, 10)]
    nothing = mig_h100.run("mig", "-dgi")
    assert (nothing.returncode, nothing.stdout) == (6, "No GPU instances found.\n")
    assert mig_h100.ok("-mig", "0", "-i", "0").startswith(f"Disabled MIG Mode for GPU {GPU0}\n")
    assert "MIG devices" not in mig_h100.ok()
    assert created_gpu_instances(mig_h100.run("mig", "-cgi", "19").stdout) == []


def test_a_gpu_reset_drops_that_gpus_instances(tmp_path: Path, bundled: Bundled) -> None:
    node = Node(tmp_path, bundled, H100_NODE)
    node.ok("-mig", "1")
    node.ok("mig", "-i", "0,1", "-cgi", "3g.40gb", "-C")
    node.ok("-r", "-i", "0")
    assert [row[0] for row in table_rows(node.ok("mig", "-lgi"))] == ["1"]
    assert node.ok("--query-gpu=mig.mode.current", "--format=csv,noheader",
                   "-i", "0") == "Enabled\n"


# --------------------------------------------------------------------------- dcgmi


def test_dcgmi_diag_refuses_mig_like_dcgm(tmp_path: Path, bundled: Bundled) -> None:
    node = Node(tmp_path, bundled, H100_NODE)
    assert node.dcgmi("diag", "-r", "1").returncode == 0
    node.ok("-i", "0", "-mig", "1")
    alone = node.dcgmi("diag", "-r", "1")
    assert alone.returncode == 226
    assert alone.stdout == (
        "Cannot run diagnostic: CUDA does not support enumerating GPUs with MIG mode enabled, "
        "yet GPU 0 is MIG enabled and the diagnostic is attempting to run on 8 GPUs.\n")
    node.ok("mig", "-cgi", "3g.40gb", "-C")
    partial = node.dcgmi("diag", "-r", "3")
    assert (partial.returncode, partial.stdout) == (226, (
        "GPU 0's MIG configuration is incompatible with the diagnostic because it prevents "
        "access to the entire GPU.\n"))


def test_dcgmi_diag_runs_on_one_whole_gpu_instance(tmp_path: Path, bundled: Bundled) -> None:
    node = Node(tmp_path, bundled, dict(H100_NODE, gpu_count=1))
    node.ok("-mig", "1")
    empty = node.dcgmi("diag", "-r", "1")
    assert empty.returncode == 226
    assert empty.stdout.startswith("Cannot run diagnostic: MIG is enabled, but no compute "
                                   "instances are configured.")
    node.ok("mig", "-cgi", "7g.80gb", "-C")
    whole = node.dcgmi("diag", "-r", "1")
    assert whole.returncode == 0 and whole.stdout.startswith("Successfully ran diagnostic")


# --------------------------------------------------------------------------- module load


def test_loading_the_module_exposes_the_mig_capabilities(tmp_path: Path) -> None:
    (tmp_path / "usr/lib/gpu-sim").mkdir(parents=True)
    (tmp_path / "usr/lib/gpu-sim/driver-version").write_text("580.159.04\n")
    run_load_lines(tmp_path)
    minors = (tmp_path / MIG_MINORS_FILE.lstrip("/")).read_text().splitlines()
    # NVIDIA's MIG user guide prints the file's start and end.
    assert minors[:6] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4",
                          "gpu0/gi0/ci1/access 5", "gpu0/gi0/ci2/access 6"]
    assert minors[-2:] == ["gpu31/gi14/ci6/access 4321", "gpu31/gi14/ci7/access 4322"]
    table = dict(line.rsplit(" ", 1) for line in minors)
    assert len(table) == 4322
    # Minors real hosts showed (GPU instances 2, 3, 9 of a 580 A100's GPU 0; others quoted in
    # NVIDIA's DRA driver for GPUs 3 and 6).
    for name, minor in (("gpu0/gi2/access", 21), ("gpu0/gi3/ci1/access", 32),
                        ("gpu0/gi9/access", 84), ("gpu3/gi3/ci3/access", 439),
                        ("gpu6/gi11/ci7/access", 920)):
        assert int(table[name]) == minor
    assert all(int(table[f"gpu{g}/gi{i}/access"]) == mig_minor(g, i)
               and int(table[f"gpu{g}/gi{i}/ci{c}/access"]) == mig_minor(g, i, c)
               for g in (0, 7, 31) for i in (0, 14) for c in (0, 7))
    devices = (tmp_path / PROC_DEVICES_FILE.lstrip("/")).read_text()
    assert devices == f"Character devices:\n{NVIDIA_CAPS_MAJOR} nvidia-caps\n"
    # The lines are embedded into rpm scriptlets as Lua long strings.
    assert "]]" not in load_module_sh()
