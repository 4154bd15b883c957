"""What smoke_launch puts in the report, field by field: each run entry (intra-node, inter-node,
nccl-tests), each check, each note, the logs it writes, and the variables it hands the
smoke_job role. Written against the mutants `make mutation` found every test survived
(assertions on substrings of a summary left the other fields free)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import plan as plan_mod
from provisioner import smoke_launch
from provisioner.busbw import CPU_SIZES, GLOO_SKIP_REASON, GPU_SIZES
from provisioner.errors import EnvironmentProblem
from provisioner.report import Check, Report
from provisioner.wheelhouse import framework_requirements


@pytest.fixture
def real_plan(tmp_path: Path) -> plan_mod.ClusterPlan:
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-a": {"gpu_profile": "hgx-h100-8gpu"}, "gpu-b": {"gpu_profile": "hgx-h100-8gpu"}}}}}}))
    return plan_mod.build(inv)


@pytest.fixture
def sim_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> plan_mod.ClusterPlan:
    from tests.unit.test_monitoring_phase import sim_inventory

    return plan_mod.build(sim_inventory(tmp_path, monkeypatch) / "hosts.yml")


# --- the variables the smoke_job role gets -------------------------------------------------

def test_extravars_of_a_real_cluster(real_plan: plan_mod.ClusterPlan, tmp_path: Path) -> None:
    locked = {"cp312-x86_64": "torch==2.13.0 --hash=sha256:" + "a" * 64 + "\n"}
    assert smoke_launch.extravars(real_plan, "run-1", tmp_path, "http://10.0.0.1:8000/",
                              locked=locked) == {
        "smoke_job_wheelhouse_url": "http://10.0.0.1:8000/",
        "smoke_job_locked_requirements": locked,
        "smoke_job_run_id": "run-1",
        "smoke_job_artifacts_dir": str(tmp_path / "smoke"),
        "smoke_job_launcher": "direct",
        "smoke_job_framework": "pytorch",
        "smoke_job_tensorflow_requirements": list(framework_requirements("tensorflow", False)),
        "smoke_job_slurm_gpus_per_node": 8,
        "smoke_job_sizes": GPU_SIZES,
        "smoke_job_nproc_per_node": 8,
        "smoke_job_expect_gpus_per_node": 8,
    }


def test_the_locked_hashes_are_the_reviewed_locks_for_each_platform(
        sim_plan: plan_mod.ClusterPlan) -> None:
    from provisioner.wheelhouse import NodePlatform
    from provisioner.wheellock import load_lock, requirements_text

    got = smoke_launch.locked_requirements(sim_plan, [NodePlatform("3.11", "x86_64")], "pytorch")
    assert got == {"cp311-x86_64": requirements_text(load_lock()["pytorch-sim"]["cp311-x86_64"])}
    assert "torch==2.13.0+cpu --hash=sha256:" in got["cp311-x86_64"]


def test_a_site_lock_adds_platforms(sim_plan: plan_mod.ClusterPlan, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.wheelhouse import NodePlatform
    from provisioner.wheellock import LockedWheel, write_lock

    site = tmp_path / "site.lock.json"
    write_lock(site, {"pytorch-sim": {"cp399-riscv64": [
        LockedWheel("torch", "2.13.0", "torch-2.13.0-cp399-cp399-linux_riscv64.whl", "c" * 64)]}})
    first = sim_plan.inventory.hosts[smoke_launch._first_gpu_host(sim_plan)]
    monkeypatch.setitem(first.vars, "smoke_job_wheel_lock", str(site))  # type: ignore[arg-type]
    got = smoke_launch.locked_requirements(sim_plan, [NodePlatform("3.99", "riscv64"),
                                                  NodePlatform("3.11", "x86_64")])
    assert sorted(got) == ["cp311-x86_64", "cp399-riscv64"]
    assert "--hash=sha256:" + "c" * 64 in got["cp399-riscv64"]


def test_extravars_of_the_simulated_cluster(sim_plan: plan_mod.ClusterPlan,
                                            tmp_path: Path) -> None:
    got = smoke_launch.extravars(sim_plan, "run-2", tmp_path, "", launcher="slurm",
                             framework="tensorflow")
    assert got == {
        "smoke_job_wheelhouse_url": "",
        "smoke_job_locked_requirements": {},
        "smoke_job_run_id": "run-2",
        "smoke_job_artifacts_dir": str(tmp_path / "smoke"),
        "smoke_job_launcher": "slurm",
        "smoke_job_framework": "tensorflow",
        "smoke_job_tensorflow_requirements": list(framework_requirements("tensorflow", True)),
        # srun still asks for the profile's GPUs (GRES); the job runs on CPUs.
        "smoke_job_slurm_gpus_per_node": 8,
        "smoke_job_backend": "gloo",
        "smoke_job_sizes": CPU_SIZES,
        "smoke_job_nproc_per_node": smoke_launch.SIM_NPROC_PER_NODE,
        "smoke_job_expect_gpus_per_node": 0,
        "smoke_job_socket_ifname": smoke_launch.SIM_SOCKET_IFNAME,
        "smoke_job_timeout_s": smoke_launch.SIM_TIMEOUT_S,
    }
    assert (smoke_launch.SIM_NPROC_PER_NODE, smoke_launch.SIM_SOCKET_IFNAME, smoke_launch.SIM_TIMEOUT_S) == (
        2, "eth0", 90)


# --- nccl-tests on a node --------------------------------------------------------------------

HEADER = ("#       size         count      type   redop    root     time   algbw   busbw "
          "#wrong     time   algbw   busbw #wrong\n"
          "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
          "          (us)  (GB/s)  (GB/s)       \n")
RANK = "#  Rank  0 Group  0 Pid   1234 on     gpu-a device  0 [0x1b] NVIDIA H100 80GB HBM3\n"


def row(size: int, busbw: float, wrong: str = "0", busbw_in: float | None = None,
        time_us: float = 4000.0, algbw: float = 250.0) -> str:
    inp = busbw if busbw_in is None else busbw_in
    return (f"  {size:>10}  {size // 4:>12}     float     sum      -1  {time_us:7.1f}  {algbw:6.2f}"
            f"  {busbw:6.2f}  {wrong:>5}  {time_us:7.1f}  {algbw:6.2f}  {inp:6.2f}      0\n")


GIB = 1 << 30


def test_nccl_tests_above_the_floor_is_this_entry() -> None:
    out = HEADER + RANK + row(GIB // 2, 300.0) + row(GIB, 470.0, busbw_in=472.0)
    assert smoke_launch.judge_nccl_tests("nccl-tests gpu-a", "gpu-a", out, 0, 460.0) == {
        "label": "nccl-tests gpu-a", "host": "gpu-a", "backend": "nccl",
        "world_size": 1, "nnodes": 1,
        "allreduce": [
            {"bytes": GIB // 2, "time_us": 4000.0, "algbw_gbps": 250.0, "busbw_gbps": 300.0,
             "correct": True},
            {"bytes": GIB, "time_us": 4000.0, "algbw_gbps": 250.0, "busbw_gbps": 470.0,
             "correct": True}],
        "verdict": {"passed": True,
                    "summary": "PASS: nccl-tests all_reduce_perf: busbw 471.00 GB/s at 1 GiB "
                               "vs floor 460 GB/s",
                    "best_busbw_gbps": 471.0, "floor_gbps": 460.0, "floor_skipped": None}}


@pytest.mark.parametrize(("output", "rc", "floor", "summary"), [
    (HEADER + row(GIB, 300.0), 0, 460.0,
     "FAIL: nccl-tests all_reduce_perf: busbw 300.00 GB/s at 1 GiB vs floor 460 GB/s; "
     "below the floor"),
    (HEADER + row(GIB, 470.0), 3, 460.0,
     "FAIL: nccl-tests all_reduce_perf: busbw 470.00 GB/s at 1 GiB vs floor 460 GB/s; "
     "all_reduce_perf exit 3"),
    (HEADER + row(GIB // 2, 470.0, wrong="2") + row(GIB, 470.0, wrong="5"), 0, 460.0,
     "FAIL: nccl-tests all_reduce_perf: busbw 470.00 GB/s at 1 GiB vs floor 460 GB/s; "
     "wrong results at 512 MiB, 1 GiB"),
    (HEADER + row(GIB // 2, 470.0), 0, 460.0,
     "FAIL: nccl-tests all_reduce_perf: no busbw to judge; no size >= 1 GiB measured"),
    (HEADER + row(GIB, 100.0), 0, None,
     "PASS: nccl-tests all_reduce_perf: busbw 100.00 GB/s at 1 GiB, no floor configured"),
    (HEADER + row(GIB, 470.0) + "# Out of bounds values : 7 FAILED\n", 0, 460.0,
     "FAIL: nccl-tests all_reduce_perf: busbw 470.00 GB/s at 1 GiB vs floor 460 GB/s; "
     "7 out-of-bounds values"),
], ids=["below-floor", "exit-code", "wrong-rows", "no-1GiB", "no-floor", "out-of-bounds"])
def test_each_nccl_tests_problem_is_named(output: str, rc: int, floor: float | None,
                                          summary: str) -> None:
    run = smoke_launch.judge_nccl_tests("L", "gpu-a", output, rc, floor)
    assert run["verdict"]["summary"] == summary
    assert run["verdict"]["passed"] is summary.startswith("PASS")
    assert run["verdict"]["floor_gbps"] == floor


def test_nccl_tests_output_that_does_not_parse_is_a_failed_entry() -> None:
    run = smoke_launch.judge_nccl_tests("L", "gpu-a", "", 127, 460.0)
    assert run == {"label": "L", "host": "gpu-a", "backend": "nccl", "allreduce": [],
                   "verdict": {"passed": False, "best_busbw_gbps": None, "floor_gbps": 460.0,
                               "floor_skipped": None,
                               "summary": run["verdict"]["summary"]}}
    assert run["verdict"]["summary"].startswith("FAIL: all_reduce_perf exit 127: ")


def test_a_node_that_skipped_nccl_tests_says_why() -> None:
    run = smoke_launch._nccl_tests_run("gpu-a", {"skipped": "nvcc cannot compile"}, None)
    assert run == {"label": "nccl-tests gpu-a", "host": "gpu-a", "backend": "nccl",
                   "allreduce": [],
                   "verdict": {"passed": True, "best_busbw_gbps": None, "floor_gbps": None,
                               "floor_skipped": "nvcc cannot compile",
                               "summary": "SKIPPED: nvcc cannot compile"}}


def test_nccl_tests_of_a_host_without_a_profile_are_judged_without_a_floor() -> None:
    run = smoke_launch._nccl_tests_run("gpu-x", {"rc": 0, "output": HEADER + row(GIB, 50.0)}, None)
    assert run["host"] == "gpu-x" and run["label"] == "nccl-tests gpu-x"
    assert run["verdict"]["floor_gbps"] is None and run["verdict"]["passed"] is True
    empty = smoke_launch._nccl_tests_run("gpu-x", {"rc": 0}, None)
    assert empty["verdict"]["summary"] == smoke_launch.judge_nccl_tests(
        "nccl-tests gpu-x", "gpu-x", "", 0, None)["verdict"]["summary"]


# --- one smoke pass (intra-node, inter-node) --------------------------------------------------

RESULT: dict[str, Any] = {
    "schema": 1, "label": "intra-node", "backend": "nccl", "world_size": 8, "nnodes": 1,
    "nodes": {"gpu-a": list(range(8))},
    "ranks": [{"rank": 0, "local_rank": 0, "hostname": "gpu-a", "device": "cuda:0",
               "cuda_device_count": 8}],
    "allreduce": [{"bytes": GIB // 2, "time_us": 3000.0, "algbw_gbps": 200.0,
                   "busbw_gbps": 350.0, "correct": True},
                  {"bytes": GIB, "time_us": 5000.0, "algbw_gbps": 266.6666,
                   "busbw_gbps": 466.666666, "correct": True}],
    "ddp": {"loss_first": 1.0, "loss_last": 0.1, "decreased": True, "params_identical": True},
    "ok": True, "errors": []}


def test_a_passing_intra_pass_is_this_entry(tmp_path: Path) -> None:
    run = smoke_launch._judge_pass("gpu-a", "intra", {"rc": 0, "result": RESULT}, 460.0, False,
                               tmp_path, [])
    assert json.loads((tmp_path / "gpu-a-intra.json").read_text()) == RESULT
    assert run["label"] == "intra-node gpu-a" and run["host"] == "gpu-a"
    assert (run["backend"], run["world_size"], run["nnodes"]) == ("nccl", 8, 1)
    assert run["nodes"] == {"gpu-a": list(range(8))}
    assert run["ddp"] == RESULT["ddp"]
    assert [(r["bytes"], r["counts_for_floor"]) for r in run["allreduce"]] == [
        (GIB // 2, False), (GIB, True)]
    assert run["verdict"] == {
        "passed": True,
        "summary": "PASS: correct all-reduce, DDP loss decreased, parameters identical; "
                   "busbw 466.67 GB/s at 1 GiB vs floor 460 GB/s",
        "best_busbw_gbps": 466.666666, "floor_gbps": 460.0, "floor_skipped": None}


@pytest.mark.parametrize(("simulated", "reason"), [
    (True, "simulated cluster: CPU gloo numbers, GPU floor not applicable"),
    (False, GLOO_SKIP_REASON),
])
def test_a_gloo_pass_says_why_its_floor_is_skipped(tmp_path: Path, simulated: bool,
                                                    reason: str) -> None:
    gloo = {**RESULT, "backend": "gloo"}
    run = smoke_launch._judge_pass("gpu-a", "inter", {"rc": 0, "result": gloo}, 320.0, simulated,
                               tmp_path, [])
    assert run["label"] == "inter-node" and run["backend"] == "gloo"
    assert run["verdict"] == {
        "passed": True,
        "summary": "PASS: correct all-reduce, DDP loss decreased, parameters identical; "
                   f"floor skipped: {reason}",
        "best_busbw_gbps": 466.666666, "floor_gbps": 320.0, "floor_skipped": reason}


def test_a_failing_pass_lists_its_failures(tmp_path: Path) -> None:
    slow = {**RESULT, "allreduce": [{**RESULT["allreduce"][1], "busbw_gbps": 100.0}]}
    run = smoke_launch._judge_pass("gpu-a", "intra", {"rc": 0, "result": slow}, 460.0, False,
                               tmp_path, [])
    assert run["verdict"]["passed"] is False
    assert run["verdict"]["summary"].startswith("FAIL: [intra-node] ")
    assert run["verdict"]["best_busbw_gbps"] == 100.0 and run["verdict"]["floor_gbps"] == 460.0


@pytest.mark.parametrize(("result", "unreachable", "summary"), [
    ({"rc": 1, "result": None, "log": ["a", "b", "peer died"]}, [],
     "no result from rank 0 on gpu-a: b peer died"),
    ({"rc": 7, "result": None, "log": []}, [], "no result from rank 0 on gpu-a: exit 7"),
    ({"rc": 1, "result": None}, ["gpu-b", "gpu-c"],
     "no result from rank 0 on gpu-a: exit 1; unreachable during the job: gpu-b, gpu-c"),
])
def test_a_pass_without_a_result_says_what_the_log_ended_with(
        tmp_path: Path, result: dict[str, Any], unreachable: list[str], summary: str) -> None:
    run = smoke_launch._judge_pass("gpu-a", "intra", result, 460.0, False, tmp_path, unreachable)
    assert run == {"label": "intra-node gpu-a", "host": "gpu-a", "allreduce": [],
                   "verdict": {"passed": False, "best_busbw_gbps": None, "summary": summary}}


def test_a_result_that_is_no_smoke_report_is_a_failed_entry(tmp_path: Path) -> None:
    run = smoke_launch._judge_pass("gpu-a", "intra", {"rc": 0, "result": {"schema": 99}}, 460.0,
                               False, tmp_path, [])
    assert run["label"] == "intra-node gpu-a" and run["host"] == "gpu-a"
    assert run["allreduce"] == [] and run["verdict"]["passed"] is False
    assert run["verdict"]["best_busbw_gbps"] is None
    assert run["verdict"]["summary"] == (
        f"{tmp_path / 'gpu-a-intra.json'}: smoke report schema 99 is not 1; the job on the "
        "nodes and this controller are from different versions")


# --- the whole smoke phase into the report -----------------------------------------------------

def test_fold_results_puts_every_pass_in_the_report(real_plan: plan_mod.ClusterPlan,
                                                    tmp_path: Path) -> None:
    inter = {**RESULT, "label": "inter-node", "world_size": 16, "nnodes": 2,
             "nodes": {"gpu-a": list(range(8)), "gpu-b": list(range(8, 16))},
             "allreduce": [{**RESULT["allreduce"][1], "busbw_gbps": 321.23456}]}
    reports = {
        "gpu-a": {"smoke_job": {"passes": {
            "intra": {"rc": 0, "result": RESULT, "log": ["line 1", "line 2"]},
            "inter": {"rc": 0, "result": inter, "log": ["inter a"]},
            "nccl_tests": {"skipped": "no nvcc"}}}},
        # Rank 0 ran on gpu-a: gpu-b's inter pass has no result and is not judged again.
        "gpu-b": {"smoke_job": {"passes": {
            "intra": {"rc": 0, "result": {**RESULT, "nodes": {"gpu-b": list(range(8))}},
                      "log": []},
            "inter": {"rc": 0, "result": None, "log": ["inter b"]}}}},
    }
    report = Report("r", "smoke", "inv", simulated=False, started_at="t")
    assert smoke_launch.fold_results(real_plan, report, tmp_path, reports, [], launcher="slurm",
                                 framework="pytorch") is True
    smoke_dir = tmp_path / "smoke"
    assert (smoke_dir / "gpu-a-intra.log").read_text() == "line 1\nline 2\n"
    assert (smoke_dir / "gpu-a-inter.log").read_text() == "inter a\n"
    assert (smoke_dir / "gpu-b-intra.log").read_text() == "\n"
    assert (smoke_dir / "gpu-b-inter.log").read_text() == "inter b\n"
    assert not (smoke_dir / "gpu-b-inter.json").exists()
    assert report.checks == [
        Check("gpu-a", "smoke", "intra_node", "pass", 466.667, 460.0,
              "PASS: correct all-reduce, DDP loss decreased, parameters identical; busbw "
              "466.67 GB/s at 1 GiB vs floor 460 GB/s"),
        Check("gpu-a", "smoke", "inter_node", "pass", 321.235, 320.0,
              "PASS: correct all-reduce, DDP loss decreased, parameters identical; busbw "
              "321.23 GB/s at 1 GiB vs floor 320 GB/s"),
        Check("gpu-a", "smoke", "nccl_tests_busbw", "skip", None, None, "SKIPPED: no nvcc"),
        Check("gpu-b", "smoke", "intra_node", "pass", 466.667, 460.0,
              "PASS: correct all-reduce, DDP loss decreased, parameters identical; busbw "
              "466.67 GB/s at 1 GiB vs floor 460 GB/s"),
    ]
    assert report.smoke is not None
    assert {k: v for k, v in report.smoke.items() if k != "runs"} == {
        "simulated": False, "launcher": "slurm", "framework": "pytorch"}
    assert [r["label"] for r in report.smoke["runs"]] == [
        "intra-node gpu-a", "inter-node", "nccl-tests gpu-a", "intra-node gpu-b"]
    assert report.notes == []


def test_a_failed_nccl_tests_check_and_the_simulated_expectation(
        sim_plan: plan_mod.ClusterPlan, tmp_path: Path) -> None:
    gloo = {**RESULT, "backend": "gloo", "nodes": {"sim-gpu-1": [0, 1]}}
    reports = {"sim-gpu-1": {"smoke_job": {"passes": {
        "intra": {"rc": 0, "result": gloo, "log": []},
        "nccl_tests": {"rc": 0, "output": HEADER + row(GIB, 10.0)}}}}}
    report = Report("r", "smoke", "inv", simulated=True, started_at="t")
    assert smoke_launch.fold_results(sim_plan, report, tmp_path, reports, []) is False
    intra, nccl = report.checks
    assert (intra.name, intra.status, intra.expected) == ("intra_node", "pass",
                                                          "n/a (simulated)")
    assert (nccl.name, nccl.status, nccl.measured, nccl.expected) == (
        "nccl_tests_busbw", "fail", 10.0, 460.0)
    assert report.smoke is not None and report.smoke["launcher"] == "direct"
    assert report.smoke["framework"] == "pytorch" and report.smoke["simulated"] is True


@pytest.mark.parametrize(("unreachable", "note"), [
    ([], "the smoke job produced no results"),
    (["gpu-b", "gpu-a"], "the smoke job produced no results (unreachable: gpu-b, gpu-a)"),
])
def test_no_results_at_all_is_a_failure_with_a_note(real_plan: plan_mod.ClusterPlan,
                                                    tmp_path: Path, unreachable: list[str],
                                                    note: str) -> None:
    report = Report("r", "smoke", "inv", simulated=False, started_at="t")
    assert smoke_launch.fold_results(real_plan, report, tmp_path, {"gpu-a": {}}, unreachable) is False
    assert report.notes == [note]
    assert report.smoke == {"simulated": False, "launcher": "direct", "framework": "pytorch",
                            "runs": []}


def test_measured_values_are_rounded_to_three_places() -> None:
    assert smoke_launch._round(None) is None
    assert smoke_launch._round(1.23456) == 1.235
    assert smoke_launch._round(2.0) == 2.0


# --- the wheelhouse's platforms and address ----------------------------------------------------

@pytest.mark.parametrize(("missing", "named"), [
    (10, ", ".join(f"n{i:02d}" for i in range(10))),
    (12, ", ".join(f"n{i:02d}" for i in range(10)) + " and 2 more"),
])
def test_nodes_without_a_platform_are_named_up_to_ten(missing: int, named: str) -> None:
    from provisioner.wheelhouse import controller_platform

    hosts = [f"n{i:02d}" for i in range(missing)]
    platforms, notes = smoke_launch.platforms_of({}, hosts)
    guess = controller_platform()
    assert platforms == [guess]
    assert notes == [
        f"wheelhouse: no Python version or known machine (x86_64, aarch64) from {named}: "
        f"their wheels were built for the controller's platform ({guess.key}), which pip on "
        "those nodes refuses if their Python or machine differs"]


def _unresolvable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Name resolution fails as the resolver says for an unknown name (no query leaves the
    machine)."""
    import socket

    def fail(_host: str) -> str:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "gethostbyname", fail)


def test_no_route_to_a_node_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _unresolvable(monkeypatch)
    with pytest.raises(EnvironmentProblem) as err:
        smoke_launch._local_address_towards("no-such-node.invalid")
    assert str(err.value) == (
        "cannot find the controller's address towards node no-such-node.invalid (Name or "
        "service not known); check the node's ansible_host resolves and is routable from here")


# --- the survivors of a second mutation run ----------------------------------------------------

def test_every_pass_of_a_node_is_judged_whatever_its_order(real_plan: plan_mod.ClusterPlan,
                                                           tmp_path: Path) -> None:
    """nccl-tests first, and an inter pass without a result (rank 0 elsewhere) before the
    intra one: the passes after them are still judged; a host the plan does not have is
    judged without a floor; a missing run directory is made."""
    reports = {
        "gpu-a": {"smoke_job": {"passes": {
            "nccl_tests": {"rc": 0, "output": HEADER + row(GIB, 460.0)},
            "intra": {"rc": 0, "result": RESULT, "log": []}}}},
        "gpu-b": {"smoke_job": {"passes": {
            "inter": {"rc": 0, "result": None, "log": []},
            "intra": {"rc": 0, "result": {**RESULT, "allreduce": [
                {**RESULT["allreduce"][1], "busbw_gbps": 100.0}]}, "log": []}}}},
        "gpu-z": {"smoke_job": {"passes": {
            "inter": {"rc": 0, "result": {**RESULT, "label": "inter-node"}, "log": []}}}},
    }
    report = Report("r", "smoke", "inv", simulated=False, started_at="t")
    out = tmp_path / "not" / "yet"
    assert smoke_launch.fold_results(real_plan, report, out, reports, []) is False
    assert [(c.host, c.name, c.status, c.expected) for c in report.checks] == [
        # busbw exactly at the floor passes (the floor is a minimum).
        ("gpu-a", "nccl_tests_busbw", "pass", 460.0),
        ("gpu-a", "intra_node", "pass", 460.0),
        ("gpu-b", "intra_node", "fail", 460.0),
        ("gpu-z", "inter_node", "pass", None),
    ]
    assert report.checks[-1].detail == (
        "PASS: correct all-reduce, DDP loss decreased, parameters identical; floor skipped: "
        "no busbw floor configured")
    assert (out / "smoke" / "gpu-b-inter.log").is_file()


def test_a_simulated_pass_is_judged_as_simulated(sim_plan: plan_mod.ClusterPlan,
                                                 tmp_path: Path) -> None:
    reports = {"sim-gpu-1": {"smoke_job": {"passes": {
        "intra": {"rc": 0, "result": {**RESULT, "backend": "gloo"}, "log": []}}}}}
    report = Report("r", "smoke", "inv", simulated=True, started_at="t")
    assert smoke_launch.fold_results(sim_plan, report, tmp_path, reports, []) is True
    [check] = report.checks
    assert check.detail == ("PASS: correct all-reduce, DDP loss decreased, parameters "
                            "identical; floor skipped: simulated cluster: CPU gloo numbers, GPU "
                            "floor not applicable")


def test_the_pass_result_is_saved_as_indented_json(tmp_path: Path) -> None:
    smoke_launch._judge_pass("gpu-a", "intra", {"rc": 0, "result": RESULT}, 460.0, False,
                         tmp_path, [])
    assert (tmp_path / "gpu-a-intra.json").read_text() == json.dumps(RESULT, indent=2)


def test_every_failure_of_a_pass_is_in_its_summary(tmp_path: Path) -> None:
    bad = {**RESULT, "ddp": None, "allreduce": [
        {**RESULT["allreduce"][1], "busbw_gbps": 100.0, "correct": False}]}
    run = smoke_launch._judge_pass("gpu-a", "intra", {"rc": 0, "result": bad}, 460.0, False,
                               tmp_path, [])
    assert run["ddp"] is None
    failures = run["verdict"]["summary"].removeprefix("FAIL: ").split("; ")
    assert len(failures) == 3, run["verdict"]["summary"]
    assert failures == [
        "[intra-node] all-reduce gave wrong results at sizes 1 GiB",
        "[intra-node] the job did not run the DDP check",
        "[intra-node] all-reduce busbw 100.00 GB/s at 1 GiB (the largest size measured) is "
        "below the floor 460 GB/s on nodes gpu-a: check the interconnect (NCCL_DEBUG=INFO shows "
        "the transport chosen)"]
