"""Precompiled kernel modules (NVIDIA's RHEL 8/9 precompiled streams): the plan's choice and
refusals, the per-kernel package names, and the driver role's rules over them."""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.errors import InputError
from provisioner.matrix import load_matrix, packages_for, resolve_stack
from tests.unit.collection_module import load_plugin

MATRIX = load_matrix()
precompiled = load_plugin("module_utils/gpucluster", "precompiled")
kmods_filter = load_plugin("filter", "nvidia_driver_precompiled_kmods")


def _resolve(**hostvars: Any):
    return resolve_stack("gpu-01", {"gpu_stack": MATRIX.default_stack, **hostvars}, None, MATRIX)


def test_precompiled_gives_the_branch_stream_and_the_kmod_name_and_no_dkms_package() -> None:
    r = _resolve(nvidia_driver_module_flavor="proprietary",
                 nvidia_driver_module_source="precompiled")
    v = r.as_vars()
    assert v["nvidia_driver_module_source"] == "precompiled"
    assert v["nvidia_driver_dnf_module_stream"] == f"nvidia-driver:{r.driver_branch}"
    assert v["nvidia_driver_precompiled_kmod"] == f"kmod-nvidia-{r.driver_version}-@K@"
    driver = [(p.name, p.version) for p in packages_for(r, "dnf") if p.component == "driver"]
    assert driver == [("nvidia-driver-cuda", f"3:{r.driver_version}-1.el9")]


def test_dkms_is_the_default_and_keeps_its_stream_and_package() -> None:
    r = _resolve(nvidia_driver_module_flavor="proprietary")
    v = r.as_vars()
    assert (v["nvidia_driver_module_source"], v["nvidia_driver_precompiled_kmod"]) == ("dkms", "")
    assert v["nvidia_driver_dnf_module_stream"] == f"nvidia-driver:{r.driver_branch}-dkms"
    names = [p.name for p in packages_for(r, "dnf") if p.component == "driver"]
    assert names == ["kmod-nvidia-latest-dkms", "nvidia-driver-cuda"]


def test_apt_pins_do_not_depend_on_the_module_source() -> None:
    dkms = _resolve(nvidia_driver_module_flavor="proprietary")
    pre = _resolve(nvidia_driver_module_flavor="proprietary",
                   nvidia_driver_module_source="precompiled")
    assert packages_for(dkms, "apt") == packages_for(pre, "apt")


def test_precompiled_open_modules_are_refused_naming_what_to_do() -> None:
    with pytest.raises(InputError, match=r"host gpu-01: nvidia_driver_module_source precompiled "
                                         r"needs the proprietary kernel modules .*no open ones"):
        _resolve(nvidia_driver_module_flavor="open", nvidia_driver_module_source="precompiled")


def test_an_unknown_module_source_is_refused() -> None:
    with pytest.raises(InputError, match=r"nvidia_driver_module_source 'signed' is not a module "
                                         r"source; choose one of dkms, precompiled"):
        _resolve(nvidia_driver_module_source="signed")


@pytest.mark.parametrize(("release", "part"), [
    ("4.18.0-147.5.1.el8_1.x86_64", "4.18.0-147.5.1"),   # NVIDIA's own example
    ("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-427.13.1"),
    ("5.14.0-70.13.1.el9_0.aarch64", "5.14.0-70.13.1"),
    ("5.14.0-503.11.1.el9.x86_64", "5.14.0-503.11.1"),
    ("6.1.0-27-amd64", "6.1.0-27-amd64"),               # no dist or arch tag: as it is
])
def test_the_kernel_part_of_the_package_name(release: str, part: str) -> None:
    assert precompiled.kernel_part(release) == part


def test_names_and_states_per_kernel() -> None:
    names = kmods_filter.nvidia_driver_precompiled_kmods(
        "kmod-nvidia-580.105.08-@K@", ["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64"])
    assert names == {"5.14.0-427.13.1.el9_4.x86_64": "kmod-nvidia-580.105.08-5.14.0-427.13.1",
                     "5.14.0-503.11.1.el9_5.x86_64": "kmod-nvidia-580.105.08-5.14.0-503.11.1"}
    # rpm -q prints the installed names and a sentence for the others.
    lines = ["kmod-nvidia-580.105.08-5.14.0-427.13.1",
             "package kmod-nvidia-580.105.08-5.14.0-503.11.1 is not installed"]
    assert kmods_filter.nvidia_driver_precompiled_states(names, lines) == {
        "5.14.0-427.13.1.el9_4.x86_64": "installed", "5.14.0-503.11.1.el9_5.x86_64": "missing"}
    assert kmods_filter.nvidia_driver_precompiled_query(names) == {
        "precompiled": ["rpm", "-q", "--qf", "%{NAME}\n", *names.values()]}


def test_dkms_gives_no_names_no_query_and_is_what_dkms_checks() -> None:
    assert kmods_filter.nvidia_driver_precompiled_kmods("", ["6.1.0-27-amd64"]) == {}
    assert kmods_filter.nvidia_driver_precompiled_query({}) == {}
    wanted = kmods_filter.nvidia_driver_dkms_wanted
    assert [wanted("dkms", True), wanted("dkms", "false"), wanted("precompiled", True)] == [
        True, False, False]


def test_the_judge_says_installed_package_for_a_precompiled_node() -> None:
    from provisioner.judge import _driver_kernels
    drv = {"module_source": "precompiled", "kernels_checked": True,
           "kernels": {"5.14.0-427.13.1.el9_4.x86_64": "missing"},
           "kernels_required": ["5.14.0-427.13.1.el9_4.x86_64"]}
    check = _driver_kernels("gpu-01", drv, "580.105.08", True)
    assert check is not None and check.status == "fail"
    assert check.expected == "580.105.08 installed for the running kernel and every newer one"
    assert "not installed for kernel 5.14.0-427.13.1.el9_4.x86_64" in check.detail
    drv["kernels"] = {"5.14.0-427.13.1.el9_4.x86_64": "installed"}
    passed = _driver_kernels("gpu-01", drv, "580.105.08", True)
    assert passed is not None and passed.status == "pass"
    assert passed.detail == ("the driver's precompiled package is installed for all 1 kernel(s) "
                             "a reboot may bring up")


def test_precompiled_on_an_rdma_fabric_is_refused_it_would_have_no_gpudirect_path() -> None:
    from provisioner.profiles import load_profiles
    profiles = load_profiles()
    hostvars = {"gpu_stack": MATRIX.default_stack, "nvidia_driver_module_flavor": "proprietary",
                "nvidia_driver_module_source": "precompiled"}
    with pytest.raises(InputError, match=r"profile sim-h100-8gpu's infiniband fabric leaves no "
                                         r"GPUDirect RDMA path"):
        resolve_stack("gpu-01", hostvars, profiles["sim-h100-8gpu"], MATRIX)
    ethernet = resolve_stack("gpu-01", hostvars, profiles["pcie-h100nvl-1gpu"], MATRIX)
    assert ethernet.module_source == "precompiled"
