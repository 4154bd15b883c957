"""The TensorFlow smoke job (roles/smoke_job/files/gpuc_smoke_tf.py).

Its cluster helpers (TF_CONFIG from the role's worker list, from a TF_CONFIG in the
environment, from srun's environment) are plain Python, tested here without TensorFlow. The
job itself runs for real as two local worker processes on CPU (RING collectives over gRPC on
localhost) when an interpreter with TensorFlow is at hand: this one (the project's venv carries
tensorflow-cpu==2.21.0, the Makefile installs it), or the one named by GPUC_SMOKE_TF_PYTHON.
Without one those tests skip. TensorFlow is only ever imported by those worker processes,
never by the test process.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from provisioner import busbw
from provisioner.smoke_judge import judge, load_smoke_result

JOB = Path(__file__).resolve().parents[2] / "roles" / "smoke_job" / "files" / "gpuc_smoke_tf.py"
TORCH_JOB = JOB.with_name("gpuc_smoke.py")


def load(path: Path = JOB) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def job_without_tensorflow() -> ModuleType:
    """The job's module, proven not to import TensorFlow at import time."""
    before = set(sys.modules)
    job = load()
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] == "tensorflow"}
    return job


# -- the cluster helpers, no TensorFlow needed ---------------------------------------------------
def test_tf_config_lists_the_workers_in_order_and_names_this_one() -> None:
    job = job_without_tensorflow()
    workers = job.parse_workers("10.0.0.5:29500, 10.0.0.6:29500")
    assert job.tf_config(workers, 1) == {
        "cluster": {"worker": ["10.0.0.5:29500", "10.0.0.6:29500"]},
        "task": {"type": "worker", "index": 1}}
    with pytest.raises(job.ClusterError, match="task index 2 is outside the 2 worker"):
        job.tf_config(workers, 2)


@pytest.mark.parametrize(("text", "message"), [
    ("", "--workers is empty"),
    ("10.0.0.5", "is not host:port"),
    ("10.0.0.5:0", "is not host:port"),
    ("10.0.0.5:70000", "is not host:port"),
    ("a:1,a:1", "names an address twice"),
])
def test_bad_worker_lists_are_refused(text: str, message: str) -> None:
    job = job_without_tensorflow()
    with pytest.raises(job.ClusterError, match=message):
        job.parse_workers(text)


def test_a_tf_config_from_the_environment_is_checked() -> None:
    job = job_without_tensorflow()
    good = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}
    assert job.read_tf_config(json.dumps(good)) == good
    with pytest.raises(job.ClusterError, match="not JSON"):
        job.read_tf_config("{")
    with pytest.raises(job.ClusterError, match="worker` list only"):
        job.read_tf_config(json.dumps({**good, "cluster": {"worker": ["a:1"], "chief": ["c:3"]}}))
    with pytest.raises(job.ClusterError, match='"type": "worker"'):
        job.read_tf_config(json.dumps({**good, "task": {"type": "chief", "index": 0}}))


@pytest.mark.parametrize(("hostlist", "hosts"), [
    ("sim-gpu-1", ["sim-gpu-1"]),
    ("sim-gpu-[1-2]", ["sim-gpu-1", "sim-gpu-2"]),
    ("n[1-2],m5,o[3-4,6,7-9]", ["n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9"]),
    ("gpu[08-11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),
    ("rack[1-2]-gpu[1-2]", ["rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]),
    ("gpu-b,gpu-a", ["gpu-b", "gpu-a"]),  # Slurm's order is kept, never sorted
])
def test_slurm_hostlists_expand_in_their_order(hostlist: str, hosts: list[str]) -> None:
    assert job_without_tensorflow().expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("hostlist", ["n[1-2", "n1-2]", "n[2-1]", "n[a-b]", "a,,b", "n[1-2-3]"])
def test_bad_hostlists_are_refused(hostlist: str) -> None:
    job = job_without_tensorflow()
    with pytest.raises(job.ClusterError, match="hostlist"):
        job.expand_hostlist(hostlist)


def test_tf_config_from_srun_places_this_node_by_name() -> None:
    job = job_without_tensorflow()
    env = {"SLURM_STEP_NODELIST": "sim-gpu-[1-2]", "SLURM_STEP_NUM_TASKS": "2",
           "SLURMD_NODENAME": "sim-gpu-2", "SLURM_PROCID": "0"}
    addresses = job.parse_addresses("sim-gpu-1=10.89.0.3:29500,sim-gpu-2=10.89.0.4", 29600)
    assert addresses == {"sim-gpu-1": "10.89.0.3:29500", "sim-gpu-2": "10.89.0.4:29600"}
    # The node's own name decides its index, even where SLURM_PROCID says otherwise.
    assert job.tf_config_from_slurm(env, 29600, addresses) == {
        "cluster": {"worker": ["10.89.0.3:29500", "10.89.0.4:29600"]},
        "task": {"type": "worker", "index": 1}}
    # Without addresses the Slurm names are the hosts; without SLURMD_NODENAME the proc id.
    bare = {"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_NTASKS": "3", "SLURM_PROCID": "2"}
    assert job.tf_config_from_slurm(bare, 2222) == {
        "cluster": {"worker": ["n1:2222", "n2:2222", "n3:2222"]},
        "task": {"type": "worker", "index": 2}}


@pytest.mark.parametrize(("env", "message"), [
    ({}, "SLURM_STEP_NODELIST is not set"),
    ({"SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "0"},
     "4 tasks on 2 node"),
    ({"SLURM_STEP_NODELIST": "n[1-2]", "SLURMD_NODENAME": "n7"}, "n7 is not in the step"),
    ({"SLURM_STEP_NODELIST": "n[1-2]"}, "neither SLURMD_NODENAME nor SLURM_PROCID"),
    ({"SLURM_STEP_NODELIST": "n1,n1", "SLURM_PROCID": "0"}, "names a node twice"),
])
def test_srun_environments_that_cannot_work_are_refused(env: dict[str, str],
                                                        message: str) -> None:
    job = job_without_tensorflow()
    with pytest.raises(job.ClusterError, match=message):
        job.tf_config_from_slurm(env, 29500)


def test_one_worker_runs_without_a_cluster() -> None:
    job = job_without_tensorflow()
    args = job.build_parser().parse_args(["--workers", "10.0.0.5:29500"])
    assert job.resolve_cluster(args, {}) is None
    args = job.build_parser().parse_args(["--slurm"])
    assert job.resolve_cluster(args, {"SLURM_STEP_NODELIST": "n1", "SLURM_PROCID": "0"}) is None
    args = job.build_parser().parse_args([])
    assert job.resolve_cluster(args, {}) is None
    two = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    assert job.resolve_cluster(args, {"TF_CONFIG": json.dumps(two)}) == two


def test_bad_cluster_arguments_exit_2_before_tensorflow_loads(
        capsys: pytest.CaptureFixture[str]) -> None:
    job = job_without_tensorflow()
    assert job.main(["--workers", "a:1,b:2", "--task-index", "5"]) == 2
    assert "task index 5 is outside the 2 worker(s)" in capsys.readouterr().err


def _constants(path: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def test_both_jobs_share_the_size_policy_and_parsing() -> None:
    tf_job, torch_job = job_without_tensorflow(), _constants(TORCH_JOB)
    assert (tf_job.GPU_SIZES, tf_job.CPU_SIZES) == (busbw.GPU_SIZES, busbw.CPU_SIZES)
    assert tf_job.FLOOR_MIN_BYTES == busbw.FLOOR_MIN_BYTES
    for name in ("SCHEMA", "GPU_SIZES", "CPU_SIZES", "FAULT_ENV", "FAULT_RANK_ENV",
                 "MEMORY_FACTOR"):
        assert getattr(tf_job, name) == torch_job[name], name
    assert tf_job.parse_sizes("8K,64K,1M,8M,32M,4096") == [8192, 65536, 1 << 20, 8 << 20,
                                                           32 << 20, 4096]
    for bad in ("3", "1T", "0", "abc"):
        with pytest.raises(argparse.ArgumentTypeError):
            tf_job.parse_size(bad)


# -- the job for real: two workers on localhost --------------------------------------------------
def _tf_python() -> str | None:
    """An interpreter that can import tensorflow: GPUC_SMOKE_TF_PYTHON, else this one."""
    python = os.environ.get("GPUC_SMOKE_TF_PYTHON") or sys.executable
    try:
        probe = subprocess.run([python, "-c", "import importlib.util, sys; sys.exit("
                                "importlib.util.find_spec('tensorflow') is None)"],
                               capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return python if probe.returncode == 0 else None


TF_PYTHON = _tf_python()
needs_tf = pytest.mark.skipif(TF_PYTHON is None, reason="tensorflow is not importable (set "
                              "GPUC_SMOKE_TF_PYTHON to a python with tensorflow-cpu==2.21.0)")


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def run_workers(tmp_path: Path, per_worker: list[tuple[list[str], dict[str, str]]],
                *common: str, env_extra: dict[str, str] | None = None,
                timeout_s: float = 240) -> tuple[list[subprocess.CompletedProcess[str]], float]:
    """Start one job process per worker (its own arguments and environment), wait for all."""
    assert TF_PYTHON is not None
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("GPUC_SMOKE_", "SLURM", "TF_CONFIG", "NCCL_"))}
    base.update(TF_CPP_MIN_LOG_LEVEL="1", CUDA_VISIBLE_DEVICES="", **(env_extra or {}))
    procs = []
    start = time.monotonic()
    for number, (args, env) in enumerate(per_worker):
        out = (tmp_path / f"worker{number}.log").open("w")
        procs.append((subprocess.Popen([TF_PYTHON, str(JOB), *args, *common], cwd=tmp_path,
                                       env={**base, **env}, stdout=out,
                                       stderr=subprocess.STDOUT, text=True), out))
    done = []
    for proc, out in procs:
        try:
            proc.wait(timeout=max(1.0, timeout_s - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
        log = Path(out.name).read_text()
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, log, log))
    return done, time.monotonic() - start


def two_workers(tmp_path: Path, *common: str, **kwargs: Any) -> tuple[
        list[subprocess.CompletedProcess[str]], float]:
    workers = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
    return run_workers(tmp_path, [(["--workers", workers, "--task-index", str(i)], {})
                                  for i in range(2)], *common, **kwargs)


QUICK = ("--sizes", "8K,64K,1M", "--warmup", "1", "--iters", "3", "--ddp-steps", "6",
         "--timeout-s", "30")


@needs_tf
def test_two_workers_pass_and_report_what_the_controller_judges(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    procs, _ = two_workers(tmp_path, *QUICK, "--label", "inter-node", "--output", str(out))
    for proc in procs:
        assert proc.returncode == 0, proc.stdout[-4000:]
    report = json.loads(out.read_text())
    assert report["schema"] == 1 and report["framework"] == "tensorflow"
    assert report["ok"] is True and report["errors"] == []
    assert report["label"] == "inter-node" and report["backend"] == "ring"
    assert report["world_size"] == 2 and report["tensorflow_version"].startswith("2.")
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert [r["node_rank"] for r in report["ranks"]] == [0, 1]
    assert all(r["cuda_device_count"] == 0 and r["device_name"] == "cpu"
               for r in report["ranks"])
    assert "/task:1/" in report["ranks"][1]["device"]
    rows = report["allreduce"]
    assert [row["bytes"] for row in rows] == [8192, 65536, 1 << 20]
    for row in rows:
        # The same fields as gpuc_smoke.py, by the same conventions (2 ranks: busbw = algbw).
        assert set(row) == {"bytes", "size", "count", "time_us", "algbw_gbps", "busbw_gbps",
                            "correct"}
        assert row["correct"] is True and row["time_us"] > 0
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / (row["time_us"] * 1e-6) / 1e9,
                                                  rel=1e-6)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"], rel=1e-9)
    training = report["ddp"]
    assert training["steps"] == 6 and training["decreased"] is True
    assert training["loss_last"] < training["loss_first"]
    assert training["params_identical"] is True and len(set(training["param_checksums"])) == 1
    assert "RESULT: OK" in procs[0].stdout
    verdict = judge(load_smoke_result(out), floor_gbps=100.0, simulated=True)
    assert verdict.passed, verdict.failures


@needs_tf
def test_workers_under_srun_find_their_place_in_the_node_list(tmp_path: Path) -> None:
    """What srun gives each task (SLURM_STEP_NODELIST, SLURMD_NODENAME...), the addresses as
    the role passes them; here both "nodes" are this machine, on two ports."""
    out = tmp_path / "result.json"
    ports = free_ports(2)
    addresses = f"gpu-b=127.0.0.1:{ports[0]},gpu-a=127.0.0.1:{ports[1]}"
    step = {"SLURM_STEP_NODELIST": "gpu-b,gpu-a", "SLURM_STEP_NUM_TASKS": "2"}
    # Started in the other order: each finds its index by its node name.
    procs, _ = run_workers(tmp_path, [
        (["--slurm", "--node-addresses", addresses],
         {**step, "SLURMD_NODENAME": "gpu-a", "SLURM_PROCID": "1"}),
        (["--slurm", "--node-addresses", addresses],
         {**step, "SLURMD_NODENAME": "gpu-b", "SLURM_PROCID": "0"}),
    ], *QUICK, "--output", str(out))
    for proc in procs:
        assert proc.returncode == 0, proc.stdout[-4000:]
    report = json.loads(out.read_text())
    assert report["ok"] is True and report["world_size"] == 2
    assert report["workers"] == [f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"]


@needs_tf
def test_wrong_data_on_one_worker_is_detected(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    procs, _ = two_workers(tmp_path, *QUICK, "--output", str(out),
                           env_extra={"GPUC_SMOKE_TEST_FAULT": "corrupt",
                                      "GPUC_SMOKE_TEST_FAULT_RANK": "1"})
    assert [p.returncode for p in procs] == [1, 1]
    report = json.loads(out.read_text())
    assert report["ok"] is False
    assert [row["correct"] for row in report["allreduce"]] == [False, False, False]
    assert "all-reduce 8 KiB: wrong result on ranks [1]" in report["errors"]
    assert report["ddp"]["params_identical"] is False
    assert any("weights differ from rank 0 on ranks [1]" in e for e in report["errors"])
    verdict = judge(load_smoke_result(out), floor_gbps=None, simulated=True)
    assert not verdict.passed
    assert any("Keras (MultiWorkerMirroredStrategy) parameters differ" in f
               for f in verdict.failures)


@needs_tf
def test_a_lost_peer_ends_the_job_instead_of_hanging(tmp_path: Path) -> None:
    """Worker 1 leaves quietly after the inventory: worker 0 fails within the collective
    timeout and says so in the report."""
    out = tmp_path / "result.json"
    procs, elapsed = two_workers(tmp_path, "--sizes", "8K", "--timeout-s", "8", "--output",
                                 str(out), env_extra={"GPUC_SMOKE_TEST_FAULT": "exit",
                                                      "GPUC_SMOKE_TEST_FAULT_RANK": "1"},
                                 timeout_s=120)
    assert procs[0].returncode == 1
    assert elapsed < 90
    assert "a peer is probably dead, hung or unreachable" in procs[0].stdout
    report = json.loads(out.read_text())
    assert report["ok"] is False
    assert any("worker 0" in err and "all-reduce 8 KiB" in err for err in report["errors"])
