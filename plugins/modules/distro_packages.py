#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Make the OS's own packages installed (any version), reading the package database first."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: distro_packages
short_description: Install distribution packages that are missing, cheaply when none is
description:
  - Makes each named package installed, at whatever version the OS's repositories carry, for
    packages whose version follows the OS release rather than the stack matrix (munge, slurmd,
    rdma-core, node_exporter, Prometheus).
  - Reads dpkg-query (apt) or rpm (dnf) first; a node that has every package costs that one
    query and reports no change. Only when a package is missing does it refresh apt's package
    lists (when they are older than O(cache_valid_time) or there are none) and install, waiting
    for the package manager's lock and retrying a transient mirror error as pinned_packages does.
  - Installs nothing in check mode; reports the packages it would install as changed.
options:
  names:
    description:
      - Package names (real packages, not virtual ones or rpm provides), without a version or
        an architecture qualifier.
    type: list
    elements: str
    required: true
  cache_valid_time:
    description:
      - apt only. Before installing, refresh the package lists when they are older than this
        many seconds, or when there are no downloaded package indexes at all (a fresh image may
        have an empty lists directory whose recent modification time looks fresh).
    type: int
    default: 86400
  lock_timeout:
    description: Seconds apt and dpkg wait for the package manager's lock held by another process.
    type: int
    default: 300
  retries:
    description: Tries after a transient mirror error, with O(retry_delay) doubling after each.
    type: int
    default: 3
  retry_delay:
    description: Seconds before the first retry; doubles after each.
    type: float
    default: 5
  services:
    description:
      - systemd units whose state to report after the packages are in place (read only, with
        one C(systemctl show)), so a role starts or enables a unit only when it is not running
        and enabled already, without a round trip of its own.
    type: list
    elements: str
    default: []
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: Munge | Install munge
  gpucluster.provisioner.distro_packages:
    names: [munge]
"""

RETURN = r"""
packages:
  description: Each name's installed version after the call ("" when not installed).
  returned: always
  type: dict
installed:
  description: The names that were missing (installed now; in check mode, would be).
  returned: always
  type: list
  elements: str
cache_updated:
  description: Whether apt's package lists were refreshed.
  returned: always
  type: bool
services:
  description:
    - Each unit of O(services) to its C(active) (systemd's ActiveState) and C(enabled) (its
      UnitFileState; empty for a unit systemd does not know), read after the install.
  returned: always
  type: dict
"""

import contextlib
import glob
import os
import time

from ansible.module_utils.basic import AnsibleModule
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
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.probe import (
    service_states,
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


def apt_install(module, missing):
    apt_get = module.get_bin_path("apt-get", required=True)
    updated = lists_stale(module.params["cache_valid_time"])
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


def dnf_install(module, missing):
    dnf = module.get_bin_path("dnf", required=True)
    run_retrying(module, [dnf, "install", "-y"] + missing, "dnf install")
    return False


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type="list", elements="str", required=True),
            cache_valid_time=dict(type="int", default=86400),
            lock_timeout=dict(type="int", default=300),
            retries=dict(type="int", default=3),
            retry_delay=dict(type="float", default=5),
            services=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    names = list(dict.fromkeys(module.params["names"]))
    bad = [n for n in names
           if not n or n != n.strip() or n.startswith("-") or "=" in n or ":" in n]
    if bad:
        module.fail_json(msg="names must be package names (no version, architecture, option or "
                             "blank): %r" % (bad,))
    apt = uses_apt()
    before = versions(module, names, apt) if names else {}
    missing = [n for n in names if not before[n]]
    if not missing or module.check_mode:
        module.exit_json(changed=bool(missing), packages=before, installed=missing,
                         cache_updated=False,
                         services=service_states(module, module.params.get("services") or []))
    updated = (apt_install if apt else dnf_install)(module, missing)
    after = versions(module, names, apt)
    still = [n for n in missing if not after[n]]
    if still:
        module.fail_json(msg="the install ended without error but these are not installed: %s "
                             "(a virtual package or an rpm provide? name the real package)"
                             % ", ".join(still), packages=after)
    module.exit_json(changed=True, packages=after, installed=missing, cache_updated=updated,
                     services=service_states(module, module.params.get("services") or []))


if __name__ == "__main__":
    main()
