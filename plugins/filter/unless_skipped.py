"""A role's reading that stands: the task's own result, or the earlier one it did not repeat."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.registered import (
    skipped,
)

DOCUMENTATION = r"""
name: unless_skipped
short_description: A registered result, or another one where that task was skipped
description:
  - Returns I(_input) unless it is skipped (C(is skipped), module_utils/gpucluster/registered.py),
    else I(fallback). A task that reads the node again only after a change registers a skipped
    result otherwise; the reading that stands is then the earlier one it passes as I(fallback).
  - "A task not run at all leaves its variable undefined; pass C(| default({'skipped': true}))."
positional: _input, fallback
options:
  _input:
    description: The registered result of the task that may have been skipped.
    type: dict
    required: true
  fallback:
    description: What stands when that task was skipped (any value, returned as it is).
    type: raw
    required: true
"""

EXAMPLES = r"""
- name: Read the node again unless the install call's reading stands
  gpucluster.provisioner.node_probe:
    files:
      loaded: {path: /sys/module/nvidia/version, read: true}
  register: probe_read
  when: not reading_stands

- name: Use whichever reading stands
  ansible.builtin.debug:
    msg: "{{ (probe_read | gpucluster.provisioner.unless_skipped(install.probe)).files.loaded }}"
"""

RETURN = r"""
_value:
  description: I(_input), or I(fallback) where I(_input) is skipped.
  type: raw
"""


def unless_skipped(result: Any, fallback: Any) -> Any:
    return fallback if skipped(result) else result


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"unless_skipped": unless_skipped}
