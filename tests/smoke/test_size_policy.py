"""One size policy: the job copied to nodes alone holds the same constants as provisioner.busbw,
and every judge (smoke, nccl-tests, inspect) compares the busbw at the largest size >= 1 GiB."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from provisioner import busbw
from provisioner.inspect import check_against_profile, inspect_file
from provisioner.profiles import load_profiles
from provisioner.smoke_launch import judge_nccl_tests

JOB = Path(__file__).resolve().parents[2] / "roles/smoke_job/files/gpuc_smoke.py"
GIB = 1 << 30


def _job_constants() -> dict[str, object]:
    tree = ast.parse(JOB.read_text(encoding="utf-8"))
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return out


def test_job_and_controller_share_the_size_policy() -> None:
    consts = _job_constants()
    assert consts["GPU_SIZES"] == busbw.GPU_SIZES
    assert consts["CPU_SIZES"] == busbw.CPU_SIZES
    assert busbw.FLOOR_MIN_BYTES == GIB
    # On GPUs the default reaches 8 GiB, where the floors are defined.
    assert busbw.GPU_SIZES.split(",")[-1] == "8G"
    assert max(int(s[:-1]) for s in busbw.CPU_SIZES.split(",") if s.endswith("M")) < 1024


def test_judged_point_is_the_largest_size_averaged() -> None:
    point = busbw.judged_point([(32 << 20, 900.0), (GIB, 400.0), (8 * GIB, 470.0),
                                (8 * GIB, 472.0)])
    assert point == busbw.FloorPoint(8 * GIB, 471.0)
    assert busbw.judged_point([(32 << 20, 900.0), (GIB - 4, 800.0)]) is None
    assert busbw.judged_point([(GIB, None), (2 * GIB, 10.0)]) == busbw.FloorPoint(2 * GIB, 10.0)


def _table(rows: list[tuple[int, float]]) -> str:
    """nccl-tests 2.x all_reduce_perf text output (the real column layout)."""
    head = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 "
            "iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n"
            + "".join(f"#  Rank  {r} Group  0 Pid   4242 on    gpu-a device  {r} [0x{r:02x}] "
                      "NVIDIA H100 80GB HBM3\n" for r in range(8))
            + "#\n#                                                              out-of-place"
              "                       in-place          \n"
              "#       size         count      type   redop    root     time   algbw   busbw "
              "#wrong     time   algbw   busbw #wrong\n"
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
              "          (us)  (GB/s)  (GB/s)       \n")
    body = ""
    for size, bus in rows:
        alg = bus * 8 / 14
        t = size / alg / 1e3
        body += (f"{size:>12} {size // 4:>13}     float     sum      -1 {t:>8.1f} {alg:>7.2f} "
                 f"{bus:>7.2f}      0 {t:>8.1f} {alg:>7.2f} {bus:>7.2f}      0\n")
    avg = sum(b for _, b in rows) / len(rows)
    return head + body + f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {avg:.4f} \n#\n"


H100 = [(32 << 20, 235.0), (256 << 20, 380.0), (GIB, 440.0), (2 * GIB, 455.0),
        (4 * GIB, 465.0), (8 * GIB, 470.0)]


@pytest.mark.parametrize(("last", "passed"), [(470.0, True), (300.0, False)])
def test_nccl_tests_h100_shape_judged_at_8gib(last: float, passed: bool) -> None:
    floor = load_profiles()["hgx-h100-8gpu"].busbw_floor_intra_gbps
    run = judge_nccl_tests("nccl-tests gpu-a", "gpu-a", _table([*H100[:-1], (8 * GIB, last)]),
                           0, floor)
    assert run["verdict"]["passed"] is passed, run["verdict"]["summary"]
    assert run["verdict"]["best_busbw_gbps"] == pytest.approx(last)
    assert "at 8 GiB vs floor 460 GB/s" in run["verdict"]["summary"]


def test_inspect_uses_the_same_policy(tmp_path: Path) -> None:
    profile = load_profiles()["hgx-h100-8gpu"]
    for last, status in ((470.0, "pass"), (300.0, "fail")):
        path = tmp_path / f"h100-{last}.txt"
        path.write_text(_table([*H100[:-1], (8 * GIB, last)]))
        [check] = check_against_profile(inspect_file(path), profile)
        assert check["status"] == status and check["measured"] == pytest.approx(last)


def test_nccl_tests_failed_run_or_garbage_fails() -> None:
    bad = judge_nccl_tests("x", "gpu-a", _table(H100), 1, 460.0)
    assert not bad["verdict"]["passed"] and "exit 1" in bad["verdict"]["summary"]
    junk = judge_nccl_tests("x", "gpu-a", "all_reduce_perf: command not found\n", 127, 460.0)
    assert not junk["verdict"]["passed"]


def test_real_a100_capture_passes_the_azure_a100_floor(captures: Path) -> None:
    text = (captures / "nccl-tests" / "a100-sxm4-40gb-8gpu-allreduce.txt").read_text()
    floor = load_profiles()["hgx-a100-8gpu"].busbw_floor_intra_gbps
    run = judge_nccl_tests("nccl-tests localhost", "localhost", text, 0, floor)
    # 235.26 / 235.03 GB/s at 8 GiB in the capture, against Azure's 228.
    assert run["verdict"]["passed"], run["verdict"]["summary"]
    assert run["verdict"]["best_busbw_gbps"] == pytest.approx((235.26 + 235.03) / 2)
    assert not judge_nccl_tests("x", "localhost", text, 0, 240.0)["verdict"]["passed"]
