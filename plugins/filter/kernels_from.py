"""The kernels a reboot may bring up by default, for the driver role's per-kernel checks."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.dkms import (
    boot_candidates,
)

DOCUMENTATION = r"""
name: kernels_from
short_description: The running kernel and every newer installed one
description:
  - Keeps, of the given kernel releases, the running one and those whose release numbers
    compare higher (module_utils/gpucluster/dkms.py, release_key). An older kernel is a manual
    fallback, not what a reboot brings up by default.
positional: _input, running
options:
  _input:
    description: Installed kernel releases.
    type: list
    elements: str
    required: true
  running:
    description: The running kernel's release.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The kernels that must have the driver's module
  ansible.builtin.debug:
    msg: "{{ installed | gpucluster.provisioner.kernels_from(ansible_facts['kernel']) }}"
"""

RETURN = r"""
_value:
  description: The running kernel and the newer ones, in the order given.
  type: list
  elements: str
"""


def kernels_from(kernels: Any, running: Any) -> list[str]:
    return boot_candidates([str(k) for k in kernels or []], str(running))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kernels_from": kernels_from}
