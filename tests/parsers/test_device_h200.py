"""Our own captures from a lent machine with one NVIDIA H200 (Ubuntu 24.04, open kernel module
580.159.04, CUDA 13.0), taken on 2026-11-27 and 2026-11-28 (tests/fixtures/device-h200; the
GPU's serial and UUID are zeroed; the module's banner and parameters are /proc/driver/nvidia's
version and params). They hold the plan's hardware facts for the H200 to a real GPU, and keep two
findings that the simulator and the public captures had not shown:
- `nvidia-smi nvlink -s` prints nothing for an SXM H200 passed through alone, so a profile that
  wants NVLink used to pass with no NVLink check at all;
- an all-reduce over one rank "measures" 0 GB/s bus bandwidth, which the smoke judge used to
  hold against an 8-GPU floor."""

from __future__ import annotations

import json
from pathlib import Path

from gpucluster.nvlink import parse_nvlink_status
from gpucluster.nvsmi_xml import parse_nvidia_smi_xml
from gpucluster.topo import parse_topo_matrix
from gpucluster.validate import evaluate

from provisioner.profiles import load_profiles
from provisioner.smoke_judge import ONE_RANK_SKIP_REASON, judge, load_smoke_result

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "tests" / "fixtures" / "device-h200"


def profile() -> dict:
    return load_profiles()["hgx-h200-8gpu"].model_dump()


def gpu_facts() -> dict:
    return parse_nvidia_smi_xml((HERE / "nvidia-smi-q-x.xml").read_text())


def test_the_h200_profile_matches_the_real_gpu() -> None:
    expected, facts = profile(), gpu_facts()
    [gpu] = facts["gpus"]
    assert gpu["name"] == expected["gpu_model"] == "NVIDIA H200"
    assert gpu["memory_total_mib"] == expected["memory_mib"]
    assert gpu["power"]["default_limit_w"] == expected["power_limit_w"]
    assert (gpu["pcie"]["gen_max"], gpu["pcie"]["width_max"]) == (expected["pcie_gen"],
                                                                  expected["pcie_width"])
    # <pci_device_id>233510DE</pci_device_id>: device 0x2335 of vendor 0x10de.
    raw = (HERE / "nvidia-smi-q-x.xml").read_text()
    device_id = raw.split("<pci_device_id>")[1][:8].lower()
    assert f"{device_id[4:]}:{device_id[:4]}" in expected["pci_device_ids"]
    csv = (HERE / "nvidia-smi-query-gpu.csv").read_text().splitlines()[1].split(", ")
    assert csv[2].lower() == "0x233510de" and csv[3] == f"{expected['memory_mib']} MiB"
    # The driver is newer than the profile's minimum.
    have = tuple(int(p) for p in facts["driver_version"].split("."))
    assert have >= tuple(int(p) for p in expected["min_driver"].split("."))


def test_a_gpu_that_nvidia_smi_lists_no_nvlink_for_fails_the_nvlink_check() -> None:
    nvlink = parse_nvlink_status((HERE / "nvidia-smi-nvlink-s.txt").read_text())
    assert nvlink["gpus"] == [] and not nvlink.get("error")
    expected = dict(profile(), gpu_count=1)
    checks = {c["name"]: c for c in evaluate({"gpu": gpu_facts(), "nvlink": nvlink}, expected)}
    assert checks["gpu0_nvlink"]["status"] == "fail"
    assert checks["gpu0_nvlink"]["measured"] == 0
    assert "lists no NVLink (the profile wants 18)" in checks["gpu0_nvlink"]["detail"]
    assert checks["gpu_count"]["status"] == "pass"
    # Without the GPU subset the node still fails NVLink, as one check.
    alone = {c["name"]: c for c in evaluate({"nvlink": nvlink}, expected)}
    assert alone["nvlink"]["status"] == "fail"
    # A profile without NVLink skips it.
    none = {c["name"]: c for c in evaluate({"gpu": gpu_facts(), "nvlink": nvlink},
                                           dict(expected, nvlink_links_per_gpu=0))}
    assert none["nvlink"]["status"] == "skip" and "gpu0_nvlink" not in none


def test_topo_of_one_gpu_without_nics() -> None:
    topo = parse_topo_matrix((HERE / "nvidia-smi-topo-m.txt").read_text())
    assert topo["gpus"] == ["GPU0"] and topo["nics"] == [] and topo["errors"] == []
    assert topo["affinity"]["GPU0"]["cpu_affinity"] == "0-15"


def test_nvcc_of_cuda_13_0_prints_its_own_build_not_the_toolkit_update() -> None:
    text = (HERE / "nvcc-version.txt").read_text()
    assert "Cuda compilation tools, release 13.0, V13.0.88" in text
    # What the roles read: the release; the V number is nvcc's build (judge.py says why).
    release = text.split("release ")[1].split(",")[0]
    assert release == "13.0"


def test_a_one_rank_smoke_job_is_not_judged_against_the_floor() -> None:
    result = load_smoke_result(HERE / "gpuc-smoke-nccl-1gpu.json")
    assert (result.backend, result.world_size) == ("nccl", 1)
    verdict = judge(result, profile()["busbw_floor_intra_gbps"], simulated=False)
    assert verdict.failures == ()
    assert verdict.floor.skipped_reason == ONE_RANK_SKIP_REASON and verdict.floor.passed
    assert all(row.busbw_gbps == 0.0 and row.correct for row in verdict.rows)
    raw = json.loads((HERE / "gpuc-smoke-nccl-1gpu.json").read_text())
    assert raw["ddp"]["decreased"] and raw["ddp"]["params_identical"]
    # Two ranks or more are judged as before: the same report claiming two ranks fails the floor.
    two = result.model_copy(update={"world_size": 2})
    assert judge(two, 431.0, simulated=False).failures


def test_the_real_machine_passes_validation_against_its_built_in_shape() -> None:
    """cloud-h200-1gpu describes the lent machine; every fact validate judges passes, NVLink and
    RDMA are not expected, and the GPUDirect path is reported, not judged, on Ethernet."""
    from gpucluster.gpudirect import module_flavour

    shape = load_profiles()["cloud-h200-1gpu"].model_dump()
    nvlink = parse_nvlink_status((HERE / "nvidia-smi-nvlink-s.txt").read_text())
    params = (HERE / "proc-driver-nvidia-params.txt").read_text()
    assert "NvLinkDisable: 1" in params.splitlines()  # why nvlink -s lists no link
    gpudirect = {"kernel_module": module_flavour(
        (HERE / "proc-driver-nvidia-version.txt").read_text()), "kernel": "6.18.44-fc-v657-gpu",
        "peermem_loaded": False, "cuda_dma_buf": [1]}
    expected = dict(shape, driver_version="580.159.04")
    checks = {c["name"]: c for c in evaluate(
        {"gpu": gpu_facts(), "nvlink": nvlink, "gpudirect": gpudirect}, expected)}
    assert {name: c["status"] for name, c in checks.items()} == {
        "gpu_count": "pass", "gpu_model": "pass", "driver_version": "pass",
        "gpu0_memory": "pass", "gpu0_pcie": "pass", "persistence_mode": "pass",
        "nvlink": "skip", "gpudirect": "skip"}
    assert checks["gpudirect"]["measured"] == "dma_buf"
    # The 8-GPU HGX profile, which this machine used to be described by, fails it.
    hgx = {c["name"]: c["status"] for c in evaluate(
        {"gpu": gpu_facts(), "nvlink": nvlink}, dict(profile(), driver_version="580.159.04"))}
    assert hgx["gpu_count"] == "fail" and hgx["gpu0_nvlink"] == "fail"
