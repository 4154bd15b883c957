"""`provisioner report`: show a saved report, or write its page."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from provisioner.commands.common import EXIT_OK, _json_option, _Parser
from provisioner.commands.running import show_report
from provisioner.errors import InputError

NAME = "report"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    rep = sub.add_parser("report", help="show a saved report")
    rep.add_argument("run_id", nargs="?")
    rep.add_argument("--html", action="store_true",
                     help="write the run's page, index.html beside its report.json (one "
                     "self-contained file: phases, checks, busbw charts, certify heatmap and "
                     "trends; no scripts, nothing fetched), print its path and exit 0")
    _json_option(rep, "the saved report.json (with --html: the page's path)")
    return rep


def run(args: argparse.Namespace) -> int:
    from provisioner import report as report_mod

    data = report_mod.load(args.run_id)
    if args.html:
        return _report_html(args, data)
    show_report(args, data)
    return int(data.get("exit_code", 0))


def _report_html(args: argparse.Namespace, data: dict[str, Any]) -> int:
    """`report RUN --html`: the page beside the run's report.json; its path on stdout."""
    from provisioner import render, report_html
    from provisioner.report import runs_dir

    run_id = args.run_id or str(data["run_id"])
    run_dir = runs_dir() / run_id
    if Path(run_id).name != run_id or not (run_dir / "report.json").is_file():
        raise InputError(f"run {run_id!r}: no report.json under {runs_dir()} to draw a page "
                         "from (give the run id, the name of its directory)")
    path = report_html.write_page(run_dir, data)
    if args.json:
        print(render.as_json({"run_id": run_id, "html": str(path)}))
    else:
        print(path)
    return EXIT_OK
