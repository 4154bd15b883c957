"""The bench: measures, prints a table, writes ``bench/results/<timestamp>.json``.

Top-level keys of the result (numbers, lower is better; null with a reason in ``not_measured``
when a mode did not measure them): ``stack_rerun_over_floor``, ``rerun_8_over_1``,
``tuned_over_stock``, ``up_3_nodes_s``, ``plan_2000_hosts_s``,
``display_us_per_event_2000_hosts``, ``unreachable_node_cost_s``, ``health_quick_sim_s``,
``cores``; the detail of every measure under ``controller``, ``node_health`` and ``cluster``.

    python bench/run.py                      # controller + simulated cluster (podman), 1,3,8 nodes
    python bench/run.py --controller-only    # no cluster: plan, live display, event folding
    python bench/run.py --nodes 1,3,8,24     # also the 24-node rerun
    python bench/run.py --no-profile         # skip the profile_tasks/profile_roles rerun

Cluster numbers are SIMULATED (containers on this machine); controller numbers are real.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import controller, node_health  # noqa: E402

RESULTS = ROOT / "bench" / "results"

# The headline figures: the value of each before the work that measures it began ("now"), and
# its target.
HEADLINE = (
    # key, what, now, target
    ("stack_rerun_over_floor", "idempotent stack rerun / raw-shell floor, 1 node", 8.9, 2.0),
    ("rerun_8_over_1", "idempotent `up` rerun, 8 nodes / 1 node (before: 3 / 1)", 1.6, 1.5),
    ("tuned_over_stock", "tuned rerun time / stock-settings rerun time", None, 0.5),
    ("up_3_nodes_s", "first `up --skip-smoke`, 3 nodes (s)", 86.6, 25.0),
    ("plan_2000_hosts_s", "`provisioner plan`, 2,000 hosts (s, process wall)", 3.0, 0.5),
    ("unreachable_node_cost_s", "one unreachable node's cost to `validate` (s)", 47.0, 10.0),
    ("display_us_per_event_2000_hosts", "live display per event, 2,000 hosts (us)", 6000.0,
     50.0),
    # Slurm's Prolog check; the target is a real 8-GPU node's, measured here on the simulated
    # tools (bench/node_health.py).
    ("health_quick_sim_s", "`gpuc-health --quick`, simulated 8-GPU node (s, process wall)", None,
     5.0),
)


def _git_commit() -> str | None:
    proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return (proc.stdout.strip() + ("+dirty" if dirty else "")) if proc.returncode == 0 else None


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("ansible-core", "ansible-runner", "rich"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "absent"
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": "controller-only" if args.controller_only else "full",
        "cores": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "commit": _git_commit(),
        "versions": _versions(),
    }
    keys: dict[str, float | None] = {k: None for k, *_ in HEADLINE}
    why: dict[str, str] = {}

    plan = controller.plan_bench(hosts=2000, repeat=args.repeat)
    display = controller.display_bench(hosts=2000, budget_s=args.display_budget)
    events = controller.event_bench()
    keys["plan_2000_hosts_s"] = plan["uniform"]["cli_wall_s"]
    keys["display_us_per_event_2000_hosts"] = display["us_per_event"]
    result["controller"] = {"plan": plan, "display": display, "events": events}
    health = node_health.quick_bench(repeat=args.repeat)
    keys["health_quick_sim_s"] = health["quick_best_s"]
    result["node_health"] = health

    if args.controller_only:
        for key, value in keys.items():
            if value is None:
                why[key] = "not measured: --controller-only (needs the simulated cluster)"
    else:
        from bench import cluster

        nodes = [int(n) for n in args.nodes.split(",")]
        measured = cluster.cluster_bench(nodes, profile=not args.no_profile)
        result["cluster"] = measured
        cluster_keys, cluster_why = cluster.headline(measured)
        keys.update(cluster_keys)
        why.update(cluster_why)
        if args.no_profile:
            why["profile"] = "not measured: --no-profile"
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    # The headline keys first, at the top level.
    return {**{k: keys[k] for k in keys}, "not_measured": why,
            "targets": {k: target for k, _w, _n, target in HEADLINE},
            "previous": {k: now for k, _w, now, _t in HEADLINE}, **result}


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}" if value >= 100 else f"{value:.3g}"
    return str(value)


def table(title: str, header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [title, line, "-+-".join("-" * w for w in widths)]
    out += [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out) + "\n"


def report(data: dict[str, Any]) -> str:
    rows = []
    for key, what, now, target in HEADLINE:
        value = data.get(key)
        met = "-" if value is None else ("yes" if value <= target else "NO")
        rows.append((what, key, _cell(now), _cell(value), _cell(target), met,
                     data["not_measured"].get(key, "")))
    text = table(f"bench {data['timestamp']} ({data['mode']}, {data['cores']} cores, load "
                 f"{data['load_average_at_start'][0]})",
                 ("measure", "key", "before", "now", "target", "met", "note"), rows)
    plan = data["controller"]["plan"]
    text += "\n" + table(
        "controller: provisioner plan, 2,000 hosts (best of "
        f"{plan['repeat']}; cli = a fresh process as users run it)",
        ("inventory", "cli wall s", "cli cpu s", "build first s", "build best s"),
        [(name, *(_cell(plan[name][k]) for k in ("cli_wall_s", "cli_cpu_s", "build_first_s",
                                                  "build_best_s")))
         for name in ("uniform", "mixed")])
    disp = data["controller"]["display"]
    text += "\n" + table(
        "controller: live display (terminal, rich refresh thread at 4 Hz)",
        ("hosts", "events", "us/event", "KB after hosts", "KB after all", "B/event growth",
         "peak KB"),
        [tuple(_cell(disp[k]) for k in ("hosts", "events", "us_per_event",
                                        "memory_after_every_host_kb",
                                        "memory_after_all_events_kb",
                                        "memory_growth_bytes_per_event", "memory_peak_kb"))])
    ev = data["controller"]["events"]
    text += "\n" + table("controller: runner event folding",
                         ("events", "events/s", "peak KB", "failures kept", "counted"),
                         [tuple(_cell(ev[k]) for k in ("events", "events_per_s", "peak_kb",
                                                       "failures_kept", "failures_counted"))])
    nh = data.get("node_health")
    if nh:
        text += "\n" + table(
            f"node: gpuc-health on a SIMULATED {nh['profile']} node (process wall s, best / "
            f"median of {nh['repeat']})",
            ("mode", "best s", "median s", "checks"),
            [(mode, _cell(nh[f"{mode}_best_s"]), _cell(nh[f"{mode}_median_s"]),
              _cell(nh[f"{mode}_checks"])) for mode in ("quick", "full")])
    cl = data.get("cluster")
    if cl:
        cols = ("up_first_s", "up_first_bringup_phases_s", "up_rerun_s", "stack_first_s",
                "stack_rerun_s", "up_rerun_stock_s", "floor_fresh_s", "floor_converged_s")
        text += "\n" + table(
            "SIMULATED cluster (s): up = `up --skip-smoke`; bringup_phases = its preflight + stack "
            "+ fabric + validate (no monitoring); stack = its package phase; stock = the "
            "rerun under ansible-core's default settings; floor = the same package work by a "
            "plain script over SSH (fresh / converged nodes)",
            ("nodes", *cols), [(n, *(_cell(r.get(c)) for c in cols))
                               for n, r in cl["nodes"].items()])
        for kind in ("tasks", "roles"):
            entries = cl.get("profile", {}).get(kind, [])
            if entries:
                text += "\n" + table(
                    f"profile_{kind} (rerun, {cl['special_nodes']} nodes): top {len(entries)}",
                    (kind[:-1], "s"), [(str(e.get("task") or e.get("role")),
                                        _cell(e["seconds"])) for e in entries])
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--controller-only", action="store_true",
                        help="only what needs no cluster (plan, live display, event folding, "
                             "gpuc-health on simulated tools)")
    parser.add_argument("--skip-cluster", dest="controller_only", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--nodes", default="1,3,8",
                        help="simulated node counts, comma-separated (default 1,3,8)")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the profile_tasks/profile_roles rerun")
    parser.add_argument("--repeat", type=int, default=3, help="plan runs per inventory (best)")
    parser.add_argument("--display-budget", type=float, default=30.0,
                        help="seconds the display bench may feed events (default 30)")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    data = measure(args)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"{data['timestamp'].replace(':', '')}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(report(data))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
