"""Slurm's switch tree (topology.conf) from the compute nodes' leaf switches."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: slurm_topology
short_description: Leaf switches and their compute nodes, for Slurm's topology/tree plugin
description:
  - Takes each compute node's leaf switch (the inventory's C(slurm_switch); empty where a node
    names none) and returns every leaf switch with its nodes, so topology.conf can say which
    nodes share a switch and Slurm places a job under one leaf when it fits.
  - Every node names a switch, or none does (the empty mapping means no topology); a switch
    name is letters, digits, C(_), C(.) or C(-).
positional: _input
options:
  _input:
    description: Compute node name to its leaf switch (C('') for none).
    type: dict
    required: true
"""

EXAMPLES = r"""
topology: >-
  {{ {'gpu-1': 'leaf1', 'gpu-2': 'leaf1', 'gpu-3': 'leaf2'}
     | gpucluster.provisioner.slurm_topology }}
# -> {'leaf1': ['gpu-1', 'gpu-2'], 'leaf2': ['gpu-3']}
"""

RETURN = r"""
_value:
  description: Leaf switch name to its nodes (sorted); empty when no node names a switch.
  type: dict
"""

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def slurm_topology(switches: Any) -> dict[str, list[str]]:
    if not isinstance(switches, Mapping):
        raise AnsibleFilterError("slurm_topology: expects node name -> leaf switch")
    named = {str(node): str(switch or "").strip() for node, switch in switches.items()}
    missing = sorted(node for node, switch in named.items() if not switch)
    if len(missing) == len(named):
        return {}
    if missing:
        raise AnsibleFilterError(
            f"slurm_switch is set on some compute nodes but not on {', '.join(missing)}: give "
            "every compute node its leaf switch, or none")
    bad = sorted({switch for switch in named.values() if not _NAME.match(switch)})
    if bad:
        names = ", ".join(repr(b) for b in bad)
        raise AnsibleFilterError(f"slurm_switch {names}: a switch name is letters, digits, _, . "
                                 "or -")
    out: dict[str, list[str]] = {}
    for node, switch in sorted(named.items()):
        out.setdefault(switch, []).append(node)
    return out


class FilterModule:
    """Slurm's switch tree."""

    def filters(self) -> dict[str, Any]:
        return {"slurm_topology": slurm_topology}
