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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.distro import (
    bad_names,
    ensure,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.probe import (
    service_states,
)


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
    bad = bad_names(names)
    if bad:
        module.fail_json(msg="names must be package names (no version, architecture, option or "
                             "blank): %r" % (bad,))
    missing, updated, after = ensure(module, names, module.params["cache_valid_time"])
    module.exit_json(changed=bool(missing), packages=after, installed=missing,
                     cache_updated=updated,
                     services=service_states(module, module.params.get("services") or []))


if __name__ == "__main__":
    main()
