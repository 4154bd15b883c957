"""Controller-side measurements: no cluster, no host contacted, nothing started but Python.

- ``plan_bench``: `provisioner plan` on 2,000 hosts that do not exist, as a user runs it (a
  fresh process, wall and CPU time, best of N) and in-process (``plan.build``).
- ``display_bench``: the live display fed synthetic events for 2,000 hosts on a terminal
  console (rich's refresh thread running, output thrown away): microseconds per event, and
  memory (tracemalloc) after every host was seen against after all events.
- ``event_bench``: the runner's event folding (events/s, peak memory).
"""

from __future__ import annotations

import io
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = str(Path(sys.executable).parent / "provisioner")


def _env() -> dict[str, str]:
    """The bench measures the checkout it lives in, whatever the venv's install points at."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p)}


def uniform_inventory(hosts: int) -> dict[str, Any]:
    """The inventory the baseline was measured on: one profile, no overrides."""
    entries = {f"gpu-{i:04d}": {"ansible_host": f"gpu-{i:04d}.invalid",
                                "gpu_profile": "hgx-h100-8gpu"} for i in range(hosts)}
    return {"all": {"children": {"gpu_nodes": {"hosts": entries}}}}


def mixed_inventory(hosts: int) -> dict[str, Any]:
    """A fleet as sites write one: racks as groups with group vars (three profiles, one stack
    for the job's NCCL), a flavour override on a tenth of the hosts, CPU login nodes."""
    racks: dict[str, Any] = {}
    profiles = ("hgx-h100-8gpu", "hgx-h200-8gpu", "hgx-b200-8gpu")
    per_rack = 32
    for r in range(0, hosts, per_rack):
        rack = {}
        for i in range(r, min(r + per_rack, hosts)):
            host: dict[str, Any] = {"ansible_host": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"}
            if i % 10 == 3:
                host["nvidia_driver_module_flavor"] = "open"
            rack[f"gpu-{i:04d}"] = host
        racks[f"rack_{r // per_rack:03d}"] = {
            "hosts": rack, "vars": {"gpu_profile": profiles[(r // per_rack) % len(profiles)]}}
    return {"all": {
        # cuda-12.9: the newest CUDA every profile's GPUs run (Volta ends there); its R575
        # branch is past its end of life, which a fleet keeping Volta nodes allows.
        "vars": {"gpu_stack": "cuda-12.9", "fabric": "infiniband", "allow_eol_driver": True},
        "children": {
            "gpu_nodes": {"children": racks},
            "cpu_nodes": {"hosts": {f"login-{i}": {} for i in range(2)}},
        }}}


def _cli_seconds(inventory: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one `provisioner plan` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([BIN, "plan", "-i", str(inventory)], capture_output=True, text=True,
                          check=False, env=_env(), timeout=600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"bench: provisioner plan -i {inventory} failed "
                         f"(exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def plan_bench(hosts: int = 2000, repeat: int = 3) -> dict[str, Any]:
    from provisioner import plan as plan_mod

    out: dict[str, Any] = {"hosts": hosts, "repeat": repeat}
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("uniform", uniform_inventory), ("mixed", mixed_inventory)):
            path = Path(tmp) / f"{name}.yml"
            path.write_text(yaml.safe_dump(make(hosts), sort_keys=False))
            cli = [_cli_seconds(path) for _ in range(repeat)]
            builds = []
            for _ in range(repeat):
                started = time.perf_counter()
                cp = plan_mod.build(path)
                builds.append(time.perf_counter() - started)
            gpu = len(cp.inventory.gpu_hosts)
            out[name] = {
                "cli_wall_s": round(min(w for w, _ in cli), 3),
                "cli_cpu_s": round(min(c for _, c in cli), 3),
                "build_first_s": round(builds[0], 3),
                "build_best_s": round(min(builds), 3),
                "gpu_hosts": gpu,
            }
    return out


def synthetic_events(hosts: int, tasks: int) -> Iterator[Any]:
    """A play as the runner reports it: per task a start event, then one result per host
    (mostly ok, a third changed, some skipped, one host in 997 failing)."""
    from provisioner.results import ProgressEvent

    names = [f"gpu-{i:04d}" for i in range(hosts)]
    yield ProgressEvent("play", task="bench")
    n = 0
    for t in range(tasks):
        task = f"role | Task {t}"
        yield ProgressEvent("task", task=task)
        for host in names:
            n += 1
            kind = ("failed" if n % 997 == 0 else "skipped" if n % 7 == 0
                    else "changed" if n % 3 == 0 else "ok")
            yield ProgressEvent(kind, host, task)


def _terminal_console() -> tuple[Any, io.TextIOBase]:
    from rich.console import Console

    sink = open(os.devnull, "w")  # noqa: SIM115 - closed by the caller
    return Console(file=sink, force_terminal=True, width=120, color_system=None), sink


def _feed(display: Callable[[Any], None], events: list[Any], budget_s: float) -> tuple[int, float]:
    """Events fed until all are in or ``budget_s`` ran out (a per-event O(hosts) display would
    take minutes): (events fed, seconds)."""
    started = time.perf_counter()
    fed = 0
    chunk = 1000
    while fed < len(events):
        for ev in events[fed:fed + chunk]:
            display(ev)
        fed = min(fed + chunk, len(events))
        if time.perf_counter() - started > budget_s:
            break
    return fed, time.perf_counter() - started


def display_bench(hosts: int = 2000, tasks: int = 100, budget_s: float = 30.0) -> dict[str, Any]:
    from provisioner.progress import ProgressDisplay

    events = list(synthetic_events(hosts, tasks))
    console, sink = _terminal_console()
    try:
        with ProgressDisplay(console, "bench (synthetic)") as display:
            fed, seconds = _feed(display, events, budget_s)
        # Memory: a fresh display; the first task (every host seen once) against the end.
        warm = 1 + 1 + hosts
        with ProgressDisplay(console, "bench (synthetic)") as display:
            tracemalloc.start()
            _feed(display, events[:warm], budget_s)
            after_hosts, _peak = tracemalloc.get_traced_memory()
            more, _s = _feed(display, events[warm:min(len(events), fed)], budget_s)
            after_all, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    finally:
        sink.close()
    return {
        "hosts": hosts,
        "events": fed,
        "events_offered": len(events),
        "seconds": round(seconds, 3),
        "us_per_event": round(seconds / fed * 1e6, 2),
        "memory_after_every_host_kb": round(after_hosts / 1e3, 1),
        "memory_after_all_events_kb": round(after_all / 1e3, 1),
        "memory_growth_bytes_per_event": round((after_all - after_hosts) / max(more, 1), 3),
        "memory_peak_kb": round(peak / 1e3, 1),
    }


def event_bench(count: int = 200_000) -> dict[str, Any]:
    from provisioner.results import PlaybookResult
    from provisioner.run_events import EventSink

    result = PlaybookResult("bench.yml", "running", -1, 0.0, Path("/tmp"))
    sink = EventSink(result, None)
    tracemalloc.start()
    started = time.perf_counter()
    for i in range(count):
        host = f"gpu-{i % 2000:04d}"
        kind = "runner_on_failed" if i % 997 == 0 else "runner_on_ok"
        sink({"event": kind, "event_data": {"host": host, "task": f"Task {i % 150}",
                                           "res": {"changed": bool(i % 3), "msg": "x" * 200}}})
    elapsed = time.perf_counter() - started
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"events": count, "events_per_s": round(count / elapsed), "peak_kb": round(peak / 1e3),
            "failures_kept": len(result.failures), "failures_counted": result.dropped_failures}
