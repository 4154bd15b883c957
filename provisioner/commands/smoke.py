"""`provisioner smoke`: the distributed smoke job only."""

from __future__ import annotations

import argparse

from provisioner.commands.common import (
    _build,
    _container,
    _container_option,
    _framework_option,
    _json_option,
    _Parser,
    _seconds,
)
from provisioner.commands.running import _run

NAME = "smoke"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    smk = sub.add_parser("smoke", help="run the distributed smoke job only")
    smk.add_argument("--inventory", "-i", required=True)
    smk.add_argument("--limit")
    smk.add_argument("--timeout", type=_seconds, default=1800, help="phase timeout (s)")
    smk.add_argument("--launcher", choices=["direct", "slurm"], default=None,
                     help="how the job starts: srun through Slurm (the default when the "
                     "inventory has Slurm) or torchrun on every node directly")
    _framework_option(smk)
    _container_option(smk)
    _json_option(smk, "the run's report")
    return smk


def run(args: argparse.Namespace) -> int:
    from provisioner import bringup, slurm

    cp = _build(args.inventory)
    launcher = slurm.choose_launcher(cp, args.launcher)
    return _run(args, cp, "smoke", (bringup.SMOKE_PHASE,),
                bringup.RunOptions(limit=args.limit, timeout_s=args.timeout,
                                   launcher=launcher, framework=args.framework,
                                   container=_container(args.container, launcher)))
