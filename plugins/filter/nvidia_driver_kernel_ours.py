"""The kernel packages the driver role holds (nvidia_driver_hold_kernel), as its record names
them."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.registered import (
    unique,
)

DOCUMENTATION = r"""
name: nvidia_driver_kernel_ours
short_description: The kernel holds that are the driver role's own
description:
  - Those the role recorded before (I(_input)) and still wants held (I(wanted)), then those it
    holds now that were not held yet (I(wanted) less I(held)), each once (the first kept;
    names equal ignoring case are one, as Ansible's C(unique)).
  - A package someone else held before stays theirs, so turning nvidia_driver_hold_kernel off
    releases exactly what the role held.
positional: _input, wanted, held
options:
  _input:
    description: The packages the role's record names (what it held before).
    type: list
    elements: str
    required: true
  wanted:
    description: The kernel packages to hold now.
    type: list
    elements: str
    required: true
  held:
    description: The packages apt holds (dnf locks) now, before this run holds any.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: The kernel holds that are the role's
  ansible.builtin.debug:
    msg: "{{ previous | gpucluster.provisioner.nvidia_driver_kernel_ours(wanted, held) }}"
"""

RETURN = r"""
_value:
  description: Package names, the ones recorded before first.
  type: list
  elements: str
"""


def nvidia_driver_kernel_ours(previous: Any, wanted: Any, held: Any) -> list[Any]:
    wanted, held = list(wanted or []), list(held or [])
    kept = [name for name in previous or [] if name in wanted]
    added = [name for name in wanted if name not in held]
    return unique(kept + added)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_kernel_ours": nvidia_driver_kernel_ours}
