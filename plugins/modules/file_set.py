#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Write (or remove) a set of small text files in one round trip."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: file_set
short_description: Write (or remove) a set of small text files in one round trip
description:
  - Makes each file of O(files) exist with exactly the given content, mode, owner and group,
    writing only those that differ (atomically, through a temporary file in the same
    directory that has the file's final mode, owner and group before its first byte, so a
    secret is never readable by others, not even for a moment), or makes it absent.
  - With O(dir), every file goes into that one directory (created with mode C(0755) and the
    given owner and group when missing) and is named by its plain file name. Without O(dir),
    every key of O(files) is an absolute path; a missing parent directory is created with mode
    C(0755), existing ones are left as they are.
  - One module call for the whole set, where a C(copy) or C(template) task per file costs a
    round trip or two per file on every run, changed or not.
  - Files that O(files) does not name are left alone. Supports check mode and diff.
options:
  dir:
    description:
      - Directory the files go into. Omitted, the keys of O(files) are absolute paths.
    type: path
  files:
    description:
      - File name (with O(dir)) or absolute path (without) to what the file must be.
      - A string is the file's content (text, UTF-8), with O(mode).
      - A dictionary says more, with the keys C(content), C(mode) (this file's mode, instead of
        O(mode)) and C(validate) (a command run on the new content before it replaces the file,
        C(%s) standing for a temporary file's path, as in C(ansible.builtin.template); a non-zero
        exit fails the task and leaves the file as it was; not run in check mode), or
        C(state=absent) alone to remove the file.
    type: dict
    required: true
  mode:
    description: Mode of every file that does not give its own, octal string.
    type: str
    default: "0644"
  owner:
    description: Owner of the files (and of O(dir)).
    type: str
  group:
    description: Group of the files (and of O(dir)).
    type: str
  probe:
    description:
      - What to read from the node once the files are written, with the options and answers of
        M(gpucluster.provisioner.node_probe) (C(files), C(commands), C(globs), C(installed),
        C(packages), C(max_bytes)), returned as RV(probe), so a role reads what follows from
        its files (apt's candidates after its pins) without a round trip of its own. In check
        mode it reads the node as it is.
    type: dict
    default: {}
notes:
  - A file holding a secret (a mirror's login) goes through this module's arguments, so the task
    that writes it sets C(no_log).
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: Node health | Install the check policy gpuc-health imports
  gpucluster.provisioner.file_set:
    dir: /usr/local/lib/gpuc-health/gpucluster
    files:
      __init__.py: ""
      node_health_policy.py: >-
        {{ lookup('ansible.builtin.file', 'node_health_policy.py', rstrip=false) }}
    owner: root
    group: root

- name: NVIDIA driver | Keep nouveau away and run the persistence daemon
  gpucluster.provisioner.file_set:
    files:
      /etc/modprobe.d/blacklist-nouveau.conf: "blacklist nouveau\n"
      /etc/apt/auth.conf.d/example.conf:
        state: absent
      /etc/example/secret.conf:
        content: "token\n"
        mode: "0600"
"""

RETURN = r"""
changed_files:
  description:
    - Names (with O(dir)) or paths (without) of the files whose content, mode or ownership was
      (or would be) changed, or that were (or would be) removed, sorted.
  returned: always
  type: list
  elements: str
probe:
  description:
    - What O(probe) asked for, read after the files were written, as
      M(gpucluster.provisioner.node_probe) returns it (C(files), C(globs), C(commands),
      C(installed), C(packages)); empty when O(probe) is.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.fileset import (
    FileSet,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.probe import (
    check_probe_option,
    read_node,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path"),
            files=dict(type="dict", required=True),
            mode=dict(type="str", default="0644"),
            owner=dict(type="str"),
            group=dict(type="str"),
            probe=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    probe = module.params.get("probe") or {}
    check_probe_option(module, probe)
    # Every entry is checked, and each file read once, before anything on the node changes;
    # new contents are validated before anything is written: an invalid one changes no file.
    files = FileSet(module, module.params["files"], module.params["dir"], module.params["mode"],
                    module.params["owner"], module.params["group"])
    files.validate()
    changed, made_dir, diffs = files.apply()
    result = {"changed": bool(changed) or made_dir, "changed_files": changed,
              "probe": read_node(module, probe) if probe else {}}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
