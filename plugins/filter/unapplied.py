"""Whether a check-mode run has left the node as it was where the run would change it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.registered import (
    changed,
)

DOCUMENTATION = r"""
name: unapplied
short_description: A check-mode run that would have changed the node
description:
  - True in check mode when the given registered result (or any of a list of them) is changed
    (C(is changed), module_utils/gpucluster/registered.py). The run would install or change
    something and has not, so what a role verifies afterwards is the node as it is, not as the
    run would leave it. Always false outside check mode.
  - A task not run at all leaves its variable undefined; pass C(| default({})).
positional: _input, check_mode
options:
  _input:
    description: A registered result, or a list of them.
    type: raw
    required: true
  check_mode:
    description: Whether the run is in check mode (C(ansible_check_mode)).
    type: bool
    required: true
"""

EXAMPLES = r"""
- name: Say the driver was not verified
  ansible.builtin.debug:
    msg: not verified (check mode)
  when: install | default({}) | gpucluster.provisioner.unapplied(ansible_check_mode)
"""

RETURN = r"""
_value:
  description: Check mode and a change the run did not make.
  type: bool
"""


def unapplied(results: Any, check_mode: Any) -> bool:
    if not check_mode:
        return False
    items = [results] if isinstance(results, Mapping) else list(results or [])
    return any(changed(item) for item in items)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"unapplied": unapplied}
