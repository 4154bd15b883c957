"""`provisioner history`: each node's certify figures over its runs."""

from __future__ import annotations

import argparse

from rich.markup import escape

from provisioner.commands import common
from provisioner.commands.common import EXIT_OK, _json_option, _Parser
from provisioner.errors import InputError

NAME = "history"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    hist = sub.add_parser("history", help="each node's certify figures over its runs (the "
                          "ledger under the runs directory)")
    hist.add_argument("--host", help="one node's figures only")
    _json_option(hist, "the figures by node")
    return hist


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from provisioner import history, render

    points = history.load(host=args.host)
    by_host = history.series(points)
    if args.host and not by_host:
        raise InputError(f"history: no certify figures for {args.host} under "
                         f"{history.ledger_path()}")
    if args.json:
        print(render.as_json({h: [asdict(p) for p in pts] for h, pts in by_host.items()}))
        return EXIT_OK
    if not by_host:
        common.console.print(f"no certify figures yet ({history.ledger_path()})")
        return EXIT_OK
    rows = [{"host": host, "run": p.run_id + (" (simulated)" if p.simulated else ""),
             "figure": f"{p.value:.3g} {p.unit}" if p.value is not None else "nothing measured",
             "fleet median": f"{p.reference:.3g}" if p.reference is not None else "-"}
            for host, pts in by_host.items() for p in pts]
    render.rows_table(common.console,
                      f"certify figures by node (best pair, {history.ledger_path()})", rows)
    for host, pts in by_host.items():
        ref = history.reference(pts[:-1])
        if ref is not None:
            common.console.print(escape(f"{host}: median of the {len(ref[1])} runs before the "
                                        f"last: {ref[0]:.3g} {pts[-1].unit}"))
    return EXIT_OK
