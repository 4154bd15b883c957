# -*- coding: utf-8 -*-
"""The OS's own packages made installed (any version), reading the package database first:
what distro_packages does, and what signed_keys does for the tools it needs (gnupg), so a role
needs no call of its own for them."""

from __future__ import annotations

import contextlib
import glob
import os
import time

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.pkgrun import (
    APT_ENV,
    apt_options,
    apt_recover,
    run_retrying,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.pkgstate import (
    dpkg_state,
    rpm_state,
    uses_apt,
)

APT_LISTS = "/var/lib/apt/lists"


def versions(module, names, apt):
    state = (dpkg_state if apt else rpm_state)(module, names)
    return {name: state.get(name, ("", None, False))[0] for name in names}


def lists_stale(max_age):
    """Whether apt's package lists need a refresh before an install: no package index at all,
    or the lists directory not touched (by apt-get update, or by this module after one) for
    ``max_age`` seconds."""
    if not glob.glob(os.path.join(APT_LISTS, "*_Packages*")):
        return True
    try:
        age = time.time() - os.stat(APT_LISTS).st_mtime
    except OSError:
        return True
    return age > max_age


def apt_install(module, missing, cache_valid_time):
    apt_get = module.get_bin_path("apt-get", required=True)
    updated = lists_stale(cache_valid_time)
    if updated:
        run_retrying(module, [apt_get, "update", "-q"] + apt_options(module)[:4],
                     "apt-get update", APT_ENV)
        # apt-get update leaves the directory's mtime alone when every index was unchanged
        # upstream: mark the refresh, so the next install within cache_valid_time skips it.
        with contextlib.suppress(OSError):
            os.utime(APT_LISTS, None)
    apt_recover(module)
    run_retrying(module, [apt_get, "install", "-y", "-q", "--no-install-recommends"]
                 + apt_options(module) + missing, "apt-get install", APT_ENV)
    return updated


def dnf_install(module, missing, cache_valid_time):
    dnf = module.get_bin_path("dnf", required=True)
    run_retrying(module, [dnf, "install", "-y"] + missing, "dnf install")
    return False


def bad_names(names):
    """The entries of names that are not plain package names."""
    return [n for n in names
            if not n or n != n.strip() or n.startswith("-") or "=" in n or ":" in n]


def ensure(module, names, cache_valid_time):
    """Install the missing ones of names (none in check mode): (the missing names, whether
    apt's lists were refreshed, the versions after). The module's params give
    lock_timeout, retries and retry_delay (pkgrun); a name the install did not bring fails."""
    apt = uses_apt()
    before = versions(module, names, apt) if names else {}
    missing = [n for n in names if not before[n]]
    if not missing or module.check_mode:
        return missing, False, before
    updated = (apt_install if apt else dnf_install)(module, missing, cache_valid_time)
    after = versions(module, names, apt)
    still = [n for n in missing if not after[n]]
    if still:
        module.fail_json(msg="the install ended without error but these are not installed: %s "
                             "(a virtual package or an rpm provide? name the real package)"
                             % ", ".join(still), packages=after)
    return missing, updated, after
