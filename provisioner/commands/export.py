"""`provisioner export k8s`: hand the planned cluster over to Kubernetes (files only)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from provisioner.commands import common
from provisioner.commands.common import EXIT_OK, _build, _chatter, _json_option, _Parser

NAME = "export"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    exp = sub.add_parser("export", help="hand the planned cluster over to another system "
                         "(files only, no host contact)")
    expsub = exp.add_subparsers(dest="export_command", metavar="TARGET", required=True,
                                parser_class=_Parser)
    k8s = expsub.add_parser("k8s", help="Kubernetes: node labels, a kubectl label script and "
                            "GPU Operator Helm values for nodes that already have the driver, "
                            "container toolkit and DCGM")
    k8s.add_argument("--inventory", "-i", required=True)
    k8s.add_argument("-o", "--output", metavar="DIR", default="k8s-handoff",
                     help="the directory to write node-labels.yaml, label-nodes.sh and "
                     "gpu-operator-values.yaml into (created if missing; those files are "
                     "overwritten; default: ./k8s-handoff)")
    _json_option(k8s, "the files written and the labels")
    return exp


def run(args: argparse.Namespace) -> int:
    """`export k8s`: plan as `plan` does, then write the Kubernetes hand-off files."""
    from provisioner import k8s, render

    cp = _build(args.inventory)
    handoff = k8s.write_handoff(cp, Path(args.output))
    out = _chatter(args)
    if args.json:
        print(render.as_json({"inventory": str(cp.inventory.source),
                              "simulated": cp.simulated, **handoff.to_dict()}))
    elif not args.quiet:
        rows = [{"node": host, **{key.rpartition("/")[2]: value for key, value in labels.items()}}
                for host, labels in handoff.labels.items()]
        if len(rows) > render.MAX_PLAN_ROWS and not args.verbose:
            render.rows_table(common.console, f"Kubernetes node labels of {len(rows)} nodes, "
                                     "one row per distinct set (-v lists every node)",
                                     render.group_rows(rows, "node"))
        else:
            render.rows_table(common.console, "Kubernetes node labels", rows)
    for note in handoff.notes:
        out.print(escape(f"note: {note}"), soft_wrap=True)
    tag = " (SIMULATED)" if cp.simulated else ""
    verdict = (f"Kubernetes hand-off{tag} for {len(handoff.labels)} GPU node(s) written to "
               f"{args.output}: {', '.join(handoff.files)}; apply with "
               f"sh {Path(args.output) / k8s.LABEL_SCRIPT} and helm install --values "
               f"{Path(args.output) / k8s.VALUES_FILE}")
    (out if args.json else common.console).print(escape(verdict), soft_wrap=True)
    return EXIT_OK
