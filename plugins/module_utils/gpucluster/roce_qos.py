# -*- coding: utf-8 -*-
"""PFC and ECN of a node's RoCE ports, as the node's own files and tools show them. Read-only:
nothing is configured, and the switches are not read (a port can be set up right on the node
and still be lossy because its switch port is not).

Per RoCE port (an RDMA port whose ``link_layer`` is Ethernet):

- its network interface: ``<ib root>/<dev>/ports/<n>/gid_attrs/ndevs/<index>``, "the
  net-device's name associated with the GID" at that index (kernel
  Documentation/ABI/stable/sysfs-class-infiniband, since 4.4); without one, the interface the
  RDMA device's PCI function lists in ``device/net/`` when it lists exactly one (a net
  device's sysfs entry sits under the device it belongs to: sys_class_net(5), "Each of these
  symbolic links refers to entries in the /sys/devices/ directory").
- ECN: ``<net root>/<interface>/ecn/roce_np/enable/<0..7>`` and ``.../roce_rp/enable/<0..7>``,
  one file per priority, "To query whether ECN is enabled per Priority X: cat
  /sys/class/net/<interface>/ecn/<protocol>/enable/X", protocol roce_rp ("Reaction point") or
  roce_np ("Notification point"), X 0..7 (NVIDIA MLNX_OFED/DOCA documentation, "Explicit
  Congestion Notification (ECN)"); in DCQCN terms the reaction point is the sender that slows
  down and the notification point the receiver that sends congestion notification packets (that
  reading is ours, not the page's). The mlx5 driver prints each file as "%d\\n" of the port's
  congestion status for that protocol and priority, and nothing when the firmware query fails
  (mlx5e_show_ecn_enable in en_ecn.c; en_sysfs.c mlx5e_sysfs_create makes ecn/<protocol>/
  enable/0..7 under the interface: MLNX_OFED's mlx5 sources, as carried by oracle/linux-uek @
  f57c630 drivers/net/ethernet/mellanox/mlx5/core/). These files were found only in
  MLNX_OFED-derived sources: whether the upstream (inbox) mlx5 driver has them is unconfirmed,
  so a missing ``ecn`` directory leaves ECN unknown, not off.
- PFC: iproute2's ``dcb pfc show dev <interface>`` (from iproute2 5.11): "pfc-cap 8
  macsec-bypass off delay 4096" then "prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:on 7:on"
  (dcb-pfc(8), "Show what was set"; dcb/dcb_pfc.c dcb_pfc_print, iproute2 @ ee2a4a8); else
  NVIDIA's ``mlnx_qos -i <interface>``: "PFC configuration:", then "priority    0   1 ...   7"
  and "enabled     0   0   0   1 ..." (tab-indented; Mellanox/mlnx-tools python/mlnx_qos
  pretty_print @ 8fbfd9c). With neither, PFC is unknown.

Lossless RoCE usually relies on PFC, ECN (DCQCN) or both on the priority its traffic uses; the
check reports what the node shows and warns only when everything it read is off.

Stdlib only, Python 3.9 syntax: runs on managed nodes inside gpu_node_facts.
"""

from __future__ import annotations

import os

from .checks import PASS, SKIP, WARN, check_result
from .values import ParseError

IB_ROOT = "/sys/class/infiniband"
NET_ROOT = "/sys/class/net"
PRIORITIES = tuple(range(8))
# The two ends of ECN congestion control (the directory names under <interface>/ecn/).
ECN_POINTS = ("roce_np", "roce_rp")
NODE_ONLY = "judged on the node only: the switches' PFC and ECN are not read"


def parse_dcb_pfc(text):
    """The priorities ``dcb pfc show dev DEV`` says have PFC on (a sorted list), from its
    ``prio-pfc 0:off ... 7:on`` line. Raises ParseError without that line."""
    for line in (text or "").splitlines():
        words = line.split()
        if not words or words[0] != "prio-pfc":
            continue
        enabled = []
        for word in words[1:]:
            prio, sep, state = word.partition(":")
            if not sep or not prio.isdigit() or state not in ("on", "off"):
                raise ParseError("prio-pfc entry %r is not PRIO:on|off" % word)
            if state == "on":
                enabled.append(int(prio))
        return sorted(enabled)
    raise ParseError("no prio-pfc line in dcb pfc show's output")


def parse_mlnx_qos_pfc(text):
    """The priorities ``mlnx_qos -i DEV`` says have PFC on, from the ``priority`` and
    ``enabled`` rows under "PFC configuration:". Raises ParseError without them."""
    lines = (text or "").splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.strip() == "PFC configuration:"), None)
    if start is None:
        raise ParseError("no 'PFC configuration:' section in mlnx_qos output")
    rows = {}
    for line in lines[start + 1:start + 4]:
        words = line.split()
        if words and words[0] in ("priority", "enabled"):
            rows[words[0]] = words[1:]
    prios, flags = rows.get("priority"), rows.get("enabled")
    if not prios or not flags or len(prios) != len(flags):
        raise ParseError("mlnx_qos PFC configuration has no matching priority and enabled rows")
    if not all(p.isdigit() for p in prios) or not all(f in ("0", "1") for f in flags):
        raise ParseError("mlnx_qos PFC rows are not numbers: %s / %s"
                         % (" ".join(prios), " ".join(flags)))
    return sorted(int(prios[i]) for i in range(len(prios)) if flags[i] == "1")


def parse_ecn_enable(text):
    """One ``ecn/<protocol>/enable/<prio>`` file: True for "1", False for "0". Raises ParseError
    for anything else (the driver writes nothing when its firmware query fails)."""
    value = (text or "").strip()
    if value not in ("0", "1"):
        raise ParseError("ECN enable file reads %r, not 0 or 1" % value)
    return value == "1"


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path), key=lambda n: (len(n), n))
    except OSError:
        return None


def port_netdev(ib_root, device, port):
    """(interface, where it was found, None) or (None, None, why) for RDMA port ``port`` of
    ``device``: the first GID entry's net device, else the PCI function's one interface."""
    ndevs = os.path.join(ib_root, device, "ports", str(port), "gid_attrs", "ndevs")
    for index in _listdir(ndevs) or []:
        # An unused GID entry's file refuses to be read: skip to the next.
        name = _read(os.path.join(ndevs, index))
        if name:
            return name, "gid_attrs/ndevs", None
    listed = _listdir(os.path.join(ib_root, device, "device", "net"))
    if listed and len(listed) == 1:
        return listed[0], "device/net", None
    if listed:
        return None, None, ("no GID entry names its interface and its PCI function lists %d "
                            "(%s)" % (len(listed), ", ".join(listed)))
    return None, None, "no GID entry names its interface and its PCI function lists none"


def read_ecn(net_root, netdev):
    """({"roce_np": [prio...], "roce_rp": [prio...]}, None): the priorities each end has ECN on;
    or (None, why) when the files are not there or one does not read 0 or 1."""
    base = os.path.join(net_root, netdev, "ecn")
    if not os.path.isdir(base):
        return None, "no %s (MLNX_OFED's mlx5 driver makes it)" % base
    out = {}
    for point in ECN_POINTS:
        out[point] = []
        for prio in PRIORITIES:
            path = os.path.join(base, point, "enable", str(prio))
            text = _read(path)
            if text is None:
                return None, "cannot read %s" % path
            try:
                if parse_ecn_enable(text):
                    out[point].append(prio)
            except ParseError as exc:
                return None, "%s: %s" % (path, exc)
    return out, None


def _why(err):
    """A runner's error as one line (gpu_node_facts' run_tool gives a list of lines)."""
    if isinstance(err, (list, tuple)):
        return str(err[-1]) if err else "failed"
    return str(err)


# The tools that show a port's PFC, in the order they are asked: iproute2's first (upstream, in
# the distributions' iproute2 packages), then NVIDIA's.
PFC_TOOLS = (
    ("dcb", lambda dev: ["dcb", "pfc", "show", "dev", dev], parse_dcb_pfc),
    ("mlnx_qos", lambda dev: ["mlnx_qos", "-i", dev], parse_mlnx_qos_pfc),
)


def read_pfc(netdev, run):
    """(priorities with PFC on, the tool that said so, None), or (None, None, why) when no tool
    answered. ``run(args)`` -> (output, None) or (None, why), as gpu_node_facts' run_tool."""
    if run is None:
        return None, None, "no command runner"
    reasons = []
    for tool, args, parse in PFC_TOOLS:
        out, err = run(args(netdev))
        if err or out is None:
            why = _why(err) if err else "printed nothing"
            reasons.append(why if why.startswith(tool + " ") else "%s: %s" % (tool, why))
            continue
        try:
            return parse(out), tool, None
        except ParseError as exc:
            reasons.append("%s: %s" % (tool, exc))
    return None, None, "; ".join(reasons)


def _ethernet_ports(ib_root):
    for device in _listdir(ib_root) or []:
        for port in _listdir(os.path.join(ib_root, device, "ports")) or []:
            layer = _read(os.path.join(ib_root, device, "ports", port, "link_layer"))
            if layer == "Ethernet" and port.isdigit():
                yield device, int(port)


def read_roce_qos(ib_root=IB_ROOT, net_root=NET_ROOT, run=None):
    """PFC and ECN of every RoCE port under ``ib_root``: {"ib_root", "ports": [{name, device,
    port, netdev, netdev_source, netdev_error, pfc, pfc_source, pfc_error, ecn, ecn_error}]},
    or {"error"} when ``ib_root`` is missing. ``pfc``: the priorities with PFC on (None:
    unknown); ``ecn``: {"roce_np": [...], "roce_rp": [...]} (None: unknown)."""
    if not os.path.isdir(ib_root):
        return {"error": "%s does not exist (no RDMA devices or driver)" % ib_root}
    ports = []
    for device, number in _ethernet_ports(ib_root):
        netdev, source, why = port_netdev(ib_root, device, number)
        entry = {"name": "%s/%d" % (device, number), "device": device, "port": number,
                 "netdev": netdev, "netdev_source": source, "netdev_error": why,
                 "pfc": None, "pfc_source": None, "pfc_error": None,
                 "ecn": None, "ecn_error": None}
        if netdev:
            entry["ecn"], entry["ecn_error"] = read_ecn(net_root, netdev)
            entry["pfc"], entry["pfc_source"], entry["pfc_error"] = read_pfc(netdev, run)
        ports.append(entry)
    return {"ib_root": ib_root, "ports": ports}


def _prios(prios):
    return ",".join(str(p) for p in prios) if prios else "off"


def _ecn_on(ecn):
    """The priorities with ECN on at both ends (notification and reaction point)."""
    return sorted(set(ecn.get("roce_np") or []) & set(ecn.get("roce_rp") or []))


def _ecn_words(ecn):
    """How a port's ECN reads, for measured and detail: "3", "off", or each end's."""
    both = _ecn_on(ecn)
    np_on, rp_on = ecn.get("roce_np") or [], ecn.get("roce_rp") or []
    if sorted(np_on) == sorted(rp_on):
        return _prios(both)
    return "roce_np %s, roce_rp %s" % (_prios(np_on), _prios(rp_on))


def _port_check(port):
    name = "roce_qos_%s_port%s" % (port.get("device"), port.get("port"))
    label = port.get("name") or "%s/%s" % (port.get("device"), port.get("port"))
    expected = "PFC or ECN on a priority"
    if not port.get("netdev"):
        return check_result(name, SKIP, None, expected,
                            "%s: its network interface was not found (%s): PFC and ECN not "
                            "read" % (label, port.get("netdev_error") or "unknown"))
    label = "%s (%s)" % (label, port["netdev"])
    pfc, ecn = port.get("pfc"), port.get("ecn")
    pfc_text = ("not read" if pfc is None else _prios(pfc))
    ecn_text = ("not read" if ecn is None else _ecn_words(ecn))
    measured = "PFC %s; ECN %s" % (pfc_text, ecn_text)
    pfc_said = ("PFC not read (%s)" % port.get("pfc_error") if pfc is None else
                "PFC %s (%s)" % ("on priority " + _prios(pfc) if pfc else "off on every priority",
                                 port.get("pfc_source")))
    ecn_on = _ecn_on(ecn) if ecn is not None else []
    ecn_said = ("ECN not read (%s)" % port.get("ecn_error") if ecn is None else
                "ECN on priority %s" % _prios(ecn_on) if ecn_on else
                "ECN off on every priority" if _ecn_words(ecn) == "off" else
                "ECN at one end only (%s)" % _ecn_words(ecn))
    said = "%s; %s" % (pfc_said, ecn_said)
    if pfc or ecn_on:
        return check_result(name, PASS, measured, expected,
                            "%s: %s; %s" % (label, said, NODE_ONLY))
    if pfc is not None and ecn is not None:
        return check_result(name, WARN, measured, expected,
                            "%s: %s: lossless RoCE usually needs PFC or ECN on the priority its "
                            "traffic uses; %s" % (label, said, NODE_ONLY))
    return check_result(name, SKIP, measured, expected,
                        "%s: %s: cannot tell whether the port is lossless; %s"
                        % (label, said, NODE_ONLY))


def roce_qos_checks(facts):
    """One check per RoCE port, ``roce_qos_<dev>_port<n>``, report-only: pass when PFC or ECN
    (both ends) is on for some priority, warn when everything read is off, skip naming what
    could not be read. ``facts``: read_roce_qos's."""
    if not facts or facts.get("error"):
        why = (facts or {}).get("error") or "not read"
        return [check_result("roce_qos", SKIP, None, "PFC or ECN on a priority",
                             "PFC and ECN not read: %s" % why)]
    ports = facts.get("ports") or []
    if not ports:
        return [check_result("roce_qos", SKIP, None, "PFC or ECN on a priority",
                             "no RoCE (Ethernet link layer) port under %s: PFC and ECN not read"
                             % facts.get("ib_root", IB_ROOT))]
    return [_port_check(port) for port in ports]
