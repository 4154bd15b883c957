"""`provisioner validate`: every GPU node against its hardware profile (read-only)."""

from __future__ import annotations

import argparse

from provisioner.commands.common import _build, _executor_options, _executors, _json_option, _Parser
from provisioner.commands.running import _run

NAME = "validate"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    val = sub.add_parser("validate", help="check every GPU node against its hardware profile "
                         "(read-only)")
    val.add_argument("--inventory", "-i", required=True)
    val.add_argument("--limit")
    _executor_options(val)
    _json_option(val, "the run's report")
    return val


def run(args: argparse.Namespace) -> int:
    from provisioner import bringup

    cp = _build(args.inventory)
    executors, limit_hosts = _executors(args, cp)
    return _run(args, cp, "validate", bringup.VALIDATE_PHASES,
                bringup.RunOptions(limit=args.limit, executors=executors,
                                   limit_hosts=limit_hosts))
