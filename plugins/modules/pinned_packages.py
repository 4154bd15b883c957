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
    description:
      - C(present) installs and holds; C(absent) unholds (unlocks) and removes the packages
        that are installed, and needs no version.
    type: str
    choices: [present, absent]
    default: present
  replaced:
    description:
      - Packages (names, or dicts with a C(name)) this install replaces, such as another
        driver branch's. Those installed are unheld (unlocked) and removed first, in the same
        call. Names also in O(packages) are kept. Only with O(state=present).
    type: list
    elements: raw
    default: []
  lock_timeout:
    description:
      - Seconds apt and dpkg wait for the package manager's lock (C(DPkg::Lock::Timeout)) held
        by another process, such as unattended-upgrades right after boot, before failing.
    type: int
    default: 300
  retries:
    description:
      - How many times a command that failed on a transient mirror error (fetch failures,
        HTTP 5xx, connection or name-resolution errors) is tried again, with C(retry_delay)
        doubling after each try. Other failures are not retried.
    type: int
    default: 3
  retry_delay:
    description: Seconds before the first retry; doubles after each.
    type: float
    default: 5
  services:
    description:
      - systemd units whose state to report after the packages are in place (read only, with
        one C(systemctl show)), so a role starts or enables a unit the packages bring only
        when it is not running and enabled already, without a round trip of its own.
    type: list
    elements: str
    default: []
  probe:
    description:
      - What to read from the node after the packages are in place, with the options and
        answers of M(gpucluster.provisioner.node_probe) (C(files), C(commands), C(globs),
        C(installed), C(packages), C(max_bytes)), returned as RV(probe), so a role verifies what
        it installed without a round trip of its own. In check mode it reads the node as it is.
    type: dict
    default: {}
  files:
    description:
      - Files that belong beside the packages (a profile.d or linker file, a unit's drop-in),
        made exactly as given after the packages are in place, with the entries of
        M(gpucluster.provisioner.file_set)'s O(files) (absolute paths; text, or a dictionary of
        C(content), C(mode), C(validate), or C(state=absent)), so a role writes them without a
        round trip of its own. Every entry is checked before any package changes. Their names
        as changed are returned in RV(changed_files), and make the task changed.
    type: dict
    default: {}
  files_mode:
    description: Mode of every file of O(files) that does not give its own, octal string.
    type: str
    default: "0644"
  files_owner:
    description: Owner of the files of O(files).
    type: str
  files_group:
    description: Group of the files of O(files).
    type: str
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
recovered_interrupted_dpkg:
  description: Whether an interrupted dpkg run was finished first (C(dpkg --configure -a)).
  returned: always
  type: bool
services:
  description:
    - Each unit of O(services) to its C(active) (systemd's ActiveState, e.g. C(active),
      C(inactive), C(failed)) and C(enabled) (its UnitFileState, e.g. C(enabled), C(disabled),
      empty for a unit systemd does not know), read after the packages were installed.
  returned: always
  type: dict
  sample: {nvidia-dcgm: {active: active, enabled: enabled}}
changed_files:
  description: The paths of O(files) written or removed (all that differed, in check mode).
  returned: always
  type: list
  elements: str
probe:
  description:
    - What O(probe) asked for, read after the packages and O(files) were put in place, as
      M(gpucluster.provisioner.node_probe) returns it (C(files), C(globs), C(commands),
      C(installed), C(packages)); empty when O(probe) is.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.fileset import (
    FileSet,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.pkgrun import (
    APT_ENV,
    apt_options,
    apt_recover,
    run_retrying,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.pkgstate import (
    describe,
    dnf_locked,
    dpkg_state,
    rpm_at_pin,
    rpm_state,
    uses_apt,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.probe import (
    check_probe_option,
    read_node,
    service_states,
)


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
               "--allow-change-held-packages"] + apt_options(module)
        cmd += ["%s=%s" % (p["name"], p["version"]) for p in need]
        run_retrying(module, cmd, "apt-get install of the pinned versions", APT_ENV)
        changed += [p["name"] for p in need]
    names = [p["name"] for p in wanted]
    after = dpkg_state(module, names)
    unheld = [n for n in names if not after.get(n, ("", False, False))[1]]
    if unheld:
        run_retrying(module, [apt_mark] + apt_options(module)[:2] + ["hold"] + unheld,
                     "apt-mark hold", APT_ENV)
        changed += unheld
    return sorted(set(changed))


def apt_remove(module, names, state):
    present = [n for n in names if state.get(n, ("", False, False))[2]]
    if not present or module.check_mode:
        return present
    apt_mark = module.get_bin_path("apt-mark", required=True)
    apt_get = module.get_bin_path("apt-get", required=True)
    run_retrying(module, [apt_mark] + apt_options(module)[:2] + ["unhold"] + present,
                 "apt-mark unhold", APT_ENV)
    run_retrying(module, [apt_get, "remove", "-y", "-q"] + apt_options(module) + present,
                 "apt-get remove", APT_ENV)
    return present


def dnf_remove(module, names, state):
    present = [n for n in names if state.get(n, ("", None, False))[2]]
    if not present or module.check_mode:
        return present
    dnf = module.get_bin_path("dnf", required=True)
    # A name without a lock makes `versionlock delete` exit non-zero: not an error here.
    module.run_command([dnf, "versionlock", "delete"] + present)
    run_retrying(module, [dnf, "remove", "-y"] + present, "dnf remove")
    return present


def dnf_apply(module, wanted, state):
    need = [p for p in wanted if not rpm_at_pin(state[p["name"]][0], p["version"])]
    dnf = module.get_bin_path("dnf", required=True)
    unlocked = [p for p in wanted if p not in need and not dnf_locked(module, dnf, p)]
    if module.check_mode or not (need or unlocked):
        return [p["name"] for p in need + unlocked]
    specs = ["%s-%s" % (p["name"], p["version"].split(":", 1)[-1]) for p in need]
    names = [p["name"] for p in need]
    if need:
        module.run_command([dnf, "versionlock", "delete"] + names)
        run_retrying(module, [dnf, "install", "-y", "--allowerasing"] + specs,
                     "dnf install of the pinned versions")
    specs += ["%s-%s" % (p["name"], p["version"].split(":", 1)[-1]) for p in unlocked]
    rc, out, err = module.run_command([dnf, "versionlock", "add"] + specs)
    if rc != 0:
        module.fail_json(msg="dnf versionlock failed (is python3-dnf-plugin-versionlock "
                             "installed?)", rc=rc, stdout=out, stderr=err)
    return names + [p["name"] for p in unlocked]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="list", elements="dict", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            replaced=dict(type="list", elements="raw", default=[]),
            lock_timeout=dict(type="int", default=300),
            retries=dict(type="int", default=3),
            retry_delay=dict(type="float", default=5),
            services=dict(type="list", elements="str", default=[]),
            probe=dict(type="dict", default={}),
            files=dict(type="dict", default={}),
            files_mode=dict(type="str", default="0644"),
            files_owner=dict(type="str"),
            files_group=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    wanted = module.params["packages"]
    for pkg in wanted:
        if not pkg.get("name") or (module.params["state"] == "present" and not pkg.get("version")):
            module.fail_json(msg="every package needs a name and a version: %r" % (pkg,))
    probe = module.params.get("probe") or {}
    check_probe_option(module, probe)
    # The files are checked (and read) before any package changes.
    files = FileSet(module, module.params["files"], None, module.params["files_mode"],
                    module.params["files_owner"], module.params["files_group"],
                    who="pinned_packages")
    names = [p["name"] for p in wanted]
    replaced = [r["name"] if isinstance(r, dict) else str(r) for r in module.params["replaced"]]
    replaced = sorted({r for r in replaced if r and r not in names})
    if replaced and module.params["state"] == "absent":
        module.fail_json(msg="replaced is for state=present (state=absent removes packages)")
    apt = uses_apt()
    if not names and not replaced:
        files.validate()
        changed_files, made_dir, _diffs = files.apply()
        module.exit_json(changed=bool(changed_files) or made_dir, packages=[], changed_packages=[],
                         changed_files=changed_files, recovered_interrupted_dpkg=False,
                         services=service_states(module, module.params.get("services") or []),
                         probe=read_node(module, probe) if probe else {})
    read = dpkg_state if apt else rpm_state
    state = read(module, names + replaced)
    recovered = apt_recover(module) if apt else False
    if recovered and not module.check_mode:
        state = read(module, names + replaced)
    if module.params["state"] == "absent":
        changed = (apt_remove if apt else dnf_remove)(module, names, state)
        final = state
    else:
        changed = (apt_remove if apt else dnf_remove)(module, replaced, state)
        applied = (apt_apply if apt else dnf_apply)(module, wanted, state) if names else []
        changed = sorted(set(changed) | set(applied))
        # Read back after a change: what the task returns is what the node has.
        final = read(module, names) if changed and not module.check_mode else state
    files.validate()
    changed_files, made_dir, _diffs = files.apply()
    module.exit_json(changed=bool(changed) or recovered or bool(changed_files) or made_dir,
                     packages=describe(names, final), changed_packages=changed,
                     changed_files=changed_files, recovered_interrupted_dpkg=recovered,
                     services=service_states(module, module.params.get("services") or []),
                     probe=read_node(module, probe) if probe else {})


if __name__ == "__main__":
    main()
