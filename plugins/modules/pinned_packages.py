#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Install packages at exact versions and hold them there (apt: dpkg hold; dnf: versionlock)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pinned_packages
short_description: Install packages at exact versions and hold them
description:
  - Makes each package installed at exactly the given version and held there (C(apt-mark hold)
    on apt systems, the versionlock plugin on dnf systems), moving up or down as needed.
  - Reads the current state with dpkg-query/rpm first, so a converged node costs one query and
    reports no change. Supports check mode.
options:
  packages:
    description: List of {name, version}; version as the repository carries it (epoch allowed).
    type: list
    elements: dict
    required: true
  state:
    description: C(present) installs and holds; C(absent) unholds and removes.
    type: str
    choices: [present, absent]
    default: present
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: CUDA toolkit | Install and hold the toolkit
  gpucluster.provisioner.pinned_packages:
    packages:
      - {name: cuda-toolkit-12-4, version: "12.4.1-1"}
"""

RETURN = r"""
packages:
  description: Final state per package (name, version, installed, held).
  returned: always
  type: list
  elements: dict
changed_packages:
  description: Names of the packages that were installed, moved, held or removed.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}


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


def apt_apply(module, wanted, state):
    changed = []
    need = [p for p in wanted if state.get(p["name"], ("", False, False))[0] != p["version"]]
    unheld = [p["name"] for p in wanted if not state.get(p["name"], ("", False, False))[1]]
    if module.check_mode:
        return sorted({p["name"] for p in need} | set(unheld))
    apt_get = module.get_bin_path("apt-get", required=True)
    apt_mark = module.get_bin_path("apt-mark", required=True)
    if need:
        cmd = [apt_get, "install", "-y", "-q", "--no-install-recommends", "--allow-downgrades",
               "--allow-change-held-packages"]
        cmd += ["%s=%s" % (p["name"], p["version"]) for p in need]
        rc, out, err = module.run_command(cmd, environ_update=APT_ENV)
        if rc != 0:
            module.fail_json(msg="apt-get install of the pinned versions failed", rc=rc,
                             stdout=out, stderr=err, cmd=cmd)
        changed += [p["name"] for p in need]
    names = [p["name"] for p in wanted]
    after = dpkg_state(module, names)
    unheld = [n for n in names if not after.get(n, ("", False, False))[1]]
    if unheld:
        rc, out, err = module.run_command([apt_mark, "hold"] + unheld, environ_update=APT_ENV)
        if rc != 0:
            module.fail_json(msg="apt-mark hold failed", rc=rc, stdout=out, stderr=err)
        changed += unheld
    return sorted(set(changed))


def apt_remove(module, names, state):
    present = [n for n in names if state.get(n, ("", False, False))[2]]
    if not present or module.check_mode:
        return present
    apt_mark = module.get_bin_path("apt-mark", required=True)
    apt_get = module.get_bin_path("apt-get", required=True)
    module.run_command([apt_mark, "unhold"] + present, environ_update=APT_ENV)
    rc, out, err = module.run_command([apt_get, "remove", "-y", "-q"] + present,
                                      environ_update=APT_ENV)
    if rc != 0:
        module.fail_json(msg="apt-get remove failed", rc=rc, stdout=out, stderr=err)
    return present


def dnf_apply(module, wanted, state):
    need = [p for p in wanted if state[p["name"]][0] != p["version"].split(":", 1)[-1]
            and state[p["name"]][0] != p["version"]]
    if module.check_mode or not need:
        return [p["name"] for p in need]
    dnf = module.get_bin_path("dnf", required=True)
    specs = ["%s-%s" % (p["name"], p["version"].split(":", 1)[-1]) for p in need]
    names = [p["name"] for p in need]
    module.run_command([dnf, "versionlock", "delete"] + names)
    rc, out, err = module.run_command([dnf, "install", "-y", "--allowerasing"] + specs)
    if rc != 0:
        module.fail_json(msg="dnf install of the pinned versions failed", rc=rc, stdout=out,
                         stderr=err)
    rc, out, err = module.run_command([dnf, "versionlock", "add"] + specs)
    if rc != 0:
        module.fail_json(msg="dnf versionlock failed (is python3-dnf-plugin-versionlock "
                             "installed?)", rc=rc, stdout=out, stderr=err)
    return names


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="list", elements="dict", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        supports_check_mode=True,
    )
    wanted = module.params["packages"]
    for pkg in wanted:
        if not pkg.get("name") or (module.params["state"] == "present" and not pkg.get("version")):
            module.fail_json(msg="every package needs a name and a version: %r" % (pkg,))
    names = [p["name"] for p in wanted]
    apt = os.path.exists("/usr/bin/dpkg-query")
    if not names:
        module.exit_json(changed=False, packages=[], changed_packages=[])
    state = dpkg_state(module, names) if apt else rpm_state(module, names)
    if module.params["state"] == "absent":
        changed = apt_remove(module, names, state) if apt else []
        final = state
    else:
        changed = apt_apply(module, wanted, state) if apt else dnf_apply(module, wanted, state)
        final = dpkg_state(module, names) if apt and changed and not module.check_mode else state
    result = [{"name": n, "version": final.get(n, ("", None, False))[0],
               "held": final.get(n, ("", None, False))[1],
               "installed": final.get(n, ("", None, False))[2]} for n in names]
    module.exit_json(changed=bool(changed), packages=result, changed_packages=changed)


if __name__ == "__main__":
    main()
