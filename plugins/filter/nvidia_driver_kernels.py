"""The installed kernels, read from their images, for the driver role's headers and DKMS checks."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.registered import (
    unique,
)

DOCUMENTATION = r"""
name: nvidia_driver_kernels
short_description: The installed kernel releases, the running one first
description:
  - From the C(globs) of a C(node_probe) reading (preflight's call in the driver role), where
    C(boot_images) are the paths of C(<boot>/vmlinuz-<release>) (Debian, Ubuntu and RHEL) and
    C(module_images) those of C(<modules>/<release>/vmlinuz) (RHEL 8/9 also keep these).
  - The running kernel comes first, then the releases of the boot images, then those of the
    module directories, each once (the first kept; releases equal ignoring case are one, as
    Ansible's C(unique)).
  - Rescue images (C(vmlinuz-0-rescue-*)) are left out, they are not kernels anyone boots by
    default.
positional: _input, running
options:
  _input:
    description: The reading's C(globs) (C(boot_images) and C(module_images), lists of paths).
    type: dict
    required: true
  running:
    description: The running kernel's release (C(ansible_facts['kernel'])).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The installed kernels
  ansible.builtin.debug:
    msg: "{{ globs | gpucluster.provisioner.nvidia_driver_kernels(ansible_facts['kernel']) }}"
"""

RETURN = r"""
_value:
  description: Kernel releases (C(6.1.0-18-amd64), C(5.14.0-427.13.1.el9_4.x86_64)).
  type: list
  elements: str
"""

_RESCUE = re.compile(r"^vmlinuz-0-rescue-")
_IMAGE = re.compile(r"^vmlinuz-")


def nvidia_driver_kernels(globs: Any, running: Any) -> list[Any]:
    globs = globs if isinstance(globs, Mapping) else {}
    images = [os.path.basename(path) for path in globs.get("boot_images") or []]
    boot = [_IMAGE.sub("", name) for name in images if not _RESCUE.match(name)]
    modules = [os.path.basename(os.path.dirname(path)) for path in globs.get("module_images") or []]
    return unique([running, *boot, *modules])


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_kernels": nvidia_driver_kernels}
