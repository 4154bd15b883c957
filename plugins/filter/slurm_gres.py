"""A compute node's Gres= in slurm.conf: its whole GPUs and its MIG devices as typed GPUs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: slurm_gres
short_description: A node's slurm.conf Gres= from its planned MIG layout
description:
  - C(gpu:<type>:<n>) for the GPUs without MIG, then one C(gpu:<profile>:<n>) per MIG instance
    profile (C(gpu:1g.10gb:7)), the typed GPUs a job asks for with C(--gres=gpu:1g.10gb:1).
  - Without a layout (null), all I(gpu_count) GPUs are I(gpu_type).
positional: _input, gpu_type, gpu_count
options:
  _input:
    description: The plan's gpu_mig_layout_planned (one entry per GPU, null is MIG off), or null.
    type: raw
    required: true
  gpu_type:
    description: The GRES type of a whole GPU (h100).
    type: str
    required: true
  gpu_count:
    description: GPUs per node (used without a layout).
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Gres= of a node with two GPUs split in MIG and two whole
  ansible.builtin.debug:
    msg: >-
      {{ [['3g.40gb', '3g.40gb'], ['1g.10gb'], none, none]
         | gpucluster.provisioner.slurm_gres('h100') }}
"""

RETURN = r"""
_value:
  description: The Gres= value, e.g. C(gpu:h100:2,gpu:3g.40gb:2,gpu:1g.10gb:1).
  type: str
"""


def slurm_gres(layout: Any, gpu_type: Any, gpu_count: Any = 0) -> str:
    """A node's ``Gres=``: ``gpu:<type>:<n>`` for the GPUs without MIG, then one
    ``gpu:<profile>:<n>`` per MIG instance profile (the plan's gpu_mig_layout_planned, one entry
    per GPU: null is MIG off); without a layout, all ``gpu_count`` GPUs are ``gpu_type``."""
    if layout is None:
        return f"gpu:{gpu_type}:{int(gpu_count)}"
    if not isinstance(layout, Iterable) or isinstance(layout, (str, Mapping)):
        raise AnsibleFilterError("slurm_gres: the MIG layout must be a list, one entry per GPU")
    counts: dict[str, int] = {}
    whole = sum(1 for gpu in layout if gpu is None)
    for gpu in layout:
        for name in gpu or []:
            counts[str(name)] = counts.get(str(name), 0) + 1
    entries = ([f"gpu:{gpu_type}:{whole}"] if whole else []) + [
        f"gpu:{name}:{n}" for name, n in counts.items()]
    return ",".join(entries)


class FilterModule:
    """slurm.conf's Gres= of a node."""

    def filters(self) -> dict[str, Any]:
        return {"slurm_gres": slurm_gres}
