"""Distributed smoke job: proves that a cluster's GPUs, interconnect and PyTorch stack work.

Launched by ``torchrun`` on every node (one process per GPU, or ``--nproc-per-node N`` CPU
processes on nodes without usable GPUs). It checks, in order:

1. inventory: every rank's host, local rank, device and visible GPU count; a node that sees
   fewer GPUs than ``--expect-gpus-per-node`` fails the job before anything else runs;
2. all-reduce (SUM, float32) per size: a correctness check on every rank, then timing with the
   nccl-tests conventions (algbw = bytes / time, busbw = algbw * 2(n-1)/n);
3. a few DDP training steps on a tiny seeded regression model: the loss must go down and the
   parameters must be bit-identical on every rank afterwards.

Rank 0 writes a JSON report (``--output``) and prints a short table. Exit 0 when every check
passed, 1 otherwise. A dead or hung peer makes the job exit 1 within about ``--timeout-s``
instead of hanging. NCCL_* variables set by the caller are honoured; the job never sets them.

Depends on torch and the standard library only, so it can be copied to nodes as one file.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import json
import os
import pwd
import re
import socket
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

SCHEMA = 1
FLOAT32_BYTES = 4
# The busbw floors are defined at large messages (>= 1 GiB, provisioner/busbw.py holds the same
# values): on GPUs the job runs up to 8 GiB, dropping sizes the GPU has no memory for; on CPU
# (gloo) small sizes, since only correctness is judged there.
GPU_SIZES = "32M,256M,1G,2G,4G,8G"
CPU_SIZES = "8K,64K,1M,8M,32M"
FLOOR_MIN_BYTES = 1 << 30
# A size needs the check tensor, the timing tensor and NCCL's own buffers: keep 3x free.
MEMORY_FACTOR = 3
# Test hooks: make one rank misbehave so the tests can prove the job does not hang.
# "exit" (leave quietly), "hang" (stop responding) or "corrupt" (wrong data, as from a bad link)
FAULT_ENV = "GPUC_SMOKE_TEST_FAULT"
FAULT_RANK_ENV = "GPUC_SMOKE_TEST_FAULT_RANK"

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def user_name() -> str:
    """Who this process runs as: its name, or its number where the passwd file has none (a
    container whose image does not list the uid it runs as)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


class CommFailure(Exception):
    """A collective failed or timed out: a peer is dead, hung or unreachable."""


def parse_size(text: str) -> int:
    """``8K`` -> 8192 (binary units, like nccl-tests); a bare number is bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:I?B)?\s*", text.upper())
    if not match:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: use e.g. 8K, 1M, 32M or 4096")
    size = int(match.group(1)) * _UNITS[match.group(2)]
    if size <= 0 or size % FLOAT32_BYTES:
        raise argparse.ArgumentTypeError(f"size {text!r} must be a positive multiple of 4 bytes")
    return size


def parse_sizes(text: str) -> list[int]:
    return [parse_size(part) for part in text.split(",") if part.strip()]


def human_size(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                        help="auto: nccl when CUDA is available, else gloo")
    parser.add_argument("--expect-gpus-per-node", type=int, default=0,
                        help="GPUs every node must see; 0 for CPU nodes")
    parser.add_argument("--sizes", type=parse_sizes, default=None,
                        help=f"all-reduce sizes in bytes of float32 (default: {GPU_SIZES} with "
                             f"nccl, {CPU_SIZES} with gloo)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    parser.add_argument("--ddp-steps", type=int, default=20, help="DDP training steps")
    parser.add_argument("--output", default=None, help="where rank 0 writes the JSON report")
    parser.add_argument("--label", default="smoke", help="e.g. intra-node or inter-node")
    parser.add_argument("--timeout-s", type=float, default=300.0,
                        help="seconds a collective may wait for its peers before the job fails")
    return parser


class Watchdog:
    """Backstop for hangs the backend does not turn into an exception (e.g. a wedged GPU).

    The main thread calls ``kick`` before each blocking step; if no kick comes for
    ``limit_s`` the process prints what it was waiting for and exits 1. The limit is longer
    than the process-group timeout so the backend's own, more precise error comes first.
    """

    def __init__(self, rank: int, limit_s: float) -> None:
        self._rank = rank
        self._limit_s = limit_s
        self._step = "start"
        self._last = time.monotonic()
        self._lock = threading.Lock()
        threading.Thread(target=self._watch, name="gpuc-smoke-watchdog", daemon=True).start()

    def kick(self, step: str) -> None:
        with self._lock:
            self._step, self._last = step, time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                idle, step = time.monotonic() - self._last, self._step
            if idle > self._limit_s:
                print(f"gpuc_smoke: rank {self._rank} on {socket.gethostname()}: no progress "
                      f"for {idle:.0f}s in {step}; a peer is dead, hung or unreachable. "
                      "Check the other nodes' logs. Exiting.", file=sys.stderr, flush=True)
                os._exit(1)


class Smoke:
    """One rank's run. Rank 0 accumulates the report; errors are kept identical on all ranks."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.hostname = socket.gethostname()
        self.backend = args.backend
        if self.backend == "auto":
            self.backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.device = torch.device("cpu")
        self.sizes: list[int] = list(args.sizes or parse_sizes(
            GPU_SIZES if self.backend == "nccl" else CPU_SIZES))
        self.errors: list[str] = []
        self.report: dict[str, Any] = {
            "schema": SCHEMA,
            "label": args.label,
            "backend": self.backend,
            "world_size": self.world_size,
            "nnodes": 0,
            "nodes": {},
            "ranks": [],
            "allreduce": [],
            "sizes_dropped": [],
            "ddp": None,
            "ok": False,
            "errors": self.errors,
            "expect_gpus_per_node": args.expect_gpus_per_node,
            "torch_version": torch.__version__,
            "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        }
        self.watchdog = Watchdog(self.rank, args.timeout_s + max(15.0, args.timeout_s / 4))

    # -- setup ---------------------------------------------------------------------------
    def init(self) -> None:
        if self.backend == "nccl":
            visible = torch.cuda.device_count()
            if self.local_rank >= visible:
                raise SystemExit(self._fatal(
                    f"local rank {self.local_rank} has no GPU: this node sees {visible} "
                    "(start one process per GPU, or use --backend gloo for CPU nodes)"))
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        self.watchdog.kick("init_process_group")
        try:
            dist.init_process_group(
                backend=self.backend,
                timeout=datetime.timedelta(seconds=self.args.timeout_s),
                **({"device_id": self.device} if self.backend == "nccl" else {}),
            )
        except (RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else repr(exc)
            raise SystemExit(self._fatal(
                f"cannot join the {self.backend} process group: {first} (start the job with "
                "torchrun; check that every node reaches the rendezvous host and port)")) from None

    def _fatal(self, message: str) -> int:
        """Report an error found before the process group exists (no JSON can be gathered)."""
        self.errors.append(message)
        print(f"gpuc_smoke: rank {self.rank} on {self.hostname}: {message}", file=sys.stderr)
        if self.rank == 0:
            self.write_output()
        return 1

    def _collective(self, step: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one collective, turning a backend error or timeout into ``CommFailure``."""
        self.watchdog.kick(step)
        try:
            return fn(*args, **kwargs)
        except RuntimeError as exc:  # gloo and nccl errors (DistBackendError...) are these
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CommFailure(
                f"{step} failed on rank {self.rank} ({self.hostname}): {first[:300]} -- a peer "
                f"is probably dead, hung or unreachable (collective timeout "
                f"{self.args.timeout_s:g}s); check the other nodes' logs") from exc

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _fault(self) -> str:
        fault = os.environ.get(FAULT_ENV, "")
        return fault if fault and os.environ.get(FAULT_RANK_ENV, "1") == str(self.rank) else ""

    def _maybe_inject_fault(self) -> None:
        fault = self._fault()
        if fault not in ("exit", "hang"):
            return
        print(f"gpuc_smoke: rank {self.rank}: test fault {fault!r} injected", file=sys.stderr,
              flush=True)
        if fault == "exit":
            os._exit(0)  # exit 0 on purpose: torchrun then leaves the other ranks running
        if fault == "hang":
            self.watchdog.kick("injected hang")
            time.sleep(10 * self.args.timeout_s + 60)

    # -- 1. inventory --------------------------------------------------------------------
    def inventory(self) -> bool:
        info = {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node_rank": int(os.environ.get("GROUP_RANK", "0")),
            "hostname": self.hostname,
            # Who the rank runs as (the role starts the job as its unprivileged user).
            "user": user_name(),
            "device": str(self.device),
            "device_name": (torch.cuda.get_device_name(self.device)
                            if self.device.type == "cuda" else "cpu"),
            "cuda_device_count": torch.cuda.device_count(),
        }
        gathered: list[Any] = [None] * self.world_size
        self._collective("gathering rank inventory", dist.all_gather_object, gathered, info)
        ranks = sorted(gathered, key=lambda r: r["rank"])
        nodes: dict[str, list[int]] = {}
        seen: dict[str, int] = {}
        for entry in ranks:
            nodes.setdefault(entry["hostname"], []).append(entry["rank"])
            seen[entry["hostname"]] = max(seen.get(entry["hostname"], 0),
                                          entry["cuda_device_count"])
        self.report.update(ranks=ranks, nodes=nodes, nnodes=len(nodes))
        expected = self.args.expect_gpus_per_node
        short = [f"{host} sees {count}" for host, count in seen.items() if count < expected]
        if short:
            self.errors.append(
                f"node GPU count below --expect-gpus-per-node {expected}: {', '.join(short)} "
                "(check the driver with nvidia-smi, CUDA_VISIBLE_DEVICES and the container's "
                "device access)")
            return False
        return True

    # -- 2. all-reduce -------------------------------------------------------------------
    def fit_sizes(self) -> None:
        """Drop sizes this rank's GPU cannot hold (the smallest free memory of all ranks
        decides, so every rank runs the same sizes); on GPUs at least one size >= 1 GiB must
        remain, or the floor could not be judged."""
        if self.device.type != "cuda":
            return
        free = torch.tensor([torch.cuda.mem_get_info(self.device)[0]], dtype=torch.int64,
                            device=self.device)
        self._collective("agreeing on the sizes", dist.all_reduce, free, op=dist.ReduceOp.MIN)
        limit = int(free.item()) // MEMORY_FACTOR
        dropped = [size for size in self.sizes if size > limit]
        self.sizes = [size for size in self.sizes if size <= limit]
        self.report["sizes_dropped"] = dropped
        if not any(size >= FLOOR_MIN_BYTES for size in self.sizes):
            self.errors.append(
                f"no all-reduce size >= {human_size(FLOOR_MIN_BYTES)} fits in the GPUs' free "
                f"memory ({int(free.item()) >> 20} MiB free on the fullest GPU; each size needs "
                f"{MEMORY_FACTOR}x): the busbw floors are defined at large sizes; free the GPUs "
                "or pass --sizes with a size of at least 1G")

    def allreduce(self) -> None:
        n = self.world_size
        for size in self.sizes:
            label = human_size(size)
            count = size // FLOAT32_BYTES
            # Correctness: rank r contributes r+1, so every element must be n(n+1)/2.
            check = torch.full((count,), float(self.rank + 1), dtype=torch.float32,
                               device=self.device)
            self._collective(f"all-reduce {label} (check)", dist.all_reduce, check)
            if self._fault() == "corrupt":
                check[-1] += 1.0
            good = bool(torch.all(check == float(n * (n + 1) // 2)).item())
            flags = torch.zeros(n, dtype=torch.int32, device=self.device)
            flags[self.rank] = 0 if good else 1
            self._collective(f"all-reduce {label} (flags)", dist.all_reduce, flags)
            bad_ranks = [r for r, bad in enumerate(flags.tolist()) if bad]
            if bad_ranks:
                self.errors.append(f"all-reduce {label}: wrong result on ranks {bad_ranks}")
            # Timing on zeros: values stay bounded however many iterations run.
            buf = torch.zeros(count, dtype=torch.float32, device=self.device)
            for _warmup in range(self.args.warmup):
                self._collective(f"all-reduce {label} (warmup)", dist.all_reduce, buf)
            self._sync()
            self._collective(f"barrier before timing {label}", dist.barrier)
            start = time.perf_counter()
            for _iteration in range(self.args.iters):
                self._collective(f"all-reduce {label} (timed)", dist.all_reduce, buf)
            self._sync()
            elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64,
                                   device=self.device)
            # The collective is done when its slowest rank is: report the max over ranks.
            self._collective(f"all-reduce {label} (timing)", dist.all_reduce, elapsed,
                             op=dist.ReduceOp.MAX)
            time_s = elapsed.item() / max(self.args.iters, 1)
            algbw = size / time_s / 1e9 if time_s > 0 else 0.0
            self.report["allreduce"].append({
                "bytes": size,
                "size": label,
                "count": count,
                "time_us": time_s * 1e6,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * 2 * (n - 1) / n,
                "correct": not bad_ranks,
            })

    # -- 3. DDP --------------------------------------------------------------------------
    def ddp(self) -> None:
        torch.manual_seed(1234)  # same init everywhere (DDP also broadcasts rank 0's)
        model = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(self.device)
        self.watchdog.kick("DDP setup")
        try:
            ddp_model = DistributedDataParallel(
                model, device_ids=[self.local_rank] if self.device.type == "cuda" else None)
        except RuntimeError as exc:
            raise CommFailure(f"DDP setup failed on rank {self.rank} ({self.hostname}): "
                              f"{str(exc).splitlines()[0][:300]}") from exc
        # Each rank trains on its own shard of one fixed regression task, so gradients differ
        # per rank and only a working all-reduce keeps the replicas identical.
        data = torch.Generator().manual_seed(42)
        true_w = torch.randn(16, 1, generator=data)
        shard = torch.Generator().manual_seed(1000 + self.rank)
        x = torch.randn(64, 16, generator=shard)
        y = x @ true_w + 0.01 * torch.randn(64, 1, generator=shard)
        x, y = x.to(self.device), y.to(self.device)
        opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
        losses: list[float] = []
        for step in range(max(self.args.ddp_steps, 2)):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(ddp_model(x), y)
            self.watchdog.kick(f"DDP step {step}")
            try:
                loss.backward()  # gradients are all-reduced here
            except RuntimeError as exc:
                raise CommFailure(f"DDP backward (gradient all-reduce) failed on rank "
                                  f"{self.rank} ({self.hostname}): "
                                  f"{str(exc).splitlines()[0][:300]} -- a peer is probably "
                                  "dead, hung or unreachable; check the other nodes' logs"
                                  ) from exc
            opt.step()
            global_loss = loss.detach().reshape(1).clone()
            self._collective(f"DDP step {step} loss", dist.all_reduce, global_loss)
            losses.append(global_loss.item() / self.world_size)
        if self._fault() == "corrupt":
            with torch.no_grad():
                next(model.parameters()).view(-1)[0] += 1e-3
        digest = hashlib.sha256()
        for param in model.parameters():
            # The int32 view of the float bits: "identical" means bit-identical, without numpy.
            bits = param.detach().cpu().contiguous().view(torch.int32).flatten().tolist()
            digest.update(repr(bits).encode())
        checksums: list[Any] = [None] * self.world_size
        self._collective("gathering DDP parameter checksums", dist.all_gather_object,
                         checksums, digest.hexdigest())
        identical = len(set(checksums)) == 1
        # DDP's reducer holds the process group in reference cycles; free it now, or its
        # destructor runs after destroy_process_group at exit and aborts the process.
        del ddp_model, opt, loss
        gc.collect()
        decreased = losses[-1] < losses[0]
        self.report["ddp"] = {
            "steps": len(losses),
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "decreased": decreased,
            "params_identical": identical,
            "param_checksums": checksums,
        }
        if not decreased:
            self.errors.append(f"DDP loss did not decrease: {losses[0]:.6g} -> {losses[-1]:.6g}")
        if not identical:
            differing = [r for r, c in enumerate(checksums) if c != checksums[0]]
            self.errors.append(f"DDP parameters differ from rank 0 on ranks {differing} "
                               "after training (gradient all-reduce is broken)")

    # -- 4. report -----------------------------------------------------------------------
    def write_output(self) -> None:
        self.report["ok"] = not self.errors and bool(self.report["allreduce"])
        if self.args.output:
            path = self.args.output
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.report, fh, indent=2, sort_keys=True)
                fh.write("\n")
            os.replace(tmp, path)

    def print_table(self) -> None:
        rep = self.report
        lines = [f"gpuc_smoke [{rep['label']}] backend={rep['backend']} "
                 f"world_size={rep['world_size']} nnodes={rep['nnodes']}"]
        for host, ranks in rep["nodes"].items():
            lines.append(f"  node {host}: ranks {ranks}")
        if rep["allreduce"]:
            lines.append(f"  {'size':>10} {'time_us':>12} {'algbw GB/s':>11} "
                         f"{'busbw GB/s':>11} {'correct':>8}")
            for row in rep["allreduce"]:
                lines.append(f"  {row['size']:>10} {row['time_us']:>12.1f} "
                             f"{row['algbw_gbps']:>11.3f} {row['busbw_gbps']:>11.3f} "
                             f"{row['correct']!s:>8}")
        if rep["ddp"]:
            d = rep["ddp"]
            lines.append(f"  DDP: loss {d['loss_first']:.5f} -> {d['loss_last']:.5f} "
                         f"decreased={d['decreased']} params_identical={d['params_identical']}")
        for err in rep["errors"]:
            lines.append(f"  ERROR: {err}")
        lines.append(f"  RESULT: {'OK' if rep['ok'] else 'FAILED'}")
        print("\n".join(lines), flush=True)

    def run(self) -> int:
        self.init()
        try:
            if self.inventory():
                self._maybe_inject_fault()
                self.fit_sizes()
                self.allreduce()
                self.ddp()
        except CommFailure as exc:
            # The group is unusable: report what we know and leave without destroy_process_group,
            # which could block on the dead peer.
            self.errors.append(str(exc))
            print(f"gpuc_smoke: {exc}", file=sys.stderr, flush=True)
            if self.rank == 0:
                self.write_output()
                self.print_table()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        # Every rank holds the same errors (they come from gathered or reduced data), so every
        # rank exits with the same code.
        ok = not self.errors and bool(self.report["allreduce"])
        if self.rank == 0:
            self.write_output()
            self.print_table()
        # No rank leaves before rank 0 has written the report: torchrun stops the remaining
        # workers as soon as one exits non-zero, so a failing rank 1 that left first could kill
        # rank 0 before its report existed (seen once under load: exit 1, no report).
        self.watchdog.kick("final barrier")
        try:
            dist.barrier()
        except RuntimeError:
            pass  # the report is written; a peer gone now changes nothing
        self.watchdog.kick("destroy_process_group")
        dist.destroy_process_group()
        # Leave without interpreter teardown: torch 2.13's backend threads can abort the
        # process ("terminate called without an active exception") while static objects are
        # destroyed, turning a passed job into a crash. Everything is written and flushed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if ok else 1)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or args.timeout_s <= 0:
        print("gpuc_smoke: --iters must be >= 1, --warmup >= 0, --timeout-s > 0",
              file=sys.stderr)
        return 2
    return Smoke(args).run()


if __name__ == "__main__":
    sys.exit(main())
