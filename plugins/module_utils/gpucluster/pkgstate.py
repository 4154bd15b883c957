# -*- coding: utf-8 -*-
"""What the package database says about pinned packages: installed version, hold (apt) or
version lock (dnf). Shared by pinned_packages (which changes it) and node_probe (which only
reads it), so "at its pin and held" means one thing for both."""

from __future__ import annotations

import os

# dpkg's query tool marks an apt node (Debian, Ubuntu); without it the node is rpm/dnf.
APT_MARKER = "/usr/bin/dpkg-query"


def uses_apt():
    return os.path.exists(APT_MARKER)


def describe(names, state):
    """Each name's state as the modules return it: name, version, held, installed."""
    result = []
    for name in names:
        version, held, installed = state.get(name, ("", None, False))
        result.append({"name": name, "version": version, "held": held, "installed": installed})
    return result


def dpkg_state(module, names):
    """name -> (version, held, installed) from dpkg-query (unknown packages are absent)."""
    dpkg = module.get_bin_path("dpkg-query", required=True)
    rc, out, err = module.run_command(
        [dpkg, "-W", "-f=${Package}\t${Version}\t${Status}\n"] + list(names))
    if rc not in (0, 1):
        module.fail_json(msg="dpkg-query failed", rc=rc, stdout=out, stderr=err)
    state = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        name, version, status = parts
        words = status.split()
        installed = len(words) == 3 and words[2] == "installed"
        state[name] = (version if installed else "", words[:1] == ["hold"], installed)
    return state


def rpm_state(module, names):
    """name -> (version, None, installed) from rpm (the lock is dnf's: see dnf_locked)."""
    rpm = module.get_bin_path("rpm", required=True)
    state = {}
    for name in names:
        rc, out, _err = module.run_command(
            [rpm, "-q", "--qf", "%{EPOCH}:%{VERSION}-%{RELEASE}", name])
        if rc == 0:
            version = out.strip().replace("(none):", "")
            state[name] = (version, None, True)
        else:
            state[name] = ("", None, False)
    return state


def dnf_locked(module, dnf, pkg):
    """Whether ``dnf versionlock list`` holds ``pkg`` at its version (epoch optional)."""
    rc, out, _err = module.run_command([dnf, "-q", "versionlock", "list"])
    if rc != 0:
        return False
    epoch, _sep, evr = pkg["version"].rpartition(":")
    wanted = {"%s-%s:%s.*" % (pkg["name"], epoch or "0", evr), "%s-%s.*" % (pkg["name"], evr)}
    return any(line.strip() in wanted for line in out.splitlines())


def rpm_at_pin(installed, pin):
    """rpm prints no epoch when it is 0 or unset; a pin may carry one."""
    return installed in (pin, pin.split(":", 1)[-1])


def mismatched(module, wanted, apt):
    """Names of the ``wanted`` packages ({name, version}) that are not installed at their pin or
    not held (apt) / not version-locked at it (dnf), and the state read: what a check-mode
    pinned_packages run reports as changed_packages."""
    names = [p["name"] for p in wanted]
    if apt:
        state = dpkg_state(module, names)
        off = [p["name"] for p in wanted
               if state.get(p["name"], ("", False, False))[0] != p["version"]
               or not state.get(p["name"], ("", False, False))[1]]
        return off, state
    state = rpm_state(module, names)
    dnf = module.get_bin_path("dnf", required=True)
    off = [p["name"] for p in wanted
           if not rpm_at_pin(state[p["name"]][0], p["version"])
           or not dnf_locked(module, dnf, p)]
    return off, state
