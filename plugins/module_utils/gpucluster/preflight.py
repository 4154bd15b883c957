# -*- coding: utf-8 -*-
"""Preflight policy: pure functions turning measured node facts into checks.

Shared by the ``node_preflight`` module (on the node) and unit tests. Stdlib only, Python 3.6+
syntax tolerant (runs on managed nodes).
"""

from __future__ import annotations

import re

from .checks import FAIL, PASS, SKIP, WARN, check_result

# PCI class codes (the PCI-SIG's class code table, as lspci -nn and sysfs show them): 0300 VGA,
# 0302 3D controller (data-center GPUs); NVSwitch shows as a bridge (0680).
_GPU_CLASSES = ("0300", "0302")
NVIDIA_VENDOR = "10de"
_PCI_LINE = re.compile(r"^(?P<slot>\S+)\s+(?P<desc>.*?\[(?P<cls>[0-9a-f]{4})\].*?)"
                       r"\[(?P<vendor>[0-9a-f]{4}):(?P<device>[0-9a-f]{4})\]", re.I)


def parse_lspci_nvidia(text):
    """NVIDIA devices from ``lspci -nn`` output: list of {slot, class, device_id, kind}."""
    out = []
    for line in (text or "").splitlines():
        m = _PCI_LINE.search(line.strip())
        if not m or m.group("vendor").lower() != "10de":
            continue
        cls = m.group("cls").lower()
        out.append({"slot": m.group("slot"), "class": cls,
                    "device_id": "10de:" + m.group("device").lower(), "kind": _kind(cls)})
    return out


def _kind(cls):
    return "gpu" if cls in _GPU_CLASSES else ("nvswitch" if cls == "0680" else "other")


def parse_pci_sysfs(entries):
    """NVIDIA devices from ``/sys/bus/pci/devices`` (what lspci itself reads): ``entries`` maps
    each function's address to its ``vendor``, ``device`` and ``class`` file contents
    (``0x10de``, ``0x2330``, ``0x030200``: the class file holds class, subclass and
    programming interface). Same shape as parse_lspci_nvidia, in address order."""
    out = []
    for slot in sorted(entries):
        files = entries[slot] or {}
        vendor = str(files.get("vendor") or "").strip().lower().replace("0x", "")
        if vendor != NVIDIA_VENDOR:
            continue
        cls = str(files.get("class") or "").strip().lower().replace("0x", "")[:4]
        device = str(files.get("device") or "").strip().lower().replace("0x", "")
        out.append({"slot": slot, "class": cls, "device_id": "10de:" + device,
                    "kind": _kind(cls)})
    return out


# RHEL rebuilds install from RHEL's repository (NVIDIA publishes rhel<major> only).
_RHEL_LIKE = ("rhel", "rocky", "almalinux")


def os_dir(os_id, version_id):
    """The NVIDIA repository directory an OS installs from, named the way the stack matrix's
    repository table names it: ``debian12``, ``ubuntu2204`` (Ubuntu keeps the minor), ``rhel9``
    (Rocky and AlmaLinux too). ``os_id``/``version_id`` are os-release's ID and VERSION_ID."""
    os_id = (os_id or "unknown").lower()
    version = str(version_id or "")
    if os_id == "ubuntu":
        return "ubuntu" + version.replace(".", "")
    major = version.split(".", maxsplit=1)[0]
    if os_id in _RHEL_LIKE:
        return "rhel" + major
    return os_id + major


_NFT_TABLE = re.compile(r"^table\s+(\S+)\s+(\S+)\s*\{")
_NFT_CHAIN = re.compile(r"^chain\s+(\S+)\s*\{")


def parse_nft_filtering(ruleset):
    """What filters incoming traffic in ``nft list ruleset``: for each chain hooked on input,
    its drop policy and its drop/reject rules, as one line each ("inet filter input: policy
    drop"). Rules that accept are not judged (what they let in is the operator's)."""
    out = []
    table = chain = None
    hooked = False
    for raw in (ruleset or "").splitlines():
        line = raw.strip()
        m = _NFT_TABLE.match(line)
        if m:
            table, chain, hooked = "%s %s" % (m.group(1), m.group(2)), None, False
            continue
        m = _NFT_CHAIN.match(line)
        if m:
            chain, hooked = m.group(1), False
            continue
        if chain is None:
            continue
        if "hook input" in line:
            hooked = True
            if re.search(r"\bpolicy\s+drop\b", line):
                out.append("%s %s: policy drop" % (table, chain))
            continue
        if hooked and re.search(r"\b(drop|reject)\b", line) and not line.startswith("#"):
            out.append("%s %s: %s" % (table, chain, line))
    return out


def parse_iptables_input(text):
    """What filters incoming traffic in ``iptables -S INPUT``: a DROP policy and DROP/REJECT
    rules, one line each."""
    out = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line in ("-P INPUT DROP", "-P INPUT REJECT"):
            out.append("iptables INPUT: policy " + line.split()[-1].lower())
        elif line.startswith("-A INPUT") and re.search(r"-j (DROP|REJECT)\b", line):
            out.append("iptables: " + line)
    return out


def parse_firewalld_zones(text):
    """``firewall-cmd --get-active-zones``: the active zones other than ``trusted`` (which
    lets everything in), each with what it applies to ("public (interfaces: eth0)")."""
    out, zone, where = [], None, []
    for line in (text or "").splitlines() + [""]:
        if line and not line[0].isspace():
            if zone and zone != "trusted":
                out.append("%s (%s)" % (zone, "; ".join(where)) if where else zone)
            zone, where = line.strip(), []
        elif line.strip():
            where.append(line.strip())
        else:
            if zone and zone != "trusted":
                out.append("%s (%s)" % (zone, "; ".join(where)) if where else zone)
            zone, where = None, []
    return out


def evaluate(facts, policy):
    """facts: what node_preflight measured; policy: thresholds from role variables."""
    checks = []
    name = facts.get("os_dir") or os_dir(facts.get("os_id"), facts.get("os_version"))
    supported = sorted(policy.get("supported_os") or [])
    ok = name in supported
    label = "%s %s (%s)" % (facts.get("os_id"), facts.get("os_version"), name)
    checks.append(check_result("os_supported", PASS if ok else FAIL, name, " | ".join(supported),
                               "supported OS %s" % label if ok else
                               "OS %s has no NVIDIA repository in the stack matrix for this node's "
                               "stack; supported: %s" % (label, ", ".join(supported) or "none")))

    arch = facts.get("architecture")
    archs = policy.get("architectures", ["x86_64", "aarch64"])
    checks.append(check_result("architecture", PASS if arch in archs else FAIL, arch,
                               " | ".join(archs),
                               "supported CPU architecture" if arch in archs else
                               "NVIDIA's repositories have no packages for %s" % arch))

    hdr = facts.get("kernel_headers")
    if hdr == "installed":
        checks.append(check_result("kernel_headers", PASS, hdr, "installed or installable",
                                   "headers for %s are installed" % facts.get("kernel")))
    elif hdr == "installable":
        checks.append(check_result("kernel_headers", PASS, hdr, "installed or installable",
                                   "headers for %s are available from the package manager"
                                   % facts.get("kernel")))
    else:
        checks.append(check_result("kernel_headers", FAIL, hdr, "installed or installable",
                                   "no headers package for the running kernel %s: DKMS cannot "
                                   "build the driver; boot a kernel whose headers are in the "
                                   "repositories" % facts.get("kernel")))

    min_gb = float(policy.get("min_free_gb", 20))
    for mount in facts.get("disk", []):
        free = mount.get("free_gb")
        if free is None:
            checks.append(check_result("free_disk:" + mount["path"], SKIP, None,
                                       ">= %g GB" % min_gb, "path does not exist"))
            continue
        ok = free >= min_gb
        short = "%.1f GB free under %s, the stack needs %g GB" % (free, mount["path"], min_gb)
        checks.append(check_result("free_disk:" + mount["path"], PASS if ok else FAIL,
                                   "%.1f GB" % free, ">= %g GB" % min_gb,
                                   "enough space" if ok else short))

    sb = facts.get("secure_boot")
    if sb == "enabled" and not policy.get("secure_boot_ok", False):
        checks.append(check_result("secure_boot", FAIL, sb, "disabled, or a MOK key enrolled",
                                   "Secure Boot is on: the unsigned DKMS module will not load; "
                                   "enroll a MOK signing key and set preflight_secure_boot_ok, or "
                                   "disable it"))
    else:
        checks.append(check_result("secure_boot", PASS, sb, "disabled, or a MOK key enrolled",
                                   "module loading is not blocked"))

    if policy.get("expect_gpus"):
        checks.extend(_gpu_checks(facts, policy))

    fw = facts.get("host_firewall")
    if fw is not None:
        checks.append(_firewall_check(fw, policy.get("cluster_ports") or []))
    ts = facts.get("time_sync")
    if ts in ("synchronized", "container"):
        detail = ("container: shares the host kernel clock" if ts == "container"
                  else "clock synchronized")
        checks.append(check_result("time_sync", PASS, ts, "synchronized", detail))
    else:
        checks.append(check_result("time_sync", WARN, ts, "synchronized",
                                   "clock not synchronized: NCCL timeouts and logs across nodes "
                                   "will disagree; enable chrony or systemd-timesyncd"))
    return checks


def _firewall_check(fw, ports):
    """A host firewall that filters incoming traffic is a warning, not a failure: it may let the
    cluster's traffic in (the rules that accept are not judged), but when it does not, Slurm,
    the multi-node smoke job and Prometheus' scrapes fail later and far from the cause."""
    filtering = fw.get("filtering") or []
    wanted = ", ".join(ports) if ports else "the cluster's ports"
    if not filtering:
        unread = fw.get("unread") or []
        detail = "no host firewall filters incoming traffic" + (
            " (not read: %s)" % ", ".join(unread) if unread else "")
        return check_result("host_firewall", PASS, "none", "no filtering of the cluster's ports",
                            detail)
    return check_result("host_firewall", WARN, "; ".join(filtering),
                        "no filtering of the cluster's ports",
                        "a host firewall filters incoming traffic (%s): make sure it lets the "
                        "cluster network reach %s, and NCCL's bootstrap and socket connections "
                        "(ephemeral ports), or Slurm, the multi-node smoke job and Prometheus' "
                        "scrapes fail; firewalld: firewall-cmd --permanent --zone=trusted "
                        "--add-source=<cluster network> && firewall-cmd --reload"
                        % ("; ".join(filtering), wanted))


def _gpu_checks(facts, policy):
    devices = facts.get("pci_devices") or []
    gpus = [d for d in devices if d["kind"] == "gpu"]
    expected = policy.get("expected_gpu_count")
    ids = sorted({d["device_id"] for d in gpus})
    out = []
    if expected is None:
        ok = len(gpus) > 0
        exp = ">= 1"
    else:
        ok = len(gpus) == int(expected)
        exp = str(expected)
    source = facts.get("pci_source")
    if source == "unread":
        out.append(check_result("nvidia_pci_devices", FAIL, None, exp,
                                "neither /sys/bus/pci/devices nor lspci (package pciutils) "
                                "could be read: the GPUs on the PCI bus cannot be counted"))
        return out
    shown = "lspci" if source == "lspci" else "/sys/bus/pci/devices"
    out.append(check_result("nvidia_pci_devices", PASS if ok else FAIL, len(gpus), exp,
                            "NVIDIA GPUs on the PCI bus (%s)" % shown if ok else
                            "%s shows %d NVIDIA GPU(s), the profile expects %s: check seating, "
                            "power and BIOS PCIe settings before installing a driver"
                            % (shown, len(gpus), exp)))
    wanted = [w.lower() for w in policy.get("expected_pci_ids") or []]
    if wanted and gpus:
        bad = [i for i in ids if i not in wanted]
        out.append(check_result("nvidia_pci_ids", FAIL if bad else PASS, ", ".join(ids),
                                " | ".join(wanted),
                                "unexpected GPU device id(s) %s: wrong gpu_profile?"
                                % ", ".join(bad) if bad else "GPU model matches the profile"))
    return out


def failed(checks):
    return [c for c in checks if c["status"] == FAIL]
