"""Cluster-side measurements on the simulated cluster (podman; SIMULATED numbers).

Per node count: `provisioner up --skip-smoke` (preflight + stack + fabric + validate) first run
and idempotent rerun, the stack phase's own time in each, and the floor: the same package
work (repository key + source, apt pins, update, install of the pinned stack, hold) done by a
plain shell script over SSH, in parallel, on fresh nodes (the baseline) and again on
the converged nodes (what an idempotent rerun cannot beat). On one node count also: the rerun
under stock Ansible settings, one node made unreachable during `validate`, and a profiled
rerun (profile_tasks/profile_roles, see profiling.py).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import profiling

ROOT = Path(__file__).resolve().parents[1]
BIN = str(Path(sys.executable).parent / "provisioner")

# ansible-core's own defaults for what our ansible.cfg tunes (ansible-core 2.19
# lib/ansible/config/base.yml: forks 5, pipelining False, ssh_args "-C -o ControlMaster=auto
# -o ControlPersist=60s", gather_subset all, fact cache memory, internal_poll_interval 0.001),
# set through the environment, which wins over ansible.cfg. What is not a speed setting
# (collections path, fact injection, host key checking) stays as configured.
STOCK_ENV = {
    "ANSIBLE_FORKS": "5",
    "ANSIBLE_PIPELINING": "False",
    "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=60s",
    "ANSIBLE_GATHER_SUBSET": "all",
    "ANSIBLE_CACHE_PLUGIN": "memory",
    "ANSIBLE_INTERNAL_POLL_INTERVAL": "0.001",
}


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p),
            **(extra or {})}


def sh(cmd: list[str], timeout: float = 3600, env: dict[str, str] | None = None,
       ok_codes: tuple[int, ...] = (0,)) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          env=_env(env))
    elapsed = time.monotonic() - started
    if proc.returncode not in ok_codes:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise SystemExit(f"bench: {' '.join(cmd[:4])} failed (exit {proc.returncode}):\n{tail}")
    return elapsed


def sim_up(nodes: int, inv: Path) -> None:
    sh([BIN, "sim", "up", "--nodes", str(nodes), "--recreate", "--inventory-dir", str(inv)])


def shell_floor(inv: Path, converged: bool) -> float:
    """The same package work as the stack phase, as a plain script per node, in parallel. On
    converged nodes the repository is already configured by the roles (adding a second source
    for it with another key would conflict): only update, install and hold run."""
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
        setup = "" if converged else f"""mkdir -p /etc/apt/keyrings
curl -fsS {mirror}/keys/mirror.asc -o /etc/apt/keyrings/bench.asc 2>/dev/null || \
  python3 -c "import urllib.request,sys;sys.stdout.buffer.write(urllib.request.urlopen('{mirror}/keys/mirror.asc').read())" > /etc/apt/keyrings/bench.asc
echo "deb [signed-by=/etc/apt/keyrings/bench.asc] {mirror}/cuda/debian12/x86_64/ /" > /etc/apt/sources.list.d/bench-cuda.list
echo "deb [signed-by=/etc/apt/keyrings/bench.asc] {mirror}/libnvidia-container/stable/deb/amd64/ /" > /etc/apt/sources.list.d/bench-ctk.list
cat > /etc/apt/preferences.d/bench.pref <<'PREF'
{prefs}PREF
"""
        script = f"""set -e
{setup}apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades {specs} >/dev/null
apt-mark hold {names} >/dev/null
"""
        host = data["children"]["gpu_nodes"]["hosts"][name]["ansible_host"]
        proc = subprocess.Popen(
            ["ssh", "-i", key, *ssh_opts, "-o", "BatchMode=yes", f"ops@{host}", "sudo", "bash",
             "-s"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        assert proc.stdin is not None
        proc.stdin.write(script)
        proc.stdin.close()
        procs.append(proc)
    for proc in procs:
        if proc.wait(timeout=1800) != 0:
            assert proc.stderr is not None
            raise SystemExit(f"bench: shell floor failed: {proc.stderr.read()[-500:]}")
    return time.monotonic() - started


def newest_run(runs: Path) -> Path:
    return max((p.parent for p in runs.glob("*/report.json")), key=lambda p: p.stat().st_mtime)


def phase_durations(runs: Path) -> dict[str, float]:
    """Every phase's own duration in the newest report, in run order."""
    phases = json.loads((newest_run(runs) / "report.json").read_text())["phases"]
    return {str(p["name"]): float(p["duration_s"]) for p in phases
            if p.get("duration_s") is not None}


# The bring-up phases (preflight + stack + fabric + validate), the first `up`'s target covers.
# `up --skip-smoke` on the simulated cluster also runs the day-two phases (monitoring:
# node_health on every node, Prometheus on one; the scheduler): the wall time includes them,
# this sum does not.
BRINGUP_PHASES = ("preflight", "stack", "fabric", "validate")


def _up(inv: Path, runs: Path,
        extra: dict[str, str] | None = None) -> tuple[float, dict[str, float]]:
    """The wall time of one `up --skip-smoke` and its report's phase durations."""
    wall = sh([BIN, "up", "-i", str(inv), "--yes", "--skip-smoke"],
              env={"PROVISIONER_RUNS_DIR": str(runs), **(extra or {})})
    return wall, phase_durations(runs)


def _wait_for_ssh(host: str, timeout: float = 120.0) -> None:
    """Until the restarted node's sshd accepts a connection: the next measure needs the node
    (a run started while it boots finds it unreachable)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, 22), timeout=2) as conn:
                if conn.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"bench: {host} did not answer on port 22 within {timeout:.0f} s "
                     "after its restart")


def unreachable_cost(inv: Path, runs: Path) -> dict[str, Any]:
    """`validate` with every node up, then with the last GPU node's container stopped: the
    difference is what one unreachable node costs the phase."""
    env = {"PROVISIONER_RUNS_DIR": str(runs)}
    healthy = sh([BIN, "validate", "-i", str(inv)], env=env, ok_codes=(0, 1))
    data = yaml.safe_load((inv / "hosts.yml").read_text())["all"]
    victim = sorted(data["children"]["gpu_nodes"]["hosts"])[-1]
    subprocess.run(["podman", "stop", "--time", "0", victim], check=True, capture_output=True)
    try:
        broken = sh([BIN, "validate", "-i", str(inv)], env=env, ok_codes=(0, 1))
    finally:
        subprocess.run(["podman", "start", victim], check=False, capture_output=True)
        _wait_for_ssh(data["children"]["gpu_nodes"]["hosts"][victim]["ansible_host"])
    return {"validate_s": round(healthy, 1), "validate_one_node_down_s": round(broken, 1),
            "node": victim, "cost_s": round(broken - healthy, 1)}


def cluster_bench(node_counts: list[int], profile: bool) -> dict[str, Any]:
    """Every count in ``node_counts``; the tuned/stock comparison, the unreachable node and the
    profiled rerun on 3 nodes when measured, else the first count."""
    rows: dict[str, Any] = {}
    special = 3 if 3 in node_counts else node_counts[0]
    out: dict[str, Any] = {"nodes": rows, "special_nodes": special}
    with tempfile.TemporaryDirectory() as tmp:
        inv = Path(tmp) / "inv"
        runs = Path(tmp) / "runs"
        for n in node_counts:
            sim_up(n, inv)
            first, first_phases = _up(inv, runs)
            rerun, rerun_phases = _up(inv, runs)
            row: dict[str, Any] = {"up_first_s": round(first, 1), "up_rerun_s": round(rerun, 1),
                                   "stack_first_s": first_phases.get("stack"),
                                   "stack_rerun_s": rerun_phases.get("stack"),
                                   "up_first_phases_s": first_phases,
                                   "up_first_bringup_phases_s": round(sum(
                                       first_phases.get(name, 0.0) for name in BRINGUP_PHASES), 1)}
            if n == special:
                stock, stock_phases = _up(inv, runs, STOCK_ENV)
                row.update(up_rerun_stock_s=round(stock, 1), stack_rerun_stock_s=stock_phases.get("stack"))
                out["unreachable"] = unreachable_cost(inv, runs)
                if profile:
                    _up(inv, runs, profiling.PROFILE_ENV)
                    out["profile"] = profiling.top(newest_run(runs))
            row["floor_converged_s"] = round(shell_floor(inv, converged=True), 1)
            sim_up(n, inv)
            row["floor_fresh_s"] = round(shell_floor(inv, converged=False), 1)
            rows[str(n)] = row
        sh([BIN, "sim", "down"])
    return out


def headline(result: dict[str, Any]) -> tuple[dict[str, float | None], dict[str, str]]:
    """The headline cluster keys from ``cluster_bench``'s result, and why any is missing."""
    rows = result["nodes"]
    keys: dict[str, float | None] = {}
    why: dict[str, str] = {}

    def ratio(key: str, num: float | None, den: float | None, reason: str) -> None:
        keys[key] = round(num / den, 2) if num is not None and den else None
        if keys[key] is None:
            why[key] = reason

    one = rows.get("1", {})
    ratio("stack_rerun_over_floor", one.get("stack_rerun_s"), one.get("floor_fresh_s"),
          "needs node count 1 (--nodes)")
    eight = rows.get("8", {})
    ratio("rerun_8_over_1", eight.get("up_rerun_s"), one.get("up_rerun_s"),
          "needs node counts 1 and 8 (--nodes)")
    if "24" in rows:
        ratio("rerun_24_over_1", rows["24"].get("up_rerun_s"), one.get("up_rerun_s"),
              "needs node count 1")
    special = rows.get(str(result["special_nodes"]), {})
    ratio("tuned_over_stock", special.get("up_rerun_s"), special.get("up_rerun_stock_s"),
          "stock rerun not measured")
    keys["up_3_nodes_s"] = rows.get("3", {}).get("up_first_s")
    if keys["up_3_nodes_s"] is None:
        why["up_3_nodes_s"] = "needs node count 3 (--nodes)"
    # The same run's preflight + stack + fabric + validate phases only (BRINGUP_PHASES).
    keys["up_3_nodes_bringup_phases_s"] = rows.get("3", {}).get("up_first_bringup_phases_s")
    if keys["up_3_nodes_bringup_phases_s"] is None:
        why["up_3_nodes_bringup_phases_s"] = "needs node count 3 (--nodes)"
    keys["unreachable_node_cost_s"] = result.get("unreachable", {}).get("cost_s")
    if keys["unreachable_node_cost_s"] is None:
        why["unreachable_node_cost_s"] = "not measured"
    return keys, why
