"""Hardware profiles: the packaged data is complete and consistent; broken files are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.errors import InputError
from provisioner.pcie import pcie_gbps
from provisioner.profiles import PROFILES_FILE, SIM_FIELDS, Profile, load_profiles

REQUIRED = ("hgx-h100-8gpu", "hgx-h200-8gpu", "hgx-a100-8gpu", "hgx-b200-8gpu",
            "pcie-l40s-4gpu", "sim-h100-8gpu")
PROFILES = load_profiles()
# PCIe x16 payload bandwidth per direction, GB/s, by generation (2.0 GT/s doubling from Gen3).
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0}


def raw_profiles() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(PROFILES_FILE.read_text())
    return data


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "profiles.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_required_profiles_present() -> None:
    assert set(REQUIRED) <= set(PROFILES)


@pytest.mark.parametrize(("real_name", "sim_name"), [("hgx-h100-8gpu", "sim-h100-8gpu"),
                                                     ("gb200-nvl72-tray", "sim-gb200-4gpu")])
def test_sim_profiles_are_real_ones_marked_simulated(real_name: str, sim_name: str) -> None:
    real, sim = PROFILES[real_name].sim_json(), PROFILES[sim_name].sim_json()
    assert sim["simulated"] is True and real["simulated"] is False
    for key in SIM_FIELDS:
        if key != "simulated":
            assert sim[key] == real[key], key
    assert [n for n, p in PROFILES.items() if p.simulated] == ["sim-h100-8gpu", "sim-gb200-4gpu"]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_counts_and_floors_are_consistent(name: str) -> None:
    p = PROFILES[name]
    # An L4 draws 72 W by default: the smallest data-center GPU profiled.
    assert p.gpu_count >= 1 and p.memory_mib > 1024 and p.power_limit_w >= 50
    if p.nvswitch:
        assert p.nvlink_links_per_gpu > 0 and p.nvlink_link_speed_gbps > 0
        assert p.fabric in ("infiniband", "roce") and p.ib_hcas > 0
    assert all(len(s) > 10 for s in p.sources)
    intra, inter = p.busbw_floor_intra_gbps, p.busbw_floor_inter_gbps
    # A multi-GPU profile with RDMA has both floors; a single GPU has no all-reduce peer on its
    # node, and a node without RDMA no inter-node floor.
    assert (intra is not None) == (p.gpu_count > 1), name
    assert (inter is not None) == (p.gpu_count > 1 and p.ib_hcas > 0), name
    if intra is not None:
        # A floor above the physical line rate could never be met.
        if p.nvlink_links_per_gpu:
            assert intra <= p.nvlink_links_per_gpu * p.nvlink_link_speed_gbps
        else:
            assert intra <= PCIE_X16_GBPS[p.pcie_gen] * p.pcie_width / 16
    if inter is not None and intra is not None:
        # Multi-node all-reduce also crosses the node's own links: it cannot beat one node.
        assert inter <= intra and inter <= p.ib_hcas * p.ib_rate_gbps / 8


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_burn_in_floors_follow_their_stated_derivation(name: str) -> None:
    # profiles.yml's header: copies 60% of the PCIe line rate, the local copy 30% of the
    # datasheet's memory bandwidth, TFLOPS 50% of the dense datasheet figure (not checked here:
    # the figure is in the sources, not a field).
    p = PROFILES[name]
    line = pcie_gbps(p.pcie_gen, p.pcie_width)
    assert line == pytest.approx(PCIE_X16_GBPS[p.pcie_gen] * p.pcie_width / 16, rel=0.001)
    for floor in (p.copy_h2d_gbps_min, p.copy_d2h_gbps_min):
        assert floor is not None and floor == pytest.approx(0.6 * line, abs=0.1)
    # The local-copy floor exactly where the datasheet's memory bandwidth is cited.
    assert (p.memory_bandwidth_gbps is None) == (p.copy_d2d_gbps_min is None), name
    if p.memory_bandwidth_gbps is not None and p.copy_d2d_gbps_min is not None:
        assert p.copy_d2d_gbps_min == pytest.approx(0.3 * p.memory_bandwidth_gbps, abs=1)
        assert any("copy_d2d_gbps_min" in s for s in p.sources) or p.simulated
    if p.burn_tflops_min is None and p.memory_bandwidth_gbps is not None:
        assert any("no burn_tflops_min" in s for s in p.sources)


def test_known_hardware_facts() -> None:
    h100 = PROFILES["hgx-h100-8gpu"]
    assert (h100.gpu_model, h100.pci_device_ids, h100.nvlink_link_speed_gbps) == (
        "NVIDIA H100 80GB HBM3", ("10de:2330",), 26.562)
    assert PROFILES["hgx-b200-8gpu"].architecture == "blackwell"
    assert not PROFILES["pcie-l40s-4gpu"].nvswitch
    assert PROFILES["pcie-l40s-4gpu"].nvlink_links_per_gpu == 0


def test_sim_json_has_exactly_the_simulator_fields() -> None:
    out = PROFILES["sim-h100-8gpu"].sim_json()
    assert list(out) == ["name", *SIM_FIELDS]
    assert out["name"] == "sim-h100-8gpu"
    assert out["pci_device_ids"] == ["10de:2330"]
    assert json.loads(json.dumps(out)) == out


def test_profiles_are_frozen() -> None:
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type is internal
        PROFILES["hgx-h100-8gpu"].gpu_count = 4  # type: ignore[misc]


def test_malformed_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "profiles.yml"
    path.write_text("profiles:\n  hgx: [unclosed\n")
    with pytest.raises(InputError, match=rf"{path}: not valid YAML at line \d+"):
        load_profiles(path)


def test_missing_key_names_file_and_key(tmp_path: Path) -> None:
    data = raw_profiles()
    del data["profiles"]["hgx-a100-8gpu"]["gpu_model"]
    path = write(tmp_path, data)
    with pytest.raises(InputError) as exc:
        load_profiles(path)
    assert str(exc.value).startswith(f"{path}: profiles.hgx-a100-8gpu.gpu_model: ")
    assert "Field required" in str(exc.value)


def test_wrong_type_names_the_key(tmp_path: Path) -> None:
    data = raw_profiles()
    data["profiles"]["hgx-h100-8gpu"]["gpu_count"] = "eight"
    with pytest.raises(InputError, match=r"profiles\.hgx-h100-8gpu\.gpu_count"):
        load_profiles(write(tmp_path, data))


def test_unknown_field_is_refused(tmp_path: Path) -> None:
    data = raw_profiles()
    data["profiles"]["hgx-h100-8gpu"]["gpu_modle"] = "typo"
    with pytest.raises(InputError, match=r"profiles\.hgx-h100-8gpu\.gpu_modle"):
        load_profiles(write(tmp_path, data))


@pytest.mark.parametrize(("change", "message"), [
    ({"nvlink_links_per_gpu": 0, "nvlink_link_speed_gbps": 0.0}, "nvswitch: true needs NVLink"),
    ({"nvlink_link_speed_gbps": 0.0}, "both be 0"),
    ({"ib_hcas": 0}, "ib_hcas and ib_rate_gbps"),
    ({"pci_device_ids": ["8086:1234"]}, "is not like '10de:2330'"),
    ({"busbw_floor_intra_gbps": 0}, "greater than 0"),
    ({"architecture": "kepler"}, "architecture"),
    ({"copy_h2d_gbps_min": 64.0}, "is above the PCIe Gen5 x16 line rate (63.0 GB/s"),
    ({"copy_d2d_gbps_min": 1700.0}, "is above half the memory bandwidth (3350 GB/s"),
    ({"burn_tflops_min": 0}, "greater than 0"),
])
def test_inconsistent_profile_is_refused(tmp_path: Path, change: dict[str, Any],
                                         message: str) -> None:
    data = raw_profiles()
    data["profiles"]["hgx-h100-8gpu"].update(change)
    with pytest.raises(InputError, match=r"profiles\.hgx-h100-8gpu") as exc:
        load_profiles(write(tmp_path, data))
    assert message in str(exc.value)


def test_top_level_shape_is_checked(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="profiles: expected a mapping"):
        load_profiles(write(tmp_path, {"schema_version": 1, "profiles": []}))
    with pytest.raises(InputError, match="extra: unknown top-level key"):
        load_profiles(write(tmp_path, {"schema_version": 1, "profiles": {}, "extra": 1}))
    with pytest.raises(InputError, match="schema_version: expected 1"):
        load_profiles(write(tmp_path, {"schema_version": 2, "profiles": {}}))


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the file"):
        load_profiles(tmp_path / "nope.yml")


def test_profile_model_validates_directly() -> None:
    body = PROFILES["pcie-l40s-4gpu"].model_dump()
    assert Profile.model_validate(body) == PROFILES["pcie-l40s-4gpu"]
