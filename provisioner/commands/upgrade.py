"""`provisioner upgrade`: another stack on the GPU nodes, a batch at a time."""

from __future__ import annotations

import argparse

from provisioner.commands.common import (
    _batch_size,
    _build,
    _confirm,
    _count,
    _json_option,
    _Parser,
    _seconds,
)
from provisioner.commands.running import _run

NAME = "upgrade"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    upg = sub.add_parser("upgrade", help="another stack on the GPU nodes, a batch at a time: "
                         "drain in Slurm, wait for the jobs, install, validate, resume")
    upg.add_argument("--inventory", "-i", required=True)
    upg.add_argument("--stack", required=True,
                     help="the stack every GPU node gets (provisioner stacks); planned and "
                     "checked like gpu_stack before any host is touched")
    upg.add_argument("--batch-size", type=_batch_size, default="1", metavar="N|P%",
                     help="nodes upgraded at a time: N nodes or P%% of the GPU nodes, rounded "
                     "up (default 1)")
    upg.add_argument("--drain-timeout", type=_seconds, default=3600, metavar="SECONDS",
                     help="how long to wait for the jobs on a drained batch to end; then the "
                     "upgrade stops, the batch stays drained (default 3600)")
    upg.add_argument("--force", action="store_true",
                     help="cancel the jobs still running on a batch after --drain-timeout "
                     "(scancel) instead of stopping")
    upg.add_argument("--max-failed-batches", type=_count, default=1, metavar="N",
                     help="stop after N failed batches; later batches are not touched "
                     "(default 1)")
    upg.add_argument("--reboot", action="store_true",
                     help="reboot nodes whose new driver needs it (default: report them)")
    upg.add_argument("--yes", "-y", action="store_true",
                     help="do not ask before changing real (non-simulated) hosts")
    upg.add_argument("--timeout", type=_seconds, default=7200, help="per-phase timeout (s)")
    _json_option(upg, "the run's report")
    return upg


def run(args: argparse.Namespace) -> int:
    """`upgrade`: the plan with --stack on every GPU node (refused like `up` would refuse it,
    before any host is touched), then the batches."""
    from functools import partial

    from provisioner import bringup, slurm, upgrade

    cp = _build(args.inventory, stack=args.stack)
    slurm.configured(cp)  # slurm_enabled without a host for slurmctld: refused here, not midway
    _confirm(args, cp, f"Upgrade {len(cp.inventory.gpu_hosts)} GPU node(s) of "
             f"{args.inventory} to {args.stack}, {args.batch_size} at a time?")
    settings = upgrade.UpgradeSettings(
        stack=args.stack, batch_size=args.batch_size, drain_timeout_s=args.drain_timeout,
        force=args.force, max_failed_batches=args.max_failed_batches)
    options = bringup.RunOptions(timeout_s=args.timeout, reboot_ok=args.reboot)
    return _run(args, cp, "upgrade", upgrade.BATCH_PHASES, options,
                execute=partial(upgrade.run, settings=settings))
