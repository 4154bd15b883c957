"""Benchmarks on the simulated cluster; prints tables (numbers are this machine's, SIMULATED).

1. `provisioner up --skip-smoke` wall time, first run and rerun, on 1 and 3 simulated nodes,
   against the floor: the same package work (repository key + source, apt pins, update,
   install of the pinned stack, hold) done by a plain shell script over SSH, in parallel on the
   same kind of fresh nodes.
2. Controller-side cost that must not grow with the fleet: `provisioner plan` on a 100- and a
   2,000-host inventory whose hosts do not exist, and the runner's event folding (events/s and
   peak memory over 200,000 synthetic events).

Usage: python bench/run.py [--nodes 1,3] [--skip-cluster]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = str(Path(sys.executable).parent / "provisioner")


def sh(cmd: list[str], timeout: float = 3600, env: dict[str, str] | None = None) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, **(env or {})})
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise SystemExit(f"bench: {' '.join(cmd[:4])} failed (exit {proc.returncode}):\n{tail}")
    return elapsed


def sim_up(nodes: int, inv: Path) -> None:
    sh([BIN, "sim", "up", "--nodes", str(nodes), "--recreate", "--inventory-dir", str(inv)])


def shell_floor(inv: Path) -> float:
    """The same package work as the stack phase, as a plain script per node, in parallel."""
    from provisioner.matrix import packages_for
    from provisioner.plan import build

    plan = build(inv / "hosts.yml")
    data = yaml.safe_load((inv / "hosts.yml").read_text())["all"]
    mirror = data["vars"]["gpu_package_source"].rstrip("/")
    key = data["vars"]["ansible_ssh_private_key_file"]
    ssh_opts = data["vars"]["ansible_ssh_common_args"].split()
    procs = []
    started = time.monotonic()
    for name, hp in plan.hosts.items():
        if hp.stack is None:
            continue
        pins = packages_for(hp.stack, "apt")
        prefs = "".join(f"Package: {p.name}\nPin: version {p.version}\nPin-Priority: 1001\n\n"
                        for p in pins)
        specs = " ".join(shlex.quote(f"{p.name}={p.version}") for p in pins)
        names = " ".join(p.name for p in pins)
        script = f"""set -e
mkdir -p /etc/apt/keyrings
curl -fsS {mirror}/keys/mirror.asc -o /etc/apt/keyrings/bench.asc 2>/dev/null || \
  python3 -c "import urllib.request,sys;sys.stdout.buffer.write(urllib.request.urlopen('{mirror}/keys/mirror.asc').read())" > /etc/apt/keyrings/bench.asc
echo "deb [signed-by=/etc/apt/keyrings/bench.asc] {mirror}/cuda/debian12/x86_64/ /" > /etc/apt/sources.list.d/bench-cuda.list
echo "deb [signed-by=/etc/apt/keyrings/bench.asc] {mirror}/libnvidia-container/stable/deb/amd64/ /" > /etc/apt/sources.list.d/bench-ctk.list
cat > /etc/apt/preferences.d/bench.pref <<'PREF'
{prefs}PREF
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades {specs} >/dev/null
apt-mark hold {names} >/dev/null
"""
        host = data["children"]["gpu_nodes"]["hosts"][name]["ansible_host"]
        procs.append(subprocess.Popen(
            ["ssh", "-i", key, *ssh_opts, "-o", "BatchMode=yes", f"ops@{host}", "sudo", "bash", "-s"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        procs[-1].stdin.write(script)  # type: ignore[union-attr]
        procs[-1].stdin.close()  # type: ignore[union-attr]
    for proc in procs:
        if proc.wait(timeout=1800) != 0:
            raise SystemExit(f"bench: shell floor failed: {proc.stderr.read()[-500:]}")  # type: ignore[union-attr]
    return time.monotonic() - started


def stack_seconds(runs: Path) -> float:
    """The stack phase's own duration in the newest report (the package work)."""
    newest = max(runs.glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    phases = json.loads(newest.read_text())["phases"]
    return float(next(p["duration_s"] for p in phases if p["name"] == "stack"))


def cluster_bench(node_counts: list[int]) -> list[tuple[str, ...]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        inv = Path(tmp) / "inv"
        runs = Path(tmp) / "runs"
        env = {"PROVISIONER_RUNS_DIR": str(runs)}
        for n in node_counts:
            sim_up(n, inv)
            first = sh([BIN, "up", "-i", str(inv), "--yes", "--skip-smoke"], env=env)
            stack_first = stack_seconds(runs)
            rerun = sh([BIN, "up", "-i", str(inv), "--yes", "--skip-smoke"], env=env)
            stack_rerun = stack_seconds(runs)
            sim_up(n, inv)
            floor = shell_floor(inv)
            rows.append((str(n), f"{first:.1f}", f"{rerun:.1f}", f"{stack_first:.1f}",
                         f"{stack_rerun:.1f}", f"{floor:.1f}", f"{stack_first / floor:.1f}x"))
        sh([BIN, "sim", "down"])
    return rows


def plan_bench() -> list[tuple[str, ...]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (100, 2000):
            hosts = {f"gpu-{i:04d}": {"ansible_host": f"gpu-{i:04d}.invalid",
                                      "gpu_profile": "hgx-h100-8gpu"} for i in range(n)}
            path = Path(tmp) / f"inv{n}.yml"
            path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
            best = min(sh([BIN, "plan", "-i", str(path)]) for _ in range(3))
            rows.append((str(n), f"{best:.2f}"))
    return rows


def event_bench(count: int = 200_000) -> tuple[str, ...]:
    from provisioner.results import PlaybookResult
    from provisioner.runner import _EventSink

    result = PlaybookResult("bench.yml", "running", -1, 0.0, Path("/tmp"))
    sink = _EventSink(result, None)
    tracemalloc.start()
    started = time.monotonic()
    for i in range(count):
        host = f"gpu-{i % 2000:04d}"
        kind = "runner_on_failed" if i % 997 == 0 else "runner_on_ok"
        sink({"event": kind, "event_data": {"host": host, "task": f"Task {i % 150}",
                                           "res": {"changed": bool(i % 3), "msg": "x" * 200}}})
    elapsed = time.monotonic() - started
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return (f"{count:,}", f"{count / elapsed:,.0f}", f"{peak / 1e3:.0f}",
            f"{len(result.failures)} kept, {result.dropped_failures} counted")


def table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [title, line, "-+-".join("-" * w for w in widths)]
    out += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="1,3")
    parser.add_argument("--skip-cluster", action="store_true")
    args = parser.parse_args()
    print(table("controller: provisioner plan (no host contact), best of 3",
                ("hosts", "wall s"), plan_bench()))
    print(table("controller: runner event folding",
                ("events", "events/s", "peak KB", "failures"), [event_bench()]))
    if not args.skip_cluster:
        rows = cluster_bench([int(n) for n in args.nodes.split(",")])
        print(table("SIMULATED cluster (s): `up --skip-smoke` = preflight+stack+fabric+validate; "
                    "stack = the package work; shell floor = the same package work by a plain "
                    "script over SSH", ("nodes", "up first", "up rerun", "stack first",
                                        "stack rerun", "shell floor", "stack/floor"), rows))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
