"""Each compute node's leaf switch from a saved ``ibnetdiscover`` output: Slurm's switch tree
read from the fabric itself instead of written by hand (the inventory's ``slurm_ibnetdiscover``).

``ibnetdiscover`` (infiniband-diags) prints one record per node, records apart by a blank line
(its man page's example): a switch as ``Switch  36 "S-<guid>"  # "<description>" ...``, a
channel adapter as ``Ca  2 "H-<guid>"  # "<description>"``, each followed by one line per
connected port: ``[<port>](<port guid>)  "<S|H|R>-<peer guid>"[<peer port>]  # ...``. An HCA's
description is its node description, which rdma-core sets to "<hostname> <device>"
("node018 mlx5_0"), so the first word names the host.

A node's leaf is the switch its HCAs are cabled to. A node whose HCAs go to several switches
(a rail-optimised fabric: HCA n of every node of a scalable unit on leaf n) belongs with the
nodes cabled to the same set of switches: they are one hop apart on every rail, and that set
is one leaf of Slurm's tree, named after its first switch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.errors import InputError

_HEADER = re.compile(r'^(?P<kind>Switch|Ca|Rt)\s+\d+\s+"(?P<id>[SHR]-[0-9a-fA-F]+)"'
                     r'(?:\s*#\s*"(?P<desc>[^"]*)")?')
_PORT = re.compile(r'^\[(?P<port>\d+)\](?:\([0-9a-fA-F]+\))?\s+"(?P<peer>[SHR]-[0-9a-fA-F]+)"'
                   r'\[(?P<peer_port>\d+)\]')
# A Slurm switch name (plan._SWITCH_NAME): what else a description holds becomes "_".
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class Fabric:
    """Switches (id -> description) and channel adapters (id -> description, switch ids)."""

    switches: dict[str, str] = field(default_factory=dict)
    adapters: dict[str, tuple[str, set[str]]] = field(default_factory=dict)


def parse_ibnetdiscover(text: str) -> Fabric:
    """The switches and HCAs of an ``ibnetdiscover`` output; InputError when it shows none."""
    fabric = Fabric()
    current: tuple[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        header = _HEADER.match(line)
        if header:
            current = (header["kind"], header["id"])
            if header["kind"] == "Switch":
                fabric.switches[header["id"]] = header["desc"] or header["id"]
            elif header["kind"] == "Ca":
                fabric.adapters[header["id"]] = (header["desc"] or "", set())
            continue
        if not line:
            current = None
            continue
        port = _PORT.match(line)
        if port and current and current[0] == "Ca" and port["peer"].startswith("S-"):
            fabric.adapters[current[1]][1].add(port["peer"])
    if not fabric.switches or not fabric.adapters:
        raise InputError("shows no switch and channel adapter records (is it the output of "
                         "ibnetdiscover?)")
    return fabric


def switch_name(description: str, ident: str) -> str:
    """A Slurm switch name from a switch's description (``MF0;leaf-07:MQM9700/U1`` ->
    ``MF0_leaf-07_MQM9700_U1``), its id where the description leaves nothing."""
    name = _NOT_NAME.sub("_", description).strip("_")
    return name or ident


def leaf_switches(fabric: Fabric, hosts: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """(host -> leaf switch name, hosts no HCA names). A host is matched by the first word of
    its HCAs' descriptions, or that word's short name (``node018.cluster`` -> ``node018``)."""
    cabled: dict[str, set[str]] = {}
    for description, switches in fabric.adapters.values():
        words = description.split()
        if not words or not switches:
            continue
        for key in {words[0], words[0].split(".")[0]}:
            cabled.setdefault(key, set()).update(switches)
    leaves: dict[str, str] = {}
    missing: list[str] = []
    sets: dict[str, set[frozenset[str]]] = {}
    for host in hosts:
        switches = cabled.get(host) or cabled.get(host.split(".")[0]) or set()
        if not switches:
            missing.append(host)
            continue
        first = min(switches, key=lambda ident: (fabric.switches.get(ident, ident), ident))
        leaves[host] = switch_name(fabric.switches.get(first, first), first)
        # Nodes on one set of switches form one leaf; two sets must not share a name.
        sets.setdefault(leaves[host], set()).add(frozenset(switches))
    for name, kinds in sets.items():
        if len(kinds) > 1:
            groups = sorted(sorted(fabric.switches.get(s, s) for s in kind) for kind in kinds)
            raise InputError(f"nodes cabled to different sets of switches would share leaf "
                             f"{name}: {groups}; give slurm_switch by hand")
    return leaves, missing


def leaves_from_file(path: Path, hosts: Iterable[str]) -> dict[str, str]:
    """Host -> leaf switch name for ``hosts`` from the ``ibnetdiscover`` output in ``path``;
    InputError (one line, naming the file) when it cannot be read or lacks a host."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"slurm_ibnetdiscover {path}: {exc.strerror or exc}") from exc
    try:
        leaves, missing = leaf_switches(parse_ibnetdiscover(text), list(hosts))
    except InputError as exc:
        raise InputError(f"slurm_ibnetdiscover {path}: {exc}") from exc
    if missing:
        raise InputError(f"slurm_ibnetdiscover {path}: no HCA of {', '.join(missing[:5])}"
                         f"{', ...' if len(missing) > 5 else ''} (matched by the first word of "
                         "an HCA's node description, the host name)")
    return leaves
