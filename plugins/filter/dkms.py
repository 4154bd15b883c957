"""Filters over ``dkms status``, for the driver role's check that every installed kernel has the
driver's module."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.dkms import (
    kernel_states,
)

DOCUMENTATION = r"""
name: dkms_kernels
short_description: The NVIDIA module's DKMS state for each kernel
description:
  - Reads the stdout of C(dkms status) (dkms 2 and 3 formats) with the parser in
    module_utils/gpucluster/dkms.py.
  - Any module whose name starts with C(nvidia) at the given version counts.
positional: _input, version, kernels
options:
  _input:
    description: The stdout of C(dkms status).
    type: str
    required: true
  version:
    description: The driver version the module must have (580.95.05).
    type: str
    required: true
  kernels:
    description: The kernel releases to report on.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Which kernels lack the module
  ansible.builtin.debug:
    msg: "{{ status.stdout | gpucluster.provisioner.dkms_kernels('580.95.05', kernels) }}"
"""

RETURN = r"""
_value:
  description: "{kernel: installed | built | missing}"
  type: dict
"""


def dkms_kernels(text: Any, version: Any, kernels: Any) -> dict[str, str]:
    return kernel_states(str(text or ""), str(version), [str(k) for k in kernels or []])


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"dkms_kernels": dkms_kernels}
