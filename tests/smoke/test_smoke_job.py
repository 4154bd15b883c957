"""Run the real smoke job under torchrun with CPU (gloo) processes on localhost."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from provisioner.smoke_judge import judge, load_smoke_result

JOB = Path(__file__).resolve().parents[2] / "roles" / "smoke_job" / "files" / "gpuc_smoke.py"
NPROC = 2


def run_job(
    tmp_path: Path, *args: str, env_extra: dict[str, str] | None = None,
    timeout_s: float = 120, nproc: int = NPROC,
) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_SMOKE_", "NCCL_"))}
    env.update(GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1",
               **(env_extra or {}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc-per-node", str(nproc), str(JOB), "--backend", "gloo", *args]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    return proc, time.monotonic() - start


def read_report(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_two_ranks_pass_and_report_consistent_numbers(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc, _ = run_job(tmp_path, "--sizes", "8K,64K,1M,4M", "--warmup", "2", "--iters", "5",
                      "--ddp-steps", "8", "--label", "intra-node", "--timeout-s", "30",
                      "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(out)
    assert report["schema"] == 1
    assert report["ok"] is True
    assert report["errors"] == []
    assert report["label"] == "intra-node"
    assert report["backend"] == "gloo"
    assert report["world_size"] == NPROC
    assert report["nnodes"] == 1
    assert sorted(r for ranks in report["nodes"].values() for r in ranks) == [0, 1]
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert [r["local_rank"] for r in report["ranks"]] == [0, 1]
    assert all(r["device"] == "cpu" and r["cuda_device_count"] == 0 for r in report["ranks"])
    rows = report["allreduce"]
    assert [row["bytes"] for row in rows] == [8192, 65536, 1 << 20, 4 << 20]
    n = report["world_size"]
    for row in rows:
        assert row["correct"] is True
        assert row["time_us"] > 0
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / (row["time_us"] * 1e-6) / 1e9,
                                                  rel=1e-6)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * (n - 1) / n,
                                                  rel=1e-9)
    ddp = report["ddp"]
    assert ddp["decreased"] is True
    assert ddp["loss_last"] < ddp["loss_first"]
    assert ddp["params_identical"] is True
    assert len(set(ddp["param_checksums"])) == 1
    assert "RESULT: OK" in proc.stdout
    assert "busbw" in proc.stdout
    # The controller reads what the job writes.
    verdict = judge(load_smoke_result(out), floor_gbps=100.0, simulated=True)
    assert verdict.passed, verdict.failures
    assert verdict.floor.skipped_reason is not None


def test_three_ranks_use_the_bus_bandwidth_factor(tmp_path: Path) -> None:
    """With 2 ranks busbw == algbw (2(n-1)/n = 1); 3 ranks tell the formula apart."""
    out = tmp_path / "result.json"
    proc, _ = run_job(tmp_path, "--sizes", "64K,1M", "--warmup", "1", "--iters", "3",
                      "--ddp-steps", "3", "--timeout-s", "30", "--output", str(out), nproc=3)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(out)
    assert report["world_size"] == 3
    for row in report["allreduce"]:
        assert row["correct"] is True
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 4 / 3, rel=1e-9)
    assert report["ddp"]["params_identical"] is True


def test_missing_gpus_fail_with_error_in_report(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc, _ = run_job(tmp_path, "--expect-gpus-per-node", "8", "--sizes", "8K",
                      "--timeout-s", "30", "--output", str(out))
    assert proc.returncode == 1
    report = read_report(out)
    assert report["ok"] is False
    assert report["allreduce"] == []
    assert len(report["errors"]) == 1
    assert "--expect-gpus-per-node 8" in report["errors"][0]
    assert "sees 0" in report["errors"][0]


def test_corrupted_data_on_one_rank_is_detected(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    proc, _ = run_job(tmp_path, "--sizes", "8K,1M", "--warmup", "1", "--iters", "2",
                      "--ddp-steps", "3", "--timeout-s", "30", "--output", str(out),
                      env_extra={"GPUC_SMOKE_TEST_FAULT": "corrupt",
                                 "GPUC_SMOKE_TEST_FAULT_RANK": "1"})
    assert proc.returncode == 1
    report = read_report(out)
    assert report["ok"] is False
    assert [row["correct"] for row in report["allreduce"]] == [False, False]
    assert "all-reduce 8 KiB: wrong result on ranks [1]" in report["errors"]
    assert report["ddp"]["params_identical"] is False
    assert any("DDP parameters differ from rank 0 on ranks [1]" in e for e in report["errors"])
    verdict = judge(load_smoke_result(out), floor_gbps=None, simulated=True)
    assert not verdict.passed


@pytest.mark.parametrize("fault", ["exit", "hang"])
def test_lost_peer_ends_the_job_instead_of_hanging(tmp_path: Path, fault: str) -> None:
    """Rank 1 leaves quietly (exit 0, so torchrun does not stop rank 0) or stops responding:
    rank 0 must fail within the collective timeout and say so in the report."""
    out = tmp_path / "result.json"
    proc, elapsed = run_job(tmp_path, "--sizes", "8K", "--timeout-s", "8",
                            "--output", str(out), timeout_s=90,
                            env_extra={"GPUC_SMOKE_TEST_FAULT": fault,
                                       "GPUC_SMOKE_TEST_FAULT_RANK": "1"})
    assert proc.returncode != 0
    assert elapsed < 60
    assert "a peer is probably dead, hung or unreachable" in proc.stderr
    report = read_report(out)
    assert report["ok"] is False
    assert any("rank 0" in err and "all-reduce 8 KiB" in err for err in report["errors"])


def test_watchdog_exits_when_nothing_progresses() -> None:
    """The backstop for hangs the backend never reports (e.g. a wedged GPU)."""
    code = (
        "import importlib.util, sys, time\n"
        f"spec = importlib.util.spec_from_file_location('gpuc_smoke', {str(JOB)!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "mod.Watchdog(rank=3, limit_s=1.0).kick('all-reduce 1 MiB (timed)')\n"
        "time.sleep(30)\n"
        "sys.exit(0)\n"
    )
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 1
    assert time.monotonic() - start < 20
    assert "rank 3" in proc.stderr
    assert "all-reduce 1 MiB (timed)" in proc.stderr


def test_sizes_are_parsed_in_binary_units() -> None:
    spec = importlib.util.spec_from_file_location("gpuc_smoke", JOB)
    assert spec is not None and spec.loader is not None
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    assert job.parse_sizes("8K,64K,1M,8M,32M,4096") == [8192, 65536, 1 << 20, 8 << 20,
                                                        32 << 20, 4096]
    assert job.parse_size("2MiB") == 2 << 20
    for bad in ("3", "1T", "0", "abc"):
        with pytest.raises(argparse.ArgumentTypeError):
            job.parse_size(bad)
    assert job.human_size(32 << 20) == "32 MiB"
