"""The hardware validation policy on facts parsed from the simulator's and real captures."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from gpucluster.ib_sysfs import read_ib_sysfs
from gpucluster.nvlink import parse_nvlink_status
from gpucluster.nvsmi_xml import parse_nvidia_smi_xml
from gpucluster.validate import evaluate

from provisioner.profiles import load_profiles
from provisioner.sim.bundle import tool_script
from provisioner.sim.sysfs import write_ib_sysfs

PROFILE = load_profiles()["sim-h100-8gpu"]


def node_facts(tmp_path: Path, faults: list[str]) -> dict[str, Any]:
    (tmp_path / "etc/gpu-sim").mkdir(parents=True)
    (tmp_path / "usr/lib/gpu-sim").mkdir(parents=True)
    data = dict(PROFILE.sim_json(), hostname="node-a")
    (tmp_path / "etc/gpu-sim/profile.json").write_text(json.dumps(data))
    (tmp_path / "etc/gpu-sim/faults").write_text("".join(f + "\n" for f in faults))
    (tmp_path / "usr/lib/gpu-sim/driver-version").write_text("580.95.05\n")
    (tmp_path / "usr/lib/gpu-sim/cuda-version").write_text("13.0\n")
    env = {**os.environ, "GPU_SIM_ROOT": str(tmp_path)}
    smi_bin = tmp_path / "nvidia-smi"  # as the simulated driver package installs it
    smi_bin.write_bytes(tool_script("nvidia_smi"))
    smi_bin.chmod(0o755)

    def smi(*args: str) -> str:
        return subprocess.run([str(smi_bin), *args], capture_output=True, text=True, env=env,
                              check=True).stdout

    write_ib_sysfs(tmp_path / "ib", data, faults)
    return {
        "gpu": parse_nvidia_smi_xml(smi("-q", "-x")),
        "nvlink": parse_nvlink_status(smi("nvlink", "-s")),
        "ib": read_ib_sysfs(str(tmp_path / "ib")),
        "xid": {"events": []},
        "dcgm": None,
    }


def expected(**over: Any) -> dict[str, Any]:
    return {**PROFILE.sim_json(), "driver_version": "580.95.05", **over}


def failed(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in checks if c["status"] == "fail"}


def test_healthy_simulated_node_passes(tmp_path: Path) -> None:
    checks = evaluate(node_facts(tmp_path, []), expected())
    assert failed(checks) == {}
    names = {c["name"] for c in checks}
    assert {"gpu_count", "gpu7_nvlink", "ib_mlx5_7_port1", "ib_ports", "gpu0_memory"} <= names


@pytest.mark.parametrize(("fault", "check", "fragment"), [
    ("gpu3-nvlink-down", "gpu3_nvlink", "GPU3: all NVLinks inactive"),
    ("gpu1-nvlink-link4-down", "gpu1_nvlink", "17 of 18 links up; down: link 4"),
    ("gpu2-ecc-uncorrectable", "gpu2_memory", "uncorrectable ECC"),
    ("gpu6-pcie-downgrade", "gpu6_pcie", "x"),
    ("mlx5_2-half-rate", "ib_mlx5_2_port1", "rate 200 Gb/s"),
    ("mlx5_0-down", "ib_mlx5_0_port1", "state DOWN"),
])
def test_each_fault_fails_exactly_its_check(tmp_path: Path, fault: str, check: str,
                                            fragment: str) -> None:
    bad = failed(evaluate(node_facts(tmp_path, [fault]), expected()))
    names = set(bad) - {"ib_ports"}
    assert names == {check}
    assert fragment in bad[check]["detail"]


def test_missing_gpu_fails_the_count(tmp_path: Path) -> None:
    bad = failed(evaluate(node_facts(tmp_path, ["gpu5-missing"]), expected()))
    assert bad["gpu_count"]["measured"] == 7 and bad["gpu_count"]["expected"] == 8


def test_wrong_driver_and_model_are_named(tmp_path: Path) -> None:
    bad = failed(evaluate(node_facts(tmp_path, []),
                          expected(driver_version="550.54.15", gpu_model="NVIDIA H200")))
    assert bad["driver_version"]["measured"] == "580.95.05"
    assert "GPU0 NVIDIA H100 80GB HBM3" in bad["gpu_model"]["detail"]


def test_aggregate_only_uncorrectable_ecc_errors_fail_the_memory_check() -> None:
    """A reboot clears the volatile counters: the lifetime (aggregate) count is then what still
    says the GPU's memory had uncorrectable errors."""
    gpu = {"driver_version": "580.95.05", "gpus": [
        {"index": 0, "ecc": {"mode": True, "volatile_uncorrectable": 0,
                             "aggregate_uncorrectable": 2}},
        {"index": 1, "ecc": {"mode": True, "volatile_uncorrectable": 0,
                             "aggregate_uncorrectable": 0}},
    ]}
    by = {c["name"]: c for c in evaluate({"gpu": gpu}, {"gpu_count": 2})}
    assert by["gpu0_memory"]["status"] == "fail"
    assert by["gpu0_memory"]["detail"] == "GPU0: 2 aggregate uncorrectable ECC error(s)"
    assert by["gpu0_memory"]["measured"] == {"volatile_uncorrectable": 0,
                                             "aggregate_uncorrectable": 2, "remap_pending": None}
    assert by["gpu1_memory"]["status"] == "pass"
    assert by["gpu1_memory"]["detail"] == "memory healthy"


def test_fatal_xid_fails_and_other_xids_warn() -> None:
    fatal = {"events": [{"xid": 79, "pci": "0000:9b:00", "fatal": True}]}
    soft = {"events": [{"xid": 13, "pci": "0000:9b:00", "fatal": False}]}
    by = {c["name"]: c for c in evaluate({"xid": fatal}, {"gpu_count": None})}
    assert by["xid"]["status"] == "fail" and "Xid 79 on 0000:9b:00" in by["xid"]["detail"]
    by = {c["name"]: c for c in evaluate({"xid": soft}, {"gpu_count": None})}
    assert by["xid"]["status"] == "warn"


def test_dcgm_failure_and_absence() -> None:
    dcgm = {"results": {"Memory": "Fail", "PCIe": "Pass"}, "level": 2}
    by = {c["name"]: c for c in evaluate({"dcgm": dcgm}, {})}
    assert by["dcgm_diag"]["status"] == "fail" and "Memory" in by["dcgm_diag"]["detail"]
    by = {c["name"]: c for c in evaluate({"dcgm": None}, {"dcgm_required": True})}
    assert by["dcgm_diag"]["status"] == "fail"
    by = {c["name"]: c for c in evaluate({"dcgm": None}, {})}
    assert by["dcgm_diag"]["status"] == "skip"


def test_roce_profile_counts_ethernet_ports(tmp_path: Path) -> None:
    facts = node_facts(tmp_path, [])
    checks = {c["name"]: c for c in evaluate(facts, expected(fabric="roce"))}
    # The simulated node's ports are InfiniBand: a RoCE profile finds no Ethernet RDMA port.
    assert checks["ib_ports"]["status"] == "fail" and checks["ib_ports"]["measured"] == 0


def test_real_a100_capture_all_links_inactive_is_caught(captures: Path) -> None:
    text = (captures / "nvidia-smi-nvlink" / "a100-sxm4-80gb-all-inactive.txt").read_text()
    by = {c["name"]: c for c in evaluate({"nvlink": parse_nvlink_status(text)},
                                         {"nvlink_links_per_gpu": 12})}
    assert by["gpu6_nvlink"]["status"] == "fail"
    assert "all NVLinks inactive" in by["gpu6_nvlink"]["detail"]
