"""`provisioner remediate`: take the drained GPU nodes back into service."""

from __future__ import annotations

import argparse

from provisioner.commands.common import _build, _confirm, _json_option, _Parser, _seconds
from provisioner.commands.running import _run

NAME = "remediate"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    rem = sub.add_parser("remediate", help="take the drained GPU nodes back into service: reset "
                         "their GPUs (reboot with --reboot where that fails), validate, resume "
                         "in Slurm only the nodes that pass; the others stay drained with why")
    rem.add_argument("--inventory", "-i", required=True)
    rem.add_argument("--reboot", action="store_true",
                     help="reboot a node whose GPUs cannot be reset (a batch at a time, "
                          "withheld once one does not come back)")
    rem.add_argument("--any-reason", action="store_true",
                     help="also take nodes drained for a reason the provisioner did not write "
                          "(by default those are left as they are)")
    rem.add_argument("--timeout", type=_seconds, default=3600, help="run timeout (s)")
    rem.add_argument("--yes", "-y", action="store_true",
                     help="do not ask for confirmation before changing real hosts")
    _json_option(rem, "the run's report")
    return rem


def run(args: argparse.Namespace) -> int:
    """`remediate`: the drained nodes reset, validated and resumed (see provisioner.remediate)."""
    from functools import partial

    from provisioner import bringup, remediate

    cp = _build(args.inventory)
    remediate.controller_of(cp)  # no Slurm: refused before anything starts
    _confirm(args, cp, f"Reset the GPUs of the drained nodes of {args.inventory} (reboot where "
             f"that fails: {'yes' if args.reboot else 'no'}) and resume those that validate?")
    settings = remediate.RemediateSettings(any_reason=args.any_reason, reboot=args.reboot)
    return _run(args, cp, "remediate", bringup.VALIDATE_PHASES,
                bringup.RunOptions(timeout_s=args.timeout, reboot_ok=args.reboot),
                execute=partial(remediate.run, settings=settings))
