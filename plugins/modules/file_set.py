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

import contextlib
import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.probe import (
    check_probe_option,
    read_node,
)

_ENTRY_KEYS = frozenset(("content", "mode", "state", "validate"))


def _current(path):
    """The file's text, or None when it does not exist (or is not a readable UTF-8 file)."""
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _temp_file(module, directory, name, content, path):
    """A new temporary file in directory holding content; its path."""
    fd, tmp = tempfile.mkstemp(prefix=".%s." % name, dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content.encode("utf-8"))
    except OSError as exc:
        os.unlink(tmp)
        module.fail_json(msg="cannot write %s: %s" % (path, exc))
    return tmp


def _final_mode(module, path, mode):
    """The mode set_mode_if_different gives path: an octal string as it is, a symbolic one
    applied to the file's mode now (a new file's: 0666 less the umask)."""
    try:
        return int(mode, 8)
    except ValueError:
        pass
    try:
        now = os.stat(path)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        now = os.stat_result((stat.S_IFREG | (0o666 & ~umask),) + (0,) * 9)
    try:
        return module._symbolic_mode_to_octal(now, mode)
    except ValueError as exc:
        module.fail_json(msg="file_set: %s: mode %r: %s" % (path, mode, exc))


def _id(module, name, lookup, what):
    """A user or group name (or number) as its id, or a one-line failure."""
    try:
        return int(name)
    except ValueError:
        pass
    try:
        return lookup(name)
    except KeyError:
        module.fail_json(msg="file_set: no %s %s on this host" % (what, name))


def _owner_ids(module, path):
    """(uid, gid, required) the new file gets: the given owner and group, else those of the
    file it replaces (as atomic_move kept them), else -1 (the creator's, or a setgid
    directory's group). required: whether a failed chown must fail the task."""
    owner, group = module.params["owner"], module.params["group"]
    try:
        now = os.stat(path)
    except OSError:
        now = None
    uid = (_id(module, owner, lambda n: pwd.getpwnam(n).pw_uid, "user") if owner is not None
           else now.st_uid if now is not None else -1)
    gid = (_id(module, group, lambda n: grp.getgrnam(n).gr_gid, "group") if group is not None
           else now.st_gid if now is not None else -1)
    return uid, gid, owner is not None or group is not None


def _create_beside(directory, name, mode):
    """A new, empty file in directory (O_EXCL: never an existing file or a link an attacker
    placed) created with mode; (fd, path)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = os.path.join(directory, ".%s.%s" % (name, os.urandom(6).hex()))
        try:
            return os.open(tmp, flags, mode & 0o777), tmp
        except FileExistsError:
            continue


def _write(module, path, content, mode):
    """Replace path by a file holding content with the final owner, group and mode from
    before its first byte: a secret written 0600 is readable by nobody else at any moment
    (atomic_move would leave a new file 0644 until the chmod that follows it)."""
    directory, name = os.path.split(path)
    final_mode = _final_mode(module, path, mode)
    uid, gid, required = _owner_ids(module, path)
    context = None
    if module.selinux_enabled():
        context = (module.selinux_context(path) if os.path.exists(path)
                   else module.selinux_default_context(path))
    try:
        fd, tmp = _create_beside(directory, name, final_mode)
    except OSError as exc:
        module.fail_json(msg="cannot write %s: %s" % (path, exc))
    try:
        with os.fdopen(fd, "wb") as handle:
            if uid != -1 or gid != -1:
                try:
                    # Before the chmod: a chown clears the setuid and setgid bits.
                    os.fchown(handle.fileno(), uid, gid)
                except PermissionError:
                    if required:
                        raise
            # The umask may have narrowed the mode open() gave; never widened it.
            os.fchmod(handle.fileno(), final_mode)
            handle.write(content.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        if context is not None:
            module.set_context_if_different(tmp, context, False)
        os.rename(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        module.fail_json(msg="cannot write %s: %s" % (path, exc))


def _validate(module, path, content, validate):
    """Run validate on content (in the module's private temporary directory); a one-line
    failure when it exits non-zero."""
    tmp = _temp_file(module, module.tmpdir, os.path.basename(path), content, path)
    try:
        rc, out, err = module.run_command(validate % tmp)
    finally:
        os.unlink(tmp)
    if rc != 0:
        lines = (err or out).strip().splitlines()
        module.fail_json(msg="file_set: %s failed validation (%s, exit %d): %s"
                         % (path, validate.split()[0], rc, lines[-1] if lines else "no output"),
                         stdout=out, stderr=err)


def _attributes(module, path, mode):
    """What set_fs_attributes_if_different takes (its SELinux and attribute keys unset)."""
    return module.load_file_common_arguments(
        {"mode": mode, "owner": module.params["owner"], "group": module.params["group"]},
        path=path)


def _entry(module, key, value):
    """(content or None for absent, mode, validate) of one entry of files, or a one-line
    failure."""
    default_mode = module.params["mode"]
    if isinstance(value, str):
        return value, default_mode, None
    if not isinstance(value, dict) or not value or set(value) - _ENTRY_KEYS:
        module.fail_json(msg="file_set: %s must be text or a dict of %s"
                         % (key, ", ".join(sorted(_ENTRY_KEYS))))
    state = value.get("state", "present")
    if state == "absent":
        if set(value) != {"state"}:
            module.fail_json(msg="file_set: %s: state=absent takes no content, mode or validate"
                             % key)
        return None, None, None
    if state != "present" or not isinstance(value.get("content"), str):
        module.fail_json(msg="file_set: %s needs text content (or state=absent)" % key)
    mode = value.get("mode", default_mode)
    if not isinstance(mode, str):
        module.fail_json(msg="file_set: the mode of %s must be an octal string" % key)
    validate = value.get("validate")
    if validate is not None and (not isinstance(validate, str) or "%s" not in validate):
        module.fail_json(msg="file_set: the validate command of %s must contain %%s" % key)
    return value["content"], mode, validate


def _path(module, directory, key):
    """The absolute path of one key of files, or a one-line failure."""
    if directory is not None:
        if not key or "/" in key or key in (".", ".."):
            module.fail_json(msg="file_set: %r is not a plain file name" % (key,))
        return os.path.join(directory, key)
    if not os.path.isabs(key) or os.path.normpath(key) != key or key == "/":
        module.fail_json(msg="file_set: %r is not a normalised absolute file path (no dir given)"
                         % (key,))
    return key


def _make_dir(module, path, owned):
    """Create a missing directory (0755); with owned, also set its owner and group. Whether
    anything changed."""
    made = False
    if not os.path.isdir(path):
        made = True
        if not module.check_mode:
            try:
                os.makedirs(path, 0o755)
            except OSError as exc:
                module.fail_json(msg="cannot create %s: %s" % (path, exc))
    if owned and os.path.isdir(path):
        made = module.set_fs_attributes_if_different(_attributes(module, path, "0755"), made) or made
    return made


def _remove(module, path):
    """Remove one file (main() refused a directory there); whether it was there."""
    if not os.path.lexists(path):
        return False
    if not module.check_mode:
        try:
            os.unlink(path)
        except OSError as exc:
            module.fail_json(msg="cannot remove %s: %s" % (path, exc))
    return True


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
    directory = module.params["dir"]
    probe = module.params.get("probe") or {}
    check_probe_option(module, probe)
    # Every entry is checked, and each file read once, before anything on the node changes.
    plan = []
    for key, value in sorted(module.params["files"].items()):
        path = _path(module, directory, key)
        content, mode, validate = _entry(module, key, value)
        if content is None and os.path.isdir(path) and not os.path.islink(path):
            module.fail_json(msg="file_set: %s is a directory, not a file to remove" % path)
        plan.append((key, path, content, mode, validate, _current(path)))
    # New contents are validated before anything is written: an invalid one changes no file.
    if not module.check_mode:
        for _key, path, content, _mode, validate, before in plan:
            if validate and content is not None and before != content:
                _validate(module, path, content, validate)
    changed = []
    diffs = []
    made_dir = _make_dir(module, directory, owned=True) if directory is not None else False
    for key, path, content, mode, _command, before in plan:
        if content is None:
            if _remove(module, path):
                changed.append(key)
                diffs.append({"before_header": path, "after_header": path,
                              "before": before or "", "after": ""})
            continue
        if directory is None:
            made_dir = _make_dir(module, os.path.dirname(path), owned=False) or made_dir
        differs = before != content
        if differs:
            diffs.append({"before_header": path, "after_header": path,
                          "before": before or "", "after": content})
            if not module.check_mode:
                _write(module, path, content, mode)
        attrs_changed = False
        if os.path.exists(path):
            attrs_changed = module.set_fs_attributes_if_different(
                _attributes(module, path, mode), False)
        if differs or attrs_changed:
            changed.append(key)
    result = {"changed": bool(changed) or made_dir, "changed_files": changed,
              "probe": read_node(module, probe) if probe else {}}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
