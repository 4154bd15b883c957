"""The NVIDIA repository directory of a node, from its Ansible facts: the one rule preflight
applies too (module_utils/gpucluster/preflight.py, os_dir)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.preflight import (
    os_dir,
)

DOCUMENTATION = r"""
name: nvidia_repo_os_dir
short_description: The NVIDIA repository directory a node installs from
description:
  - C(debian12), C(ubuntu2404) (Ubuntu keeps the minor release), C(rhel9) (Rocky Linux and
    AlmaLinux too), named as the stack matrix's repository table names them. The same rule
    as node preflight's, which reads /etc/os-release (module_utils/gpucluster/preflight.py).
positional: _input
options:
  _input:
    description: The node's Ansible facts (C(distribution), C(distribution_version)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The repository directory
  ansible.builtin.debug:
    msg: "{{ ansible_facts | gpucluster.provisioner.nvidia_repo_os_dir }}"
"""

RETURN = r"""
_value:
  description: The directory, e.g. C(ubuntu2404).
  type: str
"""

# Ansible's distribution names whose os-release ID differs.
_OS_RELEASE_ID = {"redhat": "rhel"}


def nvidia_repo_os_dir(facts: Mapping[str, Any]) -> str:
    name = str(facts.get("distribution") or "unknown").lower()
    return str(os_dir(_OS_RELEASE_ID.get(name, name), facts.get("distribution_version")))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_repo_os_dir": nvidia_repo_os_dir}
