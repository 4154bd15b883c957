"""The compute nodes slurm.conf keeps: the ones this run described, plus the planned ones it did
not reach, as the controller's current slurm.conf describes them."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: slurm_nodes
short_description: Compute node records for slurm.conf, keeping planned nodes this run missed
description:
  - A run that does not reach every compute node (a node lost during C(up), a run with
    C(--limit)) describes only the nodes it reached. Writing slurm.conf from those
    alone would drop the others from Slurm and restart every daemon twice (out, then back in).
  - This filter returns the records of this run plus, for each planned compute node this run
    did not describe, its C(NodeName) line from the controller's current slurm.conf, unchanged.
    A planned node that the current slurm.conf does not have either is left out (nothing is
    known of its CPUs and memory); a node no longer planned is dropped. A kept node's partition
    is its profile from I(partitions), else the partition the current slurm.conf puts it in.
positional: _input, planned, current
options:
  _input:
    description: The records this run made (name, addr, cpus, real_memory_mb, gpu_type,
      gpu_count, partition).
    type: list
    elements: dict
    required: true
  planned:
    description: Every compute node of the inventory (not only this run's).
    type: list
    elements: str
    required: true
  current:
    description: The controller's slurm.conf as it is now (empty when there is none).
    type: str
    required: true
  partitions:
    description: The partition (hardware profile) of each planned node, by name.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Keep the planned compute nodes this run did not reach
  ansible.builtin.set_fact:
    nodes: "{{ described | gpucluster.provisioner.slurm_nodes(groups['gpu_nodes'], current) }}"
"""

RETURN = r"""
_value:
  description: Node records, sorted by name.
  type: list
  elements: dict
"""


def _lines(text: str, keyword: str) -> list[dict[str, str]]:
    """The ``keyword=...`` lines of a slurm.conf as {lowercased key: value}; a line that does not
    split (bad quoting) is left out."""
    out: list[dict[str, str]] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.lower().startswith(keyword + "="):
            continue
        try:
            items = shlex.split(line)
        except ValueError:
            continue
        out.append({key.lower(): value for key, value in
                    (item.split("=", 1) for item in items if "=" in item)})
    return out


def parse_node_lines(text: str) -> dict[str, dict[str, Any]]:
    """``NodeName=`` lines of a slurm.conf: name -> record (one node per line, as ours are).
    A node with MIG devices (more than one GRES entry) keeps its whole ``Gres=`` as ``gres``."""
    out: dict[str, dict[str, Any]] = {}
    for fields in _lines(text, "nodename"):
        name = fields.get("nodename", "")
        entries = [entry.split(":") for entry in fields.get("gres", "").split(",")]
        if not name or name.upper() == "DEFAULT" or "," in name or "[" in name:
            continue
        if any(len(p) != 3 or p[0] != "gpu" or not p[2].isdigit() for p in entries):
            continue
        try:
            cpus, memory = int(fields["cpus"]), int(fields["realmemory"])
        except (KeyError, ValueError):
            continue
        parts = entries[0]
        out[name] = {"name": name, "addr": fields.get("nodeaddr", name), "cpus": cpus,
                     "real_memory_mb": memory, "gpu_type": parts[1], "gpu_count": int(parts[2])}
        if len(entries) > 1:
            out[name]["gres"] = fields["gres"]
    return out


def parse_partitions(text: str) -> dict[str, str]:
    """Node name -> the first partition that is not the default one listing it."""
    out: dict[str, str] = {}
    for fields in _lines(text, "partitionname"):
        if fields.get("default", "").upper() == "YES":
            continue
        for node in fields.get("nodes", "").split(","):
            if node:
                out.setdefault(node, fields["partitionname"])
    return out


def slurm_nodes(described: Any, planned: Any, current: Any,
                partitions: Any = None) -> list[dict[str, Any]]:
    if not isinstance(described, Iterable) or isinstance(described, (str, Mapping)):
        raise AnsibleFilterError("slurm_nodes: the records of this run must be a list")
    if not isinstance(planned, Iterable) or isinstance(planned, (str, Mapping)):
        raise AnsibleFilterError("slurm_nodes: planned must be a list of host names")
    records = {str(r["name"]): dict(r) for r in described}
    kept = parse_node_lines(str(current or ""))
    partition_of = {**parse_partitions(str(current or "")),
                    **{str(k): str(v) for k, v in dict(partitions or {}).items() if v}}
    for name in map(str, planned):
        if name in records or name not in kept or name not in partition_of:
            continue
        records[name] = {**kept[name], "partition": partition_of[name]}
    wanted = set(map(str, planned))
    return [records[name] for name in sorted(records) if name in wanted]


class FilterModule:
    """slurm.conf's node list."""

    def filters(self) -> dict[str, Any]:
        return {"slurm_nodes": slurm_nodes}
