# -*- coding: utf-8 -*-
"""What node_probe reads in one round trip (files, globs, commands, package states), shared with
pinned_packages, which reads the same after it has put the packages in place (its `probe`
option): a role then verifies what it installed without a round trip of its own."""

from __future__ import annotations

import glob
import hashlib
import os
import stat

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.pkgstate import (
    describe,
    dpkg_state,
    mismatched,
    rpm_state,
    uses_apt,
)

# The options node_probe takes and pinned_packages' `probe` holds.
PROBE_OPTIONS = dict(
    files=dict(type="dict", default={}),
    commands=dict(type="dict", default={}),
    globs=dict(type="dict", default={}),
    installed=dict(type="list", elements="str", default=[]),
    packages=dict(type="list", elements="dict", default=[]),
    max_bytes=dict(type="int", default=1048576),
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


def check_args(module, params):
    """Every argument checked before the node is read; the first bad one fails the task."""
    for key, spec in (params.get("files") or {}).items():
        if not isinstance(spec, dict) or not spec.get("path"):
            module.fail_json(msg="files.%s needs a path" % key)
    for key, argv in (params.get("commands") or {}).items():
        if not isinstance(argv, list) or not argv:
            module.fail_json(msg="commands.%s needs an argument list" % key)
    for pkg in params.get("packages") or []:
        if not isinstance(pkg, dict) or not pkg.get("name") or not pkg.get("version"):
            module.fail_json(msg="every package needs a name and a version: %r" % (pkg,))


def check_probe_option(module, probe):
    """A `probe` option (pinned_packages', file_set's): node_probe's keys only, each checked."""
    unknown = sorted(set(probe) - set(PROBE_OPTIONS))
    if unknown:
        module.fail_json(msg="probe takes %s, not %s"
                         % (", ".join(PROBE_OPTIONS), ", ".join(unknown)))
    check_args(module, probe)


def read_node(module, params):
    """{files, globs, commands, installed, packages} as node_probe returns them."""
    max_bytes = int(params.get("max_bytes") or 1048576)
    files = {key: probe_file(spec, max_bytes) for key, spec in (params.get("files") or {}).items()}
    globs = {}
    for key, given in (params.get("globs") or {}).items():
        patterns = [given] if isinstance(given, str) else list(given or [])
        globs[key] = sorted({path for pattern in patterns for path in glob.glob(str(pattern))})
    commands = {key: probe_command(module, argv)
                for key, argv in (params.get("commands") or {}).items()}
    apt = uses_apt()
    packages = {"mismatched": [], "packages": []}
    pins = params.get("packages") or []
    if pins:
        off, state = mismatched(module, pins, apt)
        packages = {"mismatched": off, "packages": describe([p["name"] for p in pins], state)}
    installed = {}
    names = params.get("installed") or []
    if names:
        state = (dpkg_state if apt else rpm_state)(module, names)
        installed = {n: state.get(n, ("", None, False))[0] for n in names}
    return {"files": files, "globs": globs, "commands": commands, "installed": installed,
            "packages": packages}


def service_states(module, units):
    """{unit: {active, enabled}} from one `systemctl show` (its blocks come in the order
    asked, each with the Id line); empty when nothing is asked."""
    if not units:
        return {}
    systemctl = module.get_bin_path("systemctl", required=True)
    rc, out, err = module.run_command(
        [systemctl, "show", "--property=Id,ActiveState,UnitFileState", "--"] + list(units))
    if rc != 0:
        module.fail_json(msg="systemctl show failed: %s" % (err.strip() or out.strip()), rc=rc)
    blocks = [b for b in out.strip().split("\n\n") if b.strip()]
    states = {}
    for index, block in enumerate(blocks[:len(units)]):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        states[units[index]] = {"active": fields.get("ActiveState", ""),
                                "enabled": fields.get("UnitFileState", "")}
    for unit in units:
        states.setdefault(unit, {"active": "", "enabled": ""})
    return states
