"""The stack matrix: the packaged data is matched, every rule refuses what it should, and the
package pins follow NVIDIA's naming exactly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.errors import InputError
from provisioner.matrix import (
    FAMILIES,
    STACKS_FILE,
    ResolvedStack,
    Stack,
    check_cluster,
    load_matrix,
    packages_for,
    resolve_stack,
    stack_detail,
    stack_rows,
)
from provisioner.matrix.versions import COMPONENTS, cuda_key, version_tuple
from provisioner.profiles import Profile, load_profiles

MATRIX = load_matrix()
PROFILES = load_profiles()
H100 = PROFILES["hgx-h100-8gpu"]
B200 = PROFILES["hgx-b200-8gpu"]
L40S = PROFILES["pcie-l40s-4gpu"]
REQUIRED = {"cuda-11.8": 535, "cuda-12.2": 535, "cuda-12.4": 550, "cuda-12.6": 560, "cuda-12.8": 570,
            "cuda-12.9": 575, "cuda-13.0": 580, "cuda-13.2": 595}
AS_VARS_KEYS = {
    "gpu_stack", "nvidia_driver_branch", "nvidia_driver_version", "nvidia_driver_module_flavor",
    "nvidia_fabricmanager_enabled", "nvidia_fabricmanager_version", "cuda_version",
    "cuda_toolkit_version", "cudnn_version", "nccl_version", "nvidia_container_toolkit_version",
    "dcgm_version", "nvidia_driver_dnf_module_stream", "nvidia_driver_module_source",
    "nvidia_driver_precompiled_kmod", "nvidia_fabricmanager_nvlsm_enabled",
    "nvidia_fabricmanager_nvlsm_packages", "nvidia_fabricmanager_kernel_modules",
}
V100 = PROFILES["sxm2-v100-8gpu"]
H200 = PROFILES["hgx-h200-8gpu"]
A100 = PROFILES["hgx-a100-8gpu"]


def volta_profile() -> Profile:
    """The shipped V100 profile (8x V100-SXM2 32 GB, NVLink 2, no NVSwitch)."""
    return V100


def resolve(hostvars: dict[str, Any], profile: Profile | None = H100,
            host: str = "gpu-01") -> ResolvedStack:
    return resolve_stack(host, hostvars, profile, MATRIX)


def refused(hostvars: dict[str, Any], profile: Profile | None = H100,
            host: str = "gpu-01") -> str:
    with pytest.raises(InputError) as exc:
        resolve(hostvars, profile, host)
    message = str(exc.value)
    assert "\n" not in message
    return message


def supports(stack: Stack, profile: Profile) -> bool:
    arch = MATRIX.architectures[profile.architecture]
    cuda_ok = (arch.max_cuda_version is None
               or cuda_key(stack.cuda_version) <= cuda_key(arch.max_cuda_version))
    model_ok = (profile.min_driver is None
                or version_tuple(stack.driver.version) >= version_tuple(profile.min_driver))
    return stack.driver.branch >= arch.min_driver_branch and cuda_ok and model_ok


# --------------------------------------------------------------------------- the data


def test_matrix_has_the_required_stacks_and_branches() -> None:
    assert {name: s.driver.branch for name, s in MATRIX.stacks.items()} == REQUIRED
    # The default: the newest stack on a long-term support or production branch that claims
    # every OS the product installs (cuda-13.2 is newer but claims ubuntu2404 and rhel9 only).
    every_os = set(MATRIX.repositories.cuda)
    candidates = [s for s in MATRIX.stacks.values() if set(s.os_support) == every_os
                  and MATRIX.driver_branches[s.driver.branch].designation
                  in ("long-term support", "production")]
    newest = max(candidates, key=lambda s: cuda_key(s.cuda_version))
    assert MATRIX.default_stack == newest.name == "cuda-13.0"
    assert max(MATRIX.stacks.values(), key=lambda s: cuda_key(s.cuda_version)).name == "cuda-13.2"
    assert set(MATRIX.stacks["cuda-13.2"].os_support) == {"ubuntu2404", "rhel9"}


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_stack_versions_are_matched(name: str) -> None:
    s = MATRIX.stacks[name]
    assert s.fabricmanager.version == s.driver.version
    assert s.cudnn.cuda_major == int(s.cuda_version.split(".")[0])
    assert s.nccl.version.endswith(f"+cuda{s.cuda_version}")
    assert (s.driver.default_module_flavor == "open") == (
        s.driver.branch >= MATRIX.open_modules_default_from_branch)
    minimum = MATRIX.cuda_minimum_driver[s.cuda_version]
    assert version_tuple(s.driver.version) >= version_tuple(minimum)
    # The container toolkit is never older than the CVE-2025-23266 fix.
    assert version_tuple(s.container_toolkit.version) >= (1, 17, 8)


def test_cuda_minimum_driver_table_facts() -> None:
    table = MATRIX.cuda_minimum_driver
    assert table["11.8"] == "520.61.05"
    assert table["12.4"] == "550.54.14" and table["12.8"] == "570.26"
    assert table["13.0"] == "580.65.06"
    ordered = sorted(table, key=cuda_key)
    assert [version_tuple(table[c]) for c in ordered] == sorted(version_tuple(v) for v in table.values())


def test_architecture_facts() -> None:
    arch = MATRIX.architectures
    assert arch["hopper"].min_driver_branch == 525
    assert arch["blackwell"].min_driver_branch == 570
    assert arch["blackwell"].open_modules and not arch["blackwell"].proprietary_modules
    assert not arch["volta"].open_modules and arch["volta"].max_cuda_version == "12.9"
    assert all(arch[a].open_modules for a in ("turing", "ampere", "ada", "hopper"))


def test_repositories_have_pinned_fingerprints() -> None:
    cuda = MATRIX.repositories.cuda
    # No debian13: NVIDIA's debian13 repository (another key) is not in the matrix.
    assert set(cuda) == {"debian12", "ubuntu2204", "ubuntu2404", "rhel9"}
    assert cuda["debian12"].fingerprint == "EB693B3035CD5710E231E123A4B469963BF863CC"
    assert cuda["rhel9"].fingerprint == "610C7B14E068A878070DA4E99CD0A493D42D0685"
    assert cuda["rhel9"].key_url.endswith("/D42D0685.pub")
    assert cuda["rhel9"].fingerprint.endswith("D42D0685")  # the key's short id
    assert all(r.base_url.endswith(f"/{os_dir}/x86_64/") for os_dir, r in cuda.items())
    assert {r.package_family for r in cuda.values()} == set(FAMILIES)
    assert [o for o, r in cuda.items() if r.driver_module_streams] == ["rhel9"]


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_rhel_stack_names_its_module_streams(name: str) -> None:
    stack = MATRIX.stacks[name]
    assert "rhel9" in stack.os_support
    b = stack.driver.branch
    assert stack.driver.dnf_module_streams == {"open": f"nvidia-driver:{b}-open",
                                               "proprietary": f"nvidia-driver:{b}-dkms"}
    detail = stack_detail(MATRIX, name)
    assert detail["dnf_module_streams"] == stack.driver.dnf_module_streams


def test_resolved_stream_follows_branch_and_flavour() -> None:
    assert resolve({"gpu_stack": "cuda-13.0"}).dnf_module_stream == "nvidia-driver:580-open"
    r = resolve({"gpu_stack": "cuda-12.4", "nvidia_driver_version": "570.124.06",
                 "nvidia_driver_module_flavor": "proprietary"})
    assert r.as_vars()["nvidia_driver_dnf_module_stream"] == "nvidia-driver:570-dkms"


def test_stacks_yml_is_plain_yaml_for_include_vars() -> None:
    text = STACKS_FILE.read_text()
    assert not re.search(r"^[^#]*[&*][A-Za-z_]", text, re.MULTILINE), "no anchors/aliases"
    assert "{{" not in text and "{%" not in text


@pytest.mark.parametrize("stack_name", sorted(REQUIRED))
@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_every_stack_passes_every_rule_on_every_profile_it_supports(
        stack_name: str, profile_name: str) -> None:
    stack, profile = MATRIX.stacks[stack_name], PROFILES[profile_name]
    if not supports(stack, profile):
        message = refused({"gpu_stack": stack_name}, profile)
        arch = MATRIX.architectures[profile.architecture]
        if arch.max_cuda_version and cuda_key(stack.cuda_version) > cuda_key(
                arch.max_cuda_version):
            assert "cuda_version" in message and profile.architecture in message
        elif stack.driver.branch < arch.min_driver_branch:
            assert "nvidia_driver_version" in message and profile.architecture in message
        else:
            assert f"{profile.gpu_model} ({profile.pci_device_ids[0]})" in message
            assert f"min_driver {profile.min_driver}" in message
        return
    r = resolve({"gpu_stack": stack_name}, profile)
    assert (r.stack, r.driver_version, r.overrides) == (stack_name, stack.driver.version, ())
    assert packages_for(r, "apt")


# --------------------------------------------------------------------------- resolution


@pytest.mark.parametrize(("stack_name", "profile_name", "flavor", "fm"), [
    ("cuda-12.2", "hgx-a100-8gpu", "proprietary", True),
    ("cuda-12.4", "hgx-h100-8gpu", "proprietary", True),
    ("cuda-12.6", "hgx-h200-8gpu", "open", True),
    ("cuda-12.9", "hgx-b200-8gpu", "open", True),
    ("cuda-11.8", "sxm2-v100-8gpu", "proprietary", False),
    ("cuda-12.9", "pcie-l40s-4gpu", "open", False),
    ("cuda-13.0", "sim-h100-8gpu", "open", True),
])
def test_resolves_each_stack(stack_name: str, profile_name: str, flavor: str, fm: bool) -> None:
    stack = MATRIX.stacks[stack_name]
    out = resolve({"gpu_stack": stack_name}, PROFILES[profile_name], "node-7").as_vars()
    assert set(out) == AS_VARS_KEYS
    assert out == {
        "gpu_stack": stack_name,
        "nvidia_driver_branch": str(stack.driver.branch),
        "nvidia_driver_version": stack.driver.version,
        "nvidia_driver_module_flavor": flavor,
        "nvidia_fabricmanager_enabled": fm,
        "nvidia_fabricmanager_version": stack.driver.version,
        "cuda_version": stack.cuda_version,
        "cuda_toolkit_version": stack.cuda_toolkit_version,
        "cudnn_version": stack.cudnn.version,
        "nccl_version": stack.nccl.version,
        "nvidia_container_toolkit_version": stack.container_toolkit.version,
        "dcgm_version": stack.dcgm.version,
        "nvidia_driver_dnf_module_stream":
            f"nvidia-driver:{stack.driver.branch}-{'open' if flavor == 'open' else 'dkms'}",
        "nvidia_driver_module_source": "dkms",
        "nvidia_driver_precompiled_kmod": "",
        "nvidia_fabricmanager_nvlsm_enabled": profile_name == "hgx-b200-8gpu",
        "nvidia_fabricmanager_nvlsm_packages": (
            {"apt": ["nvlsm", "libibumad3", "infiniband-diags"],
             "apt_ubuntu": ["nvlsm", "libibumad3", "infiniband-diags"],
             "dnf": ["nvlsm", "libibumad", "infiniband-diags"]}
            if profile_name == "hgx-b200-8gpu" else {}),
        "nvidia_fabricmanager_kernel_modules":
            ["ib_umad"] if profile_name == "hgx-b200-8gpu" else [],
    }


def test_default_stack_when_gpu_stack_unset() -> None:
    for hostvars in ({}, {"gpu_stack": None}, {"gpu_stack": ""}):
        assert resolve(hostvars).stack == MATRIX.default_stack


def test_without_profile_no_fabric_manager() -> None:
    r = resolve({"gpu_stack": "cuda-12.4"}, None)
    assert r.profile is None and not r.fabricmanager_enabled
    assert r.module_flavor == "proprietary"


def test_override_driver_same_branch_moves_fabric_manager_along() -> None:
    # 550.127.05 is no release of stacks.yml: given in full, with its Ubuntu revision [HOLO].
    r = resolve({"gpu_stack": "cuda-12.4", "nvidia_driver_version": "550.127.05-0ubuntu1"})
    assert (r.driver_version, r.driver_branch) == ("550.127.05", 550)
    assert r.fabricmanager_version == "550.127.05"
    assert r.overrides == ("nvidia_driver_version",)


def test_override_driver_to_newer_branch_takes_that_branchs_default_flavor() -> None:
    r = resolve({"gpu_stack": "cuda-12.4", "nvidia_driver_version": "570.124.06"})
    assert (r.driver_branch, r.module_flavor) == (570, "open")


def test_override_flavor() -> None:
    r = resolve({"gpu_stack": "cuda-12.8", "nvidia_driver_module_flavor": "proprietary"})
    assert r.module_flavor == "proprietary"
    assert r.as_vars()["nvidia_driver_module_flavor"] == "proprietary"


def test_override_cuda_with_matching_driver() -> None:
    r = resolve({"gpu_stack": "cuda-12.4", "cuda_version": "12.6",
                 "nvidia_driver_version": "560.35.03", "nccl_version": "2.23.4-1+cuda12.6"})
    assert (r.cuda_version, r.cuda_toolkit_version) == ("12.6", "12.6.2")


def test_override_cuda_full_release_and_yaml_float() -> None:
    assert resolve({"gpu_stack": "cuda-12.4", "cuda_version": "12.4.0"}).cuda_toolkit_version \
        == "12.4.0"
    # An unquoted `cuda_version: 12.4` reaches us as a float.
    assert resolve({"gpu_stack": "cuda-12.8", "cuda_version": 12.4}).cuda_version == "12.4"


def test_override_cudnn_short_and_full() -> None:
    r = resolve({"gpu_stack": "cuda-12.8", "cudnn_version": "9.5.1"})
    assert r.cudnn_version == "9.5.1.17"
    assert resolve({"gpu_stack": "cuda-12.8", "cudnn_version": "9.7.1.26"}).cudnn_version \
        == "9.7.1.26"


def test_override_nccl_and_container_toolkit() -> None:
    r = resolve({"gpu_stack": "cuda-12.8", "nccl_version": "2.26.2-1+cuda12.8",
                 "nvidia_container_toolkit_version": "1.17.7-1"})
    assert (r.nccl_version, r.container_toolkit_version) == ("2.26.2-1+cuda12.8", "1.17.7")
    assert r.overrides == ("nccl_version", "nvidia_container_toolkit_version")


def test_volta_defaults_to_proprietary_on_open_default_stacks() -> None:
    r = resolve({"gpu_stack": "cuda-12.8"}, volta_profile())
    assert r.module_flavor == "proprietary"


# --------------------------------------------------------------------------- one test per rule


def test_rule_driver_too_old_for_cuda_exact_message() -> None:
    message = refused({"gpu_stack": "cuda-12.4", "nvidia_driver_version": "535.54.03-1"})
    assert message == ("host gpu-01: nvidia_driver_version 535.54.03 is too old for "
                       "cuda_version 12.4 (needs >= 550.54.14); pick gpu_stack cuda-12.2 or a "
                       "newer driver")


def test_rule_cuda_override_too_new_for_stack_driver() -> None:
    message = refused({"gpu_stack": "cuda-12.4", "cuda_version": "12.6"}, host="gpu-07")
    assert message.startswith("host gpu-07: cuda_version 12.6 needs a driver >= 560.28.03")
    assert "nvidia_driver_version is 550.54.15" in message and "gpu_stack cuda-12.6" in message


def test_rule_blackwell_needs_r570() -> None:
    message = refused({"gpu_stack": "cuda-12.4"}, B200, host="b200-3")
    assert message.startswith("host b200-3: nvidia_driver_version 550.54.15 (branch R550) does "
                              "not support blackwell GPUs")
    assert "needs branch >= R570" in message and "pick gpu_stack cuda-12.8 or newer" in message


def test_rule_blackwell_open_modules_only() -> None:
    message = refused({"gpu_stack": "cuda-12.8", "nvidia_driver_module_flavor": "proprietary"},
                      B200)
    assert message.startswith("host gpu-01: nvidia_driver_module_flavor proprietary is not "
                              "supported on blackwell GPUs")
    assert message.endswith("set nvidia_driver_module_flavor: open")


def test_rule_no_open_modules_on_volta() -> None:
    message = refused({"gpu_stack": "cuda-12.4", "nvidia_driver_module_flavor": "open"},
                      volta_profile())
    assert message.startswith("host gpu-01: nvidia_driver_module_flavor open is not supported "
                              "on volta GPUs")
    assert "Turing or newer" in message


def test_rule_open_modules_need_r515() -> None:
    message = refused({"gpu_stack": "cuda-12.4", "cuda_version": "12.0.1",
                       "nvidia_driver_version": "510.108.03-1",
                       "nvidia_driver_module_flavor": "open"}, None)
    assert "host gpu-01: nvidia_driver_version 510.108.03 is too old" in message  # CUDA first
    m = MATRIX.model_copy(update={"cuda_minimum_driver": {**MATRIX.cuda_minimum_driver,
                                                          "12.4": "510.47.03"}})
    with pytest.raises(InputError, match=r"^host gpu-01: nvidia_driver_module_flavor: open "
                                         r"kernel modules need driver branch >= R515"):
        resolve_stack("gpu-01", {"gpu_stack": "cuda-12.4", "nvidia_driver_version": "510.108.03-1",
                                 "nvidia_driver_module_flavor": "open"}, None, m)


def test_rule_hopper_needs_r525() -> None:
    # Every CUDA 12 driver is >= R525, so loosen the CUDA table to reach the hopper rule.
    m = MATRIX.model_copy(update={"cuda_minimum_driver": {**MATRIX.cuda_minimum_driver,
                                                          "12.2": "520.61.05"}})
    with pytest.raises(InputError) as exc:
        resolve_stack("gpu-01", {"gpu_stack": "cuda-12.2", "nvidia_driver_version": "520.61.05-1"},
                      H100, m)
    assert str(exc.value).startswith("host gpu-01: nvidia_driver_version 520.61.05 (branch "
                                     "R520) does not support hopper GPUs")


def test_rule_cuda13_cannot_target_volta() -> None:
    message = refused({"gpu_stack": "cuda-13.0"}, volta_profile())
    assert message.startswith("host gpu-01: cuda_version 13.0 cannot target volta GPUs")
    assert "pick gpu_stack cuda-12.9 or older" in message


def test_rule_cudnn_must_be_built_for_the_cuda_major() -> None:
    message = refused({"gpu_stack": "cuda-13.0", "cudnn_version": "9.1.0.70"})
    assert message.startswith("host gpu-01: cudnn_version: cuDNN 9.1.0.70 has no build for "
                              "CUDA 13")
    assert "pick a cudnn_version >= 9.12.0" in message


def test_rule_cudnn_follows_a_cuda_override() -> None:
    message = refused({"gpu_stack": "cuda-12.8", "cuda_version": "13.0",
                       "nvidia_driver_version": "580.95.05",
                       "nccl_version": "2.28.3-1+cuda13.0"})
    assert message.startswith("host gpu-01: cuda_version: cuDNN 9.8.0.87 has no build for "
                              "CUDA 13")


def test_rule_nccl_not_newer_than_the_driver_supports() -> None:
    message = refused({"gpu_stack": "cuda-12.4", "nccl_version": "2.23.4-1+cuda12.6"})
    assert message.startswith("host gpu-01: nccl_version: NCCL 2.23.4-1+cuda12.6 is built for "
                              "CUDA 12.6, newer than nvidia_driver_version 550.54.15 supports "
                              "(up to CUDA 12.4)")


def test_rule_fabric_manager_equals_driver_on_nvswitch() -> None:
    message = refused({"gpu_stack": "cuda-12.4", "nvidia_fabricmanager_version": "550.54.14"})
    assert message == ("host gpu-01: nvidia_fabricmanager_version 550.54.14 does not match "
                       "nvidia_driver_version 550.54.15; NVSwitch systems (gpu_profile "
                       "hgx-h100-8gpu) need fabric manager == driver: remove "
                       "nvidia_fabricmanager_version or set it to 550.54.15")
    # Without NVSwitch there is no fabric manager to mismatch.
    assert resolve({"gpu_stack": "cuda-12.4", "nvidia_fabricmanager_version": "550.54.14"},
                   L40S).fabricmanager_enabled is False


def test_rule_unknown_stack_lists_choices() -> None:
    message = refused({"gpu_stack": "cuda-11.7"})
    assert message == ("host gpu-01: gpu_stack cuda-11.7 is not a known stack; choose one of "
                       "cuda-11.8, cuda-12.2, cuda-12.4, cuda-12.6, cuda-12.8, cuda-12.9, "
                       "cuda-13.0, cuda-13.2")


def test_rule_unknown_flavor_lists_choices() -> None:
    message = refused({"nvidia_driver_module_flavor": "closed"})
    assert message == ("host gpu-01: nvidia_driver_module_flavor 'closed' is not a kernel "
                       "module flavour; choose one of open, proprietary")


@pytest.mark.parametrize(("var", "value"), [
    ("nvidia_driver_version", "latest"),
    ("nvidia_driver_version", "55"),
    ("cuda_version", "twelve"),
    ("cudnn_version", "8.9.7.29"),
    ("nccl_version", "2.21.5"),
    ("nvidia_container_toolkit_version", "v1.17"),
])
def test_rule_malformed_override(var: str, value: str) -> None:
    message = refused({var: value}, host="gpu-09")
    assert message.startswith(f"host gpu-09: {var} {value!r} is not a version like")


def test_rule_unknown_cuda_version_lists_table() -> None:
    message = refused({"cuda_version": "11.7"})
    assert message.startswith("host gpu-01: cuda_version 11.7 is not in the CUDA/driver table")
    assert "11.8, 12.0, 12.1" in message


def test_rule_cuda_without_toolkit_release_needs_full_version() -> None:
    message = refused({"gpu_stack": "cuda-13.0", "cuda_version": "12.5"})
    assert "cuda_version 12.5 has no toolkit release" in message and "12.5.1" in message


def test_rule_cudnn_short_version_unknown_build() -> None:
    message = refused({"cudnn_version": "9.3.0"})
    assert message.startswith("host gpu-01: cudnn_version 9.3.0 needs its build number")


def test_rule_override_of_wrong_type() -> None:
    message = refused({"nccl_version": ["2.21.5-1+cuda12.4"]})
    assert message.startswith("host gpu-01: nccl_version must be a version string, got list")
    assert "nvidia_driver_version must be" in refused({"nvidia_driver_version": True})


# --------------------------------------------------------------------------- cluster rules


def test_check_cluster_names_two_hosts_with_different_nccl() -> None:
    a = resolve({"gpu_stack": "cuda-12.8"}, host="gpu-01")
    b = resolve({"gpu_stack": "cuda-12.9"}, host="gpu-02")
    c = resolve({"gpu_stack": "cuda-12.8"}, host="gpu-03")
    with pytest.raises(InputError) as exc:
        check_cluster({"gpu-03": c, "gpu-02": b, "gpu-01": a})
    assert str(exc.value).startswith("hosts gpu-01 and gpu-02 resolve to different "
                                     "nccl_version (2.25.1-1+cuda12.8 vs 2.27.3-1+cuda12.9)")


def test_check_cluster_accepts_matching_and_empty() -> None:
    check_cluster({})
    check_cluster({h: resolve({"gpu_stack": "cuda-12.6"}, host=h) for h in ("a", "b", "c")})


# --------------------------------------------------------------------------- packages


def test_packages_for_apt_default_stack_h100() -> None:
    pins = packages_for(resolve({}), "apt")
    assert [p.component for p in pins][:1] == ["driver"]
    assert {p.component for p in pins} == set(COMPONENTS)
    by_name = {p.name: p.version for p in pins}
    assert by_name["nvidia-kernel-open-dkms"] == "580.159.04-1"
    assert by_name["cuda-drivers-580"] == "580.159.04-1"
    assert by_name["nvidia-fabricmanager"] == "580.159.04-1"  # R580 drops the branch suffix
    assert by_name["cuda-toolkit-13-0"] == "13.0.2-1"
    assert by_name["libcudnn9-cuda-13"] == "9.13.0.50-1"
    assert by_name["libnccl2"] == "2.28.9-1+cuda13.0"
    assert by_name["nvidia-container-toolkit"] == "1.18.2-1"
    assert by_name["datacenter-gpu-manager-4-cuda13"] == "1:4.5.2-1"


def test_packages_for_brief_example_stack() -> None:
    pins = {p.name: p.version for p in packages_for(resolve({"gpu_stack": "cuda-12.4"}))}
    assert pins["cuda-toolkit-12-4"] == "12.4.1-1"
    assert pins["libcudnn9-cuda-12"] == "9.1.0.70-1"
    assert pins["libnccl2"] == pins["libnccl-dev"] == "2.21.5-1+cuda12.4"
    assert pins["nvidia-fabricmanager-550"] == "550.54.15-1"
    assert pins["cuda-drivers-550"] == "550.54.15-1" and "nvidia-kernel-dkms" in pins
    assert pins["datacenter-gpu-manager"] == "1:3.3.6"


def test_packages_for_skips_fabric_manager_without_nvswitch() -> None:
    pins = packages_for(resolve({"gpu_stack": "cuda-12.9"}, L40S))
    assert "fabricmanager" not in {p.component for p in pins}


def test_packages_for_follows_overrides() -> None:
    r = resolve({"gpu_stack": "cuda-12.4", "nvidia_driver_version": "550.127.05-0ubuntu1",
                 "nvidia_container_toolkit_version": "1.17.7"})
    apt = {p.name: p.version for p in packages_for(r, "apt")}
    assert apt["cuda-drivers-550"] == apt["nvidia-fabricmanager-550"] == "550.127.05-1"
    assert apt["libnvidia-container1"] == "1.17.7-1"
    dnf = {p.name: p.version for p in packages_for(r, "dnf")}
    assert dnf["nvidia-driver-cuda"] == "3:550.127.05-1.el9"
    assert dnf["nvidia-fabric-manager"] == "550.127.05-1"
    ubuntu = {p.name: p.version for p in packages_for(r, "apt_ubuntu")}
    assert ubuntu["nvidia-driver-550"] == ubuntu["cuda-drivers-550"] == "550.127.05-0ubuntu1"
    assert ubuntu["libnccl2"] == "2.21.5-1+cuda12.4"  # non-driver names shared with Debian


def test_packages_for_cuda_major_change_renames_cudnn_and_dcgm() -> None:
    r = resolve({"gpu_stack": "cuda-12.8", "cuda_version": "13.0.2",
                 "nvidia_driver_version": "580.95.05", "cudnn_version": "9.13.0.50",
                 "nccl_version": "2.28.3-1+cuda13.0"})
    names = {p.name for p in packages_for(r)}
    assert {"libcudnn9-cuda-13", "datacenter-gpu-manager-4-cuda13", "cuda-toolkit-13-0",
            "nvidia-fabricmanager", "libnvidia-nscq"} <= names
    assert not any(n.endswith("cuda-12") or n.endswith("cuda12") for n in names)


def test_packages_for_unknown_family() -> None:
    with pytest.raises(InputError, match="package family 'zypper' is unknown; choose one of "
                                         "apt, apt_ubuntu, dnf"):
        packages_for(resolve({}), "zypper")


def with_exceptions(tmp_path: Path, stack: str, *exceptions: dict[str, str]) -> Any:
    data = raw_matrix()
    data["stacks"][stack]["package_exceptions"] = list(exceptions)
    return load_matrix(write(tmp_path, data))


UBUNTU_570_OPEN = {"family": "apt_ubuntu", "component": "driver",
                   "name": "nvidia-driver-570-open", "version": "570.124.06-0ubuntu2"}


def test_package_exception_replaces_the_conventional_pin(tmp_path: Path) -> None:
    matrix = with_exceptions(tmp_path, "cuda-12.8", UBUNTU_570_OPEN)

    def pins(family: str, flavor: str, **extra: str) -> dict[str, str]:
        r = resolve_stack("gpu-01", {"gpu_stack": "cuda-12.8",
                                     "nvidia_driver_module_flavor": flavor, **extra}, None, matrix)
        return {p.name: p.version for p in packages_for(r, family)}

    assert pins("apt_ubuntu", "open")["nvidia-driver-570-open"] == "570.124.06-0ubuntu2"
    assert pins("apt_ubuntu", "open")["cuda-drivers-570"] == "570.124.06-0ubuntu1"
    assert pins("apt_ubuntu", "proprietary")["nvidia-driver-570"] == "570.124.06-0ubuntu1"
    assert "nvidia-driver-570-open" not in pins("apt", "open")
    # An exception is a fact about the stack's own version: a driver override drops it.
    assert pins("apt_ubuntu", "open", nvidia_driver_version="570.133.20-0ubuntu1")[
        "nvidia-driver-570-open"] == "570.133.20-0ubuntu1"
    # Other stacks are untouched.
    r = resolve_stack("gpu-01", {"gpu_stack": "cuda-12.9"}, None, matrix)
    assert {p.name: p.version for p in packages_for(r, "apt_ubuntu")}[
        "nvidia-driver-575-open"] == "575.57.08-0ubuntu1"
    shown = stack_detail(matrix, "cuda-12.8")["packages"]["apt_ubuntu"]["driver"]["open"]
    assert shown[0] == "nvidia-driver-570-open 570.124.06-0ubuntu2"


def test_package_exception_can_rename(tmp_path: Path) -> None:
    matrix = with_exceptions(tmp_path, "cuda-12.9", {
        "family": "dnf", "component": "fabricmanager", "replaces": "nvidia-fabric-manager",
        "name": "nvidia-fabricmanager-575", "version": "575.57.08-1"})
    r = resolve_stack("gpu-01", {"gpu_stack": "cuda-12.9"}, H100, matrix)
    fabric = [(p.name, p.version) for p in packages_for(r, "dnf") if p.component == "fabricmanager"]
    assert fabric == [("nvidia-fabricmanager-575", "575.57.08-1"),
                      ("libnvidia-nscq-575", "575.57.08-1")]


@pytest.mark.parametrize(("exception", "message"), [
    ({**UBUNTU_570_OPEN, "name": "nvidia-driver-57-open"},
     "stack cuda-12.8: package_exceptions[0]: apt_ubuntu driver has no package "
     "nvidia-driver-57-open by convention (it has cuda-drivers-570, nvidia-driver-570, "
     "nvidia-driver-570-open)"),
    ({**UBUNTU_570_OPEN, "version": "570.124.06-0ubuntu1"},
     "stack cuda-12.8: package_exceptions[0]: nvidia-driver-570-open 570.124.06-0ubuntu1 is "
     "what the convention gives already; remove the exception"),
    ({**UBUNTU_570_OPEN, "component": "nccl"}, "apt_ubuntu nccl has no package"),
    ({**UBUNTU_570_OPEN, "family": "zypper"}, "package_exceptions.0.family"),
])
def test_load_refuses_a_package_exception_that_cannot_apply(
        tmp_path: Path, exception: dict[str, str], message: str) -> None:
    with pytest.raises(InputError) as exc:
        with_exceptions(tmp_path, "cuda-12.8", exception)
    assert str(exc.value).startswith(str(tmp_path / "stacks.yml"))
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


# --------------------------------------------------------------------------- CLI helpers


def test_stack_rows() -> None:
    rows = stack_rows(MATRIX)
    assert [r["stack"] for r in rows] == sorted(REQUIRED, key=lambda n: cuda_key(n[5:]))
    assert [r["stack"] for r in rows if r["default"]] == ["cuda-13.0"]
    assert rows[2]["driver"] == "R550 550.54.15"
    assert rows[2]["module_flavors"] == "open, proprietary (default)"
    assert (rows[2]["branch"], rows[2]["end_of_life"]) == ("production", "2025-08-31")
    assert all(isinstance(v, str) for row in rows for v in row.values())


def test_stack_detail() -> None:
    d = stack_detail(MATRIX, "cuda-12.8")
    assert d["cuda_minimum_driver"] == "570.26" and d["driver_version"] == "570.124.06"
    assert "blackwell" in d["architectures"]
    assert "nvidia-driver-570-open 570.124.06-0ubuntu1" in d["packages"]["apt_ubuntu"]["driver"][
        "open"]
    assert "volta" not in stack_detail(MATRIX, "cuda-13.0")["architectures"]
    with pytest.raises(InputError, match=r"stack cuda-9\.0 is not known; choose one of cuda-11\.8, cuda-12\.2"):
        stack_detail(MATRIX, "cuda-9.0")


# --------------------------------------------------------------------------- loading errors


def raw_matrix() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(STACKS_FILE.read_text())
    return data


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "stacks.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_load_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "stacks.yml"
    path.write_text("stacks:\n  cuda-12.4: {driver: [\n")
    with pytest.raises(InputError, match=rf"^{re.escape(str(path))}: not valid YAML at line"):
        load_matrix(path)


def test_load_missing_key_names_file_and_key(tmp_path: Path) -> None:
    data = raw_matrix()
    del data["stacks"]["cuda-12.6"]["driver"]["version"]
    path = write(tmp_path, data)
    with pytest.raises(InputError) as exc:
        load_matrix(path)
    assert str(exc.value).startswith(f"{path}: stacks.cuda-12.6.driver.version: Field required")


def test_load_missing_default_stack(tmp_path: Path) -> None:
    data = raw_matrix()
    del data["default_stack"]
    with pytest.raises(InputError, match=r"stacks\.yml: default_stack: Field required"):
        load_matrix(write(tmp_path, data))


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.update(default_stack="cuda-99.9"), "default_stack cuda-99.9 is not a stack"),
    (lambda d: d["stacks"]["cuda-12.4"]["driver"].update(version="535.104.05"),
     "version 535.104.05 is not of branch 550"),
    (lambda d: d["stacks"]["cuda-12.4"].update(cuda_toolkit_version="12.6.2"),
     "is not a release of CUDA 12.4"),
    (lambda d: d["cuda_minimum_driver"].pop("12.9"), "cuda_version 12.9 has no cuda_minimum"),
    (lambda d: d["stacks"]["cuda-12.4"]["nccl"].update(version="2.21.5"), "stacks.cuda-12.4.nccl"),
    (lambda d: d["stacks"]["cuda-12.4"].update(os_support=["sles15"]), "os_support sles15"),
    (lambda d: d["stacks"]["cuda-12.4"].update(unknown_key=1), "stacks.cuda-12.4.unknown_key"),
    (lambda d: d["repositories"]["cuda"]["rhel9"].update(fingerprint="D42D0685"), "fingerprint"),
])
def test_load_refuses_inconsistent_matrix(tmp_path: Path, mutate: Any, message: str) -> None:
    data = raw_matrix()
    mutate(data)
    with pytest.raises(InputError) as exc:
        load_matrix(write(tmp_path, data))
    assert str(exc.value).startswith(str(tmp_path / "stacks.yml"))
    assert message in str(exc.value)


def test_load_default_path_is_the_packaged_file() -> None:
    assert load_matrix().model_dump() == load_matrix(STACKS_FILE).model_dump()
