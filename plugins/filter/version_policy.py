"""The roles' side of the version policy the controller's judge applies
(module_utils/gpucluster/version_policy.py): one rule, two callers."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.version_policy import (  # noqa: E501
    first_three,
    upstream,
)

DOCUMENTATION = r"""
name: upstream_version
short_description: A package version as the software reports it
description:
  - Drops the epoch and the packaging revision (C(2.21.5-1+cuda12.4) -> C(2.21.5)).
    C(version_first_three) keeps MAJOR.MINOR.PATCH of that (cuDNN's header,
    C(9.1.0.70) -> C(9.1.0)). The rule the provisioner's judge applies too.
positional: _input
options:
  _input:
    description: A planned package version.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: NCCL as nccl.h reports it
  ansible.builtin.debug:
    msg: "{{ nccl_version | gpucluster.provisioner.upstream_version }}"
"""

RETURN = r"""
_value:
  description: The version without epoch and packaging revision.
  type: str
"""


def upstream_version(version: Any) -> str:
    return upstream(str(version or ""))


def version_first_three(version: Any) -> str:
    return first_three(str(version or ""))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"upstream_version": upstream_version, "version_first_three": version_first_three}
