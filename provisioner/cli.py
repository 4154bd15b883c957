"""Command line: argument parsing, printing, and the one place exceptions become exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from provisioner.errors import InputError, ProvisionerError

if TYPE_CHECKING:  # heavy imports stay out of `provisioner --help`
    from provisioner.bringup import RunOptions
    from provisioner.plan import ClusterPlan
    from provisioner.runner import ProgressCallback

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2

def _console(stderr: bool = False) -> Console:
    """Wide tables in logs (CI, pipes): rich would otherwise squeeze them to 80 columns."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal or os.environ.get("COLUMNS") else 160
    return Console(stderr=stderr, highlight=False, width=width)


console = _console()
errconsole = _console(stderr=True)


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="provisioner", description="Bring up a multi-node GPU cluster and prove "
                "it works (Ansible, driven by ansible-runner).")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    up = sub.add_parser("up", help="validate, preflight, install the stack, check, smoke job")
    up.add_argument("--inventory", "-i", required=True)
    up.add_argument("--limit", help="Ansible host pattern to restrict the run to")
    up.add_argument("--skip-smoke", action="store_true", help="do not run the smoke job")
    up.add_argument("--yes", "-y", action="store_true",
                    help="do not ask before changing real (non-simulated) hosts")
    up.add_argument("--timeout", type=int, default=7200, help="per-phase timeout (s)")
    up.add_argument("--reboot", action="store_true",
                    help="reboot nodes whose new driver needs it (default: report them)")
    up.add_argument("--check", action="store_true",
                    help="dry run (ansible --check): report what would change, change nothing")

    stacks = sub.add_parser("stacks", help="the matrix of known-good stacks")
    stacks.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    stacks.add_argument("name", nargs="?")

    insp = sub.add_parser("inspect", help="parse saved outputs (nvidia-smi -q -x, nvlink -s, "
                          "topo -m, ibstat, IB sysfs dump, all_reduce_perf, dmesg, dcgmi diag)")
    insp.add_argument("files", nargs="+")
    insp.add_argument("--profile", help="also judge the facts against this hardware profile")

    smk = sub.add_parser("smoke", help="run the distributed smoke job only")
    smk.add_argument("--inventory", "-i", required=True)
    smk.add_argument("--limit")
    smk.add_argument("--timeout", type=int, default=1800, help="phase timeout (s)")

    val = sub.add_parser("validate", help="check every GPU node against its hardware profile "
                         "(read-only)")
    val.add_argument("--inventory", "-i", required=True)
    val.add_argument("--limit")

    plan = sub.add_parser("plan", help="validate the inventory and show the resolved stack "
                          "per host (no host contact)")
    plan.add_argument("--inventory", "-i", required=True)

    rep = sub.add_parser("report", help="show a saved report")
    rep.add_argument("run_id", nargs="?")
    rep.add_argument("--json", action="store_true", help="print the raw report.json")

    sim = sub.add_parser("sim", help="the local simulated cluster (podman)")
    simsub = sim.add_subparsers(dest="sim_command", required=True, parser_class=_Parser)
    from provisioner.sim.faults import help_text as faults_help

    simup = simsub.add_parser("up", help="start (or reuse) the simulated cluster",
                              epilog=faults_help(),
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    simup.add_argument("--nodes", type=int, default=3,
                       help="total nodes: 1 CPU login node + N-1 GPU nodes (default 3); "
                       "--nodes 1 is a single GPU node")
    simup.add_argument("--profile", default="sim-h100-8gpu")
    simup.add_argument("--fault", action="append", default=[], metavar="[NODE:]FAULT",
                       help="inject a simulated fault on every GPU node (gpu3-nvlink-down) or one "
                       "(sim-gpu-2:gpu3-nvlink-down); repeatable; the faults are listed below")
    simup.add_argument("--inventory-dir", default=None,
                       help="where to write hosts.yml (default: inventories/sim)")
    simup.add_argument("--recreate", action="store_true")
    simsub.add_parser("down", help="remove the simulated cluster's containers and network")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return _dispatch(args)
    except ProvisionerError as exc:
        errconsole.print(f"[bold red]error:[/bold red] {escape(str(exc))}", soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        errconsole.print("error: interrupted")
        return 130
    except Exception as exc:  # a bug of ours: say so in one line, details on request
        if os.environ.get("PROVISIONER_DEBUG"):
            raise
        what = escape(f"{type(exc).__name__}: {exc}")
        errconsole.print(f"[bold red]internal error:[/bold red] {what} "
                         "(rerun with PROVISIONER_DEBUG=1 for the traceback)", soft_wrap=True)
        return EXIT_FAILED


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "plan":
        return _plan(args)
    if args.command == "up":
        return _up(args)
    if args.command == "validate":
        return _validate(args)
    if args.command == "smoke":
        return _smoke(args)
    if args.command == "report":
        return _report(args)
    if args.command == "sim":
        return _sim(args)
    if args.command == "stacks":
        return _stacks(args)
    if args.command == "inspect":
        return _inspect(args)
    raise InputError(f"unknown command {args.command}")


def _plan(args: argparse.Namespace) -> int:
    from provisioner import plan as plan_mod
    from provisioner import render

    cp = plan_mod.build(args.inventory)
    rows = []
    for name, h in cp.hosts.items():
        v = h.stack.as_vars() if h.stack else {}
        rows.append({
            "host": name, "kind": h.kind,
            "profile": h.profile.name if h.profile else "-",
            "stack": str(v.get("gpu_stack", "-")),
            "driver": f"{v.get('nvidia_driver_version', '-')} "
                      f"({v.get('nvidia_driver_module_flavor', '-')})" if v else "-",
            "cuda": str(v.get("cuda_toolkit_version", "-")),
            "cudnn": str(v.get("cudnn_version", "-")),
            "nccl": str(v.get("nccl_version", "-")),
            "ctk": str(v.get("nvidia_container_toolkit_version", "-")),
            "fabric mgr": (str(v.get("nvidia_fabricmanager_version"))
                           if v.get("nvidia_fabricmanager_enabled") else "-"),
        })
    render.plan(console, rows, cp.simulated)
    console.print(f"inventory OK: {len(cp.hosts)} host(s), "
                  f"{len(cp.inventory.gpu_hosts)} GPU node(s)")
    return EXIT_OK


@contextmanager
def _display(title: str) -> Iterator[ProgressCallback]:
    from provisioner.progress import ProgressDisplay

    with ProgressDisplay(console, title) as disp:
        yield disp


def _up(args: argparse.Namespace) -> int:
    from provisioner import bringup
    from provisioner import plan as plan_mod

    cp = plan_mod.build(args.inventory)
    if not cp.simulated and not args.yes:
        if not sys.stdin.isatty():
            raise InputError("up changes real hosts: pass --yes to run non-interactively")
        answer = console.input(f"Provision {len(cp.hosts)} host(s) from {args.inventory}? "
                               "[y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise InputError("aborted: nothing was changed")
    phases = bringup.UP_PHASES if args.skip_smoke or args.check else (
        *bringup.UP_PHASES, bringup.SMOKE_PHASE)
    return _run(cp, "up", phases, bringup.RunOptions(
        limit=args.limit, timeout_s=args.timeout, check_mode=args.check, reboot_ok=args.reboot))


def _stacks(args: argparse.Namespace) -> int:
    import json

    from provisioner import render, stacks

    matrix = stacks.load_matrix()
    if args.action == "show":
        if not args.name:
            raise InputError("stacks show: name a stack, e.g. `provisioner stacks show "
                             f"{matrix.default_stack}`")
        print(json.dumps(stacks.stack_detail(matrix, args.name), indent=2))
        return EXIT_OK
    render.rows_table(console, "known-good stacks (provisioner/data/stacks.yml)",
                      stacks.stack_rows(matrix))
    return EXIT_OK


def _inspect(args: argparse.Namespace) -> int:
    import json

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
    failed = False
    if profile is not None:
        for result in results:
            result["checks"] = check_against_profile(result, profile)
            failed = failed or any(c["status"] == "fail" for c in result["checks"])
    print(json.dumps(results if len(results) > 1 else results[0], indent=2))
    return EXIT_FAILED if failed else EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from provisioner import bringup
    from provisioner import plan as plan_mod

    return _run(plan_mod.build(args.inventory), "validate", bringup.VALIDATE_PHASES,
                bringup.RunOptions(limit=args.limit))


def _smoke(args: argparse.Namespace) -> int:
    from provisioner import bringup
    from provisioner import plan as plan_mod

    return _run(plan_mod.build(args.inventory), "smoke", (bringup.SMOKE_PHASE,),
                bringup.RunOptions(limit=args.limit, timeout_s=args.timeout))


def _run(cp: ClusterPlan, command: str, phases: Sequence[tuple[str, str]],
         options: RunOptions) -> int:
    """Run phases on a validated plan, save the report, print it; the exit code of the run."""
    from provisioner import bringup, render

    report, run_dir = bringup.start_report(cp, command)
    if cp.simulated:
        render.simulated_banner(console)
    ok = bringup.run_phases(cp, report, run_dir, phases, options, _display)
    report.finish(EXIT_OK if ok else EXIT_FAILED)
    path = report.save(run_dir)
    data = report.to_dict()
    data["report_path"] = str(path)
    render.report(console, data)
    return report.exit_code


def _report(args: argparse.Namespace) -> int:
    import json

    from provisioner import render
    from provisioner import report as report_mod

    data = report_mod.load(args.run_id)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        render.report(console, data)
    return int(data.get("exit_code", 0))


def _sim(args: argparse.Namespace) -> int:
    from provisioner.sim import cluster

    if args.sim_command == "down":
        n = cluster.down(lambda m: console.print(escape(m)))
        console.print(f"simulated cluster removed ({n} container(s))")
        return EXIT_OK
    from provisioner.paths import workspace_root
    from provisioner.profiles import load_profiles

    profiles = load_profiles()
    if args.profile not in profiles:
        raise InputError(f"sim up: unknown --profile {args.profile!r}; choose one of "
                         f"{', '.join(sorted(profiles))}")
    if not 1 <= args.nodes <= 64:
        raise InputError("sim up: --nodes must be between 1 and 64")
    cpu_nodes = 1 if args.nodes >= 2 else 0
    spec = cluster.SimSpec(gpu_nodes=args.nodes - cpu_nodes, cpu_nodes=cpu_nodes,
                           profile=args.profile, faults=tuple(args.fault))
    inv_dir = Path(args.inventory_dir) if args.inventory_dir else (
        workspace_root() / "inventories" / "sim")
    sc = cluster.up(spec, inv_dir, profiles[args.profile].sim_json(),
                    progress=lambda m: console.print(escape(m)), recreate=args.recreate)
    from provisioner import render

    render.simulated_banner(console)
    for name, addr in sc.addresses.items():
        console.print(f"  {name:<14} {addr}")
    console.print(f"inventory: {inv_dir / 'hosts.yml'}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
