"""`provisioner profiles`: the hardware profiles (list, detect)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from provisioner.commands import common
from provisioner.commands.common import (
    EXIT_OK,
    _data_title,
    _display_factory,
    _json_option,
    _Parser,
    _shown,
)
from provisioner.errors import InputError

NAME = "profiles"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    profs = sub.add_parser("profiles", help="the hardware profiles (GPU, minimum driver, "
                           "fabric); `profiles detect` writes one from a machine's tools")
    profs.add_argument("action", nargs="?", choices=["list", "detect"], default="list")
    profs.add_argument("files", nargs="*", metavar="FILE",
                       help="detect: saved outputs of one machine (nvidia-smi -q -x, the plain "
                       "nvidia-smi table, nvidia-smi nvlink -s, nvidia-smi topo -m, ibstat, "
                       "ibv_devinfo, a flattened /sys/class/infiniband), recognised by content")
    profs.add_argument("--inventory", "-i",
                       help="detect: read a live node of this inventory instead (read-only)")
    profs.add_argument("--limit", metavar="HOST", help="detect --inventory: the node")
    profs.add_argument("--name", help="detect: the profile's name (default: site-profile)")
    profs.add_argument("--output", "-o", metavar="FILE",
                       help="detect: write the profile YAML here (default: standard output)")
    _json_option(profs, "the list, or what detect found")
    return profs


def run(args: argparse.Namespace) -> int:
    from provisioner import matrix as stacks
    from provisioner import render
    from provisioner.profiles import load_profiles_with_sources

    if args.action == "detect":
        return _profiles_detect(args)
    if args.files or args.inventory or args.limit or args.name or args.output:
        raise InputError("FILE, --inventory, --limit, --name and --output belong to "
                         "`provisioner profiles detect`")

    matrix = stacks.load_matrix()
    rows = []
    for name, (p, source) in sorted(load_profiles_with_sources().items()):
        arch = matrix.architectures.get(p.architecture)
        branch = f"R{arch.min_driver_branch}" if arch is not None else "-"
        rows.append({
            "profile": name, "gpu": f"{p.gpu_count}x {p.gpu_model}",
            "pci_ids": ", ".join(p.pci_device_ids), "architecture": p.architecture,
            "min_driver": p.min_driver or f"{branch} (architecture)",
            "nvswitch": f"gen {p.nvswitch_generation}" if p.nvswitch_generation else "no",
            "fabric": f"{p.ib_hcas}x {p.ib_rate_gbps} Gb/s {p.fabric}" if p.ib_hcas else p.fabric,
            "simulated": "yes" if p.simulated else "",
            "source": source,
        })
    if args.json:
        print(render.as_json(rows))
    else:
        render.rows_table(common.console, f"hardware profiles ({_data_title('profiles.yml')})",
                                 _shown(rows))
    return EXIT_OK


def _profiles_detect(args: argparse.Namespace) -> int:
    """A profile from saved outputs or a live node: YAML on stdout (or -o), what it could not
    see on stderr, one line each."""
    from provisioner import detect, render

    name = args.name or "site-profile"
    detect.check_name(name)
    simulated = False
    if bool(args.files) == bool(args.inventory):
        raise InputError("profiles detect: give saved output FILEs or --inventory X --limit "
                         "HOST, one of the two")
    if args.inventory:
        from provisioner import detect_node

        # The profile (or --json) is the command's standard output: progress and the banner go
        # to stderr, as under --json.
        chatter = argparse.Namespace(**{**vars(args), "json": True})
        with _display_factory(chatter)("detect (detect.yml)") as progress:
            node = detect_node.detect_node(Path(args.inventory), args.limit, name, progress)
        found, where = node.detected, f"{node.host} (outputs kept in {node.run_dir})"
        simulated = node.simulated
        if simulated:
            render.simulated_banner(common._chatter(chatter))
        for key, why in node.silent.items():
            common.errconsole.print(escape(f"{node.host}: {key} {why}"), soft_wrap=True)
    else:
        found, where = detect.detect_profile([Path(f) for f in args.files], name), "the files"
    text = detect.render_profile_yaml(found, name, simulated)
    if args.json:
        print(render.as_json({"name": name, "from": where, "simulated": simulated,
                              "facts": found.facts,
                              "sources": found.sources, "missing": found.missing,
                              "reasons": found.reasons, "withheld": found.withheld,
                              "unused": found.unused}))
    elif args.output:
        from provisioner.report import write_private

        write_private(Path(args.output), text)
        common.errconsole.print(escape(f"profile {name} written to {args.output}, read from "
                                       f"{where}"), soft_wrap=True)
    else:
        print(text, end="")
    for field_name in found.missing:
        why = found.withheld.get(field_name) or found.reasons.get(field_name) or "not shown"
        common.errconsole.print(escape(f"not detected: {field_name}: {why}"), soft_wrap=True)
    for unused in found.unused:
        common.errconsole.print(escape(f"not used: {unused} (says nothing of a profile)"),
                                soft_wrap=True)
    return EXIT_OK
