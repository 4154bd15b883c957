"""Every field of the smoke judge's verdict, for every branch of the floor check: the floor,
the busbw compared, whether it passed, why it was skipped, the size judged, and the failure
line word for word. (A mutation run found that tests asserting `passed` alone let a verdict
lose its floor, its measured busbw or its size unnoticed.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provisioner.busbw import GLOO_SKIP_REASON
from provisioner.errors import InputError
from provisioner.smoke_judge import (
    NO_FLOOR_REASON,
    SIMULATED_SKIP_REASON,
    FloorCheck,
    SmokeResult,
    judge,
    load_smoke_result,
)
from tests.smoke.test_smoke_analysis import GIB, MIB, _row, variant


def result(**changes: Any) -> SmokeResult:
    return SmokeResult.model_validate(variant(**changes))


# GOOD measures 32 MiB .. 8 GiB; the judged point is 8 GiB at 180 GB/s.
@pytest.mark.parametrize(("changes", "floor", "simulated", "expected"), [
    ({}, 150.0, True, FloorCheck(150.0, 180.0, True, SIMULATED_SKIP_REASON, 8 * GIB)),
    ({"backend": "gloo"}, 150.0, False, FloorCheck(150.0, 180.0, True, GLOO_SKIP_REASON,
                                                   8 * GIB)),
    # TensorFlow's CPU collectives (RING) are no NCCL either: below a GPU floor, not judged by it.
    ({"backend": "ring", "framework": "tensorflow"}, 200.0, False,
     FloorCheck(200.0, 180.0, True, GLOO_SKIP_REASON, 8 * GIB)),
    ({}, None, False, FloorCheck(None, 180.0, True, NO_FLOOR_REASON, 8 * GIB)),
    ({}, 150.0, False, FloorCheck(150.0, 180.0, True, None, 8 * GIB)),
    ({}, 180.0, False, FloorCheck(180.0, 180.0, True, None, 8 * GIB)),  # the floor itself passes
    ({}, 200.0, False, FloorCheck(200.0, 180.0, False, None, 8 * GIB)),
    ({"allreduce": [_row(32 * MIB, 120.0), _row(256 * MIB, 160.0)]}, 150.0, False,
     FloorCheck(150.0, None, False)),
], ids=["simulated", "gloo", "tensorflow-ring", "no-floor", "above", "at", "below",
        "no-large-size"])
def test_the_floor_check_is_exact(changes: dict[str, Any], floor: float | None,
                                  simulated: bool, expected: FloorCheck) -> None:
    verdict = judge(result(**changes), floor, simulated)
    assert verdict.floor == expected
    assert verdict.passed is expected.passed
    assert [row.counts_for_floor for row in verdict.rows] == [
        row.bytes == expected.size_bytes for row in verdict.rows]


def test_a_missed_floor_says_where_word_for_word() -> None:
    verdict = judge(result(), 200.0, False)
    assert verdict.failures == (
        "[inter-node] all-reduce busbw 180.00 GB/s at 8 GiB (the largest size measured) is "
        "below the floor 200 GB/s on nodes gpu-a, gpu-b: check the interconnect "
        "(NCCL_DEBUG=INFO shows the transport chosen)",)


def test_no_large_size_says_so_word_for_word() -> None:
    verdict = judge(result(allreduce=[_row(32 * MIB, 120.0)], nodes={}), 150.0, False)
    assert verdict.failures == (
        "[inter-node] no all-reduce size >= 1 GiB was measured, so the busbw floor 150 GB/s "
        "cannot be checked on nodes (no nodes reported); run the job with sizes up to 8G (or "
        "the largest the GPUs' memory allows)",)


GOOD_DDP = {"steps": 20, "loss_first": 3.1, "loss_last": 0.4, "decreased": True,
            "params_identical": True}


@pytest.mark.parametrize(("changes", "failures"), [
    ({"allreduce": []},
     ("[inter-node] the job measured no all-reduce (it stopped before that step)",)),
    ({"allreduce": [_row(32 * MIB, 120.0, correct=False), _row(GIB, 175.0, correct=False),
                    _row(8 * GIB, 180.0)]},
     ("[inter-node] all-reduce gave wrong results at sizes 32 MiB, 1 GiB",)),
    ({"ddp": None}, ("[inter-node] the job did not run the DDP check",)),
    ({"ddp": None, "framework": "tensorflow"},
     ("[inter-node] the job did not run the Keras (MultiWorkerMirroredStrategy) check",)),
    ({"ddp": {**GOOD_DDP, "params_identical": False}},
     ("[inter-node] DDP parameters differ between ranks after training",)),
    ({"ddp": {**GOOD_DDP, "decreased": False, "loss_last": 3.2}},
     ("[inter-node] DDP loss did not decrease (3.1 -> 3.2)",)),
    ({"ok": False}, ("[inter-node] the job reported failure without an error message",)),
    ({"ok": False, "errors": ["rank 3 on gpu-a: NCCL error"], "ddp": None},
     ("[inter-node] job: rank 3 on gpu-a: NCCL error",)),
], ids=["no-allreduce", "wrong-sizes", "no-ddp", "no-keras", "params", "loss", "not-ok",
        "job-error"])
def test_each_failure_line_word_for_word(changes: dict[str, Any],
                                         failures: tuple[str, ...]) -> None:
    assert judge(result(**changes), 150.0, False).failures == failures


def test_no_allreduce_leaves_the_floor_unjudged_and_says_why() -> None:
    verdict = judge(result(allreduce=[]), 150.0, False)
    assert verdict.floor == FloorCheck(150.0, None, False, "the job measured no all-reduce")
    assert verdict.rows == ()


@pytest.mark.parametrize(("content", "message"), [
    ("[1, 2]", "smoke report must be a JSON object, got list"),
    (json.dumps(variant(schema=2)),
     "smoke report schema 2 is not 1; the job on the nodes and this controller are from "
     "different versions"),
    (json.dumps(variant(ranks=[{"rank": -1, "local_rank": 0, "hostname": "gpu-a",
                                "device": "cuda:0", "cuda_device_count": 8}])),
     "smoke report field 'ranks.0.rank': Input should be greater than or equal to 0 "
     "(1 problem(s) in total)"),
], ids=["not-an-object", "schema", "nested-field"])
def test_a_broken_report_is_one_exact_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "smoke.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_smoke_result(path)
    assert str(err.value) == f"{path}: {message}"


def test_a_missing_or_unreadable_report_is_one_exact_line(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(InputError) as err:
        load_smoke_result(missing)
    assert str(err.value) == (f"{missing}: smoke report not found; the job's rank 0 did not "
                              "write it (see the job's log on the first node)")
    with pytest.raises(InputError) as err:
        load_smoke_result(tmp_path)  # a directory: read_text fails with EISDIR
    assert str(err.value) == f"{tmp_path}: cannot read smoke report: Is a directory"



def test_the_verdict_names_the_job_it_judged() -> None:
    verdict = judge(result(label="intra-node", backend="nccl"), 150.0, False)
    assert (verdict.label, verdict.backend, verdict.world_size, verdict.nodes) == (
        "intra-node", "nccl", 16, ("gpu-a", "gpu-b"))
