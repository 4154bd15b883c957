"""Every field of the smoke judge's verdict, for every branch of the floor check: the floor,
the busbw compared, whether it passed, why it was skipped, the size judged, and the failure
line word for word. (A mutation run found that tests asserting `passed` alone let a verdict
lose its floor, its measured busbw or its size unnoticed.)"""

from __future__ import annotations

from typing import Any

import pytest

from provisioner.busbw import GLOO_SKIP_REASON
from provisioner.smoke import (
    NO_FLOOR_REASON,
    SIMULATED_SKIP_REASON,
    FloorCheck,
    SmokeResult,
    judge,
)
from tests.smoke.test_smoke_analysis import GIB, MIB, _row, variant


def result(**changes: Any) -> SmokeResult:
    return SmokeResult.model_validate(variant(**changes))


# GOOD measures 32 MiB .. 8 GiB; the judged point is 8 GiB at 180 GB/s.
@pytest.mark.parametrize(("changes", "floor", "simulated", "expected"), [
    ({}, 150.0, True, FloorCheck(150.0, 180.0, True, SIMULATED_SKIP_REASON, 8 * GIB)),
    ({"backend": "gloo"}, 150.0, False, FloorCheck(150.0, 180.0, True, GLOO_SKIP_REASON,
                                                   8 * GIB)),
    ({}, None, False, FloorCheck(None, 180.0, True, NO_FLOOR_REASON, 8 * GIB)),
    ({}, 150.0, False, FloorCheck(150.0, 180.0, True, None, 8 * GIB)),
    ({}, 180.0, False, FloorCheck(180.0, 180.0, True, None, 8 * GIB)),  # the floor itself passes
    ({}, 200.0, False, FloorCheck(200.0, 180.0, False, None, 8 * GIB)),
    ({"allreduce": [_row(32 * MIB, 120.0), _row(256 * MIB, 160.0)]}, 150.0, False,
     FloorCheck(150.0, None, False)),
], ids=["simulated", "gloo", "no-floor", "above", "at", "below", "no-large-size"])
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
