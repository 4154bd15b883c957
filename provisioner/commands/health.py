"""`provisioner health`: every GPU node's health command, one table."""

from __future__ import annotations

import argparse

from provisioner.commands import common
from provisioner.commands.common import _chatter, _display_factory, _json_option, _Parser, _seconds

NAME = "health"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    hlt = sub.add_parser("health", help="run every GPU node's health command (gpuc-health) "
                         "in parallel, one table; exit status: the worst node's (0 healthy, "
                         "1 degraded, 2 unhealthy, 3 could not check)")
    hlt.add_argument("--inventory", "-i", required=True)
    hlt.add_argument("--limit")
    hlt.add_argument("--timeout", type=_seconds, default=300, help="run timeout (s)")
    _json_option(hlt, "every node's verdict")
    return hlt


def run(args: argparse.Namespace) -> int:
    from provisioner import cluster_health, render
    from provisioner import plan as plan_mod

    cp = plan_mod.build(args.inventory)
    if cp.simulated:
        render.simulated_banner(_chatter(args))
    with _display_factory(args)("health (health.yml)") as progress:
        summary = cluster_health.run(cp, progress, limit=args.limit, timeout_s=args.timeout)
    if args.json:
        print(render.as_json(summary.to_dict()))
    else:
        render.rows_table(common.console, f"node health (run {summary.run_id})", [
            {"node": n.host, "status": n.status_name,
             "failing": ", ".join(n.failing) or "-", "warnings": ", ".join(n.warnings) or "-",
             "detail": n.detail or "-"} for n in summary.nodes])
        common.console.print(f"worst: {cluster_health.STATUS_NAMES[summary.worst]} "
                             f"(exit {summary.worst})")
    return summary.worst
