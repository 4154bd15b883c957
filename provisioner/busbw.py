"""The one policy for judging all-reduce bus bandwidth against the profiles' floors.

The floors in ``data/profiles.yml`` are the figure Azure's node health checks read: nccl-tests
``all_reduce_perf`` at one large message (16 GiB on H100/H200, 8 GiB on A100), one rank per GPU,
NCCL's default algorithm, the "Avg bus bandwidth" line, which for a single size is the mean of
the out-of-place and in-place busbw. Smaller messages measure latency and protocol choice, not
the links: a healthy 8x H100 reaches about 235 GB/s at 32 MiB and about 470 GB/s at 8 GiB.

So every judge here (the smoke job, nccl-tests run on the nodes, ``provisioner inspect``) takes
the busbw at the *largest* measured size, which must be at least :data:`FLOOR_MIN_BYTES`
(mean of the values measured at that size), and compares it with the floor. On CPU (gloo)
nothing is compared: only correctness is judged there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

GIB = 1 << 30
# Sizes below this never count for a floor.
FLOOR_MIN_BYTES = GIB
# What the smoke job runs when no sizes are given. GPU: up to 8 GiB (the job drops sizes a GPU
# has no memory for, and fails when none >= FLOOR_MIN_BYTES is left); CPU: small sizes, since
# gloo numbers are never compared with a floor. roles/smoke_job/files/gpuc_smoke.py holds the
# same strings (it is copied to nodes alone); tests/smoke checks they agree.
GPU_SIZES = "32M,256M,1G,2G,4G,8G"
CPU_SIZES = "8K,64K,1M,8M,32M"
# nccl-tests on a node: the sweep the reference logs use, judged by the same rule.
NCCL_TESTS_ARGS = ("-b", "8", "-e", "8G", "-f", "2", "-g", "1")
GLOO_SKIP_REASON = "CPU (gloo) backend: only correctness is judged, no busbw floor applies"


@dataclass(frozen=True)
class FloorPoint:
    """The measurement a floor is compared with: busbw (GB/s) at ``size_bytes``."""

    size_bytes: int
    busbw_gbps: float


def judged_point(samples: Iterable[tuple[int, float | None]]) -> FloorPoint | None:
    """``(size, busbw)`` samples -> the busbw at the largest size >= :data:`FLOOR_MIN_BYTES`.

    Several samples of one size (nccl-tests' out-of-place and in-place halves) are averaged,
    as nccl-tests' "Avg bus bandwidth" does. ``None`` when no such size was measured.
    """
    big = [(size, bw) for size, bw in samples if size >= FLOOR_MIN_BYTES and bw is not None]
    if not big:
        return None
    largest = max(size for size, _ in big)
    values = [bw for size, bw in big if size == largest]
    return FloorPoint(largest, sum(values) / len(values))


def human_size(size: int) -> str:
    """``1048576`` -> ``1 MiB``; sizes that are not a whole unit stay in bytes."""
    for unit, factor in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"
