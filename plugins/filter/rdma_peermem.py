"""Whether the rdma role loads nvidia-peermem: ``rdma_peermem`` as given, or for ``auto`` only
where GPUDirect RDMA has no dma_buf path (module_utils/gpucluster/gpudirect.py's rule, the one
validate applies without the CUDA driver: one rule, two callers)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.gpudirect import (
    dma_buf_by_rule,
)

DOCUMENTATION = r"""
name: rdma_peermem_wanted
short_description: Whether a node needs nvidia-peermem for GPUDirect RDMA
description:
  - C(auto) is true on a GPU node of an InfiniBand or RoCE fabric whose planned kernel module
    flavour and running kernel give no dma_buf path (the open module on Linux 5.12 or later has
    one, NVIDIA's recommended path); an unknown flavour keeps nvidia-peermem. A boolean is
    returned as given.
positional: _input
options:
  _input:
    description: The rdma_peermem setting, C(auto) or a boolean.
    type: raw
    required: true
  gpu_node:
    description: Whether the host is a GPU node.
    type: bool
    required: true
  fabric:
    description: The fabric (infiniband, roce, ethernet).
    type: str
    required: true
  flavour:
    description: The planned kernel module flavour (open, proprietary), empty when unknown.
    type: str
    required: true
  kernel:
    description: The running kernel's release.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Whether nvidia-peermem is loaded
  ansible.builtin.debug:
    msg: >-
      {{ rdma_peermem | gpucluster.provisioner.rdma_peermem_wanted(
           true, 'infiniband', 'open', ansible_facts['kernel']) }}
"""

RETURN = r"""
_value:
  description: True where nvidia-peermem is to be loaded.
  type: bool
"""


def rdma_peermem_wanted(setting: Any, gpu_node: Any, fabric: Any, flavour: Any,
                        kernel: Any) -> bool:
    if str(setting).strip().lower() == "auto":
        return (bool(gpu_node) and fabric in ("infiniband", "roce")
                and not dma_buf_by_rule(str(flavour or ""), str(kernel or "")))
    try:
        return boolean(setting, strict=True)
    except TypeError:
        raise AnsibleFilterError(
            f"rdma_peermem must be auto, true or false, got {setting!r}") from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"rdma_peermem_wanted": rdma_peermem_wanted}
