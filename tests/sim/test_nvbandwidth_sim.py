"""The simulated nvbandwidth as installed on the simulated GPU nodes (bundled), run against a
temporary GPU_SIM_ROOT: nvbandwidth v0.8's formats (the parser reads it as it reads the real
tool's, tests/fixtures/nvbandwidth), figures from the node's simulated PCIe links and memory,
the faults that change them, and the SIMULATED marks."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from gpucluster.nvbandwidth import parse_nvbandwidth, per_device

from provisioner.pcie import pcie_gbps
from provisioner.profiles import load_profiles
from provisioner.sim.tools.nvbandwidth import COPY_EFFICIENCY, LOCAL_COPY_EFFICIENCY
from tests.sim.conftest import Bundled, run_tool
from tests.sim.test_nvidia_smi_sim import make_node

TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_local_copy")
SIM = load_profiles()["sim-h100-8gpu"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvbandwidth"
Nvb = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def nvbandwidth(tmp_path: Path, bundled: Bundled) -> Nvb:
    """``nvbandwidth(*args, faults=...)``: the installed nvbandwidth on a simulated node."""

    def call(*args: str, faults: tuple[str, ...] = (),
             driver: str = "550.54.15") -> subprocess.CompletedProcess[str]:
        make_node(tmp_path, dict(SIM.sim_json(), hostname="sim-gpu-2"), driver=driver,
                  faults=faults)
        return run_tool(bundled("nvbandwidth"), tmp_path, *args)

    return call


def test_text_has_the_real_layout_and_says_simulated(nvbandwidth: Nvb) -> None:
    out = nvbandwidth("-t", *TESTS)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["nvbandwidth Version: v0.8",
                         "Built from Git version: SIMULATED (gpu-cluster-provisioner)"]
    assert lines[3:6] == ["CUDA Runtime Version: 12040", "CUDA Driver Version: 12040",
                          "Driver Version: 550.54.15"]
    assert lines[7] == "sim-gpu-2"
    assert lines[8] == "Device 0: NVIDIA H100 80GB HBM3 (00000000:19:00)"
    at = lines.index("Running host_to_device_memcpy_ce.")
    assert lines[at + 1] == "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"
    # PeerValueMatrix: 2 spaces, then each column id in 10; the row id in 2, values in 10.
    assert lines[at + 2] == "  " + "".join(f"{i:>10}" for i in range(8))
    assert re.fullmatch(r" 0(\s{5}\d{2}\.\d{2}){8}", lines[at + 3]), lines[at + 3]
    assert lines[at + 4] == "" and re.fullmatch(r"SUM host_to_device_memcpy_ce \d+\.\d{2}",
                                                lines[at + 5])
    assert lines[-3:] == [
        "NOTE: The reported results may not reflect the full capabilities of the platform.",
        "Performance can vary with software drivers, hardware clocks, and system topology.",
        ""]


def test_json_has_the_real_keys(nvbandwidth: Nvb) -> None:
    real = json.loads((FIXTURES / "h2d-d2h-local-4gpu.json").read_text())["nvbandwidth"]
    out = nvbandwidth("-t", *TESTS, "-j")
    sim = json.loads(out.stdout)["nvbandwidth"]
    assert set(sim) == set(real) and sim["git_version"].startswith("SIMULATED")
    assert [set(case) for case in sim["testcases"]] == [set(real["testcases"][0])] * 3
    assert all(isinstance(cell, str) for cell in sim["testcases"][0]["bandwidth_matrix"][0])
    assert re.fullmatch(r"0: NVIDIA H100 80GB HBM3 \(00000000:19:00\): \(sim-gpu-2\)",
                        sim["GPU Device list"][0])
    # jsoncpp's styled writer: three-space indent, " : " after each key, keys sorted.
    assert out.stdout.startswith('{\n   "nvbandwidth" : {\n      "CUDA Runtime Version" : 12040,')


@pytest.mark.parametrize("json_output", [False, True])
def test_the_parser_reads_it_and_figures_follow_the_links(nvbandwidth: Nvb,
                                                          json_output: bool) -> None:
    out = nvbandwidth("-t", *TESTS, *(["-j"] if json_output else []),
                      faults=("gpu3-pcie-downgrade", "gpu5-missing"))
    got = parse_nvbandwidth(out.stdout)
    # gpu5 fell off the bus: seven devices, the ones after it renumbered as CUDA would.
    assert [d["index"] for d in got["devices"]] == list(range(7))
    assert got["devices"][5]["bus_id"] == "00000000:cb:00"
    h2d, d2h, local = (per_device(got, test) for test in TESTS)
    assert h2d is not None and d2h is not None and local is not None
    line = pcie_gbps(5, 16)
    for gpu in (0, 1, 2, 4, 5, 6):
        assert h2d[gpu] == pytest.approx(line * COPY_EFFICIENCY[TESTS[0]], rel=0.011)
        assert d2h[gpu] == pytest.approx(line * COPY_EFFICIENCY[TESTS[1]], rel=0.011)
    # Gen4 x8: a quarter of Gen5 x16, below the profile's floor; the local copy is the GPU's.
    assert h2d[3] == pytest.approx(pcie_gbps(4, 8) * COPY_EFFICIENCY[TESTS[0]], rel=0.011)
    assert SIM.copy_h2d_gbps_min is not None and h2d[3] < SIM.copy_h2d_gbps_min < h2d[0]
    assert SIM.memory_bandwidth_gbps is not None and SIM.copy_d2d_gbps_min is not None
    assert local[3] == pytest.approx(SIM.memory_bandwidth_gbps / 2 * LOCAL_COPY_EFFICIENCY,
                                     rel=0.011)
    assert min(v for v in local.values() if v) > SIM.copy_d2d_gbps_min


def test_other_testcases_are_waived_saying_so(nvbandwidth: Nvb) -> None:
    out = nvbandwidth("-t", "host_to_device_memcpy_ce", "device_to_device_memcpy_read_ce", "-j")
    cases = json.loads(out.stdout)["nvbandwidth"]["testcases"]
    assert [(c["name"], c["status"]) for c in cases] == [
        ("host_to_device_memcpy_ce", "Passed"), ("device_to_device_memcpy_read_ce", "Waived")]
    assert "SIMULATED nvbandwidth: testcase device_to_device_memcpy_read_ce is not simulated" \
        in out.stderr


def test_without_a_driver_cuda_cannot_start(tmp_path: Path, bundled: Bundled) -> None:
    out = run_tool(bundled("nvbandwidth"), tmp_path, "-t", "host_to_device_memcpy_ce")
    assert out.returncode == 1
    assert "SIMULATED nvbandwidth: cuInit failed" in out.stderr


def test_a_bad_option_fails_like_the_real_tool(nvbandwidth: Nvb) -> None:
    out = nvbandwidth("--bogus")
    assert out.returncode == 1 and "ERROR: Invalid Arguments" in out.stdout
