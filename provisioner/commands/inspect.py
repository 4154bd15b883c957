"""`provisioner inspect`: parse saved outputs, optionally judged against a profile."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from provisioner.commands import common
from provisioner.commands.common import EXIT_FAILED, EXIT_OK, _json_option, _Parser
from provisioner.errors import InputError

NAME = "inspect"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    insp = sub.add_parser("inspect", help="parse saved outputs (nvidia-smi -q -x, nvlink -s, "
                          "topo -m, ibstat, IB sysfs dump, the plain nvidia-smi table, "
                          "ibv_devinfo, "
                          "all_reduce_perf, dmesg, dcgmi diag)")
    insp.add_argument("files", nargs="+")
    insp.add_argument("--profile", help="also judge the facts against this hardware profile")
    _json_option(insp, "the parsed facts (and checks)")
    return insp


def run(args: argparse.Namespace) -> int:
    from provisioner import render
    from provisioner.inspect import check_against_profile, inspect_file

    profile = None
    if args.profile:
        from provisioner.profiles import load_profiles

        profiles = load_profiles()
        if args.profile not in profiles:
            raise InputError(f"inspect: unknown --profile {args.profile!r}; choose one of "
                             f"{', '.join(sorted(profiles))}")
        profile = profiles[args.profile]
    results = [inspect_file(Path(f)) for f in args.files]
    failed = 0
    if profile is not None:
        for result in results:
            result["checks"] = check_against_profile(result, profile)
            failed += sum(c["status"] == "fail" for c in result["checks"])
    if args.json:
        print(render.as_json(results if len(results) > 1 else results[0]))
        return EXIT_FAILED if failed else EXIT_OK
    if not args.quiet:
        for result in results:
            render.mapping(common.console, f"{result['file']} ({result['format']})",
                           result["facts"])
            if result.get("checks"):
                render.rows_table(common.console, f"{result['file']} against {args.profile}",
                                  [{k: str(c.get(k, "")) for k in ("name", "status", "measured",
                                                                   "expected", "detail")}
                                   for c in result["checks"]])
    judged = f": {failed} check(s) failed against {args.profile}" if profile else ""
    common.console.print(escape(f"inspected {len(results)} file(s){judged}"))
    return EXIT_FAILED if failed else EXIT_OK
