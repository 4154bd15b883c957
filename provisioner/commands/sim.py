"""`provisioner sim`: the local simulated cluster (podman): up, down, executors."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape

from provisioner.commands import common
from provisioner.commands.common import EXIT_OK, _chatter, _Parser
from provisioner.errors import InputError

NAME = "sim"


class _LazyChoices(Sequence[str]):
    """argparse ``choices`` read when a value is checked or the help is shown: the simulator's
    modules stay unimported for every command but ``sim`` (`plan` starts faster)."""

    def __init__(self, load: Callable[[], Sequence[str]]) -> None:
        self._load = load
        self._items: tuple[str, ...] | None = None

    def _get(self) -> tuple[str, ...]:
        if self._items is None:
            self._items = tuple(self._load())
        return self._items

    def __contains__(self, value: object) -> bool:
        return value in self._get()

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __getitem__(self, index: Any) -> Any:
        return self._get()[index]


def _fault_help() -> str:
    from provisioner.sim.faults import help_text

    return help_text()


def _node_oses() -> Sequence[str]:
    from provisioner.sim.image import NODE_OSES

    return NODE_OSES


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    sim = sub.add_parser("sim", help="the local simulated cluster (podman)")
    simsub = sim.add_subparsers(dest="sim_command", required=True, parser_class=_Parser)
    simup = simsub.add_parser("up", help="start (or reuse) the simulated cluster",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    simup.lazy_epilog = _fault_help
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
    simup.add_argument("--os", default="debian12", choices=_LazyChoices(_node_oses),
                       metavar="OS",
                       help="the OS of every node: %(choices)s (default debian12); the others "
                       "are imitated on a Debian userland")
    simup.add_argument("--arch", default="amd64", choices=["amd64", "arm64"],
                       help="the nodes' architecture: amd64 (default) or arm64, emulated with "
                       "qemu-user-static (registers qemu-aarch64 in binfmt_misc; Debian nodes "
                       "only; Ansible runs several times slower on them)")
    simsub.add_parser("down", help="remove the simulated cluster's containers and network")
    simexec = simsub.add_parser("executors", help="replace the simulated executors (for `up "
                                "--executors`) beside the running simulated cluster")
    simexec.add_argument("--count", type=int, default=2,
                         help="how many (default 2; 0 removes them)")
    return sim


def run(args: argparse.Namespace) -> int:
    from provisioner.sim import cluster

    if args.sim_command == "down":
        n = cluster.down(lambda m: _chatter(args).print(escape(m)))
        common.console.print(f"simulated cluster removed ({n} container(s))")
        return EXIT_OK
    if args.sim_command == "executors":
        return _sim_executors(args)
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
                           profile=args.profile, faults=tuple(args.fault), os=args.os,
                           arch=args.arch)
    inv_dir = Path(args.inventory_dir) if args.inventory_dir else (
        workspace_root() / "inventories" / "sim")
    sc = cluster.up(spec, inv_dir, profiles[args.profile].sim_json(),
                    progress=lambda m: _chatter(args).print(escape(m)), recreate=args.recreate)
    from provisioner import render

    render.simulated_banner(_chatter(args))
    for name, addr in sc.addresses.items():
        common.console.print(f"  {name:<14} {addr}")
    common.console.print(f"inventory: {inv_dir / 'hosts.yml'}")
    return EXIT_OK


def _sim_executors(args: argparse.Namespace) -> int:
    from provisioner.sim import executor_containers

    addresses = executor_containers.up(args.count, lambda m: _chatter(args).print(escape(m)))
    if not addresses:
        common.console.print("no simulated executor is running")
        return EXIT_OK
    for name, addr in addresses.items():
        common.console.print(f"  {name:<14} {addr}")
    common.console.print(escape(f"use: provisioner up ... --executors {','.join(addresses)} "
                                f"--executor-ssh-config {executor_containers.ssh_config_path()}"))
    return EXIT_OK
