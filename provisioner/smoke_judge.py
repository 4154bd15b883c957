"""Read the distributed smoke job's JSON report and judge it against the cluster's floors.

The job (``roles/smoke_job/files/gpuc_smoke.py``) runs on the nodes and writes one JSON file
from rank 0; the controller fetches it and calls :func:`load_smoke_result` then :func:`judge`.
Correctness and DDP checks always apply. The bus-bandwidth floor is judged by the one policy of
:mod:`provisioner.busbw` (busbw at the largest size, which must be >= 1 GiB), shared with
nccl-tests and ``provisioner inspect``; it is skipped for gloo on CPU (correctness only) and on
a simulated cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provisioner.busbw import FLOOR_MIN_BYTES, GLOO_SKIP_REASON, human_size, judged_point
from provisioner.errors import InputError

SCHEMA_VERSION = 1
SIMULATED_SKIP_REASON = "simulated cluster: CPU gloo numbers, GPU floor not applicable"
NO_FLOOR_REASON = "no busbw floor configured"
# An all-reduce over one rank moves no data: nccl-tests' bus bandwidth factor 2(n-1)/n is 0, and
# the algorithm bandwidth is the time of a no-op (seen on a lent H200: "369855 GB/s" at 8 GiB).
ONE_RANK_SKIP_REASON = ("one rank: an all-reduce over a single GPU moves no data (bus bandwidth "
                        "is 0 by definition); the floor is judged where at least 2 ranks take part")


class _Model(BaseModel):
    # Unknown keys are allowed: a newer job may report more than this controller reads.
    model_config = ConfigDict(extra="ignore", frozen=True)


class RankInfo(_Model):
    rank: int = Field(ge=0)
    local_rank: int = Field(ge=0)
    hostname: str
    device: str
    device_name: str = ""
    cuda_device_count: int = Field(ge=0)
    # The user the rank ran as ("" from a job that does not say).
    user: str = ""


class AllReduceRow(_Model):
    bytes: int = Field(gt=0)
    time_us: float = Field(ge=0)
    algbw_gbps: float = Field(ge=0)
    busbw_gbps: float = Field(ge=0)
    correct: bool


class DdpResult(_Model):
    loss_first: float
    loss_last: float
    decreased: bool
    params_identical: bool


class SmokeResult(_Model):
    schema_: Literal[1] = Field(alias="schema")
    # gpuc_smoke.py (PyTorch) leaves it out; gpuc_smoke_tf.py says "tensorflow". Both write
    # the same fields: the TensorFlow job's Keras training steps sit under `ddp`.
    framework: Literal["pytorch", "tensorflow"] = "pytorch"
    label: str
    backend: str
    world_size: int = Field(ge=1)
    nnodes: int = Field(ge=0)
    nodes: dict[str, list[int]]
    ranks: list[RankInfo]
    allreduce: list[AllReduceRow]
    ddp: DdpResult | None
    ok: bool
    errors: list[str]


@dataclass(frozen=True)
class SizeRow:
    """One all-reduce size as the report shows it."""

    bytes: int
    size: str
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    correct: bool
    counts_for_floor: bool


@dataclass(frozen=True)
class FloorCheck:
    """The busbw floor: ``skipped_reason`` is set when it was not applied."""

    floor_gbps: float | None
    # The busbw compared with the floor: at the largest size >= 1 GiB (provisioner.busbw).
    best_busbw_gbps: float | None
    passed: bool
    skipped_reason: str | None = None
    size_bytes: int | None = None


@dataclass(frozen=True)
class SmokeVerdict:
    label: str
    backend: str
    world_size: int
    nodes: tuple[str, ...]
    rows: tuple[SizeRow, ...]
    floor: FloorCheck
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures


def load_smoke_result(path: Path | str) -> SmokeResult:
    """Read and validate a smoke report; any problem is an ``InputError`` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"{path}: smoke report not found; the job's rank 0 did not write it "
            "(see the job's log on the first node)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read smoke report: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}: smoke report is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}); the job was probably killed while writing it") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: smoke report must be a JSON object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA_VERSION:
        raise InputError(
            f"{path}: smoke report schema {data.get('schema')!r} is not {SCHEMA_VERSION}; "
            "the job on the nodes and this controller are from different versions")
    try:
        return SmokeResult.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InputError(
            f"{path}: smoke report field {where!r}: {first['msg']} "
            f"({exc.error_count()} problem(s) in total)") from None


def _floor_check(result: SmokeResult, floor_gbps: float | None, simulated: bool,
                 rows: tuple[SizeRow, ...]) -> tuple[FloorCheck, str | None]:
    """The floor verdict, and the failure message when the floor was missed."""
    point = judged_point((row.bytes, row.busbw_gbps) for row in rows)
    best = point.busbw_gbps if point else None
    size = point.size_bytes if point else None
    if simulated:
        return FloorCheck(floor_gbps, best, True, SIMULATED_SKIP_REASON, size), None
    if result.backend != "nccl":
        return FloorCheck(floor_gbps, best, True, GLOO_SKIP_REASON, size), None
    if floor_gbps is None:
        return FloorCheck(None, best, True, NO_FLOOR_REASON, size), None
    if result.world_size < 2:
        return FloorCheck(floor_gbps, best, True, ONE_RANK_SKIP_REASON, size), None
    nodes = ", ".join(result.nodes) or "(no nodes reported)"
    if point is None:
        return FloorCheck(floor_gbps, None, passed=False), (
            f"[{result.label}] no all-reduce size >= {human_size(FLOOR_MIN_BYTES)} was measured, "
            f"so the busbw floor {floor_gbps:g} GB/s cannot be checked on nodes {nodes}; "
            "run the job with sizes up to 8G (or the largest the GPUs' memory allows)")
    if point.busbw_gbps < floor_gbps:
        return FloorCheck(floor_gbps, best, False, None, size), (
            f"[{result.label}] all-reduce busbw {point.busbw_gbps:.2f} GB/s at "
            f"{human_size(point.size_bytes)} (the largest size measured) is below the floor "
            f"{floor_gbps:g} GB/s on nodes {nodes}: check the interconnect (NCCL_DEBUG=INFO "
            "shows the transport chosen)")
    return FloorCheck(floor_gbps, best, True, None, size), None


def training_name(framework: str) -> str:
    """What the training check is called in messages: PyTorch's DDP, or Keras under
    TensorFlow's MultiWorkerMirroredStrategy."""
    return "DDP" if framework == "pytorch" else "Keras (MultiWorkerMirroredStrategy)"


def judge(result: SmokeResult, floor_gbps: float | None, simulated: bool) -> SmokeVerdict:
    """Decide pass/fail. Correctness and DDP always count; the floor only with NCCL on real
    GPUs, at the largest size measured (>= 1 GiB)."""
    point = judged_point((r.bytes, r.busbw_gbps) for r in result.allreduce)
    rows = tuple(
        SizeRow(bytes=r.bytes, size=human_size(r.bytes), time_us=r.time_us,
                algbw_gbps=r.algbw_gbps, busbw_gbps=r.busbw_gbps, correct=r.correct,
                counts_for_floor=point is not None and r.bytes == point.size_bytes)
        for r in result.allreduce)
    label = f"[{result.label}]"
    # The job's own errors come first: they name the rank, the host and what the backend said,
    # and they cover what the fields below cannot show (a node missing GPUs, a dead peer).
    failures = [f"{label} job: {err}" for err in result.errors]
    if not rows and not result.errors:
        failures.append(f"{label} the job measured no all-reduce (it stopped before that step)")
    wrong = [row.size for row in rows if not row.correct]
    if wrong:
        failures.append(f"{label} all-reduce gave wrong results at sizes {', '.join(wrong)}")
    training = training_name(result.framework)
    if result.ddp is None:
        if not result.errors:
            failures.append(f"{label} the job did not run the {training} check")
    else:
        if not result.ddp.decreased:
            failures.append(f"{label} {training} loss did not decrease "
                            f"({result.ddp.loss_first:.6g} -> {result.ddp.loss_last:.6g})")
        if not result.ddp.params_identical:
            failures.append(f"{label} {training} parameters differ between ranks after "
                            "training")
    if rows:
        floor, floor_failure = _floor_check(result, floor_gbps, simulated, rows)
        if floor_failure:
            failures.append(floor_failure)
    else:
        floor = FloorCheck(floor_gbps, None, passed=False,
                           skipped_reason="the job measured no all-reduce")
    if not result.ok and not failures:
        failures.append(f"{label} the job reported failure without an error message")
    return SmokeVerdict(
        label=result.label, backend=result.backend, world_size=result.world_size,
        nodes=tuple(result.nodes), rows=rows, floor=floor, failures=tuple(failures))
