# -*- coding: utf-8 -*-
"""Error counters judged by how much they rose since the last reading: the policy ``validate``
and ``gpuc-health`` share for the InfiniBand ports' error counters and the PCIe AER counters of
the GPUs' and HCAs' PCI functions.

A reading (``take_reading``) is plain JSON that whoever judges keeps until the next run
(``gpuc-health`` in its state file, the provisioner in its report of the validate run)::

    {"time": 1718000000.0,        # when it was taken: the node's clock, epoch seconds
     "boot_id": "4f3c...",        # /proc/sys/kernel/random/boot_id then
     "ib": {"mlx5_0/1": {"symbol_error": 0, "link_downed": 0, ...}},
     "pcie": {"0000:19:00.0": {"device": "gpu0", "correctable": {"total": 0}, ...}}}

``ib`` holds the ports of the fabric's link layer and the counters of IB_COUNTER_LIMITS the
port has; ``pcie`` the AER counters (``pci_aer``) of every GPU and HCA function that has them.

Judging (``counter_checks``, one check per port and per PCI function):

- the first reading is the baseline: counts since boot are nobody's finding (status skip),
  except a counter stuck at its maximum, which no longer counts (fail);
- a counter lower than at the last reading was reset (``perfquery -R``, a driver reload, a
  re-enumerated function): its value is judged as the increase, and the detail says so;
- after a reboot (another boot id) the InfiniBand counters start a new baseline, and the AER
  counters, which the kernel starts at 0 at every boot, are judged whole.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import os
from typing import Any

from .checks import FAIL, PASS, SKIP, WARN, check_result
from .pci_aer import TOTAL, read_functions

PER_HOUR = "per hour"
BETWEEN_READINGS = "between two readings"

# InfiniBand port error counter -> (the most it may rise, what that figure is judged over).
# "per hour": the increase divided by the hours between the two readings, at least one hour
# (RATE_MIN_INTERVAL_S), so a short interval never extrapolates a few errors into a rate;
# "between two readings": the increase itself. Above the figure the port's check fails.
# Source of the figures: the thresholds rdma-core ships for ibqueryerrors and ibcheckerrs,
# infiniband-diags/etc/error_thresholds (SymbolErrorCounter=10, LinkErrorRecoveryCounter=10,
# PortRcvErrors=10, LocalLinkIntegrityErrors=10, ExcessiveBufferOverrunErrors=10,
# PortRcvRemotePhysicalErrors=100, PortXmitDiscards=100, PortXmitConstraintErrors=100,
# PortRcvConstraintErrors=100, VL15Dropped=100). Those are counts since the counters were last
# cleared, with no time base; judging them per hour of the interval is the project's choice,
# because validate's interval (days) and gpuc-health's (an hour at most) differ. link_downed is
# the project's own, stricter than rdma-core's 10: each count is the link going down and
# retraining, which breaks the connections of every job using the port, so one is a finding.
IB_COUNTER_LIMITS = {
    "symbol_error": (10, PER_HOUR),
    "link_error_recovery": (10, PER_HOUR),
    "link_downed": (0, BETWEEN_READINGS),
    "port_rcv_errors": (10, PER_HOUR),
    "port_rcv_remote_physical_errors": (100, PER_HOUR),
    "port_xmit_discards": (100, PER_HOUR),
    "excessive_buffer_overrun_errors": (10, PER_HOUR),
    "local_link_integrity_errors": (10, PER_HOUR),
    "VL15_dropped": (100, PER_HOUR),
    "port_xmit_constraint_errors": (100, PER_HOUR),
    "port_rcv_constraint_errors": (100, PER_HOUR),
}

# Width in bits of each counter in the PMA's PortCounters attribute, as the kernel reads it into
# sysfs (drivers/infiniband/core/sysfs.c: PORT_PMA_ATTR(name, counter, width, offset)). These
# counters stop at all ones rather than wrap: at 2**width - 1 a counter is saturated, and how
# much it rose since is unknown.
IB_COUNTER_BITS = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
}

# PCIe AER, per PCI function, judged over the interval between two readings: any uncorrectable
# error (fatal or non-fatal) fails; correctable errors (a bad TLP or DLLP, a replay: the link
# corrected itself) warn above this many per hour (over at least RATE_MIN_INTERVAL_S). Source:
# NVIDIA DCGM's PCIe health watch allows 8 PCIe replays per minute
# (dcgm_gpu_hardware_limits.h: DCGM_LIMIT_MAX_PCIREPLAY_RATE, "8 replays per minute is the
# maximum recommended by RM"); a replay follows a corrected error, so the same rate, 480 per
# hour, is taken for the correctable AER count.
AER_CORRECTABLE_PER_HOUR = 8 * 60

# Per-hour figures are judged over at least this many seconds between the readings.
RATE_MIN_INTERVAL_S = 3600
# gpuc-health keeps a baseline this long before the next reading replaces it (next_baseline), so
# each run judges the errors of the last one to two hours, however often it runs.
BASELINE_MAX_AGE_S = RATE_MIN_INTERVAL_S


def fabric_layer(expected: dict[str, Any]) -> str | None:
    """The link layer of the profile's RDMA ports, None when it has none."""
    fabric = expected.get("fabric") or "infiniband"
    if not expected.get("ib_hcas") or fabric == "ethernet":
        return None
    return "Ethernet" if fabric == "roce" else "InfiniBand"


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def ib_reading(ib: Any, expected: dict[str, Any]) -> dict[str, dict[str, int]]:
    """``{"mlx5_0/1": {counter: value}}`` of read_ib_sysfs's facts: the ports of the
    profile's link layer, the judged counters they have."""
    layer = fabric_layer(expected)
    if layer is None or not isinstance(ib, dict) or ib.get("error"):
        return {}
    out = {}
    for device in ib.get("devices") or []:
        for port in device.get("ports") or []:
            if port.get("link_layer") != layer:
                continue
            counters = port.get("counters") or {}
            out["%s/%s" % (device.get("name"), port.get("number"))] = {
                name: counters[name] for name in IB_COUNTER_LIMITS
                if _count(counters.get(name)) is not None}
    return out


def pcie_functions(gpu: Any, ib: Any, ib_root: str, pci_root: str) -> dict[str, str]:
    """``{label: sysfs directory}`` of the GPUs (``gpu0``: pci_root/<bus id> from nvidia-smi)
    and the RDMA devices (``mlx5_0``: ib_root/<device>/device, the kernel's link to the PCI
    function)."""
    out = {}
    if isinstance(gpu, dict) and not gpu.get("error"):
        for g in gpu.get("gpus") or []:
            if g.get("bus_id"):
                out["gpu%s" % g.get("index")] = os.path.join(pci_root, g["bus_id"])
    if isinstance(ib, dict) and not ib.get("error"):
        for device in ib.get("devices") or []:
            if device.get("name"):
                out[device["name"]] = os.path.join(ib_root, device["name"], "device")
    return out


def take_reading(ib: Any, gpu: Any, expected: dict[str, Any], ib_root: str, pci_root: str,
                 when: float, boot_id: str | None) -> dict[str, Any]:
    """A reading of the node now (see the module's docstring)."""
    return {
        "time": float(when),
        "boot_id": boot_id or None,
        "ib": ib_reading(ib, expected),
        "pcie": read_functions(pcie_functions(gpu, ib, ib_root, pci_root)),
    }


def is_reading(value: Any) -> bool:
    """Whether ``value`` has a reading's shape (one from a file or an argument is checked
    before it is judged against)."""
    return (isinstance(value, dict) and isinstance(value.get("time"), (int, float))
            and not isinstance(value.get("time"), bool)
            and isinstance(value.get("ib"), dict) and isinstance(value.get("pcie"), dict))


def _rebooted(before: dict[str, Any], now: dict[str, Any]) -> bool:
    old, new = before.get("boot_id"), now.get("boot_id")
    return bool(old and new and old != new)


def next_baseline(before: Any, now: dict[str, Any]) -> dict[str, Any]:
    """What gpuc-health keeps for its next run: the baseline it has, until it is
    BASELINE_MAX_AGE_S old (or the node rebooted, or its ports or PCI functions changed);
    then this reading."""
    if (not is_reading(before) or _rebooted(before, now)
            or not 0 <= now["time"] - before["time"] < BASELINE_MAX_AGE_S
            or set(before["ib"]) != set(now["ib"]) or set(before["pcie"]) != set(now["pcie"])):
        return now
    return before


def _span(seconds: float) -> str:
    if seconds < 120:
        return "%d s" % max(seconds, 0)
    if seconds < 2 * 3600:
        return "%d min" % round(seconds / 60)
    if seconds < 48 * 3600:
        return "%.1f h" % (seconds / 3600)
    return "%.1f days" % (seconds / 86400)


def _limit_text(counter: str) -> str:
    limit, basis = IB_COUNTER_LIMITS[counter]
    return "at most %d %s" % (limit, basis)


def _since(seconds: float) -> str:
    text = "in the %s since the last reading" % _span(seconds)
    if seconds < RATE_MIN_INTERVAL_S:
        text += " (per-hour rates over 1 h)"
    return text


def _port_check(port: str, now: dict[str, Any], before: dict[str, Any] | None,
                seconds: float, why_baseline: str) -> dict[str, Any]:
    name = "ib_%s_errors" % port.replace("/", "_port")
    present = [c for c in IB_COUNTER_LIMITS if _count(now.get(c)) is not None]
    expected = dict((c, _limit_text(c)) for c in present)
    if not present:
        return check_result(name, SKIP, None, expected, "%s: no error counter could be read" % port)
    device, _sep, number = port.partition("/")
    saturated = ["%s is saturated at %d, its %d-bit maximum: it no longer counts (reset the "
                 "port's counters, perfquery -C %s -P %s -R, to judge it again)"
                 % (c, now[c], IB_COUNTER_BITS[c], device, number) for c in present
                 if now[c] >= 2 ** IB_COUNTER_BITS[c] - 1]
    if before is None:
        detail = "%s: %s: baseline recorded" % (port, why_baseline)
        if saturated:
            return check_result(name, FAIL, dict((c, now[c]) for c in present), expected,
                                "%s; %s" % (detail, "; ".join(saturated)))
        return check_result(name, SKIP, None, expected, detail)
    increases = {}
    resets = []
    for c in present:
        old = _count(before.get(c))
        if old is None:
            continue  # a counter the last reading lacked: this one is its baseline
        if now[c] < old:
            resets.append(c)
            increases[c] = now[c]
        else:
            increases[c] = now[c] - old
    hours = max(seconds, RATE_MIN_INTERVAL_S) / 3600.0
    over = []
    for c in present:
        if c not in increases:
            continue
        limit, basis = IB_COUNTER_LIMITS[c]
        if basis == PER_HOUR and increases[c] / hours > limit:
            over.append("%s +%d (%.0f per hour, more than %d)"
                        % (c, increases[c], increases[c] / hours, limit))
        elif basis == BETWEEN_READINGS and increases[c] > limit:
            over.append("%s +%d (more than %d between two readings)" % (c, increases[c], limit))
    notes = saturated[:]
    if resets:
        notes.append("%s lower than at the last reading (counters reset): the value is "
                     "judged as the increase" % ", ".join(resets))
    if over:
        detail = "%s: %s %s" % (port, "; ".join(over), _since(seconds))
        if any(c.startswith(("link_downed", "link_error_recovery")) for c in over):
            detail += ": the link flapped; check the cable, transceiver and switch port"
        else:
            detail += ": check the cable, transceiver and switch port"
    else:
        detail = "%s: no error counter over its threshold %s" % (port, _since(seconds))
    if notes:
        detail += "; " + "; ".join(notes)
    return check_result(name, FAIL if over or saturated else PASS, increases, expected, detail)


_AER_KINDS = ("fatal", "nonfatal", "correctable")
_AER_WORDS = {"fatal": "uncorrectable fatal", "nonfatal": "uncorrectable non-fatal",
              "correctable": "correctable"}


def _aer_increase(new: dict[str, int], old: dict[str, int]) -> tuple[int, list[str], bool]:
    """(increase of the total, the error types that rose, whether the counters were reset)."""
    new_total, old_total = _count(new.get(TOTAL)) or 0, _count(old.get(TOTAL)) or 0
    reset = new_total < old_total
    base = {} if reset else old
    names = []
    for name, value in sorted(new.items()):
        rise = (_count(value) or 0) - (_count(base.get(name)) or 0)
        if name != TOTAL and rise > 0:
            names.append("%s +%d" % (name, rise))
    return new_total - (0 if reset else old_total), names, reset


def _pcie_check(address: str, now: dict[str, Any], before: dict[str, Any] | None,
                seconds: float, rebooted: bool) -> dict[str, Any]:
    label = str(now.get("device") or address)
    name = "%s_pcie_errors" % label
    where = "%s (%s)" % (label, address) if label != address else address
    expected = {"fatal": 0, "nonfatal": 0,
                "correctable": "at most %d per hour" % AER_CORRECTABLE_PER_HOUR}
    if before is None and not rebooted:
        return check_result(name, SKIP, None, expected,
                            "%s: first reading: baseline recorded" % where)
    base = {} if rebooted else (before or {})
    increases: dict[str, int] = {}
    found: dict[str, list[str]] = {}
    resets = []
    for kind in _AER_KINDS:
        new = now.get(kind)
        old = base.get(kind) if not rebooted else {}
        if not isinstance(new, dict) or not isinstance(old, dict):
            continue
        increases[kind], found[kind], reset = _aer_increase(new, old)
        if reset:
            resets.append(kind)
    hours = max(seconds, RATE_MIN_INTERVAL_S) / 3600.0
    uncorrectable = [k for k in ("fatal", "nonfatal") if increases.get(k)]
    noisy = increases.get("correctable", 0) / hours > AER_CORRECTABLE_PER_HOUR
    parts = []
    for kind in uncorrectable + (["correctable"] if noisy else []):
        named = " (%s)" % ", ".join(found[kind]) if found[kind] else ""
        parts.append("%d %s PCIe error(s)%s" % (increases[kind], _AER_WORDS[kind], named))
    span = ("since boot (the node rebooted since the last reading)" if rebooted
            else _since(seconds))
    if uncorrectable:
        status = FAIL
        detail = ("%s: %s %s: the device or its link lost data; drain the node and check the "
                  "device, its riser and slot" % (where, "; ".join(parts), span))
    elif noisy:
        status = WARN
        detail = ("%s: %s %s (%.0f per hour, more than %d): the link corrects errors; check "
                  "its seating and riser" % (where, "; ".join(parts), span,
                                             increases["correctable"] / hours,
                                             AER_CORRECTABLE_PER_HOUR))
    else:
        status = PASS
        detail = "%s: no uncorrectable PCIe error %s" % (where, span)
    if resets:
        detail += ("; %s counters lower than at the last reading (reset): the value is judged "
                   "as the increase" % ", ".join(resets))
    return check_result(name, status, increases, expected, detail)


def counter_checks(counters: Any) -> list[dict[str, Any]]:
    """One check per InfiniBand port and per PCI function of the reading ``now``, judged
    against ``before`` (None or not a reading: the first reading). ``counters``: {now,
    before}."""
    counters = counters if isinstance(counters, dict) else {}
    now = counters.get("now")
    if not is_reading(now):
        return [check_result("error_counters", SKIP, None, None,
                             "the error counters were not read")]
    before = counters.get("before")
    before = before if is_reading(before) else None
    rebooted = before is not None and _rebooted(before, now)
    seconds = float(now["time"] - before["time"]) if before is not None else 0.0
    out = []
    why = ("the node rebooted since the last reading" if rebooted else "first reading")
    for port in sorted(now["ib"]):
        old = None if before is None or rebooted else before["ib"].get(port)
        out.append(_port_check(port, now["ib"][port], old if isinstance(old, dict) else None,
                               seconds, why))
    for address in sorted(now["pcie"]):
        old = None if before is None else before["pcie"].get(address)
        out.append(_pcie_check(address, now["pcie"][address],
                               old if isinstance(old, dict) else None, seconds, rebooted))
    return out
