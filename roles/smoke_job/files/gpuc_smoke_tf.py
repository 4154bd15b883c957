"""Distributed smoke job, TensorFlow: proves the nodes train with MultiWorkerMirroredStrategy.

One worker process per node (``TF_CONFIG`` worker ``i`` of the cluster); every GPU the worker
sees is one replica, a worker without GPUs is one CPU replica. The cluster comes from
``--workers host:port,... --task-index I`` (the smoke_job role lists the nodes in play order),
from ``--slurm`` (``SLURM_STEP_NODELIST`` and this node's place in it, for a job started by
``srun`` with one task per node), or from a ``TF_CONFIG`` already in the environment. One
worker needs no cluster: it runs alone. It checks, in order, like ``gpuc_smoke.py`` (same
JSON report, read and judged by the same controller code):

1. inventory: every replica's host, device and visible GPU count; a node that sees fewer GPUs
   than ``--expect-gpus-per-node`` fails the job;
2. all-reduce (SUM, float32) per size: replica r contributes r+1 and every element must be
   n(n+1)/2 on every replica; then timing with the nccl-tests conventions (algbw = bytes /
   time, busbw = algbw * 2(n-1)/n, n replicas);
3. a few training steps of a tiny seeded Keras model, each replica on its own data shard: the
   loss must go down and the weights must be bit-identical on every replica afterwards.

Worker 0 writes the JSON report (``--output``) and prints a short table. Exit 0 when every check
passed, 1 otherwise (2: bad arguments or cluster description). Collectives run with
CommunicationImplementation.NCCL on GPUs and RING (gRPC) on CPU; a dead or hung peer makes the
job exit 1 within about ``--timeout-s``.

Imports TensorFlow only when the job runs: the cluster helpers above it are plain Python that
the controller's tests import without TensorFlow.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pwd
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

SCHEMA = 1
FRAMEWORK = "tensorflow"
FLOAT32_BYTES = 4
# The same size policy as gpuc_smoke.py and provisioner/busbw.py (tests/smoke checks they agree).
GPU_SIZES = "32M,256M,1G,2G,4G,8G"
CPU_SIZES = "8K,64K,1M,8M,32M"
FLOOR_MIN_BYTES = 1 << 30
MEMORY_FACTOR = 3
# Room per replica when gathering small records (host names, checksums) through an all-reduce.
GATHER_BYTES = 1024
FAULT_ENV = "GPUC_SMOKE_TEST_FAULT"
FAULT_RANK_ENV = "GPUC_SMOKE_TEST_FAULT_RANK"
# After the last collective a worker waits this long before leaving: a peer may still be
# pulling the last buffer from it (TensorFlow's RING collectives read from the sender).
EXIT_GRACE_S = 2.0

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")


def user_name() -> str:
    """Who this process runs as: its name, or its number where the passwd file has none (a
    container whose image does not list the uid it runs as)."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"


class ClusterError(ValueError):
    """The cluster description (arguments, TF_CONFIG or the Slurm environment) is unusable."""


class CommFailure(Exception):
    """A collective failed or timed out: a peer is dead, hung or unreachable."""


# -- sizes (the same rules as gpuc_smoke.py) ---------------------------------------------------
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


# -- the cluster: TF_CONFIG ----------------------------------------------------------------------
def parse_workers(text: str) -> list[str]:
    """``a:2222,b:2222`` -> the worker addresses, each checked as ``host:port``."""
    workers = [part.strip() for part in text.split(",") if part.strip()]
    if not workers:
        raise ClusterError("--workers is empty: give host:port of every node, in order")
    for worker in workers:
        match = _HOST_PORT.match(worker)
        if not match or not 0 < int(match.group("port")) < 65536:
            raise ClusterError(f"worker {worker!r} is not host:port (e.g. 10.0.0.5:29500)")
    if len(set(workers)) != len(workers):
        raise ClusterError(f"--workers names an address twice: {','.join(workers)}")
    return workers


def tf_config(workers: list[str], index: int) -> dict[str, Any]:
    """TF_CONFIG for worker ``index`` of ``workers`` (all are peers; worker 0 reports)."""
    if not 0 <= index < len(workers):
        raise ClusterError(f"task index {index} is outside the {len(workers)} worker(s)")
    return {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}}


def read_tf_config(text: str) -> dict[str, Any]:
    """A TF_CONFIG from the environment, checked: workers only, one task of them."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ClusterError(f"TF_CONFIG is not JSON ({exc.msg} at column {exc.colno})") from None
    cluster = data.get("cluster") if isinstance(data, dict) else None
    task = data.get("task") if isinstance(data, dict) else None
    if not isinstance(cluster, dict) or set(cluster) != {"worker"}:
        raise ClusterError("TF_CONFIG must have a cluster with a `worker` list only (no chief, "
                           "ps or evaluator: every node is a worker of the smoke job)")
    if not isinstance(task, dict) or task.get("type") != "worker" \
            or not isinstance(task.get("index"), int):
        raise ClusterError('TF_CONFIG needs "task": {"type": "worker", "index": N}')
    workers = cluster["worker"]
    if not isinstance(workers, list) or not all(isinstance(w, str) for w in workers):
        raise ClusterError("TF_CONFIG cluster.worker must be a list of host:port strings")
    return tf_config(parse_workers(",".join(workers)), task["index"])


def expand_hostlist(text: str) -> list[str]:
    """A Slurm hostlist in its order: ``gpu-[01-03,7],login`` -> gpu-01 gpu-02 gpu-03 gpu-7
    login (zero padding kept; several bracket groups in one name are expanded left to right)."""
    parts: list[str] = []
    depth, current = 0, ""
    for char in text.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ClusterError(f"hostlist {text!r}: ']' without '['")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    if depth:
        raise ClusterError(f"hostlist {text!r}: '[' without ']'")
    parts.append(current)
    hosts: list[str] = []
    for part in parts:
        if not part:
            raise ClusterError(f"hostlist {text!r}: empty name")
        hosts.extend(_expand_one(part, text))
    return hosts


def _expand_one(part: str, whole: str) -> list[str]:
    match = re.match(r"^([^\[\]]*)\[([^\[\]]+)\](.*)$", part)
    if not match:
        if "[" in part or "]" in part:
            raise ClusterError(f"hostlist {whole!r}: cannot read {part!r}")
        return [part]
    prefix, ranges, rest = match.groups()
    out: list[str] = []
    for item in ranges.split(","):
        bounds = item.split("-")
        if len(bounds) not in (1, 2) or not all(b.isdigit() for b in bounds):
            raise ClusterError(f"hostlist {whole!r}: bad range {item!r}")
        low, high = bounds[0], bounds[-1]
        if int(high) < int(low):
            raise ClusterError(f"hostlist {whole!r}: range {item!r} runs backwards")
        for number in range(int(low), int(high) + 1):
            out.extend(prefix + str(number).zfill(len(low)) + tail
                       for tail in _expand_one(rest, whole))
    return out


def parse_addresses(text: str, port: int) -> dict[str, str]:
    """``node=addr[:port],...`` -> node name -> ``addr:port`` (``port`` when none is given)."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("=")
        if not sep or not name or not address:
            raise ClusterError(f"--node-addresses item {item!r} is not NAME=ADDRESS[:PORT]")
        out[name] = address if _HOST_PORT.match(address) else f"{address}:{port}"
    return out


def tf_config_from_slurm(env: Mapping[str, str], port: int,
                         addresses: Mapping[str, str] | None = None) -> dict[str, Any]:
    """TF_CONFIG for a task of an ``srun --ntasks-per-node 1`` step: the workers are the step's
    nodes in Slurm's order (each at ``addresses[node]``, else ``node:port``), and this task is
    the one on ``SLURMD_NODENAME`` (else ``SLURM_PROCID``)."""
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise ClusterError("--slurm: SLURM_STEP_NODELIST is not set; start the job with srun")
    nodes = expand_hostlist(nodelist)
    tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
    if tasks is not None and tasks.strip() != str(len(nodes)):
        raise ClusterError(f"--slurm: {tasks.strip()} tasks on {len(nodes)} node(s) "
                           f"({nodelist}); start exactly one task per node "
                           "(srun --ntasks-per-node 1)")
    if len(set(nodes)) != len(nodes):
        raise ClusterError(f"--slurm: the node list {nodelist} names a node twice")
    own = env.get("SLURMD_NODENAME")
    if own:
        if own not in nodes:
            raise ClusterError(f"--slurm: this node {own} is not in the step's nodes {nodelist}")
        index = nodes.index(own)
    else:
        try:
            index = int(env.get("SLURM_PROCID", ""))
        except ValueError:
            raise ClusterError("--slurm: neither SLURMD_NODENAME nor SLURM_PROCID is set; "
                               "start the job with srun") from None
    addresses = addresses or {}
    workers = [addresses.get(node, f"{node}:{port}") for node in nodes]
    return tf_config(parse_workers(",".join(workers)), index)


def resolve_cluster(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any] | None:
    """The TF_CONFIG this worker runs with, or None when it runs alone (one worker)."""
    if args.slurm:
        config = tf_config_from_slurm(env, args.port,
                                      parse_addresses(args.node_addresses or "", args.port))
    elif args.workers:
        config = tf_config(parse_workers(args.workers), args.task_index)
    elif env.get("TF_CONFIG"):
        config = read_tf_config(env["TF_CONFIG"])
    else:
        return None
    return config if len(config["cluster"]["worker"]) > 1 else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", choices=("auto", "nccl", "ring"), default="auto",
                        help="collective implementation: auto (nccl with GPUs, else ring)")
    parser.add_argument("--workers", default="",
                        help="host:port of every node's worker, in order (TF_CONFIG's cluster)")
    parser.add_argument("--task-index", type=int, default=0,
                        help="this node's place in --workers")
    parser.add_argument("--slurm", action="store_true",
                        help="build the cluster from srun's environment (one task per node)")
    parser.add_argument("--port", type=int, default=29500,
                        help="with --slurm: the port every worker listens on")
    parser.add_argument("--node-addresses", default="",
                        help="with --slurm: NODE=ADDRESS[:PORT],... where a Slurm node name is "
                             "not the address the others reach it at")
    parser.add_argument("--expect-gpus-per-node", type=int, default=0,
                        help="GPUs every node must see; 0 for CPU nodes")
    parser.add_argument("--sizes", type=parse_sizes, default=None,
                        help=f"all-reduce sizes in bytes of float32 (default: {GPU_SIZES} with "
                             f"nccl, {CPU_SIZES} on CPU)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed iterations per size")
    parser.add_argument("--iters", type=int, default=20, help="timed iterations per size")
    parser.add_argument("--ddp-steps", type=int, default=20, help="training steps")
    parser.add_argument("--output", default=None, help="where worker 0 writes the JSON report")
    parser.add_argument("--label", default="smoke", help="e.g. intra-node or inter-node")
    parser.add_argument("--timeout-s", type=float, default=300.0,
                        help="seconds a collective may wait for its peers before the job fails")
    return parser


class Watchdog:
    """Backstop for hangs TensorFlow does not turn into an error (a peer that never joins the
    cluster: the strategy waits for it without a limit). See gpuc_smoke.py."""

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
                print(f"gpuc_smoke_tf: worker {self._rank} on {socket.gethostname()}: no "
                      f"progress for {idle:.0f}s in {step}; a peer is dead, hung or "
                      "unreachable. Check the other nodes' logs. Exiting.", file=sys.stderr,
                      flush=True)
                os._exit(1)


def _free_gpu_memory_bytes() -> int | None:
    """The least free memory of this node's GPUs (nvidia-smi), None when it cannot tell."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.free",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30, check=False)
        values = [int(line.strip()) for line in out.stdout.splitlines() if line.strip()]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None
    return min(values) << 20 if out.returncode == 0 and values else None


class Smoke:
    """One worker's run. Worker 0 accumulates the report; errors are identical on all workers
    (they come from gathered or reduced data)."""

    def __init__(self, args: argparse.Namespace, cluster: dict[str, Any] | None) -> None:
        import tensorflow as tf

        self.tf = tf
        self.args = args
        self.cluster = cluster
        self.worker = cluster["task"]["index"] if cluster else 0
        self.nworkers = len(cluster["cluster"]["worker"]) if cluster else 1
        self.hostname = socket.gethostname()
        self.gpus = tf.config.list_physical_devices("GPU")
        self.backend = args.backend
        if self.backend == "auto":
            self.backend = "nccl" if self.gpus else "ring"
        self.sizes: list[int] = list(args.sizes or parse_sizes(
            GPU_SIZES if self.backend == "nccl" else CPU_SIZES))
        self.errors: list[str] = []
        self.report: dict[str, Any] = {
            "schema": SCHEMA,
            "framework": FRAMEWORK,
            "label": args.label,
            "backend": self.backend,
            "world_size": 0,
            "nnodes": 0,
            "nodes": {},
            "ranks": [],
            "allreduce": [],
            "sizes_dropped": [],
            "ddp": None,
            "ok": False,
            "errors": self.errors,
            "expect_gpus_per_node": args.expect_gpus_per_node,
            "tensorflow_version": tf.__version__,
            "workers": cluster["cluster"]["worker"] if cluster else [],
            "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        }
        self.watchdog = Watchdog(self.worker, args.timeout_s + max(15.0, args.timeout_s / 4))
        self.strategy: Any = None
        self.n = 1
        self._runners: dict[Any, Any] = {}

    # -- setup ---------------------------------------------------------------------------
    def init(self) -> None:
        tf = self.tf
        if self.args.expect_gpus_per_node > len(self.gpus):
            # Every worker must bring the same devices; a node short of GPUs cannot join.
            raise SystemExit(self._fatal(
                f"node GPU count below --expect-gpus-per-node {self.args.expect_gpus_per_node}: "
                f"{self.hostname} sees {len(self.gpus)} (check the driver with nvidia-smi, "
                "CUDA_VISIBLE_DEVICES and the container's device access)"))
        if self.backend == "nccl" and not self.gpus:
            raise SystemExit(self._fatal(
                f"--backend nccl but {self.hostname} sees no GPU (use --backend ring on CPU)"))
        for gpu in self.gpus:
            # Allocate as the job needs, not the whole GPU up front (sizes are fitted below).
            tf.config.experimental.set_memory_growth(gpu, True)
        implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL
                          if self.backend == "nccl"
                          else tf.distribute.experimental.CommunicationImplementation.RING)
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=implementation, timeout_seconds=self.args.timeout_s)
        self.watchdog.kick("joining the cluster (MultiWorkerMirroredStrategy)")
        try:
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
                communication_options=options)
        except (tf.errors.OpError, RuntimeError, ValueError) as exc:
            raise SystemExit(self._fatal(
                f"cannot join the TensorFlow cluster: {_first_line(exc)} (check that every "
                "node reaches the others' host:port in TF_CONFIG)")) from None
        self.n = int(self.strategy.num_replicas_in_sync)
        self.report["world_size"] = self.n
        self.devices = list(self.strategy.extended.worker_devices)

    def _fatal(self, message: str) -> int:
        """Report an error found before the cluster exists (nothing can be gathered)."""
        self.errors.append(message)
        print(f"gpuc_smoke_tf: worker {self.worker} on {self.hostname}: {message}",
              file=sys.stderr)
        if self.worker == 0:
            self.write_output()
        return 1

    def _collective(self, step: str, fn: Any, *args: Any) -> Any:
        """Run ``fn`` on every replica (strategy.run in a tf.function, one per ``fn``, traced
        alike on every worker), an error or timeout -> ``CommFailure``."""
        tf = self.tf
        runner = self._runners.get(fn)
        if runner is None:
            runner = self._runners[fn] = tf.function(
                lambda *values: self.strategy.run(_on_replica_device(tf, fn), args=values))
        self.watchdog.kick(step)
        try:
            return runner(*args)
        except (tf.errors.OpError, RuntimeError) as exc:
            raise CommFailure(
                f"{step} failed on worker {self.worker} ({self.hostname}): "
                f"{_first_line(exc)} -- a peer is probably dead, hung or unreachable "
                f"(collective timeout {self.args.timeout_s:g}s); check the other nodes' logs"
            ) from exc

    def _local(self, value: Any) -> list[Any]:
        return list(self.strategy.experimental_local_results(value))

    def _per_replica(self, make: Any) -> Any:
        """A value per local replica, placed on its device: ``make(replica_id)``."""
        tf = self.tf

        def value_fn(ctx: Any) -> Any:
            with tf.device(self.devices[ctx.replica_id_in_sync_group % len(self.devices)]):
                return make(ctx.replica_id_in_sync_group)
        return self.strategy.experimental_distribute_values_from_function(value_fn)

    def _replica_ids(self) -> list[int]:
        """The global ids of this worker's replicas, in local order."""
        ids: list[int] = []

        def note(ctx: Any) -> int:
            ids.append(ctx.replica_id_in_sync_group)
            return 0
        self.strategy.experimental_distribute_values_from_function(note)
        return ids

    def gather(self, step: str, payloads: Mapping[int, bytes]) -> list[bytes]:
        """Every replica's bytes (``payloads``: this worker's, by replica id) on every replica,
        through one SUM all-reduce of a replicas x GATHER_BYTES table of byte values."""
        tf, n = self.tf, self.n
        for rid, data in payloads.items():
            if len(data) > GATHER_BYTES:
                raise ValueError(f"replica {rid}: {len(data)} bytes to gather, "
                                 f"over {GATHER_BYTES}")

        def make(rid: int) -> Any:
            table = [[0.0] * GATHER_BYTES for _row in range(n)]
            row = list(payloads[rid])
            table[rid][:len(row)] = [float(b) for b in row]
            return tf.constant(table, dtype=tf.float32)

        summed = self._collective(step, self._all_reduce, self._per_replica(make))
        rows = self._local(summed)[0].numpy()
        return [bytes(int(v) for v in row).rstrip(b"\0") for row in rows]

    def _all_reduce(self, value: Any) -> Any:
        ctx = self.tf.distribute.get_replica_context()
        return ctx.all_reduce(self.tf.distribute.ReduceOp.SUM, value)

    def _fault(self) -> str:
        fault = os.environ.get(FAULT_ENV, "")
        return fault if fault and os.environ.get(FAULT_RANK_ENV, "1") == str(self.worker) else ""

    def _maybe_inject_fault(self) -> None:
        fault = self._fault()
        if fault not in ("exit", "hang"):
            return
        print(f"gpuc_smoke_tf: worker {self.worker}: test fault {fault!r} injected",
              file=sys.stderr, flush=True)
        if fault == "exit":
            os._exit(0)
        self.watchdog.kick("injected hang")
        time.sleep(10 * self.args.timeout_s + 60)

    # -- 1. inventory --------------------------------------------------------------------
    def inventory(self) -> bool:
        tf = self.tf
        local_ids = self._replica_ids()
        payloads = {}
        for local, rid in enumerate(local_ids):
            name = "cpu"
            if self.gpus and local < len(self.gpus):
                details = tf.config.experimental.get_device_details(self.gpus[local])
                name = str(details.get("device_name", "gpu"))
            payloads[rid] = json.dumps({
                "rank": rid, "local_rank": local, "node_rank": self.worker,
                "hostname": self.hostname, "device": self.devices[local], "device_name": name,
                "user": user_name(),
                "cuda_device_count": len(self.gpus),
            }, sort_keys=True).encode()
        gathered = self.gather("gathering replica inventory", payloads)
        ranks = sorted((json.loads(raw) for raw in gathered), key=lambda r: r["rank"])
        nodes: dict[str, list[int]] = {}
        for entry in ranks:
            nodes.setdefault(entry["hostname"], []).append(entry["rank"])
        self.report.update(ranks=ranks, nodes=nodes, nnodes=len(nodes))
        return True

    # -- 2. all-reduce -------------------------------------------------------------------
    def fit_sizes(self) -> None:
        """Drop sizes the GPUs cannot hold (the fullest GPU of all nodes decides, so every
        worker runs the same sizes); at least one size >= 1 GiB must remain on GPUs."""
        if self.backend != "nccl":
            return
        free = _free_gpu_memory_bytes()
        gathered = self.gather("agreeing on the sizes", {
            rid: str(free if free is not None else -1).encode() for rid in self._replica_ids()})
        known = [int(raw) for raw in gathered if int(raw) >= 0]
        if not known:
            return  # nvidia-smi said nothing anywhere: run the sizes as given
        least = min(known)
        limit = least // MEMORY_FACTOR
        self.report["sizes_dropped"] = [size for size in self.sizes if size > limit]
        self.sizes = [size for size in self.sizes if size <= limit]
        if not any(size >= FLOOR_MIN_BYTES for size in self.sizes):
            self.errors.append(
                f"no all-reduce size >= {human_size(FLOOR_MIN_BYTES)} fits in the GPUs' free "
                f"memory ({least >> 20} MiB free on the fullest GPU; each size needs "
                f"{MEMORY_FACTOR}x): free the GPUs or pass --sizes with a size of at least 1G")

    def allreduce(self) -> None:
        tf, n = self.tf, self.n
        corrupt = self._fault() == "corrupt"
        expected = float(n * (n + 1) // 2)

        def check(value: Any) -> Any:
            ctx = tf.distribute.get_replica_context()
            summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
            if corrupt:  # test hook: wrong data on this worker, as from a bad link
                last = tf.size(summed, out_type=tf.int64) - 1
                summed = tf.tensor_scatter_nd_add(summed, tf.reshape(last, [1, 1]), [1.0])
            bad = 1.0 - tf.cast(tf.reduce_all(tf.equal(summed, expected)), tf.float32)
            flags = tf.one_hot(ctx.replica_id_in_sync_group, n) * bad
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, flags)

        for size in self.sizes:
            label = human_size(size)
            count = size // FLOAT32_BYTES
            # 64-bit shapes: 8 GiB of float32 is 2**31 elements, one past int32.
            shape = tf.constant([count], dtype=tf.int64)
            values = self._per_replica(lambda rid, s=shape: tf.fill(s, float(rid + 1)))
            flags = self._local(self._collective(f"all-reduce {label} (check)", check,
                                                 values))[0].numpy()
            bad_ranks = [r for r, bad in enumerate(flags.tolist()) if bad]
            if bad_ranks:
                self.errors.append(f"all-reduce {label}: wrong result on ranks {bad_ranks}")
            del values
            # Timing on zeros, each iteration fed the last one's output: values stay bounded
            # and the iterations run one after the other.
            buf = self._per_replica(lambda _rid, s=shape: tf.zeros(s, tf.float32))
            for _warmup in range(self.args.warmup):
                buf = self._collective(f"all-reduce {label} (warmup)", self._all_reduce, buf)
            self._sync(buf)
            self.gather(f"barrier before timing {label}", {
                rid: b"" for rid in self._replica_ids()})
            start = time.perf_counter()
            for _iteration in range(self.args.iters):
                buf = self._collective(f"all-reduce {label} (timed)", self._all_reduce, buf)
            self._sync(buf)
            elapsed = time.perf_counter() - start
            del buf
            # The collective is done when its slowest replica is: the max over replicas.
            times = self.gather(f"all-reduce {label} (timing)", {
                rid: repr(elapsed).encode() for rid in self._replica_ids()})
            time_s = max(float(raw) for raw in times) / max(self.args.iters, 1)
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

    def _sync(self, value: Any) -> None:
        """Wait for ``value`` on every local replica (a one-element read)."""
        for tensor in self._local(value):
            tensor[:1].numpy()

    # -- 3. training -----------------------------------------------------------------------
    def train(self) -> None:
        import keras
        import numpy as np

        tf, n = self.tf, self.n
        with self.strategy.scope():
            keras.utils.set_random_seed(1234)  # same start everywhere (MWMS also broadcasts)
            model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, "tanh"),
                                      keras.layers.Dense(1)])
            optimizer = keras.optimizers.SGD(learning_rate=0.05)
            optimizer.build(model.trainable_variables)
        # Each replica trains on its own shard of one fixed regression task, so gradients
        # differ per replica and only a working all-reduce keeps the replicas identical.
        true_w = np.random.default_rng(42).standard_normal((16, 1)).astype("float32")

        def shard(rid: int) -> Any:
            rng = np.random.default_rng(1000 + rid)
            x = rng.standard_normal((64, 16)).astype("float32")
            y = x @ true_w + 0.01 * rng.standard_normal((64, 1)).astype("float32")
            return tf.constant(x), tf.constant(y)

        data = self._per_replica(shard)

        def step(batch: Any) -> Any:
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
                # Keras sums the replicas' gradients (an all-reduce): scale for their mean.
                scaled = loss / n
            grads = tape.gradient(scaled, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss) / n

        losses: list[float] = []
        for number in range(max(self.args.ddp_steps, 2)):
            loss = self._collective(f"training step {number}", step, data)
            losses.append(float(self._local(loss)[0].numpy()))
        payloads = {}
        for local, rid in enumerate(self._replica_ids()):
            digest = hashlib.sha256()
            for number, var in enumerate(model.trainable_variables):
                array = np.array(self._local(var.value)[local].numpy(), dtype="<f4")
                if number == 0 and self._fault() == "corrupt":  # test hook: a diverged replica
                    array.reshape(-1)[0] += 1e-3
                digest.update(array.tobytes())
            payloads[rid] = digest.hexdigest().encode()
        checksums = [raw.decode() for raw in self.gather("gathering weight checksums", payloads)]
        identical = len(set(checksums)) == 1
        decreased = losses[-1] < losses[0]
        self.report["ddp"] = {
            "method": "keras+MultiWorkerMirroredStrategy",
            "steps": len(losses),
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "decreased": decreased,
            "params_identical": identical,
            "param_checksums": checksums,
        }
        if not decreased:
            self.errors.append(f"training loss did not decrease: {losses[0]:.6g} -> "
                               f"{losses[-1]:.6g}")
        if not identical:
            differing = [r for r, c in enumerate(checksums) if c != checksums[0]]
            self.errors.append(f"weights differ from rank 0 on ranks {differing} after "
                               "training (gradient all-reduce is broken)")

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
        lines = [f"gpuc_smoke_tf [{rep['label']}] tensorflow {rep['tensorflow_version']} "
                 f"backend={rep['backend']} replicas={rep['world_size']} "
                 f"nnodes={rep['nnodes']}"]
        for host, ranks in rep["nodes"].items():
            lines.append(f"  node {host}: replicas {ranks}")
        if rep["allreduce"]:
            lines.append(f"  {'size':>10} {'time_us':>12} {'algbw GB/s':>11} "
                         f"{'busbw GB/s':>11} {'correct':>8}")
            for row in rep["allreduce"]:
                lines.append(f"  {row['size']:>10} {row['time_us']:>12.1f} "
                             f"{row['algbw_gbps']:>11.3f} {row['busbw_gbps']:>11.3f} "
                             f"{row['correct']!s:>8}")
        if rep["ddp"]:
            d = rep["ddp"]
            lines.append(f"  training: loss {d['loss_first']:.5f} -> {d['loss_last']:.5f} "
                         f"decreased={d['decreased']} weights_identical={d['params_identical']}")
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
                self.train()
        except CommFailure as exc:
            self.errors.append(str(exc))
            print(f"gpuc_smoke_tf: {exc}", file=sys.stderr, flush=True)
            if self.worker == 0:
                self.write_output()
                self.print_table()
            _leave(1)
        ok = not self.errors and bool(self.report["allreduce"])
        if self.worker == 0:
            self.write_output()
            self.print_table()
        try:
            # Nobody leaves while a peer may still read from it.
            self.gather("final barrier", {rid: b"" for rid in self._replica_ids()})
        except CommFailure as exc:
            print(f"gpuc_smoke_tf: {exc} (after the checks; their result stands)",
                  file=sys.stderr, flush=True)
        if self.nworkers > 1:
            time.sleep(EXIT_GRACE_S)
        _leave(0 if ok else 1)
        return 0  # not reached


def _on_replica_device(tf: Any, fn: Any) -> Any:
    """``fn`` with its inputs pinned to the replica's device: a tf.function's inputs carry no
    device, and a collective needs one to know where its result goes."""
    def pinned(*values: Any) -> Any:
        return fn(*tf.nest.map_structure(tf.identity, values))
    return pinned


def _leave(code: int) -> None:
    # Without interpreter teardown: TensorFlow's gRPC server and collective threads can block
    # or abort the process while they are destroyed. Everything is written and flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or exc).strip()
    # TensorFlow prefixes the function a graph error came from: noise for the reader.
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", text)
    return text.splitlines()[0][:300] if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.iters < 1 or args.warmup < 0 or args.timeout_s <= 0:
        print("gpuc_smoke_tf: --iters must be >= 1, --warmup >= 0, --timeout-s > 0",
              file=sys.stderr)
        return 2
    try:
        cluster = resolve_cluster(args, os.environ)
    except ClusterError as exc:
        print(f"gpuc_smoke_tf: {exc}", file=sys.stderr)
        return 2
    # The strategy reads TF_CONFIG from the environment; one worker runs without a cluster.
    if cluster:
        os.environ["TF_CONFIG"] = json.dumps(cluster)
    else:
        os.environ.pop("TF_CONFIG", None)
    return Smoke(args, cluster).run()


if __name__ == "__main__":
    sys.exit(main())
