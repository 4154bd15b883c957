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

import glob
import hashlib
import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.pkgstate import (
    describe,
    dpkg_state,
    mismatched,
    rpm_state,
    uses_apt,
)


def probe_file(spec, max_bytes):
    path = spec["path"]
    out = {"path": path, "exists": False, "isreg": False, "isdir": False, "islnk": False,
           "lnk_target": "", "size": 0}
    try:
        link = os.lstat(path)
    except OSError:
        return out
    out["islnk"] = stat.S_ISLNK(link.st_mode)
    if out["islnk"]:
        out["lnk_target"] = os.readlink(path)
    try:
        target = os.stat(path)
    except OSError:  # a dangling link: it exists as a link only
        target = None
    st = target if spec.get("follow", True) and target is not None else link
    out.update(exists=True, isreg=stat.S_ISREG(st.st_mode), isdir=stat.S_ISDIR(st.st_mode),
               size=st.st_size, mode="%04o" % stat.S_IMODE(st.st_mode), uid=st.st_uid,
               gid=st.st_gid)
    readable = target is not None and stat.S_ISREG(target.st_mode)
    keep = spec.get("read") and readable and target.st_size <= max_bytes
    if not (keep or (spec.get("checksum") and readable)):
        return out
    # One pass over the file for both the checksum and the content.
    digest, blocks = hashlib.sha256(), []
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
                if keep:
                    blocks.append(block)
    except OSError as exc:
        out["error"] = str(exc)
        return out
    if spec.get("checksum"):
        out["checksum"] = digest.hexdigest()
    if keep:
        out["content"] = b"".join(blocks)[:max_bytes].decode("utf-8", "replace")
    return out


def probe_command(module, argv):
    argv = [str(a) for a in argv]
    found = module.get_bin_path(argv[0]) if "/" not in argv[0] else (
        argv[0] if os.access(argv[0], os.X_OK) else None)
    if not found:
        rc, out, err = 127, "", "%s: command not found" % argv[0]
    else:
        rc, out, err = module.run_command([found] + argv[1:], environ_update={"LC_ALL": "C"})
    return {"cmd": argv, "rc": rc, "stdout": out, "stderr": err,
            "stdout_lines": out.splitlines(), "stderr_lines": err.splitlines()}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="dict", default={}),
            commands=dict(type="dict", default={}),
            globs=dict(type="dict", default={}),
            installed=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="dict", default=[]),
            max_bytes=dict(type="int", default=1048576),
        ),
        supports_check_mode=True,
    )
    params = module.params
    # Every argument is checked before the node is read.
    for key, spec in params["files"].items():
        if not isinstance(spec, dict) or not spec.get("path"):
            module.fail_json(msg="files.%s needs a path" % key)
    for key, argv in params["commands"].items():
        if not isinstance(argv, list) or not argv:
            module.fail_json(msg="commands.%s needs an argument list" % key)
    for pkg in params["packages"]:
        if not pkg.get("name") or not pkg.get("version"):
            module.fail_json(msg="every package needs a name and a version: %r" % (pkg,))
    files = {key: probe_file(spec, params["max_bytes"]) for key, spec in params["files"].items()}
    globs = {}
    for key, given in params["globs"].items():
        patterns = [given] if isinstance(given, str) else list(given or [])
        globs[key] = sorted({path for pattern in patterns for path in glob.glob(str(pattern))})
    commands = {key: probe_command(module, argv) for key, argv in params["commands"].items()}
    apt = uses_apt()
    packages = {"mismatched": [], "packages": []}
    if params["packages"]:
        off, state = mismatched(module, params["packages"], apt)
        packages = {"mismatched": off,
                    "packages": describe([p["name"] for p in params["packages"]], state)}
    installed = {}
    if params["installed"]:
        state = (dpkg_state if apt else rpm_state)(module, params["installed"])
        installed = {n: state.get(n, ("", None, False))[0] for n in params["installed"]}
    module.exit_json(changed=False, files=files, globs=globs, commands=commands,
                     installed=installed, packages=packages)


if __name__ == "__main__":
    main()
