"""`provisioner certify`: the network between pairs of nodes, and the burn-in."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich.markup import escape

from provisioner.commands import common
from provisioner.commands.common import (
    _build,
    _chatter,
    _display_factory,
    _json_option,
    _Parser,
    _seconds,
)

if TYPE_CHECKING:
    from provisioner.burnin import BurnIn

NAME = "certify"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    cert = sub.add_parser("certify", help="measure the network between pairs of nodes (TCP "
                          "both ways at once, rounds of disjoint pairs) and name the node or "
                          "link that is slow in every pair it is in; read-only unless --drain; "
                          "exit 1 when there is a suspect")
    cert.add_argument("--inventory", "-i", required=True)
    cert.add_argument("--drain", action="store_true",
                      help="with Slurm: drain each suspect node, the check as the reason")
    cert.add_argument("--margin", type=float, default=25.0, metavar="PERCENT",
                      help="how far below the fleet's median best pair a node or link is a "
                           "suspect (default 25: one short TCP measurement per pair varies by "
                           "up to about 15%% between healthy nodes)")
    cert.add_argument("--outlier-margin", type=float, default=10.0, metavar="PERCENT",
                      help="flag (warn, not fail) a node this far below the fleet's median "
                           "best pair, and beyond 3 robust standard deviations of the fleet's "
                           "spread, or this far below the median of its own recent runs "
                           "(default 10)")
    cert.add_argument("--seconds", type=_seconds, default=4,
                      help="how long each pair sends (default 4)")
    cert.add_argument("--level", choices=["quick", "burn-in"], default="quick",
                      help="quick (default): the pairs alone; burn-in: then every GPU node runs "
                           "DCGM's diagnostic (level 3), copy bandwidth per GPU (nvbandwidth or "
                           "PyTorch), a sustained load sampled for hardware clock slowdown, an "
                           "NCCL all-reduce soak and an Xid check; a failure names the GPU")
    cert.add_argument("--burn-seconds", type=_seconds, default=60,
                      help="with --level burn-in: how long the sustained load and the NCCL "
                           "soak each run (default 60)")
    _json_option(cert, "the certify section of the run's report")
    return cert


def run(args: argparse.Namespace) -> int:
    from provisioner import certify, render

    cp = _build(args.inventory)
    certify.check_input(cp, args.margin / 100, args.outlier_margin / 100, args.level)
    if cp.simulated:
        render.simulated_banner(_chatter(args))
    books = "certify.yml" + (", certify_burnin.yml" if args.level == certify.BURN_IN else "")
    with _display_factory(args)(f"certify ({books})") as progress:
        done = certify.run(cp, drain=args.drain, margin=args.margin / 100,
                           outlier_margin=args.outlier_margin / 100, seconds=args.seconds,
                           on_progress=progress, level=args.level,
                           burn_seconds=args.burn_seconds)
    section = done.report.certify or {}
    if args.json:
        print(render.as_json({"run_id": done.report.run_id, "simulated": cp.simulated,
                              "exit_code": done.report.exit_code, **section}))
        return done.report.exit_code
    render.rows_table(common.console, f"pairs, TCP both ways at once (run {done.report.run_id})", [
        {"round": str(p.round), "pair": f"{p.a} <-> {p.b}",
         "Gbit/s": f"{p.gbps:.3g}" if p.gbps is not None else "-",
         "detail": p.error or (f"measured again (first {p.first_gbps} Gbit/s)"
                               if p.retested else "-")} for p in done.pairs])
    reference = done.verdict.reference_gbps
    common.console.print(f"reference (median of each node's best pair): "
                         f"{reference:.3g} Gbit/s" if reference is not None else
                         "reference: nothing was measured")
    for s in done.verdict.suspects:
        common.console.print(f"SUSPECT {s.host} ({s.component}): {s.check} {s.measured} Gbit/s "
                             f"< {s.expected} Gbit/s; evidence: {'; '.join(s.evidence)}")
    if not done.verdict.suspects:
        common.console.print("no suspect: every node has a pair at the reference")
    if done.burn_in is not None:
        _certify_burn_in(done.burn_in)
    for node, reason in done.drained.items():
        common.console.print(f"drained {node} in Slurm: {reason}")
    for c in done.report.checks:
        if c.status == "warn":
            kind = c.name.rsplit(":", 1)[-1].upper()
            common.console.print(f"{kind} {escape(c.host)}: {escape(c.detail)}")
    common.console.print(f"report: {done.run_dir / 'report.json'}")
    return done.report.exit_code


def _certify_burn_in(burn: BurnIn) -> None:
    """The burn-in's checks that did not pass, one row each, and its suspects."""
    from provisioner import certify, render

    rows = [{"node": c.host, "check": c.name, "status": c.status.upper(),
             "detail": c.detail} for c in burn.checks if c.status != "pass"]
    passed = sum(c.status == "pass" for c in burn.checks)
    common.console.print(f"burn-in: {passed} of {len(burn.checks)} checks passed")
    render.rows_table(common.console, "burn-in checks that did not pass", rows)
    for s in certify.burn_in_suspects(burn):
        common.console.print(f"SUSPECT {escape(s.host)} ({s.component}): {s.check} measured "
                             f"{s.measured}, expected {s.expected}; "
                             f"{escape('; '.join(s.evidence))}")
