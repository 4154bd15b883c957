"""How many nodes a batch holds: ``N`` or ``P%`` of a number of nodes, for the reboot's throttle."""

from __future__ import annotations

import math
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: batch_count
short_description: Nodes per batch from N or P% of a number of nodes
description:
  - C(N) (N >= 1) is N nodes; C(P%) (1-100) is P percent of I(total), rounded up. The result
    is at least 1 and at most I(total) (at least 1 when I(total) is 0).
  - Anything else is an error that names the value, before any node is touched.
positional: _input, total
options:
  _input:
    description: The batch size, C(N) or C(P%).
    type: str
    required: true
  total:
    description: How many nodes there are (the play's hosts).
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Reboot at most 10% of the nodes at once
  ansible.builtin.reboot:
  throttle: "{{ '10%' | gpucluster.provisioner.batch_count(ansible_play_hosts_all | length) }}"
"""

RETURN = r"""
_value:
  description: Nodes per batch.
  type: int
"""


def batch_count(size: Any, total: Any) -> int:
    """N, or P% of ``total`` rounded up; between 1 and max(total, 1)."""
    text = str(size).strip()
    number = text[:-1] if text.endswith("%") else text
    if not number.isdigit() or int(number) < 1 or (text.endswith("%") and int(number) > 100):
        raise AnsibleFilterError(
            f"batch size {size!r} is not a number of nodes (N >= 1) or a percentage of them "
            "(P%, 1-100)")
    try:
        nodes = max(int(total), 1)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"batch_count: {total!r} is not a number of nodes") from exc
    wanted = math.ceil(nodes * int(number) / 100) if text.endswith("%") else int(number)
    return max(1, min(wanted, nodes))


class FilterModule:
    """Batch sizes."""

    def filters(self) -> dict[str, Any]:
        return {"batch_count": batch_count}
