# -*- coding: utf-8 -*-
"""A set of small text files made exactly as given in one module call: what file_set does, and
what pinned_packages does beside an install (its O(files)), so a role writes the files that
belong to its packages without a round trip of its own."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
import tempfile

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


def _final_mode(module, path, mode, who):
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
        module.fail_json(msg="%s: %s: mode %r: %s" % (who, path, mode, exc))


def _id(module, name, lookup, what, who):
    """A user or group name (or number) as its id, or a one-line failure."""
    try:
        return int(name)
    except ValueError:
        pass
    try:
        return lookup(name)
    except KeyError:
        module.fail_json(msg="%s: no %s %s on this host" % (who, what, name))


def _owner_ids(module, path, owner, group, who):
    """(uid, gid, required) the new file gets: the given owner and group, else those of the
    file it replaces (as atomic_move kept them), else -1 (the creator's, or a setgid
    directory's group). required: whether a failed chown must fail the task."""
    try:
        now = os.stat(path)
    except OSError:
        now = None
    uid = (_id(module, owner, lambda n: pwd.getpwnam(n).pw_uid, "user", who) if owner is not None
           else now.st_uid if now is not None else -1)
    gid = (_id(module, group, lambda n: grp.getgrnam(n).gr_gid, "group", who) if group is not None
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


def _write(module, path, content, mode, owner, group, who):
    """Replace path by a file holding content with the final owner, group and mode from
    before its first byte: a secret written 0600 is readable by nobody else at any moment
    (atomic_move would leave a new file 0644 until the chmod that follows it)."""
    directory, name = os.path.split(path)
    final_mode = _final_mode(module, path, mode, who)
    uid, gid, required = _owner_ids(module, path, owner, group, who)
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


def _validate(module, path, content, validate, who):
    """Run validate on content (in the module's private temporary directory); a one-line
    failure when it exits non-zero."""
    tmp = _temp_file(module, module.tmpdir, os.path.basename(path), content, path)
    try:
        rc, out, err = module.run_command(validate % tmp)
    finally:
        os.unlink(tmp)
    if rc != 0:
        lines = (err or out).strip().splitlines()
        module.fail_json(msg="%s: %s failed validation (%s, exit %d): %s"
                         % (who, path, validate.split()[0], rc,
                            lines[-1] if lines else "no output"),
                         stdout=out, stderr=err)


def _attributes(module, path, mode, owner, group):
    """What set_fs_attributes_if_different takes (its SELinux and attribute keys unset)."""
    return module.load_file_common_arguments(
        {"mode": mode, "owner": owner, "group": group},
        path=path)


def _entry(module, key, value, default_mode, who):
    """(content or None for absent, mode, validate) of one entry of files, or a one-line
    failure."""
    if isinstance(value, str):
        return value, default_mode, None
    if not isinstance(value, dict) or not value or set(value) - _ENTRY_KEYS:
        module.fail_json(msg="%s: %s must be text or a dict of %s"
                         % (who, key, ", ".join(sorted(_ENTRY_KEYS))))
    state = value.get("state", "present")
    if state == "absent":
        if set(value) != {"state"}:
            module.fail_json(msg="%s: %s: state=absent takes no content, mode or validate"
                             % (who, key))
        return None, None, None
    if state != "present" or not isinstance(value.get("content"), str):
        module.fail_json(msg="%s: %s needs text content (or state=absent)" % (who, key))
    mode = value.get("mode", default_mode)
    if not isinstance(mode, str):
        module.fail_json(msg="%s: the mode of %s must be an octal string" % (who, key))
    validate = value.get("validate")
    if validate is not None and (not isinstance(validate, str) or "%s" not in validate):
        module.fail_json(msg="%s: the validate command of %s must contain %%s" % (who, key))
    return value["content"], mode, validate


def _path(module, directory, key, who):
    """The absolute path of one key of files, or a one-line failure."""
    if directory is not None:
        if not key or "/" in key or key in (".", ".."):
            module.fail_json(msg="%s: %r is not a plain file name" % (who, key))
        return os.path.join(directory, key)
    if not os.path.isabs(key) or os.path.normpath(key) != key or key == "/":
        module.fail_json(msg="%s: %r is not a normalised absolute file path (no dir given)"
                         % (who, key))
    return key


def _make_dir(module, path, owned, owner, group):
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
        attributes = _attributes(module, path, "0755", owner, group)
        made = module.set_fs_attributes_if_different(attributes, made) or made
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


class FileSet:
    """The files of one call: checked and read at construction (a one-line failure before
    anything on the node changes), new contents validated by validate(), written by apply().
    who names the module in failure messages."""

    def __init__(self, module, files, directory=None, mode="0644", owner=None, group=None,
                 who="file_set"):
        self.module, self.directory, self.who = module, directory, who
        self.owner, self.group = owner, group
        self.plan = []
        for key, value in sorted((files or {}).items()):
            path = _path(module, directory, key, who)
            content, file_mode, validate = _entry(module, key, value, mode, who)
            if content is None and os.path.isdir(path) and not os.path.islink(path):
                module.fail_json(msg="%s: %s is a directory, not a file to remove" % (who, path))
            self.plan.append((key, path, content, file_mode, validate, _current(path)))

    def validate(self):
        """Run each changed file's validate command (not in check mode): an invalid content
        fails before any file is written."""
        if self.module.check_mode:
            return
        for _key, path, content, _mode, validate, before in self.plan:
            if validate and content is not None and before != content:
                _validate(self.module, path, content, validate, self.who)

    def apply(self):
        """Write and remove what differs: (changed keys, whether a directory was made, diffs)."""
        module, owner, group = self.module, self.owner, self.group
        changed = []
        diffs = []
        made_dir = (_make_dir(module, self.directory, True, owner, group)
                    if self.directory is not None else False)
        for key, path, content, mode, _command, before in self.plan:
            if content is None:
                if _remove(module, path):
                    changed.append(key)
                    diffs.append({"before_header": path, "after_header": path,
                                  "before": before or "", "after": ""})
                continue
            if self.directory is None:
                made_dir = _make_dir(module, os.path.dirname(path), False, owner, group) or made_dir
            differs = before != content
            if differs:
                diffs.append({"before_header": path, "after_header": path,
                              "before": before or "", "after": content})
                if not module.check_mode:
                    _write(module, path, content, mode, owner, group, self.who)
            attrs_changed = False
            if os.path.exists(path):
                attrs_changed = module.set_fs_attributes_if_different(
                    _attributes(module, path, mode, owner, group), False)
            if differs or attrs_changed:
                changed.append(key)
        return changed, made_dir, diffs
