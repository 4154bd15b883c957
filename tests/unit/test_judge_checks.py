"""Every field of the stack checks the judge writes (phase, measured, expected, detail), for
each way a check can end: pass, fail, warn, skip, not measured, absent. The report, the JUnit
file and the console show these fields, so a check that names the wrong value or says the wrong
thing is a defect even when its status is right (a mutation run found such changes surviving).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import plan as plan_mod
from provisioner.judge import Check, stack_checks, upstream
from tests.unit.test_judge_and_report import measured, role_reports

DRIVER = "580.159.04"
KERNELS_WANT = f"{DRIVER} built for the running kernel and every newer one"


def build(tmp_path: Path, hosts: dict[str, dict[str, str]],
          login: bool = False) -> plan_mod.ClusterPlan:
    children: dict[str, Any] = {"gpu_nodes": {"hosts": hosts}}
    if login:
        children["cpu_nodes"] = {"hosts": {"aaa-login": {}}}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": children}}))
    return plan_mod.build(inv)


@pytest.fixture
def two(tmp_path: Path) -> plan_mod.ClusterPlan:
    return build(tmp_path, {"gpu-a": {"gpu_profile": "hgx-h100-8gpu"},
                            "gpu-b": {"gpu_profile": "hgx-h100-8gpu"}})


def judge(plan: plan_mod.ClusterPlan, reports: dict[str, Any],
          **kwargs: Any) -> dict[tuple[str, str], Check]:
    checks = stack_checks(plan, reports, **kwargs)
    assert {c.phase for c in checks} == {"stack"}
    return {(c.host, c.name): c for c in checks}


def fields(check: Check) -> tuple[Any, ...]:
    return (check.status, check.measured, check.expected, check.detail)


def test_every_check_of_a_healthy_node_says_what_it_compared(
        two: plan_mod.ClusterPlan) -> None:
    checks = judge(two, role_reports())
    assert fields(checks[("gpu-a", "driver_loaded")]) == (
        "pass", DRIVER, DRIVER, "loaded kernel module is the planned driver")
    assert fields(checks[("gpu-a", "driver")]) == (
        "pass", DRIVER, DRIVER, f"nvidia-smi says {DRIVER}, as planned")
    assert fields(checks[("gpu-a", "driver_kernels")]) == (
        "pass", "6.1.0-18-amd64: installed, 6.1.0-20-amd64: installed", KERNELS_WANT,
        "dkms has the driver's module for all 2 installed kernel(s)")
    assert fields(checks[("gpu-a", "cdi_devices")]) == (
        "pass", 8, 8, "CDI spec lists every GPU")
    assert fields(checks[("gpu-b", "nccl_consistent")]) == (
        "pass", "2.28.9", "2.28.9", "same NCCL on every GPU node")
    assert ("gpu-a", "nccl_library") not in checks
    assert ("gpu-a", "kernel_held") not in checks  # nvidia_driver_hold_kernel is off


@pytest.mark.parametrize(("completed", "status", "detail"), [
    (True, "fail", "the nvidia_driver role published no measurement of the loaded kernel "
                   "module (was its verify step skipped?)"),
    (False, "skip", "not measured: the stack phase stopped before the nvidia_driver role "
                    "verified this host (see the phase failures)"),
])
def test_a_missing_driver_section_fails_after_the_phase_and_skips_before(
        two: plan_mod.ClusterPlan, completed: bool, status: str, detail: str) -> None:
    reports = role_reports()
    del reports["gpu-b"]["nvidia_driver"]
    checks = judge(two, reports, completed=completed)
    assert fields(checks[("gpu-b", "driver_loaded")]) == (status, None, DRIVER, detail)
    kernels_detail = (detail.replace("the loaded kernel module", "dkms status") if completed
                      else detail)
    assert fields(checks[("gpu-b", "driver_kernels")]) == (
        status, None, KERNELS_WANT, kernels_detail)
    # Every other check of the host is still there, each saying what it could not measure.
    cudnn = checks[("gpu-b", "cudnn")]
    assert (cudnn.status, cudnn.measured, cudnn.expected) == ("pass", "9.13.0", "9.13.0")
    assert checks[("gpu-a", "driver_loaded")].status == "pass"


def test_a_driver_waiting_for_a_reboot_fails_driver_loaded_and_skips_nvidia_smi(
        two: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    reports["gpu-b"]["nvidia_driver"].update(loaded="575.57.08", reboot_required=True)
    reports["gpu-a"]["nvidia_driver"].update(loaded="", reboot_required="True")
    checks = judge(two, reports)
    reboot = ("installed driver is not loaded: reboot the node (rerun `provisioner up "
              "--reboot` to let the provisioner do it)")
    assert fields(checks[("gpu-b", "driver_loaded")]) == ("fail", "575.57.08", DRIVER, reboot)
    assert fields(checks[("gpu-a", "driver_loaded")]) == ("fail", "none", DRIVER, reboot)
    assert fields(checks[("gpu-b", "driver")]) == (
        "skip", None, DRIVER, "not measured: nvidia-smi cannot talk to a driver that is "
                              "installed but not loaded (see driver_loaded)")
    # The checks after the skipped one are all there.
    assert {name for host, name in checks if host == "gpu-b"} >= {
        "fabricmanager", "nvcc_release", "cuda_toolkit", "cudnn", "nccl", "container_toolkit",
        "dcgm"}


@pytest.mark.parametrize(("completed", "status", "detail"), [
    (True, "fail", "the cudnn role published no measurement of the cuDNN version header (was "
                   "its verify step skipped?)"),
    (False, "skip", "not measured: the stack phase stopped before the cudnn role verified this "
                    "host (see the phase failures)"),
])
def test_a_missing_measurement_names_its_role_and_source(
        two: plan_mod.ClusterPlan, completed: bool, status: str, detail: str) -> None:
    reports = role_reports()
    del reports["gpu-b"]["cudnn"]["version"]
    checks = judge(two, reports, completed=completed)
    assert fields(checks[("gpu-b", "cudnn")]) == (status, None, "9.13.0", detail)


def test_an_unreadable_loaded_module_fails_and_says_so(two: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    reports["gpu-b"]["nvidia_driver"]["loaded"] = ""
    reports["gpu-a"]["nvidia_driver"]["loaded"] = "575.57.08"
    checks = judge(two, reports)
    assert fields(checks[("gpu-b", "driver_loaded")]) == (
        "fail", None, DRIVER, f"loaded kernel module is unreadable, the plan says {DRIVER}")
    assert fields(checks[("gpu-a", "driver_loaded")]) == (
        "fail", "575.57.08", DRIVER, f"loaded kernel module is 575.57.08, the plan says {DRIVER}")
    assert fields(checks[("gpu-a", "driver")]) == (
        "pass", DRIVER, DRIVER, f"nvidia-smi says {DRIVER}, as planned")


def test_a_mismatch_names_both_values_and_the_tool(two: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    reports["gpu-b"]["nvidia_driver"]["version"] = "575.57.08"
    assert fields(judge(two, reports)[("gpu-b", "driver")]) == (
        "fail", "575.57.08", DRIVER, f"nvidia-smi says 575.57.08, the plan says {DRIVER}")


def test_kernels_older_newer_unchecked_and_unlisted(two: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    drv_a, drv_b = reports["gpu-a"]["nvidia_driver"], reports["gpu-b"]["nvidia_driver"]
    # gpu-a: an older kernel (not required) without the module is a warning.
    drv_a.update(kernels={"5.10.0-1-amd64": "missing", "6.1.0-18-amd64": "installed"},
                 kernels_required=["6.1.0-18-amd64"])
    # gpu-b: no list of required kernels: every kernel must have the module.
    drv_b.update(kernels={"5.10.0-1-amd64": "built", "6.1.0-18-amd64": "installed",
                          "6.1.0-9-amd64": "missing"}, kernels_required=[])
    checks = judge(two, reports)
    assert fields(checks[("gpu-a", "driver_kernels")]) == (
        "warn", "5.10.0-1-amd64: missing, 6.1.0-18-amd64: installed", KERNELS_WANT,
        "older kernel 5.10.0-1-amd64 has no driver module: booting it by hand leaves the node "
        "without a GPU driver")
    assert fields(checks[("gpu-b", "driver_kernels")]) == (
        "fail", "5.10.0-1-amd64: built, 6.1.0-18-amd64: installed, 6.1.0-9-amd64: missing",
        KERNELS_WANT, "the driver's module is not built for kernel 5.10.0-1-amd64, "
                      "6.1.0-9-amd64: a reboot into it leaves the node without a GPU driver")
    # An older kernel that has the module is no warning.
    drv_a.update(kernels={"5.10.0-1-amd64": "installed", "6.1.0-18-amd64": "installed"})
    assert judge(two, reports)[("gpu-a", "driver_kernels")].status == "pass"
    drv_a.update(kernels={"5.10.0-1-amd64": "missing", "5.4.0-1-amd64": "built",
                          "6.1.0-18-amd64": "installed"})
    assert judge(two, reports)[("gpu-a", "driver_kernels")].detail.startswith(
        "older kernel 5.10.0-1-amd64, 5.4.0-1-amd64 has no driver module")
    drv_a.update(kernels={"5.10.0-1-amd64": "missing", "6.1.0-18-amd64": "installed"})
    drv_a.update(kernels_checked=False)
    drv_b.update(kernels={})
    checks = judge(two, reports)
    assert fields(checks[("gpu-a", "driver_kernels")]) == (
        "skip", None, KERNELS_WANT, "not checked: nvidia_driver_dkms_check is off")
    assert fields(checks[("gpu-b", "driver_kernels")]) == (
        "fail", None, KERNELS_WANT, "the nvidia_driver role published no measurement of dkms "
                                    "status (was its verify step skipped?)")


def test_kernel_hold_held_partly_held_and_nothing_to_hold(two: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    wanted = ["linux-image-6.1.0-18-amd64", "linux-image-amd64"]
    reports["gpu-a"]["nvidia_driver"].update(kernel_hold=True, kernel_hold_wanted=wanted,
                                             kernel_held=wanted)
    reports["gpu-b"]["nvidia_driver"].update(
        kernel_hold="true", kernel_hold_wanted=[*wanted, "linux-headers-amd64"],
        kernel_held=["linux-image-amd64"])
    checks = judge(two, reports)
    planned = "held: " + ", ".join(wanted)
    assert fields(checks[("gpu-a", "kernel_held")]) == (
        "pass", ", ".join(wanted), planned, "the kernel is held (2 package(s))")
    assert fields(checks[("gpu-b", "kernel_held")]) == (
        "fail", "linux-image-amd64", planned + ", linux-headers-amd64",
        "linux-image-6.1.0-18-amd64, linux-headers-amd64 not held: an upgrade can bring in "
        "another kernel")
    reports["gpu-a"]["nvidia_driver"].update(kernel_held=[])
    reports["gpu-b"]["nvidia_driver"].update(kernel_hold_wanted=[])
    checks = judge(two, reports)
    assert fields(checks[("gpu-a", "kernel_held")])[:2] == ("fail", "none held")
    assert fields(checks[("gpu-b", "kernel_held")]) == (
        "fail", "no kernel package found", "held: the kernel's packages",
        "nvidia_driver_hold_kernel is on, but the role found no installed kernel package to "
        "hold")


def test_nccl_library_against_its_header_and_the_cluster(two: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    reports["gpu-b"]["nccl"].update(version="2.28.9", library="2.27.3")
    checks = judge(two, reports)
    assert fields(checks[("gpu-b", "nccl_library")]) == (
        "fail", "2.27.3", "2.28.9", "libnccl.so is 2.27.3 but nccl.h says 2.28.9: the library "
                                    "and its headers come from different packages")
    # The library is what programs load: the cluster-wide check compares libraries.
    assert fields(checks[("gpu-b", "nccl_consistent")]) == (
        "fail", "2.27.3", "one version", "NCCL differs across the cluster (2.27.3, 2.28.9): "
                                         "collectives between these nodes can hang or crash")
    # Without a readable library, the header stands for it; a header alone is no mismatch.
    reports["gpu-b"]["nccl"].update(version="2.27.3", library="")
    reports["gpu-a"]["nccl"].update(version="", library="2.28.9")
    checks = judge(two, reports)
    assert ("gpu-b", "nccl_library") not in checks and ("gpu-a", "nccl_library") not in checks
    assert checks[("gpu-b", "nccl_consistent")].measured == "2.27.3"
    assert checks[("gpu-a", "nccl_consistent")].measured == "2.28.9"


def test_a_cdi_spec_without_every_gpu_fails(two: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    reports["gpu-b"]["nvidia_container_toolkit"]["cdi_devices"] = (
        [f"nvidia.com/gpu={i}" for i in range(7)] + ["nvidia.com/gpu=all"])
    del reports["gpu-a"]["nvidia_container_toolkit"]
    checks = judge(two, reports)
    assert fields(checks[("gpu-b", "cdi_devices")]) == (
        "fail", 7, 8, "the CDI spec does not list every GPU")
    assert ("gpu-a", "cdi_devices") not in checks  # no toolkit report: nothing to count


def test_a_limited_run_judges_only_its_hosts_and_skips_cpu_nodes(tmp_path: Path) -> None:
    plan = build(tmp_path, {"gpu-a": {"gpu_profile": "hgx-h100-8gpu"},
                            "gpu-b": {"gpu_profile": "hgx-h100-8gpu"}}, login=True)
    reports = {"gpu-b": role_reports()["gpu-b"]}
    checks = judge(plan, reports, hosts_run={"gpu-b"})
    assert {host for host, _ in checks} == {"gpu-b"}
    assert {c.status for c in checks.values()} == {"pass"}
    checks = judge(plan, role_reports())
    assert {host for host, _ in checks} == {"gpu-a", "gpu-b"}


@pytest.mark.parametrize(("completed", "status"), [(True, "fail"), (False, "skip")])
def test_nvlsm_not_measured_failing_and_passing(tmp_path: Path, completed: bool,
                                                status: str) -> None:
    plan = build(tmp_path, {"b200-a": {"gpu_profile": "hgx-b200-8gpu"},
                            "b200-b": {"gpu_profile": "hgx-b200-8gpu"}})
    reports = {host: measured() for host in ("b200-a", "b200-b")}
    reports["b200-a"]["nvidia_fabricmanager"].update(
        nvlsm_missing=[], kernel_modules={"ib_umad": "boot-only (container)"})
    reports["b200-b"]["nvidia_fabricmanager"].update(
        nvlsm_missing=["nvlsm", "libnvlsm"], kernel_modules={})
    planned = "nvlsm packages installed, ib_umad loaded"
    checks = judge(plan, reports, completed=completed)
    assert fields(checks[("b200-a", "fabricmanager_nvlsm")]) == (
        "pass", "nvlsm packages installed, ib_umad boot-only (container)", planned,
        "NVLink subnet manager installed and its kernel modules in place")
    assert fields(checks[("b200-b", "fabricmanager_nvlsm")]) == (
        "fail", "nvlsm, libnvlsm not installed; ib_umad not measured", planned,
        "the fabric manager of this NVSwitch generation needs the NVLink subnet manager: "
        "nvlsm, libnvlsm not installed; ib_umad not measured")
    del reports["b200-b"]["nvidia_fabricmanager"]["nvlsm_missing"]
    detail = ("the nvidia_fabricmanager role published no measurement of the NVLink subnet "
              "manager (was its verify step skipped?)" if completed else
              "not measured: the stack phase stopped before the nvidia_fabricmanager role "
              "verified this host (see the phase failures)")
    assert fields(judge(plan, reports, completed=completed)[("b200-b", "fabricmanager_nvlsm")]) == (
        status, None, planned, detail)


@pytest.mark.parametrize(("version", "bare"), [
    ("1:2.3:4-1", "2.3:4"),            # the epoch ends at the first colon
    ("2.3-rc1-1", "2.3-rc1"),          # the revision starts at the last hyphen
    ("1:4.4.0-1", "4.4.0"),
    ("2.28.9-1+cuda13.0", "2.28.9"),
])
def test_upstream_follows_debian_version_syntax(version: str, bare: str) -> None:
    assert upstream(version) == bare


def test_a_node_without_nvswitches_gets_every_check_but_the_fabric_managers(
        tmp_path: Path) -> None:
    plan = build(tmp_path, {"l40s": {"gpu_profile": "pcie-l40s-4gpu"}})
    reports = {"l40s": measured(nvidia_container_toolkit={
        "cdi_devices": [f"nvidia.com/gpu={i}" for i in range(4)]})}
    names = {name for _host, name in judge(plan, reports)}
    assert names == {"driver_loaded", "driver", "driver_kernels", "nvcc_release", "cuda_toolkit",
                     "cudnn", "nccl", "container_toolkit", "dcgm", "cdi_devices",
                     "nccl_consistent"}


def test_a_driver_secure_boot_refuses_says_why_a_reboot_alone_does_not_load_it(
        two: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    kernel_check = {"name": "module_signatures:6.1.0-18-amd64", "status": "fail",
                    "measured": {"nvidia": "DKMS module signing key"},
                    "expected": "every NVIDIA module signed by an enrolled key",
                    "detail": "kernel 6.1.0-18-amd64: nvidia signed by 'DKMS module signing "
                              "key', whose certificate /var/lib/dkms/mok.pub is not enrolled"}
    reports["gpu-b"]["nvidia_driver"].update(loaded="", reboot_required=True,
                                             secure_boot="enabled",
                                             signature_checks=[kernel_check])
    # Secure Boot off: the signatures are reported, a reboot is what the node needs.
    reports["gpu-a"]["nvidia_driver"].update(
        loaded="", reboot_required=True, secure_boot="disabled",
        signature_checks=[dict(kernel_check, status="pass")])
    checks = judge(two, reports)
    status, measured, _expected, detail = fields(checks[("gpu-b", "driver_loaded")])
    assert (status, measured) == ("fail", "none")
    assert detail == ("installed driver is not loaded, and with Secure Boot on the kernel loads "
                      "it only once its modules are signed by an enrolled key (see "
                      "module_signatures:6.1.0-18-amd64); reboot after that")
    assert fields(checks[("gpu-b", "module_signatures:6.1.0-18-amd64")])[0] == "fail"
    assert fields(checks[("gpu-a", "driver_loaded")])[3].startswith(
        "installed driver is not loaded: reboot the node")
