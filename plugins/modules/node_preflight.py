#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Measure what a node must offer before the NVIDIA stack goes on, and judge it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_preflight
short_description: Read-only preflight checks of a node before the NVIDIA stack is installed
description:
  - Measures OS, architecture, kernel headers, free disk, Secure Boot, NVIDIA PCI devices,
    clock synchronisation and host firewall filtering (firewalld's zones, nft's input chains,
    iptables' INPUT chain) in one round trip, and evaluates them against the given policy.
  - Never changes the node.
options:
  supported_os:
    description: NVIDIA repository directories of the OSes the node may run (C(debian12),
      C(ubuntu2204), C(rhel9)); the node's C(/etc/os-release) is named the same way (RHEL
      rebuilds as C(rhel)).
    type: list
    elements: str
    required: true
  min_free_gb:
    description: Free space needed under each of O(disk_paths).
    type: float
    default: 20
  disk_paths:
    description: Paths whose filesystems must have O(min_free_gb) free.
    type: list
    elements: str
    default: ['/', '/var']
  expect_gpus:
    description: Whether this node must show NVIDIA GPUs on the PCI bus.
    type: bool
    default: false
  expected_gpu_count:
    description: GPUs the hardware profile says this node has.
    type: int
  expected_pci_ids:
    description: Allowed GPU PCI ids (C(10de:2330) form).
    type: list
    elements: str
    default: []
  secure_boot_ok:
    description: Secure Boot is acceptable (a MOK key is enrolled for module signing).
    type: bool
    default: false
  cluster_ports:
    description: What the cluster needs to reach on this node (C(slurmd 6818) ...), named in
      the warning when a host firewall filters incoming traffic.
    type: list
    elements: str
    default: []
  efivars_root:
    description: Where the EFI variables are read (efivarfs); Secure Boot is the
      C(SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c) variable there (4 attribute bytes, then
      its value). A missing directory means a machine without EFI.
    type: path
    default: /sys/firmware/efi/efivars
  pci_sysfs_root:
    description: Where the PCI functions are listed (their C(vendor), C(device), C(class)
      files), what lspci itself reads; the GPUs are counted there, and with C(lspci -nn) only
      when it cannot be read.
    type: str
    default: /sys/bus/pci/devices
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: Preflight | Measure and judge the node
  gpucluster.provisioner.node_preflight:
    supported_os: [debian12, ubuntu2204, ubuntu2404, rhel9]
    expect_gpus: true
    expected_gpu_count: 8
"""

RETURN = r"""
preflight:
  description: Measured facts.
  returned: always
  type: dict
checks:
  description: One entry per check with name, status (pass/fail/warn/skip), measured, expected,
    detail.
  returned: always
  type: list
  elements: dict
failed_checks:
  description: Names of the checks with status fail.
  returned: always
  type: list
  elements: str
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.modsign import (
    read_secure_boot,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.preflight import (
    evaluate,
    failed,
    os_dir,
    parse_firewalld_zones,
    parse_iptables_input,
    parse_lspci_nvidia,
    parse_nft_filtering,
    parse_pci_sysfs,
)


def read_os_release():
    data = {}
    try:
        with open("/etc/os-release") as fh:
            for line in fh:
                if "=" in line:
                    key, _sep, value = line.strip().partition("=")
                    value = value.strip()
                    # os-release(5): a value may be in double or in single quotes.
                    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                        value = value[1:-1]
                    data[key] = value
    except OSError:
        pass
    os_id = data.get("ID", "unknown")
    version = data.get("VERSION_ID", "unknown")
    if os_id in ("rhel", "rocky", "almalinux"):
        version = version.split(".")[0]
    return os_id, version


def kernel_headers(module, kernel):
    if os.path.exists("/lib/modules/%s/build" % kernel):
        return "installed"
    apt_cache = module.get_bin_path("apt-cache")
    if apt_cache:
        rc, out, _err = module.run_command([apt_cache, "policy", "linux-headers-" + kernel])
        if rc == 0 and "Candidate:" in out and "Candidate: (none)" not in out:
            return "installable"
        return "missing"
    dnf = module.get_bin_path("dnf")
    if dnf:
        rc, _out, _err = module.run_command(
            [dnf, "-q", "list", "--available", "kernel-devel-" + kernel])
        return "installable" if rc == 0 else "missing"
    return "unknown"


def disk(paths):
    out = []
    for path in paths:
        try:
            st = os.statvfs(path)
        except OSError:
            out.append({"path": path, "free_gb": None})
            continue
        out.append({"path": path, "free_gb": round(st.f_bavail * st.f_frsize / 1e9, 1)})
    return out


def _read_pci_sysfs(root):
    """{address: {vendor, device, class}} of every function under ``root``; None when the
    directory cannot be listed."""
    try:
        names = os.listdir(root)
    except OSError:
        return None
    entries = {}
    for name in names:
        files = {}
        for attr in ("vendor", "device", "class"):
            try:
                with open(os.path.join(root, name, attr)) as fh:
                    files[attr] = fh.read()
            except OSError:
                files[attr] = ""
        entries[name] = files
    return entries


def pci_devices(module, sysfs_root):
    """The NVIDIA functions from sysfs (what lspci reads; present without pciutils), else from
    ``lspci -nn``; source "sysfs", "lspci" or "unread"."""
    entries = _read_pci_sysfs(sysfs_root)
    if entries:
        return parse_pci_sysfs(entries), "sysfs"
    lspci = module.get_bin_path("lspci")
    if not lspci:
        return [], "unread"
    rc, out, err = module.run_command([lspci, "-nn", "-d", "10de:"])
    if rc != 0:
        module.fail_json(msg="lspci failed", rc=rc, stdout=out, stderr=err)
    return parse_lspci_nvidia(out), "lspci"


def time_sync(module):
    virt = module.get_bin_path("systemd-detect-virt")
    if virt:
        rc, _out, _err = module.run_command([virt, "--container", "--quiet"])
        if rc == 0:
            return "container"
    timedatectl = module.get_bin_path("timedatectl")
    if timedatectl:
        rc, out, _err = module.run_command(
            [timedatectl, "show", "--property=NTPSynchronized", "--value"])
        if rc == 0:
            return "synchronized" if out.strip() == "yes" else "unsynchronized"
    return "unknown"


def _filtering(module, tool, args, parse, unread):
    """What ``tool args`` shows filtering (parse of its output); [] without the tool, and the
    command named in ``unread`` when it fails."""
    path = module.get_bin_path(tool)
    if not path:
        return []
    rc, out, _err = module.run_command([path] + list(args))
    if rc != 0:
        unread.append(" ".join([tool] + list(args)))
        return []
    return parse(out)


def host_firewall(module):
    """What filters incoming traffic: firewalld's active zones other than trusted (when it
    runs), the nft chains hooked on input with a drop policy or drop/reject rules, iptables'
    INPUT chain. A tool that is not installed is not a firewall; one that cannot be read is
    named."""
    unread = []
    filtering = []
    firewall_cmd = module.get_bin_path("firewall-cmd")
    if firewall_cmd:
        rc, out, _err = module.run_command([firewall_cmd, "--state"])
        if rc == 0 and out.strip() == "running":
            filtering += ["firewalld zone " + z for z in _filtering(
                module, "firewall-cmd", ["--get-active-zones"], parse_firewalld_zones, unread)]
    filtering += ["nft " + line for line in _filtering(
        module, "nft", ["list", "ruleset"], parse_nft_filtering, unread)]
    filtering += _filtering(module, "iptables", ["-S", "INPUT"], parse_iptables_input, unread)
    return {"filtering": filtering, "unread": unread}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            supported_os=dict(type="list", elements="str", required=True),
            min_free_gb=dict(type="float", default=20),
            disk_paths=dict(type="list", elements="str", default=["/", "/var"]),
            expect_gpus=dict(type="bool", default=False),
            expected_gpu_count=dict(type="int"),
            expected_pci_ids=dict(type="list", elements="str", default=[]),
            secure_boot_ok=dict(type="bool", default=False),
            cluster_ports=dict(type="list", elements="str", default=[]),
            pci_sysfs_root=dict(type="str", default="/sys/bus/pci/devices"),
            efivars_root=dict(type="path", default="/sys/firmware/efi/efivars"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    kernel = platform.release()
    os_id, version = read_os_release()
    devices, source = (pci_devices(module, p["pci_sysfs_root"]) if p["expect_gpus"]
                       else ([], "not-checked"))
    facts = {
        "os_id": os_id, "os_version": version, "os_dir": os_dir(os_id, version),
        "architecture": platform.machine(),
        "kernel": kernel, "kernel_headers": kernel_headers(module, kernel),
        "disk": disk(p["disk_paths"]), "secure_boot": read_secure_boot(p["efivars_root"]),
        "pci_devices": devices, "pci_source": source, "time_sync": time_sync(module),
        "host_firewall": host_firewall(module),
    }
    checks = evaluate(facts, {
        "supported_os": p["supported_os"], "min_free_gb": p["min_free_gb"],
        "expect_gpus": p["expect_gpus"], "expected_gpu_count": p["expected_gpu_count"],
        "expected_pci_ids": p["expected_pci_ids"], "secure_boot_ok": p["secure_boot_ok"],
        "cluster_ports": p["cluster_ports"],
    })
    module.exit_json(changed=False, preflight=facts, checks=checks,
                     failed_checks=[c["name"] for c in failed(checks)])


if __name__ == "__main__":
    main()
