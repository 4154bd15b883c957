#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read what a role verifies in one round trip: files, read-only commands, pinned packages."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_probe
short_description: Read files, run read-only commands and check pinned packages in one round trip
description:
  - A role's verification reads several things from the node (a version header, a tool's
    C(--version), the package database). Each C(stat), C(slurp), C(command) or check-mode
    C(pinned_packages) task is a round trip with its own Python start on the node; this module
    does them all in one and returns each answer under the key the caller gave it.
  - Never changes anything, and runs the same in check mode. The caller lists only commands
    that change nothing (version queries, listings).
options:
  files:
    description:
      - Key to C({path, read, checksum, follow}). Each answer has C(path), C(exists),
        C(isreg), C(isdir), C(islnk), C(lnk_target) (a link's target as stored, else empty),
        C(size), C(mode) (octal string, e.g. C(0755)), C(uid), C(gid) and,
        when C(read) is true and the file is a regular file of at most O(max_bytes),
        C(content) (text; bytes that are not UTF-8 are replaced); when C(checksum) is true and
        the file is a regular file, C(checksum) (SHA-256 of its bytes). C(follow) (default true)
        says whether C(exists)/C(isreg)/C(size) describe the link's target.
    type: dict
    default: {}
  commands:
    description:
      - Key to an argument list (no shell). Each answer has C(cmd), C(rc), C(stdout),
        C(stderr), C(stdout_lines) and C(stderr_lines). A program that is not found answers
        rc 127 and says so on stderr, as a shell would; the module does not fail.
    type: dict
    default: {}
  globs:
    description:
      - Key to a shell-style pattern (or a list of them). Each answer is the sorted list of
        paths that match (links included, dangling or not), as C(find) or a shell would list
        them.
    type: dict
    default: {}
  installed:
    description:
      - Package names whose installed version to read (from dpkg, else rpm). The answer
        C(installed) maps each name to its version, or to an empty string when it is not
        installed.
    type: list
    elements: str
    default: []
  packages:
    description:
      - Pins ({name, version}) to check as a check-mode C(pinned_packages) would. The answer
        C(packages) has C(mismatched) (names not installed at their pin, or not held (apt) /
        not version-locked (dnf)) and C(packages) (name, version, held, installed).
    type: list
    elements: dict
    default: []
  max_bytes:
    description: Largest file C(read) returns the content of.
    type: int
    default: 1048576
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: CUDA toolkit | Measure the toolkit
  gpucluster.provisioner.node_probe:
    files:
      version_json: {path: /usr/local/cuda-12.4/version.json, read: true}
    commands:
      nvcc: [/usr/local/cuda-12.4/bin/nvcc, --version]
    packages: "{{ cuda_toolkit_packages }}"
  register: __cuda_toolkit_probe
"""

RETURN = r"""
files:
  description: Key to what the node has at that path (see O(files)).
  returned: always
  type: dict
globs:
  description: Key to the sorted paths that match (see O(globs)).
  returned: always
  type: dict
commands:
  description: Key to the command's exit status and output (see O(commands)).
  returned: always
  type: dict
installed:
  description: Name to installed version, empty when not installed (see O(installed)).
  returned: always
  type: dict
packages:
  description: C(mismatched) names and C(packages) states (see O(packages)).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.probe import (
    PROBE_OPTIONS,
    check_args,
    read_node,
)


def main():
    module = AnsibleModule(argument_spec=dict(PROBE_OPTIONS), supports_check_mode=True)
    check_args(module, module.params)
    module.exit_json(changed=False, **read_node(module, module.params))


if __name__ == "__main__":
    main()
