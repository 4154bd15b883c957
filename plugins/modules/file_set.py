#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Write a set of small text files into one directory in one round trip."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: file_set
short_description: Write a set of small text files into one directory in one round trip
description:
  - Makes each file of O(files) exist under O(dir) with exactly the given content, mode, owner
    and group, writing only those that differ (atomically, through a temporary file in the same
    directory). Creates O(dir) when it is missing.
  - One module call for the whole set, where a C(copy) loop costs two round trips per file
    (stat, then copy or file) on every run, changed or not.
  - Files in O(dir) that O(files) does not name are left alone. Supports check mode and diff.
options:
  dir:
    description: Directory the files go into (created with mode C(0755) when missing).
    type: path
    required: true
  files:
    description:
      - File name (no directory part) to its content (text, UTF-8).
    type: dict
    required: true
  mode:
    description: Mode of every file, octal string.
    type: str
    default: "0644"
  owner:
    description: Owner of the directory and the files.
    type: str
  group:
    description: Group of the directory and the files.
    type: str
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: Node health | Install the check policy gpuc-health imports
  gpucluster.provisioner.file_set:
    dir: /usr/local/lib/gpuc-health/gpucluster
    files:
      __init__.py: ""
      health.py: "{{ lookup('ansible.builtin.file', 'health.py', rstrip=false) }}"
    owner: root
    group: root
"""

RETURN = r"""
changed_files:
  description: Names of the files whose content, mode or ownership was (or would be) changed.
  returned: always
  type: list
  elements: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def _current(path):
    """The file's text, or None when it does not exist (or is not a readable UTF-8 file)."""
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _write(module, directory, name, content):
    fd, tmp = tempfile.mkstemp(prefix=".%s." % name, dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content.encode("utf-8"))
    except OSError as exc:
        os.unlink(tmp)
        module.fail_json(msg="cannot write %s: %s" % (os.path.join(directory, name), exc))
    module.atomic_move(tmp, os.path.join(directory, name))


def _attributes(module, path, mode):
    """What set_fs_attributes_if_different takes (its SELinux and attribute keys unset)."""
    return module.load_file_common_arguments(
        {"mode": mode, "owner": module.params["owner"], "group": module.params["group"]},
        path=path)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            files=dict(type="dict", required=True),
            mode=dict(type="str", default="0644"),
            owner=dict(type="str"),
            group=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    directory = module.params["dir"]
    files = module.params["files"]
    for name, content in files.items():
        if not name or "/" in name or name in (".", ".."):
            module.fail_json(msg="file_set: %r is not a plain file name" % (name,))
        if not isinstance(content, str):
            module.fail_json(msg="file_set: the content of %s is not text" % name)
    changed = []
    diffs = []
    made_dir = False
    if not os.path.isdir(directory):
        made_dir = True
        if not module.check_mode:
            try:
                os.makedirs(directory, 0o755)
            except OSError as exc:
                module.fail_json(msg="cannot create %s: %s" % (directory, exc))
    if os.path.isdir(directory):
        made_dir = module.set_fs_attributes_if_different(
            _attributes(module, directory, "0755"), made_dir) or made_dir
    for name in sorted(files):
        path = os.path.join(directory, name)
        content = files[name]
        before = _current(path)
        differs = before != content
        if differs:
            diffs.append({"before_header": path, "after_header": path,
                          "before": before or "", "after": content})
            if not module.check_mode:
                _write(module, directory, name, content)
        attrs_changed = False
        if os.path.exists(path):
            attrs_changed = module.set_fs_attributes_if_different(
                _attributes(module, path, module.params["mode"]), False)
        if differs or attrs_changed:
            changed.append(name)
    result = {"changed": bool(changed) or made_dir, "changed_files": changed}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
