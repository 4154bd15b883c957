"""Controller-side judgement of role reports, smoke results, and report rendering/saving."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from provisioner import plan as plan_mod
from provisioner import render
from provisioner.judge import first_three, stack_checks, upstream
from provisioner.report import Report
from provisioner.smoke_launch import fold_results


@pytest.fixture
def cluster_plan(tmp_path: Path) -> plan_mod.ClusterPlan:
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-a": {"gpu_profile": "hgx-h100-8gpu"}, "gpu-b": {"gpu_profile": "hgx-h100-8gpu"}}}}}}))
    return plan_mod.build(inv)


# What the roles of a healthy cuda-13.0 node measure (stacks.yml: driver 580.159.04, CUDA 13.0.2,
# cuDNN 9.13.0.50, NCCL 2.28.9-1+cuda13.0, Container Toolkit 1.18.2, DCGM 4.5.2).
HEALTHY: dict[str, dict[str, Any]] = {
    "nvidia_driver": {"version": "580.159.04", "loaded": "580.159.04", "reboot_required": False,
                      "kernels": {"6.1.0-18-amd64": "installed", "6.1.0-20-amd64": "installed"},
                      "kernels_required": ["6.1.0-18-amd64", "6.1.0-20-amd64"],
                      "kernels_checked": True},
    "nvidia_fabricmanager": {"version": "580.159.04", "service": "active"},
    "cuda_toolkit": {"release": "13.0", "nvcc_build": "13.0.88", "version": "13.0.2"},
    "cudnn": {"version": "9.13.0"},
    "nccl": {"version": "2.28.9", "library": "2.28.9"},
    "nvidia_container_toolkit": {"version": "1.18.2",
                                 "cdi_devices": [f"nvidia.com/gpu={i}" for i in range(8)]
                                 + ["nvidia.com/gpu=all"]},
    "nvidia_dcgm": {"version": "4.5.2", "source": "dcgmi"},
}
STACK_CHECKS = {"driver_loaded", "driver", "driver_kernels", "fabricmanager", "nvcc_release", "cuda_toolkit",
                "cudnn", "nccl", "container_toolkit", "dcgm", "cdi_devices", "nccl_consistent"}


def measured(**changes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One node's role reports: the healthy ones with some sections' keys replaced."""
    out = {section: dict(values) for section, values in HEALTHY.items()}
    for section, values in changes.items():
        out[section].update(values)
    return out


def role_reports(driver: str = "580.159.04", nccl_b: str = "2.28.9",
                 reboot: bool = False) -> dict[str, dict[str, Any]]:
    drv = {"loaded": driver, "reboot_required": reboot}
    if reboot:
        drv["version"] = ""  # nvidia-smi is not asked while the new driver waits for a reboot
    return {"gpu-a": measured(nvidia_driver=drv),
            "gpu-b": measured(nvidia_driver=drv, nccl={"version": nccl_b, "library": nccl_b})}


def by(checks: list[Any]) -> dict[tuple[str, str], Any]:
    return {(c.host, c.name): c for c in checks}


def test_healthy_stack_passes(cluster_plan: plan_mod.ClusterPlan) -> None:
    checks = by(stack_checks(cluster_plan, role_reports()))
    assert {c.status for c in checks.values()} == {"pass"}
    assert {name for _, name in checks} == STACK_CHECKS
    assert checks[("gpu-a", "cdi_devices")].measured == 8
    # Compared in the form the node reports: the plan's cuDNN 9.13.0.50 and NCCL pin.
    assert checks[("gpu-a", "cudnn")].expected == "9.13.0"
    assert checks[("gpu-a", "nccl")].expected == "2.28.9"


# (section, key, value a node could report, the check that must fail, the planned value).
MISMATCHES = [
    ("nvidia_driver", "version", "575.57.08", "driver", "580.159.04"),
    ("nvidia_driver", "loaded", "575.57.08", "driver_loaded", "580.159.04"),
    ("nvidia_fabricmanager", "version", "580.65.06", "fabricmanager", "580.159.04"),
    ("cuda_toolkit", "release", "12.9", "nvcc_release", "13.0"),
    ("cuda_toolkit", "version", "13.0.1", "cuda_toolkit", "13.0.2"),
    ("cudnn", "version", "9.12.0", "cudnn", "9.13.0"),
    ("nccl", "version", "2.27.3", "nccl", "2.28.9"),
    ("nvidia_container_toolkit", "version", "1.17.8", "container_toolkit", "1.18.2"),
    ("nvidia_dcgm", "version", "4.2.3", "dcgm", "4.5.2"),
]


@pytest.mark.parametrize(("section", "key", "value", "check", "planned"), MISMATCHES,
                         ids=[m[3] for m in MISMATCHES])
def test_a_measured_value_other_than_planned_fails_that_check(
        cluster_plan: plan_mod.ClusterPlan, section: str, key: str, value: str, check: str,
        planned: str) -> None:
    reports = role_reports()
    reports["gpu-b"][section][key] = value
    checks = by(stack_checks(cluster_plan, reports))
    bad = checks[("gpu-b", check)]
    assert (bad.status, bad.measured, bad.expected) == ("fail", value, planned)
    assert value in bad.detail and planned in bad.detail
    # The same check on the node that matches its plan passes: the failure is this node's.
    assert checks[("gpu-a", check)].status == "pass"
    assert checks[("gpu-a", check)].measured == planned


def test_every_stack_check_has_a_mismatch_case() -> None:
    assert ({m[3] for m in MISMATCHES} | {"cdi_devices", "nccl_consistent", "driver_kernels"}
            == STACK_CHECKS)


@pytest.mark.parametrize("state", ["missing", "built"])
def test_a_kernel_without_the_drivers_module_fails_driver_kernels(
        cluster_plan: plan_mod.ClusterPlan, state: str) -> None:
    """dkms status for every installed kernel: one installed-but-not-booted kernel without the
    module (or with another version's file in place) fails, naming that kernel."""
    reports = role_reports()
    reports["gpu-b"]["nvidia_driver"]["kernels"] = {"6.1.0-18-amd64": "installed",
                                                    "6.1.0-20-amd64": state}
    checks = by(stack_checks(cluster_plan, reports))
    bad = checks[("gpu-b", "driver_kernels")]
    assert bad.status == "fail"
    assert "6.1.0-20-amd64" in bad.detail and "6.1.0-18-amd64" not in bad.detail
    assert bad.measured == f"6.1.0-18-amd64: installed, 6.1.0-20-amd64: {state}"
    assert checks[("gpu-a", "driver_kernels")].status == "pass"


def test_an_older_kernel_without_the_module_is_a_warning(
        cluster_plan: plan_mod.ClusterPlan) -> None:
    """A fallback kernel older than the running one is booted only by hand: reported, not a
    failure (its headers may be gone from the mirror)."""
    reports = role_reports()
    drv = reports["gpu-b"]["nvidia_driver"]
    drv["kernels"] = {"6.1.0-17-amd64": "missing", "6.1.0-18-amd64": "installed"}
    drv["kernels_required"] = ["6.1.0-18-amd64"]
    check = by(stack_checks(cluster_plan, reports))[("gpu-b", "driver_kernels")]
    assert check.status == "warn" and "6.1.0-17-amd64" in check.detail
    drv["kernels_required"] = ["6.1.0-17-amd64", "6.1.0-18-amd64"]
    assert by(stack_checks(cluster_plan, reports))[("gpu-b", "driver_kernels")].status == "fail"


@pytest.mark.parametrize(("kernels", "checked", "status"), [
    ({}, True, "fail"),            # the role checked and published nothing: a defect
    (None, True, "fail"),
    ({}, False, "skip"),           # nvidia_driver_dkms_check off: said so
])
def test_driver_kernels_without_a_measurement(cluster_plan: plan_mod.ClusterPlan,
                                              kernels: dict[str, str] | None, checked: bool,
                                              status: str) -> None:
    reports = role_reports()
    drv = reports["gpu-a"]["nvidia_driver"]
    drv["kernels_checked"] = checked
    if kernels is None:
        del drv["kernels"]
    else:
        drv["kernels"] = kernels
    assert by(stack_checks(cluster_plan, reports))[("gpu-a", "driver_kernels")].status == status


@pytest.mark.parametrize(("hold", "wanted", "held", "status", "fragment"), [
    (True, ["linux-image-amd64", "linux-image-6.1.0-18-amd64"],
     ["linux-image-6.1.0-18-amd64", "linux-image-amd64", "vim"], "pass", "the kernel is held"),
    (True, ["linux-image-amd64", "linux-image-6.1.0-18-amd64"], ["linux-image-6.1.0-18-amd64"],
     "fail", "linux-image-amd64 not held"),
    (True, [], [], "fail", "found no installed kernel package"),
    ("True", ["kernel-core"], ["kernel-core"], "pass", "1 package"),
    (False, ["linux-image-amd64"], [], None, ""),   # off: no check at all
    ("False", [], [], None, ""),
])
def test_kernel_held_compares_the_holds_with_what_the_role_meant_to_hold(
        cluster_plan: plan_mod.ClusterPlan, hold: object, wanted: list[str], held: list[str],
        status: str | None, fragment: str) -> None:
    reports = role_reports()
    drv = reports["gpu-a"]["nvidia_driver"]
    drv.update(kernel_hold=hold, kernel_hold_wanted=wanted, kernel_held=held)
    check = by(stack_checks(cluster_plan, reports)).get(("gpu-a", "kernel_held"))
    if status is None:
        assert check is None
        return
    assert check is not None and check.status == status and fragment in check.detail
    assert ("gpu-b", "kernel_held") not in by(stack_checks(cluster_plan, reports))


def test_module_signature_checks_of_the_role_become_stack_checks(
        cluster_plan: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    reports["gpu-a"]["nvidia_driver"]["signature_checks"] = [
        {"name": "module_signatures:6.1.0-18-amd64", "status": "fail",
         "measured": {"nvidia": "DKMS module signing key", "nvidia-uvm": ""},
         "expected": "every NVIDIA module signed by an enrolled key",
         "detail": "kernel 6.1.0-18-amd64: nvidia-uvm carries no signature"}]
    checks = by(stack_checks(cluster_plan, reports))
    check = checks[("gpu-a", "module_signatures:6.1.0-18-amd64")]
    assert check.status == "fail" and check.phase == "stack"
    assert check.measured == "nvidia: DKMS module signing key, nvidia-uvm: unsigned"
    assert not any(name.startswith("module_signatures") for host, name in checks
                   if host == "gpu-b")


def test_nccl_consistency_compares_measured_versions_across_nodes(
        cluster_plan: plan_mod.ClusterPlan) -> None:
    checks = by(stack_checks(cluster_plan, role_reports(nccl_b="2.27.3")))
    assert checks[("gpu-a", "nccl_consistent")].status == "fail"
    assert checks[("gpu-b", "nccl_consistent")].measured == "2.27.3"
    assert "2.27.3, 2.28.9" in checks[("gpu-b", "nccl_consistent")].detail


def test_nccl_consistency_uses_the_library_programs_load(
        cluster_plan: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    reports["gpu-b"]["nccl"]["library"] = "2.27.3"  # headers 2.28.9, library of another build
    checks = by(stack_checks(cluster_plan, reports))
    assert checks[("gpu-b", "nccl_library")].status == "fail"
    assert checks[("gpu-b", "nccl_library")].measured == "2.27.3"
    assert checks[("gpu-a", "nccl_consistent")].status == "fail"
    assert ("gpu-a", "nccl_library") not in checks  # only reported when the two disagree


def test_pending_reboot_is_a_failure_naming_the_fix(cluster_plan: plan_mod.ClusterPlan) -> None:
    checks = by(stack_checks(cluster_plan, role_reports(driver="", reboot=True)))
    assert checks[("gpu-a", "driver_loaded")].status == "fail"
    assert "--reboot" in checks[("gpu-a", "driver_loaded")].detail
    assert checks[("gpu-a", "driver")].status == "skip"


def test_missing_role_report_fails(cluster_plan: plan_mod.ClusterPlan) -> None:
    checks = by(stack_checks(cluster_plan, {}))
    assert checks[("gpu-a", "driver")].status == "fail"
    assert {c.status for c in checks.values()} == {"fail"}
    assert "published no measurement" in checks[("gpu-a", "nccl")].detail


def test_missing_measurement_after_a_failed_phase_is_skipped(
        cluster_plan: plan_mod.ClusterPlan) -> None:
    reports = role_reports()
    del reports["gpu-b"]["nvidia_dcgm"]  # the host failed before the DCGM role ran
    checks = by(stack_checks(cluster_plan, reports, completed=False))
    assert checks[("gpu-b", "dcgm")].status == "skip"
    assert checks[("gpu-a", "dcgm")].status == "pass"


def test_hosts_outside_the_run_are_not_judged(cluster_plan: plan_mod.ClusterPlan) -> None:
    checks = by(stack_checks(cluster_plan, {"gpu-a": role_reports()["gpu-a"]},
                             hosts_run={"gpu-a"}))
    assert {host for host, _ in checks} == {"gpu-a"}
    assert {c.status for c in checks.values()} == {"pass"}


def test_fabric_manager_is_judged_only_where_the_plan_enables_it(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "l40s": {"gpu_profile": "pcie-l40s-4gpu"}}}}}}))
    reports = {"l40s": measured(nvidia_container_toolkit={
        "cdi_devices": [f"nvidia.com/gpu={i}" for i in range(4)]})}
    del reports["l40s"]["nvidia_fabricmanager"]
    checks = by(stack_checks(plan_mod.build(inv), reports))
    assert ("l40s", "fabricmanager") not in checks
    assert {c.status for c in checks.values()} == {"pass"}


@pytest.mark.parametrize(("version", "up", "three"), [
    ("2.21.5-1+cuda12.4", "2.21.5", "2.21.5"), ("1:3.3.6-1", "3.3.6", "3.3.6"),
    ("9.1.0.70", "9.1.0.70", "9.1.0"), ("580.95.05", "580.95.05", "580.95.05"),
])
def test_plan_versions_are_brought_to_the_form_nodes_report(version: str, up: str,
                                                             three: str) -> None:
    assert upstream(version) == up
    assert first_three(version) == three


SMOKE = {"schema": 1, "label": "inter-node", "backend": "nccl", "world_size": 16, "nnodes": 2,
         "nodes": {"gpu-a": list(range(8)), "gpu-b": list(range(8, 16))},
         "ranks": [{"rank": 0, "local_rank": 0, "hostname": "gpu-a", "device": "cuda:0",
                    "cuda_device_count": 8}],
         "allreduce": [{"bytes": 1 << 30, "time_us": 50.0, "algbw_gbps": 20.0,
                        "busbw_gbps": 37.5, "correct": True}],
         "ddp": {"loss_first": 1.0, "loss_last": 0.1, "decreased": True,
                 "params_identical": True}, "ok": True, "errors": []}


def test_smoke_below_floor_fails_and_names_nodes(cluster_plan: plan_mod.ClusterPlan,
                                                 tmp_path: Path) -> None:
    report = Report("r1", "smoke", "inv", simulated=False, started_at="now")
    reports = {"gpu-a": {"smoke_job": {"passes": {"inter": {"rc": 0, "result": SMOKE,
                                                            "log": ["ok"]}}}},
               "gpu-b": {"smoke_job": {"passes": {"inter": {"rc": 0, "result": None,
                                                            "log": []}}}}}
    assert fold_results(cluster_plan, report, tmp_path, reports, []) is False
    assert report.smoke is not None
    [run] = report.smoke["runs"]
    assert run["label"] == "inter-node" and not run["verdict"]["passed"]
    assert "below the floor 320" in run["verdict"]["summary"]
    assert "gpu-a, gpu-b" in run["verdict"]["summary"]
    assert (tmp_path / "smoke" / "gpu-a-inter.json").is_file()


def test_smoke_without_results_names_unreachable_node(cluster_plan: plan_mod.ClusterPlan,
                                                      tmp_path: Path) -> None:
    report = Report("r2", "smoke", "inv", simulated=True, started_at="now")
    reports = {"gpu-a": {"smoke_job": {"passes": {"inter": {"rc": 1, "result": None,
                                                            "log": ["peer died"]}}}}}
    assert fold_results(cluster_plan, report, tmp_path, reports, ["gpu-b"]) is False
    summary = report.smoke["runs"][0]["verdict"]["summary"]  # type: ignore[index]
    assert "unreachable during the job: gpu-b" in summary and "peer died" in summary


def test_saved_report_is_marked_simulated_and_renders_untrusted_text(tmp_path: Path) -> None:
    report = Report("r3", "up", "inv", simulated=True, started_at="now")
    report.notes.append("gloo says [/__w/pytorch/gloo/pair.cc:553] connection reset")
    report.finish(1)
    path = report.save(tmp_path)
    data = json.loads(path.read_text())
    assert "SIMULATED" in data and data["outcome"] == "failed"
    assert "<testsuites" in (tmp_path / "junit.xml").read_text()
    out = io.StringIO()
    render.report(Console(file=out, width=200), {**data, "report_path": str(path)})
    text = out.getvalue()
    assert "[/__w/pytorch/gloo/pair.cc:553]" in text
    assert "SIMULATED" in text and "cluster FAILED (SIMULATED)" in text


def test_nccl_tests_output_is_parsed_and_judged(cluster_plan: plan_mod.ClusterPlan,
                                                 tmp_path: Path) -> None:
    header = ("#       size         count      type   redop    root     time   algbw   busbw "
              "#wrong     time   algbw   busbw #wrong\n"
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
              "          (us)  (GB/s)  (GB/s)       \n")
    rows = ("  1073741824     268435456     float     sum      -1   4500.0  238.61  417.57      0"
            "   4490.0  239.14  418.49      0\n"
            "  8589934592    2147483648     float     sum      -1  31900.0  269.28  471.24      0"
            "  31890.0  269.36  471.38      0\n")
    report = Report("r4", "smoke", "inv", simulated=False, started_at="now")
    reports = {"gpu-a": {"smoke_job": {"passes": {"nccl_tests": {"rc": 0,
                                                                  "output": header + rows}}}}}
    assert fold_results(cluster_plan, report, tmp_path, reports, []) is True
    [run] = report.smoke["runs"]  # type: ignore[index]
    assert run["label"] == "nccl-tests gpu-a" and len(run["allreduce"]) == 2
    # The floor is judged at the largest size: the mean of out-of-place and in-place busbw.
    assert run["verdict"]["best_busbw_gbps"] == pytest.approx((471.24 + 471.38) / 2)
    slow = header + rows.replace("471.24", "300.24").replace("471.38", "300.38")
    reports["gpu-a"]["smoke_job"]["passes"]["nccl_tests"]["output"] = slow
    report = Report("r5", "smoke", "inv", simulated=False, started_at="now")
    assert fold_results(cluster_plan, report, tmp_path, reports, []) is False


NCCL_HEADER = ("#       size         count      type   redop    root     time   algbw   busbw "
               "#wrong     time   algbw   busbw #wrong\n"
               "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
               "          (us)  (GB/s)  (GB/s)       \n")
# Above hgx-h100-8gpu's intra-node floor (460 GB/s), so only #wrong decides.
NCCL_ROW = ("  1073741824     268435456     float     sum      -1   3900.0  275.31  481.79      {w}"
            "   3890.0  276.02  483.04      0\n")


@pytest.mark.parametrize(("wrong", "passed"), [("0", True), ("3", False)])
def test_nccl_tests_rows_with_wrong_results_fail(cluster_plan: plan_mod.ClusterPlan,
                                                 tmp_path: Path, wrong: str,
                                                 passed: bool) -> None:
    """Fast but wrong is a failure: each row's #wrong counts, not only the busbw floor."""
    report = Report("r6", "smoke", "inv", simulated=False, started_at="now")
    reports = {"gpu-a": {"smoke_job": {"passes": {"nccl_tests": {
        "rc": 0, "output": NCCL_HEADER + NCCL_ROW.format(w=wrong)}}}}}
    assert fold_results(cluster_plan, report, tmp_path, reports, []) is passed
    [run] = report.smoke["runs"]  # type: ignore[index]
    assert run["allreduce"][0]["correct"] is passed
    assert run["verdict"]["passed"] is passed
    assert ("wrong results at 1 GiB" in run["verdict"]["summary"]) is not passed


def test_passing_smoke_with_an_unreachable_node_fails(cluster_plan: plan_mod.ClusterPlan,
                                                      tmp_path: Path) -> None:
    report = Report("r7", "smoke", "inv", simulated=False, started_at="now")
    reports = {"gpu-a": {"smoke_job": {"passes": {"nccl_tests": {
        "rc": 0, "output": NCCL_HEADER + NCCL_ROW.format(w="0")}}}}}
    assert fold_results(cluster_plan, report, tmp_path, reports, []) is True
    report = Report("r8", "smoke", "inv", simulated=False, started_at="now")
    assert fold_results(cluster_plan, report, tmp_path, reports, ["gpu-b"]) is False


@pytest.fixture
def b200_plan(tmp_path: Path) -> plan_mod.ClusterPlan:
    """Two HGX B200 nodes on cuda-13.0 (R580): fourth-generation NVSwitch, so the plan asks for
    the NVLink subnet manager and ib_umad."""
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "b200-a": {"gpu_profile": "hgx-b200-8gpu"}, "b200-b": {"gpu_profile": "hgx-b200-8gpu"}}}}}}))
    return plan_mod.build(inv)


def nvlsm_reports(**b: Any) -> dict[str, dict[str, Any]]:
    healthy = {"nvlsm_missing": [], "kernel_modules": {"ib_umad": "loaded"}}
    out = {}
    for host, fm in (("b200-a", healthy), ("b200-b", {**healthy, **b})):
        reports = measured()
        reports["nvidia_fabricmanager"].update(fm)
        reports["nvidia_container_toolkit"]["cdi_devices"] = [f"nvidia.com/gpu={i}"
                                                              for i in range(8)]
        out[host] = reports
    return out


def test_the_b200_plan_asks_for_the_nvlink_subnet_manager(
        b200_plan: plan_mod.ClusterPlan, cluster_plan: plan_mod.ClusterPlan) -> None:
    b200 = b200_plan.hosts["b200-a"].variables()
    assert b200["nvidia_fabricmanager_nvlsm_enabled"] is True
    assert "nvlsm" in b200["nvidia_fabricmanager_nvlsm_packages"]["apt"]
    assert b200["nvidia_fabricmanager_kernel_modules"] == ["ib_umad"]
    h100 = cluster_plan.hosts["gpu-a"].variables()  # third-generation NVSwitch: no nvlsm
    assert h100["nvidia_fabricmanager_nvlsm_enabled"] is False
    assert h100["nvidia_fabricmanager_kernel_modules"] == []
    # ... and no nvlsm check on it.
    assert ("gpu-a", "fabricmanager_nvlsm") not in by(stack_checks(cluster_plan, role_reports()))


def test_nvlsm_installed_and_ib_umad_loaded_or_boot_only_in_a_container_pass(
        b200_plan: plan_mod.ClusterPlan) -> None:
    checks = by(stack_checks(b200_plan, nvlsm_reports(
        kernel_modules={"ib_umad": "boot-only (container)"})))
    assert checks[("b200-a", "fabricmanager_nvlsm")].status == "pass"
    assert checks[("b200-b", "fabricmanager_nvlsm")].status == "pass"
    assert "boot-only" in str(checks[("b200-b", "fabricmanager_nvlsm")].measured)


@pytest.mark.parametrize(("fm", "says"), [
    ({"nvlsm_missing": ["nvlsm"]}, "nvlsm not installed"),
    ({"kernel_modules": {"ib_umad": "not loaded"}}, "ib_umad not loaded"),
    ({"kernel_modules": {"ib_umad": "not listed for boot"}}, "ib_umad not listed for boot"),
    ({"kernel_modules": {}}, "ib_umad not measured"),
], ids=["package", "not-loaded", "not-at-boot", "unmeasured-module"])
def test_a_missing_nvlsm_piece_fails_that_node_only(b200_plan: plan_mod.ClusterPlan,
                                                    fm: dict[str, Any], says: str) -> None:
    checks = by(stack_checks(b200_plan, nvlsm_reports(**fm)))
    bad = checks[("b200-b", "fabricmanager_nvlsm")]
    assert bad.status == "fail" and says in str(bad.measured), bad
    assert checks[("b200-a", "fabricmanager_nvlsm")].status == "pass"


def test_no_nvlsm_measurement_fails_a_completed_phase(b200_plan: plan_mod.ClusterPlan) -> None:
    reports = nvlsm_reports()
    del reports["b200-b"]["nvidia_fabricmanager"]["nvlsm_missing"]
    checks = by(stack_checks(b200_plan, reports))
    assert checks[("b200-b", "fabricmanager_nvlsm")].status == "fail"
    assert "published no measurement" in checks[("b200-b", "fabricmanager_nvlsm")].detail
