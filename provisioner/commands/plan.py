"""`provisioner plan`: validate the inventory and show the resolved stack per host."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from provisioner.commands import common
from provisioner.commands.common import EXIT_OK, _build, _chatter, _json_option, _Parser
from provisioner.errors import InputError

if TYPE_CHECKING:
    from provisioner.plan import ClusterPlan

NAME = "plan"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    plan = sub.add_parser("plan", help="validate the inventory and show the resolved stack "
                          "per host (no host contact)")
    plan.add_argument("--inventory", "-i", required=True)
    plan.add_argument("-o", "--output", metavar="PATH",
                      help="also write the plan as an inventory file, for plain "
                      "ansible-playbook: -i INVENTORY -i PATH playbooks/site.yml")
    _json_option(plan, "the plan")
    return plan


def run(args: argparse.Namespace) -> int:
    from provisioner import render

    cp = _build(args.inventory)
    written = _write_plan(cp, Path(args.output)) if args.output is not None else None
    tag = " (SIMULATED)" if cp.simulated else ""
    verdict = (f"inventory OK{tag}: {len(cp.hosts)} host(s), "
               f"{len(cp.inventory.gpu_hosts)} GPU node(s)")
    if args.json:
        print(render.as_json({
            "inventory": str(cp.inventory.source),
            "simulated": cp.simulated,
            "plan_inventory": str(written) if written else None,
            "hosts": [{"host": name, "kind": h.kind,
                       "profile": h.profile.name if h.profile else None,
                       "variables": h.variables()} for name, h in cp.hosts.items()],
        }))
        _chatter(args).print(escape(verdict))
    elif not args.quiet:
        render.plan(common.console, _plan_rows(cp), cp.simulated)
        if args.verbose:
            import yaml

            for name, h in cp.hosts.items():
                common.console.print(escape(f"{name}:\n" + yaml.safe_dump(h.variables(),
                                                                          sort_keys=True)))
    if not args.json:
        common.console.print(escape(verdict))
    if written:
        (common.errconsole if args.json else common.console).print(
            escape(f"plan inventory written to {written}: ansible-playbook -i "
                   f"{args.inventory} -i {written} playbooks/site.yml"), soft_wrap=True)
    return EXIT_OK


def _plan_rows(cp: ClusterPlan) -> list[dict[str, str]]:
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
    return rows


def _write_plan(cp: ClusterPlan, path: Path) -> Path:
    """The plan as an inventory file; an unwritable path is bad input (exit 2)."""
    if path.is_dir():
        raise InputError(f"plan -o {path}: is a directory; name a file, e.g. {path / 'plan.yml'}")
    try:
        return cp.write_inventory(path)
    except OSError as exc:
        raise InputError(f"plan -o {path}: cannot write the plan inventory "
                         f"({exc.strerror or exc})") from exc
