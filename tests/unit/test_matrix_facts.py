"""Version facts held by the matrix: Ubuntu driver revisions by release, the pinned
rhel9 key and dnf module streams, per-GPU minimum drivers, the CUDA 11.8 stack and Volta, and the
fabric manager's prerequisites on fourth-generation NVSwitch systems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.errors import InputError
from provisioner.matrix import (
    STACKS_FILE,
    ResolvedStack,
    check_cluster,
    load_matrix,
    packages_for,
    resolve_stack,
    stack_detail,
)
from provisioner.profiles import PROFILES_FILE, Profile, load_profiles

MATRIX = load_matrix()
PROFILES = load_profiles()
V100, A100 = PROFILES["sxm2-v100-8gpu"], PROFILES["hgx-a100-8gpu"]
H100, H200 = PROFILES["hgx-h100-8gpu"], PROFILES["hgx-h200-8gpu"]
B200, L40S = PROFILES["hgx-b200-8gpu"], PROFILES["pcie-l40s-4gpu"]


def resolve(hostvars: dict[str, Any], profile: Profile | None, host: str = "gpu-01"
            ) -> ResolvedStack:
    return resolve_stack(host, hostvars, profile, MATRIX)


def refused(hostvars: dict[str, Any], profile: Profile | None, host: str = "gpu-01") -> str:
    with pytest.raises(InputError) as exc:
        resolve(hostvars, profile, host)
    assert "\n" not in str(exc.value)
    return str(exc.value)


def pins(hostvars: dict[str, Any], family: str, profile: Profile | None = None) -> dict[str, str]:
    return {p.name: p.version for p in packages_for(resolve(hostvars, profile), family)}


# --------------------------------------------------------------------------- Ubuntu revisions


@pytest.mark.parametrize(("stack", "nvidia_driver", "cuda_drivers"), [
    ("cuda-11.8", "535.154.05-0ubuntu1", "535.154.05-1"),
    ("cuda-12.2", "535.104.05-0ubuntu1", "535.104.05-1"),
    ("cuda-12.4", "550.54.15-0ubuntu1", "550.54.15-1"),
    ("cuda-12.6", "560.35.03-0ubuntu1", "560.35.03-1"),
    ("cuda-12.8", "570.124.06-0ubuntu1", "570.124.06-0ubuntu1"),
    ("cuda-12.9", "575.57.08-0ubuntu1", "575.57.08-0ubuntu1"),
    ("cuda-13.0", "580.159.04-1ubuntu1", "580.159.04-1ubuntu1"),
    ("cuda-13.2", "595.71.05-1ubuntu1", "595.71.05-1ubuntu1"),
])
def test_ubuntu_driver_pins_carry_the_repositorys_revision(stack: str, nvidia_driver: str,
                                                            cuda_drivers: str) -> None:
    branch = MATRIX.stacks[stack].driver.branch
    ubuntu = pins({"gpu_stack": stack, "nvidia_driver_module_flavor": "open"}, "apt_ubuntu")
    assert ubuntu[f"nvidia-driver-{branch}-open"] == nvidia_driver
    assert ubuntu[f"cuda-drivers-{branch}"] == cuda_drivers
    # Debian 12's repository keeps -1 for both driver packages.
    if "debian12" in MATRIX.stacks[stack].os_support:
        debian = pins({"gpu_stack": stack, "nvidia_driver_module_flavor": "open"}, "apt")
        version = MATRIX.stacks[stack].driver.version
        assert debian[f"cuda-drivers-{branch}"] == debian["nvidia-kernel-open-dkms"] \
            == f"{version}-1"


@pytest.mark.parametrize(("override", "driver", "nvidia_driver", "cuda_drivers"), [
    # Releases stacks.yml lists (ubuntu_driver_packages) take their listed revisions: the
    # revision changes inside R580 (cuda-13.0's own 580.159.04 is -1ubuntu1).
    ("580.95.05", "580.95.05", "0ubuntu1", "0ubuntu1"),
    ("580.159.04", "580.159.04", "1ubuntu1", "1ubuntu1"),
    # Others are given in full, as the Ubuntu repository lists them.
    ("580.105.08-0ubuntu1", "580.105.08", "0ubuntu1", "0ubuntu1"),
    ("580.126.09-1ubuntu1", "580.126.09", "1ubuntu1", "1ubuntu1"),
    ("580.126.20-1ubuntu1", "580.126.20", "1ubuntu1", "1ubuntu1"),
])
def test_ubuntu_revision_follows_a_driver_override(override: str, driver: str,
                                                    nvidia_driver: str, cuda_drivers: str) -> None:
    hostvars = {"gpu_stack": "cuda-13.0", "nvidia_driver_version": override}
    assert resolve(hostvars, H100).driver_version == driver
    ubuntu = pins(hostvars, "apt_ubuntu")
    assert ubuntu["nvidia-driver-580-open"] == f"{driver}-{nvidia_driver}"
    assert ubuntu["cuda-drivers-580"] == f"{driver}-{cuda_drivers}"
    # Debian's repository keeps -1, whatever the Ubuntu revision.
    assert pins(hostvars, "apt")["cuda-drivers-580"] == f"{driver}-1"


@pytest.mark.parametrize("driver", ["580.105.08", "580.126.09", "580.126.20"])
def test_an_unlisted_ubuntu_driver_override_without_an_index_is_refused(driver: str) -> None:
    assert refused({"gpu_stack": "cuda-13.0", "nvidia_driver_version": driver}, H100) == (
        f"host gpu-01: nvidia_driver_version {driver} is not a release in stacks.yml, and its "
        "Ubuntu package revision (ubuntu2204) is a fact of the repository, not of the number: "
        "set gpu_package_index to the Ubuntu CUDA repository's index, or give the full package "
        f"version as that repository lists it (nvidia_driver_version: \"{driver}-<revision>\")")


def test_ubuntu_revisions_are_stated_per_release_never_derived() -> None:
    facts = MATRIX.naming_facts
    assert facts.ubuntu_revision("560.35.03").cuda_drivers == "1"
    # 560.35.05 (-0ubuntu1 [HOLO]) is not listed: a neighbouring release lends it nothing.
    assert facts.ubuntu_revision("560.35.05") is None
    assert facts.ubuntu_revision("470.256.02") is None  # older than every listed release
    assert facts.ubuntu_revision("580.95.05").cuda_drivers == "0ubuntu1"
    assert facts.ubuntu_revision("580.159.04").cuda_drivers == "1ubuntu1"
    # Every stack that claims an Ubuntu OS has its own driver release listed.
    for stack in MATRIX.stacks.values():
        if any(os_dir.startswith("ubuntu") for os_dir in stack.os_support):
            assert facts.ubuntu_revision(stack.driver.version) is not None, stack.name


def test_stacks_show_cuda_12_8_lists_both_revisions() -> None:
    packages = stack_detail(MATRIX, "cuda-12.8")["packages"]
    assert "cuda-drivers-570 570.124.06-0ubuntu1" in packages["apt_ubuntu"]["driver"]["open"]
    assert "cuda-drivers-570 570.124.06-1" in packages["apt"]["driver"]["open"]


# --------------------------------------------------------------------------- fabric manager names


@pytest.mark.parametrize(("stack", "family", "expected"), [
    ("cuda-12.8", "apt", [("nvidia-fabricmanager-570", "570.124.06-1"),
                          ("libnvidia-nscq-570", "570.124.06-1")]),
    ("cuda-12.8", "dnf", [("nvidia-fabric-manager", "570.124.06-1"),
                          ("libnvidia-nscq-570", "570.124.06-1")]),
    ("cuda-13.0", "apt", [("nvidia-fabricmanager", "580.159.04-1"),
                          ("libnvidia-nscq", "580.159.04-1")]),
    # Ubuntu's fabric manager carries the Ubuntu revision at 580.159.04 (package_exceptions).
    ("cuda-13.0", "apt_ubuntu", [("nvidia-fabricmanager", "580.159.04-1ubuntu1"),
                                 ("libnvidia-nscq", "580.159.04-1ubuntu1")]),
    ("cuda-13.0", "dnf", [("nvidia-fabricmanager", "580.159.04-1"),
                          ("libnvidia-nscq", "580.159.04-1")]),
])
def test_fabric_manager_names_before_and_from_r580(stack: str, family: str,
                                                   expected: list[tuple[str, str]]) -> None:
    r = resolve({"gpu_stack": stack}, H100)
    got = [(p.name, p.version) for p in packages_for(r, family) if p.component == "fabricmanager"]
    assert got == expected


# --------------------------------------------------------------------------- nvlsm on NVSwitch 4


def test_fourth_generation_nvswitch_gets_the_subnet_manager() -> None:
    out = resolve({}, B200).as_vars()
    assert out["nvidia_fabricmanager_nvlsm_enabled"] is True
    assert out["nvidia_fabricmanager_nvlsm_packages"]["dnf"] == ["nvlsm", "libibumad",
                                                                 "infiniband-diags"]
    assert out["nvidia_fabricmanager_nvlsm_packages"]["apt_ubuntu"] == [
        "nvlsm", "libibumad3", "infiniband-diags"]
    assert out["nvidia_fabricmanager_kernel_modules"] == ["ib_umad"]
    for profile in (H100, H200, A100, L40S, V100):
        v = resolve({"gpu_stack": "cuda-12.9"}, profile).as_vars()
        assert v["nvidia_fabricmanager_nvlsm_enabled"] is False, profile.name
        assert v["nvidia_fabricmanager_nvlsm_packages"] == {}
        assert v["nvidia_fabricmanager_kernel_modules"] == []


def test_nvlsm_prerequisite_starts_at_r570() -> None:
    assert MATRIX.fabricmanager_prerequisite(4, 565) is None
    assert MATRIX.fabricmanager_prerequisite(3, 580) is None
    prerequisite = MATRIX.fabricmanager_prerequisite(4, 570)
    assert prerequisite is not None and prerequisite.kernel_modules == ("ib_umad",)
    shown = stack_detail(MATRIX, "cuda-12.8")["fabricmanager_prerequisites"]
    assert shown[0]["nvswitch_generation"] == 4 and "nvlsm" in shown[0]["packages"]["apt"]
    assert stack_detail(MATRIX, "cuda-12.6")["fabricmanager_prerequisites"] == []


# --------------------------------------------------------------------------- per-GPU minimums


def test_profile_minimum_drivers() -> None:
    assert (H200.min_driver, B200.min_driver, L40S.min_driver) == (
        "550.90.07", "570.133.20", "535.104.05")
    assert H200.pci_device_ids == ("10de:2335",) and L40S.pci_device_ids == ("10de:26b9",)


@pytest.mark.parametrize(("profile", "hostvars", "expected"), [
    (H200, {"gpu_stack": "cuda-12.2"},
     "host gpu-01: nvidia_driver_version 535.104.05 (from gpu_stack cuda-12.2) is older than "
     "NVIDIA H200 (10de:2335) needs (gpu_profile hgx-h200-8gpu: min_driver 550.90.07); set "
     "nvidia_driver_version >= 550.90.07 or pick gpu_stack cuda-12.6 or newer"),
    (H200, {"gpu_stack": "cuda-12.4"},
     "host gpu-01: nvidia_driver_version 550.54.15 (from gpu_stack cuda-12.4) is older than "
     "NVIDIA H200 (10de:2335) needs (gpu_profile hgx-h200-8gpu: min_driver 550.90.07); set "
     "nvidia_driver_version >= 550.90.07 or pick gpu_stack cuda-12.6 or newer"),
    (B200, {"gpu_stack": "cuda-12.8"},
     "host gpu-01: nvidia_driver_version 570.124.06 (from gpu_stack cuda-12.8) is older than "
     "NVIDIA B200 (10de:2901) needs (gpu_profile hgx-b200-8gpu: min_driver 570.133.20); set "
     "nvidia_driver_version >= 570.133.20 or pick gpu_stack cuda-12.9 or newer"),
    (L40S, {"gpu_stack": "cuda-12.2", "nvidia_driver_version": "535.54.03-1"},
     "host gpu-01: nvidia_driver_version 535.54.03 (as overridden) is older than NVIDIA L40S "
     "(10de:26b9) needs (gpu_profile pcie-l40s-4gpu: min_driver 535.104.05); set "
     "nvidia_driver_version >= 535.104.05 or pick gpu_stack cuda-12.2 or newer"),
])
def test_rule_gpu_model_needs_its_minimum_driver(profile: Profile, hostvars: dict[str, Any],
                                                 expected: str) -> None:
    assert refused(hostvars, profile) == expected


@pytest.mark.parametrize(("profile", "hostvars"), [
    # Releases stacks.yml does not list, given in full with their Ubuntu revision [HOLO] [UREPO].
    (H200, {"gpu_stack": "cuda-12.4", "nvidia_driver_version": "550.90.07-1"}),
    (B200, {"gpu_stack": "cuda-12.8", "nvidia_driver_version": "570.133.20-0ubuntu1"}),
    (L40S, {"gpu_stack": "cuda-12.2"}),
    (H200, {"gpu_stack": "cuda-12.6"}),
])
def test_a_new_enough_release_is_accepted(profile: Profile, hostvars: dict[str, Any]) -> None:
    r = resolve(hostvars, profile)
    assert r.driver_version == hostvars.get(
        "nvidia_driver_version",
        MATRIX.stacks[hostvars["gpu_stack"]].driver.version).partition("-")[0]
    # The same branch's override keeps the stack's CUDA, NCCL and the fabric manager in step.
    assert r.cuda_version == MATRIX.stacks[hostvars["gpu_stack"]].cuda_version
    assert r.fabricmanager_version == r.driver_version


def test_stacks_show_says_which_profiles_a_stack_fails() -> None:
    detail = stack_detail(MATRIX, "cuda-12.4", PROFILES)["gpu_profiles"]
    assert detail["hgx-h200-8gpu"]["min_driver"] == "550.90.07"
    assert detail["hgx-h200-8gpu"]["verdict"].startswith("nvidia_driver_version 550.54.15")
    assert detail["hgx-h100-8gpu"] == {"gpu": "NVIDIA H100 80GB HBM3 (10de:2330)",
                                       "min_driver": "R525", "verdict": "ok"}
    assert "blackwell" in detail["hgx-b200-8gpu"]["verdict"]
    assert stack_detail(MATRIX, "cuda-12.8", PROFILES)["gpu_profiles"]["hgx-b200-8gpu"][
        "verdict"].startswith("nvidia_driver_version 570.124.06")
    assert "gpu_profiles" not in stack_detail(MATRIX, "cuda-12.8")


# --------------------------------------------------------------------------- CUDA 11.8 and Volta


def test_cuda_11_8_stack_facts() -> None:
    s = MATRIX.stacks["cuda-11.8"]
    assert (s.driver.version, s.cuda_toolkit_version) == ("535.154.05", "11.8.0")
    assert s.os_support == ("ubuntu2204", "rhel9")
    assert (s.cudnn.version, s.cudnn.cuda_major) == ("9.1.0.70", 11)
    assert 11 in MATRIX.cudnn_majors(s.cudnn.version)
    assert s.nccl.version == "2.15.5-1+cuda11.8"
    assert s.driver.default_module_flavor == "proprietary"


def test_v100_profile_facts() -> None:
    assert (V100.gpu_model, V100.pci_device_ids, V100.architecture) == (
        "Tesla V100-SXM2-32GB", ("10de:1db5",), "volta")
    assert (V100.gpu_count, V100.nvlink_links_per_gpu, V100.nvswitch) == (8, 6, False)
    assert V100.nvlink_link_speed_gbps == pytest.approx(25.781)


def test_v100_on_cuda_11_8() -> None:
    r = resolve({"gpu_stack": "cuda-11.8"}, V100)
    assert (r.module_flavor, r.fabricmanager_enabled) == ("proprietary", False)
    ubuntu = pins({"gpu_stack": "cuda-11.8"}, "apt_ubuntu", V100)
    assert ubuntu["nvidia-driver-535"] == "535.154.05-0ubuntu1"
    assert ubuntu["cuda-toolkit-11-8"] == "11.8.0-1"
    assert ubuntu["libcudnn9-cuda-11"] == "9.1.0.70-1"
    assert ubuntu["libnccl2"] == "2.15.5-1+cuda11.8"
    assert ubuntu["datacenter-gpu-manager"] == "1:3.3.6"


def test_v100_refuses_cuda_13_and_open_modules() -> None:
    assert refused({}, V100).startswith("host gpu-01: cuda_version 13.0 cannot target volta GPUs")
    message = refused({"gpu_stack": "cuda-12.4", "nvidia_driver_module_flavor": "open"}, V100)
    assert message.startswith("host gpu-01: nvidia_driver_module_flavor open is not supported "
                              "on volta GPUs")


def test_mixed_fleet_cannot_leave_volta_behind() -> None:
    fleet = {"v100-01": resolve({"gpu_stack": "cuda-12.9"}, V100, "v100-01"),
             "a100-01": resolve({"gpu_stack": "cuda-13.0"}, A100, "a100-01")}
    with pytest.raises(InputError) as exc:
        check_cluster(fleet)
    assert str(exc.value) == (
        "host v100-01: volta GPUs (gpu_profile sxm2-v100-8gpu) cannot run CUDA 13.0 like host "
        "a100-01 (gpu_stack cuda-13.0), and NCCL must match on every node of a job; put the "
        "whole gpu_nodes group on CUDA <= 12.9 (gpu_stack cuda-12.9 or older)")


def test_mixed_fleet_on_one_stack_is_accepted() -> None:
    fleet = {f"v100-0{i}": resolve({"gpu_stack": "cuda-12.4"}, V100, f"v100-0{i}")
             for i in range(4)}
    fleet.update({f"a100-0{i}": resolve({"gpu_stack": "cuda-12.4"}, A100, f"a100-0{i}")
                  for i in range(4)})
    check_cluster(fleet)
    assert {r.module_flavor for r in fleet.values()} == {"proprietary"}


# --------------------------------------------------------------------------- schema


def raw(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def load_changed(tmp_path: Path, change: Any) -> str:
    data = raw(STACKS_FILE)
    change(data)
    path = tmp_path / "stacks.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as exc:
        load_matrix(path)
    assert str(exc.value).startswith(str(path)) and "\n" not in str(exc.value)
    return str(exc.value)


@pytest.mark.parametrize(("change", "fragment"), [
    (lambda d: d["repositories"]["cuda"]["rhel9"].update(fingerprint=None),
     "repositories.cuda.rhel9.fingerprint"),
    (lambda d: d["repositories"]["cuda"]["ubuntu2204"].pop("fingerprint"),
     "repositories.cuda.ubuntu2204.fingerprint: Field required"),
    (lambda d: d["repositories"]["container_toolkit"]["dnf"].update(fingerprint=None),
     "repositories.container_toolkit.dnf.fingerprint"),
    (lambda d: d["stacks"]["cuda-13.0"]["driver"].update(dnf_module_streams=None),
     "stack cuda-13.0: driver.dnf_module_streams has no open stream, but rhel9 installs the "
     "driver from module streams; add open: \"nvidia-driver:580-open\""),
    (lambda d: d["stacks"]["cuda-12.9"]["driver"].update(
        dnf_module_streams={"open": "nvidia-driver:575-open",
                            "proprietary": "nvidia-driver:570-dkms"}),
     "driver.dnf_module_streams.proprietary is 'nvidia-driver:570-dkms'; the stream of branch "
     "575 is 'nvidia-driver:575-dkms'"),
    (lambda d: d["ubuntu_driver_packages"].update(
        {"R580": {"nvidia_driver": "1ubuntu1", "cuda_drivers": "1ubuntu1"}}),
     "ubuntu_driver_packages: 'R580' is not a driver release like '580.95.05' (quote it)"),
    (lambda d: d["ubuntu_driver_packages"].pop("580.159.04"),
     "stack cuda-13.0: os_support ubuntu2204 needs the Ubuntu revisions of driver 580.159.04: "
     "add it to ubuntu_driver_packages with its source, or drop the OS"),
    (lambda d: d.pop("ubuntu_driver_packages"), "ubuntu_driver_packages: Field required"),
    (lambda d: d["fabricmanager_prerequisites"][0]["packages"].pop("dnf"),
     "no package list for family dnf"),
])
def test_load_refuses_missing_facts(tmp_path: Path, change: Any, fragment: str) -> None:
    assert fragment in load_changed(tmp_path, change)


def test_streams_are_optional_where_no_os_has_modules(tmp_path: Path) -> None:
    data = raw(STACKS_FILE)
    data["repositories"]["cuda"]["rhel9"]["driver_module_streams"] = False
    data["stacks"]["cuda-13.0"]["driver"]["dnf_module_streams"] = None
    path = tmp_path / "stacks.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_matrix(path).stacks["cuda-13.0"].driver.dnf_module_streams is None


@pytest.mark.parametrize(("profile", "change", "fragment"), [
    ("hgx-h100-8gpu", {"nvswitch_generation": None}, "nvswitch_generation must be set"),
    ("pcie-l40s-4gpu", {"nvswitch_generation": 3}, "nvswitch_generation must be set"),
    ("hgx-h200-8gpu", {"min_driver": "latest"}, "profiles.hgx-h200-8gpu.min_driver"),
])
def test_profiles_refuse_bad_new_fields(tmp_path: Path, profile: str, change: dict[str, Any],
                                        fragment: str) -> None:
    data = raw(PROFILES_FILE)
    data["profiles"][profile].update(change)
    path = tmp_path / "profiles.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as exc:
        load_profiles(path)
    assert fragment in str(exc.value)
