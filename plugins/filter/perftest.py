"""Filters over perftest output, for roles that run ``ib_write_bw`` on the nodes."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.perftest import (
    parse_ib_write_bw,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.values import (
    ParseError,
)

DOCUMENTATION = r"""
name: ib_write_bw
short_description: Parse perftest ib_write_bw output
description:
  - Turns the stdout of perftest C(ib_write_bw) (or C(ib_read_bw), C(ib_send_bw)) into facts
    with the parser in module_utils/gpucluster/perftest.py.
  - Bandwidth comes out in Gb/s (C(bw_avg_gbps), the BW average at the largest size run).
  - Text that is no perftest output gives no rows and one entry in C(errors).
positional: _input
options:
  _input:
    description: The tool's stdout.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the bandwidth
  ansible.builtin.debug:
    msg: "{{ (result.stdout | gpucluster.provisioner.ib_write_bw).bw_avg_gbps }}"
"""

RETURN = r"""
_value:
  description: device, link_type, use_cuda, rows, bw_avg_gbps, bytes and errors.
  type: dict
"""


def ib_write_bw(text: Any) -> dict[str, Any]:
    """perftest facts, or no rows and the reason when ``text`` is not perftest output."""
    try:
        return parse_ib_write_bw(str(text or ""))
    except ParseError as exc:
        return {"rows": [], "bw_avg_gbps": None, "bytes": None, "use_cuda": False,
                "errors": [str(exc)]}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"ib_write_bw": ib_write_bw}
