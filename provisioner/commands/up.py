"""`provisioner up`: validate, preflight, install the stack, check, monitoring, smoke job."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from provisioner.commands.common import (
    _batch_size,
    _build,
    _confirm,
    _container,
    _container_option,
    _executor_options,
    _executors,
    _framework_option,
    _json_option,
    _max_fail,
    _Parser,
    _seconds,
)
from provisioner.commands.running import _run
from provisioner.errors import InputError

NAME = "up"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    up = sub.add_parser("up", help="validate, preflight, install the stack, check, "
                        "monitoring, smoke job")
    up.add_argument("--inventory", "-i", required=True)
    up.add_argument("--limit", help="Ansible host pattern to restrict the run to")
    up.add_argument("--skip-smoke", action="store_true", help="do not run the smoke job")
    _framework_option(up)
    _container_option(up)
    up.add_argument("--yes", "-y", action="store_true",
                    help="do not ask before changing real (non-simulated) hosts")
    up.add_argument("--timeout", type=_seconds, default=7200, help="per-phase timeout (s)")
    up.add_argument("--reboot", action="store_true",
                    help="reboot nodes whose new driver needs it (default: report them)")
    up.add_argument("--batch-size", type=_batch_size, default=None, metavar="N|P%",
                    help="with --reboot: how many nodes reboot at once, N or P%% of the nodes "
                    "the run targets, rounded up (default 10%%); a node that does not come "
                    "back is reported and the others go on")
    up.add_argument("--reboot-timeout", type=_seconds, default=None, metavar="SECONDS",
                    help="with --reboot: how long a node may take to come back (default 1800)")
    up.add_argument("--retry-failed", metavar="RUN",
                    help="resume run RUN (its id, or its directory under the runs dir): rerun "
                    "only the hosts it lost, from the phase they stopped in, then validate "
                    "and the smoke job on the whole cluster")
    up.add_argument("--max-fail", type=_max_fail, default=None, metavar="N|P%",
                    help="how many nodes (or what share of them) the run may lose, failed or "
                    "unreachable, and go on with the others (default: 0 up to 8 nodes, else "
                    "5%%); the run still exits 1 and the report names every lost node")
    up.add_argument("--check", action="store_true",
                    help="dry run (ansible --check): report what would change, change nothing")
    _executor_options(up)
    _json_option(up, "the run's report")
    return up


def run(args: argparse.Namespace) -> int:
    from provisioner import bringup

    if not args.reboot and (args.batch_size or args.reboot_timeout):
        raise InputError("--batch-size and --reboot-timeout say how `up --reboot` reboots: "
                         "add --reboot, or leave them out")
    cp = _build(args.inventory)
    executors, limit_hosts = _executors(args, cp)
    from provisioner import slurm

    # Refused before the question: nothing is asked, or changed, for input that cannot run.
    launcher = slurm.choose_launcher(cp, None)
    container = _container(args.container, launcher)
    _confirm(args, cp, f"Provision {len(cp.hosts)} host(s) from {args.inventory}?")

    scheduler = (slurm.SCHEDULER_PHASE,) if slurm.configured(cp) else ()
    phases = (*bringup.UP_PHASES, *scheduler) if args.skip_smoke or args.check else (
        *bringup.UP_PHASES, *scheduler, bringup.SMOKE_PHASE)
    retry = _retry(args, str(cp.inventory.source), [name for name, _ in phases])
    if retry is not None:
        phases = phases[[name for name, _ in phases].index(retry.phase):]
    options = bringup.RunOptions(
        limit=args.limit, timeout_s=args.timeout, check_mode=args.check, reboot_ok=args.reboot,
        reboot_batch=args.batch_size, reboot_timeout_s=args.reboot_timeout,
        max_fail=args.max_fail, launcher=launcher,
        framework=args.framework, container=container,
        retry_hosts=retry.hosts if retry else (),
        executors=executors, limit_hosts=limit_hosts)
    return _run(args, cp, "up", phases, options, resumes=retry)


def _retry(args: argparse.Namespace, inventory: str, phase_names: list[str]) -> Any:
    """`--retry-failed RUN`: the saved run's lost hosts and where they stopped (or None)."""
    if not args.retry_failed:
        return None
    from provisioner import bringup, report

    if args.limit:
        raise InputError("--retry-failed picks the hosts itself: drop --limit")
    run_id = Path(args.retry_failed.rstrip("/")).name
    if run_id == "report.json":
        run_id = Path(args.retry_failed).parent.name
    retry = bringup.retry_of(report.load(run_id), inventory)
    if retry.phase not in phase_names:
        raise InputError(f"run {retry.run_id} lost its hosts in {retry.phase}, which this run "
                         "does not have (drop --skip-smoke?)")
    return retry
