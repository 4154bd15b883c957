"""The compute nodes a new slurm.conf describes otherwise than the current one: their running
slurmd would register what slurmctld, once restarted with the new file, no longer expects."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpucluster.provisioner.plugins.filter.slurm_nodes import (
    parse_node_lines,
)

DOCUMENTATION = r"""
name: slurm_nodes_redescribed
short_description: The compute nodes whose CPUs, RealMemory or Gres= a new slurm.conf changes
description:
  - Returns the names of the nodes in I(_input) (the records the new slurm.conf is written
    from) whose C(NodeName) line in I(current) gives other CPUs, RealMemory or Gres=.
  - slurmctld judges a node's registration against these three. Until the node's slurmd is
    restarted with the new files, it registers what the old ones say; a slurmctld restarted
    with the new slurm.conf in between drains the node for what is short ("gres/gpu:h100
    count too low (6 < 8)") and keeps the GRES that registration listed as the node's
    (sinfo's %G, what jobs are scheduled against) until slurmctld restarts again (Slurm
    22.05.8, measured).
  - A node the current slurm.conf does not describe is not returned.
positional: _input, current
options:
  _input:
    description: The node records of the new slurm.conf (name, cpus, real_memory_mb, gpu_type,
      gpu_count, and gres where it has MIG devices).
    type: list
    elements: dict
    required: true
  current:
    description: The slurm.conf as it is now (empty when there is none).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The nodes whose slurmd must not register its old files with the new slurmctld
  ansible.builtin.debug:
    msg: "{{ records | gpucluster.provisioner.slurm_nodes_redescribed(current_conf) }}"
"""

RETURN = r"""
_value:
  description: Node names, sorted.
  type: list
  elements: str
"""


def _registered_as(record: Mapping[str, Any]) -> tuple[int, int, str]:
    gres = record.get("gres") or f"gpu:{record['gpu_type']}:{record['gpu_count']}"
    return int(record["cpus"]), int(record["real_memory_mb"]), str(gres)


def slurm_nodes_redescribed(nodes: Any, current: Any) -> list[str]:
    """Names of ``nodes`` that ``current`` describes with other CPUs, RealMemory or Gres=."""
    if not isinstance(nodes, Iterable) or isinstance(nodes, (str, Mapping)):
        raise AnsibleFilterError("slurm_nodes_redescribed: the node records must be a list")
    before = parse_node_lines(str(current or ""))
    try:
        return sorted(str(r["name"]) for r in nodes
                      if str(r["name"]) in before
                      and _registered_as(before[str(r["name"])]) != _registered_as(r))
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"slurm_nodes_redescribed: a node record lacks {exc}") from exc


class FilterModule:
    """The compute nodes a new slurm.conf describes otherwise."""

    def filters(self) -> dict[str, Any]:
        return {"slurm_nodes_redescribed": slurm_nodes_redescribed}
