"""The GH200 and H100 NVL profiles: the facts their sources cite, and validate on those facts."""

from __future__ import annotations

from typing import Any

import pytest
from gpucluster.validate import evaluate

from provisioner.profiles import PROFILES_FILE, Profile, load_profiles, read_yaml_mapping

PROFILES = load_profiles()
NEW = ("gh200-1gpu", "pcie-h100nvl-1gpu")


@pytest.mark.parametrize("name", NEW)
def test_profile_loads_and_validates_on_its_own(name: str) -> None:
    body = read_yaml_mapping(PROFILES_FILE)["profiles"][name]
    assert Profile.model_validate({**body, "name": name}) == PROFILES[name]
    assert not PROFILES[name].simulated


@pytest.mark.parametrize("name", NEW)
def test_no_performance_floor_without_a_source(name: str) -> None:
    p = PROFILES[name]
    # One GPU: no all-reduce peer, no RDMA network; no datasheet figure was cited.
    assert p.busbw_floor_intra_gbps is None and p.busbw_floor_inter_gbps is None
    assert p.ib_write_bw_floor_gbps == 0
    assert p.memory_bandwidth_gbps is p.copy_d2d_gbps_min is p.burn_tflops_min is None
    assert any("no busbw floors" in s for s in p.sources)
    assert any("no memory_bandwidth_gbps" in s for s in p.sources)


def test_gh200_facts_as_its_nvidia_smi_capture_shows_them() -> None:
    p = PROFILES["gh200-1gpu"]
    assert (p.gpu_model, p.gpu_count, p.architecture, p.pci_device_ids) == (
        "NVIDIA GH200 480GB", 1, "hopper", ("10de:2342",))
    assert (p.memory_mib, p.power_limit_w) == (97871, 900)
    # The C2C-attached GPU's link as nvidia-smi reports it, not a PCIe slot's x16.
    assert (p.pcie_gen, p.pcie_width) == (4, 1)
    assert p.min_driver == "535.129.03"
    assert (p.nvlink_links_per_gpu, p.nvswitch, p.ib_hcas, p.fabric) == (0, False, 0, "ethernet")
    assert any("[SMIGH200]" in s for s in p.sources)


def test_h100_nvl_facts_as_its_nvidia_smi_capture_shows_them() -> None:
    p = PROFILES["pcie-h100nvl-1gpu"]
    assert (p.gpu_model, p.gpu_count, p.architecture, p.pci_device_ids) == (
        "NVIDIA H100 NVL", 1, "hopper", ("10de:2321",))
    assert (p.memory_mib, p.power_limit_w, p.pcie_gen, p.pcie_width) == (95830, 310, 5, 16)
    assert p.min_driver == "535.104.05"
    assert p.copy_h2d_gbps_min == p.copy_d2h_gbps_min == 37.8
    assert any("[SMIH100NVL]" in s for s in p.sources)


def captured_gpu(name: str, gen: int, width: int) -> dict[str, Any]:
    """One GPU as the facts parser reads it, with the link the capture reports."""
    return {"index": 0, "name": name, "persistence_mode": True,
            "ecc": {"mode": True, "volatile_uncorrectable": 0, "aggregate_uncorrectable": 0},
            "remapped_rows": {"pending": False, "failure": False},
            "pcie": {"gen_current": gen, "gen_max": gen, "width_current": width,
                     "width_max": width}}


@pytest.mark.parametrize(("name", "gen", "width"), [("gh200-1gpu", 4, 1),
                                                    ("pcie-h100nvl-1gpu", 5, 16)])
def test_a_node_like_the_capture_passes_validate(name: str, gen: int, width: int) -> None:
    p = PROFILES[name]
    facts = {"gpu": {"gpus": [captured_gpu(p.gpu_model, gen, width)]},
             "nvlink": {"gpus": []}}
    expected = p.model_dump(mode="json")
    checks = {c["name"]: c for c in evaluate(facts, expected)}
    assert {k: checks[k]["status"] for k in ("gpu_count", "gpu_model", "gpu0_pcie", "nvlink")} == {
        "gpu_count": "pass", "gpu_model": "pass", "gpu0_pcie": "pass", "nvlink": "skip"}


def test_gh200_expected_at_x16_would_fail_its_own_link() -> None:
    # Why the profile says x1: a GH200 reports its GPU link as Gen4 x1, so x16 fails every node.
    expected = dict(PROFILES["gh200-1gpu"].model_dump(mode="json"), pcie_width=16)
    facts = {"gpu": {"gpus": [captured_gpu("NVIDIA GH200 480GB", 4, 1)]}}
    checks = {c["name"]: c for c in evaluate(facts, expected)}
    assert checks["gpu0_pcie"]["status"] == "fail"
