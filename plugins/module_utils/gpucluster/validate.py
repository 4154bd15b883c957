# -*- coding: utf-8 -*-
"""Hardware validation policy: node facts (parsed nvidia-smi, NVLink, IB, XID, DCGM) against the
node's hardware profile. Pure; shared by the gpu_node_facts module and the unit tests.

Every check names the GPU or port it is about and carries measured vs expected values.
"""

from __future__ import annotations

from .checks import FAIL, PASS, SKIP, WARN, check_result
from .counters import counter_checks
from .fabric import fabric_checks, imex_checks
from .gpudirect import gpudirect_checks
from .mig import same_layout
from .roce_qos import roce_qos_checks

SPEED_TOLERANCE = 0.01  # NVLink speeds print with 3 decimals; allow rounding


def evaluate(facts, expected):
    """facts: {gpu, nvlink, ib, xid, dcgm, counters}; expected: profile fields plus
    driver_version, fabric, dcgm_required. Only the subsets present in facts are judged (a
    subset that was read but failed is present, with an error). ``counters``: {now, before},
    error counter readings (counters.take_reading), judged by their increase. ``roce_qos``:
    the RoCE ports' PFC and ECN (roce_qos.read_roce_qos), reported, never failed."""
    checks = []
    if "gpu" in facts:
        checks.extend(_gpu_checks(facts.get("gpu"), expected))
    if "gpu" in facts and expected.get("multi_node_nvlink"):
        checks.extend(fabric_checks(facts.get("gpu")))
    if "nvlink" in facts:
        checks.extend(_nvlink_checks(facts.get("nvlink"), expected, facts.get("gpu")))
    if "imex" in facts:
        checks.extend(imex_checks(facts.get("imex"), expected))
    if "ib" in facts:
        checks.extend(_ib_checks(facts.get("ib"), expected))
    if "xid" in facts:
        checks.extend(_xid_checks(facts.get("xid")))
    if "dcgm" in facts:
        checks.extend(_dcgm_checks(facts.get("dcgm"), expected))
    if "counters" in facts:
        checks.extend(counter_checks(facts.get("counters")))
    if "gpudirect" in facts:
        checks.extend(gpudirect_checks(facts.get("gpudirect"), expected))
    if "mig" in facts:
        checks.extend(_mig_checks(facts.get("mig"), expected))
    if "roce_qos" in facts:
        checks.extend(roce_qos_checks(facts.get("roce_qos")))
    return checks


def ib_from_ibstat(parsed):
    """ibstat's CA/port listing in the shape read_ib_sysfs returns (state upper-cased)."""
    devices = []
    for ca in parsed.get("cas") or []:
        ports = []
        for port in ca.get("ports") or []:
            ports.append(dict(port, state=(port.get("state") or "").upper() or None))
        devices.append({"name": ca.get("name"), "ports": ports})
    return {"devices": devices}


def _gpu_checks(gpu, exp):
    if not gpu or gpu.get("error"):
        why = (gpu or {}).get("error") or "nvidia-smi returned nothing"
        return [check_result("gpu_visible", FAIL, None, exp.get("gpu_count"),
                             "cannot read the GPUs: %s" % why)]
    out = []
    gpus = gpu.get("gpus") or []
    count = len(gpus)
    want = exp.get("gpu_count")
    if want is not None and count != want:
        detail = "%d of %d GPUs visible" % (count, want)
        if count < want:
            detail += " (the driver enumerates %d; a GPU fell off the bus or is not seated)" % count
        out.append(check_result("gpu_count", FAIL, count, want, detail))
    else:
        out.append(check_result("gpu_count", PASS, count, want, "all GPUs visible"))
    model = exp.get("gpu_model")
    wrong = ["GPU%s %s" % (g.get("index"), g.get("name")) for g in gpus
             if model and g.get("name") != model]
    out.append(check_result("gpu_model", FAIL if wrong else PASS,
                            sorted({g.get("name") for g in gpus}), model,
                            "unexpected model: %s" % ", ".join(wrong) if wrong
                            else "model matches"))
    drv = exp.get("driver_version")
    if drv:
        got = gpu.get("driver_version")
        out.append(check_result("driver_version", PASS if got == drv else FAIL, got, drv,
                                "driver matches the stack" if got == drv
                                else "running driver is not the stack's"))
    for g in gpus:
        idx = g.get("index")
        ecc = g.get("ecc") or {}
        vol, agg = ecc.get("volatile_uncorrectable"), ecc.get("aggregate_uncorrectable")
        rows = g.get("remapped_rows") or {}
        bad = []
        if vol:
            bad.append("%s volatile uncorrectable ECC error(s)" % vol)
        if agg:
            bad.append("%s aggregate uncorrectable ECC error(s)" % agg)
        if rows.get("pending"):
            bad.append("a row remap is pending (reset the GPU)")
        if rows.get("failure"):
            bad.append("row remapping failed (RMA candidate)")
        if ecc.get("mode") is False:
            bad.append("ECC is disabled")
        out.append(check_result("gpu%s_memory" % idx, FAIL if bad else PASS,
                                {"volatile_uncorrectable": vol, "aggregate_uncorrectable": agg,
                                 "remap_pending": rows.get("pending")},
                                "ECC on, 0 uncorrectable, no pending remap",
                                "GPU%s: %s" % (idx, "; ".join(bad)) if bad else "memory healthy"))
        pcie = g.get("pcie") or {}
        w_cur, w_max = pcie.get("width_current"), pcie.get("width_max")
        g_cur, g_max = pcie.get("gen_current"), pcie.get("gen_max")
        want_w = exp.get("pcie_width") or w_max
        want_g = exp.get("pcie_gen") or g_max
        if w_cur is not None and want_w is not None and w_cur < want_w:
            out.append(check_result("gpu%s_pcie" % idx, FAIL, "Gen%s x%s" % (g_cur, w_cur),
                                    "Gen%s x%s" % (want_g, want_w),
                                    "GPU%s PCIe link trained at x%s of x%s: reseat or check "
                                    "the riser" % (idx, w_cur, want_w)))
        elif g_cur is not None and want_g is not None and g_cur < want_g:
            # GPUs drop the link generation when idle to save power: only a warning.
            out.append(check_result("gpu%s_pcie" % idx, WARN, "Gen%s x%s" % (g_cur, w_cur),
                                    "Gen%s x%s" % (want_g, want_w),
                                    "GPU%s PCIe at Gen%s (max Gen%s); normal at idle, a fault "
                                    "under load" % (idx, g_cur, want_g)))
        else:
            out.append(check_result("gpu%s_pcie" % idx, PASS, "Gen%s x%s" % (g_cur, w_cur),
                                    "Gen%s x%s" % (want_g, want_w), "PCIe link at full width"))
    if exp.get("persistence_mode", True):
        off = [g.get("index") for g in gpus if g.get("persistence_mode") is False]
        out.append(check_result("persistence_mode", WARN if off else PASS,
                                "off on GPU %s" % ", ".join(map(str, off)) if off else "on", "on",
                                "persistence mode off: first CUDA call per job pays GPU init"
                                if off else "persistence mode on"))
    return out


def _nvlink_checks(nvl, exp, gpu=None):
    want_links = exp.get("nvlink_links_per_gpu") or 0
    if not want_links:
        return [check_result("nvlink", SKIP, None, 0, "profile has no NVLink")]
    if not nvl or nvl.get("error"):
        return [check_result("nvlink", FAIL, None, want_links, "cannot read NVLink status: %s"
                             % ((nvl or {}).get("error") or "no output"))]
    out = []
    # A GPU nvidia-smi enumerates that `nvidia-smi nvlink -s` lists no link for has none this
    # OS can use (seen on a lent H200, an SXM part passed through alone: the command prints
    # nothing and exits 0). Without this, a profile that wants NVLink passed with no check.
    listed = set(str(g.get("index")) for g in nvl.get("gpus") or [])
    gpu = gpu or {}
    seen = [] if gpu.get("error") else [g.get("index") for g in gpu.get("gpus") or []]
    for idx in seen:
        if str(idx) not in listed:
            out.append(check_result("gpu%s_nvlink" % idx, FAIL, 0, want_links,
                                    "GPU%s: nvidia-smi nvlink -s lists no NVLink (the profile "
                                    "wants %d)" % (idx, want_links)))
    if not listed and not seen:
        out.append(check_result("nvlink", FAIL, 0, want_links,
                                "nvidia-smi nvlink -s lists no GPU's NVLinks (the profile wants %d "
                                "per GPU)" % want_links))
    speed = exp.get("nvlink_link_speed_gbps")
    for g in nvl.get("gpus") or []:
        idx = g.get("index")
        links = g.get("links") or []
        up = [link for link in links if link.get("state") == "up"]
        down = [link.get("link") for link in links if link.get("state") != "up"]
        slow = [link.get("link") for link in up if speed and link.get("speed_gbps") is not None
                and link["speed_gbps"] < speed * (1 - SPEED_TOLERANCE)]
        if g.get("status") == "mig_unsupported":
            # nvidia-smi does not query a MIG GPU's NVLinks ("Nvlink queries are not supported
            # for Devices in MIG mode", a real H200's output); MIG devices do not use NVLink
            # peer to peer. Not measured, so not judged: skipped, saying why.
            out.append(check_result("gpu%s_nvlink" % idx, SKIP, None, want_links,
                                    "GPU%s is in MIG mode: nvidia-smi does not report its "
                                    "NVLinks" % idx))
        elif g.get("status") == "all_inactive":
            detail = "GPU%s: all NVLinks inactive (fabric manager down, or a baseboard fault)" % idx
            out.append(check_result("gpu%s_nvlink" % idx, FAIL, 0, want_links, detail))
        elif len(up) < want_links or slow:
            parts = []
            if len(up) < want_links:
                parts.append("%d of %d links up" % (len(up), want_links))
                if down:
                    parts.append("down: link %s" % ", ".join(map(str, down)))
            if slow:
                parts.append("below %s GB/s: link %s" % (speed, ", ".join(map(str, slow))))
            out.append(check_result("gpu%s_nvlink" % idx, FAIL, len(up), want_links,
                                    "GPU%s: %s" % (idx, "; ".join(parts))))
        else:
            out.append(check_result("gpu%s_nvlink" % idx, PASS, len(up), want_links,
                                    "all links up at %s GB/s" % speed))
    return out


def _ib_checks(ib, exp):
    want = exp.get("ib_hcas") or 0
    fabric = exp.get("fabric") or "infiniband"
    if not want or fabric == "ethernet":
        return [check_result("ib_ports", SKIP, None, want, "profile has no RDMA NICs")]
    if not ib or ib.get("error"):
        return [check_result("ib_ports", FAIL, 0, want, "cannot read RDMA devices: %s"
                             % ((ib or {}).get("error") or "no /sys/class/infiniband"))]
    layer = "Ethernet" if fabric == "roce" else "InfiniBand"
    rate = exp.get("ib_rate_gbps")
    out = []
    ports = [(d.get("name"), p) for d in ib.get("devices") or [] for p in d.get("ports") or []
             if p.get("link_layer") == layer]
    active = 0
    for dev, port in ports:
        name = "%s/%s" % (dev, port.get("number"))
        problems = []
        if port.get("state") != "ACTIVE":
            problems.append("state %s (%s)" % (port.get("state"), port.get("physical_state")))
        if rate and port.get("rate_gbps") is not None and port["rate_gbps"] < rate:
            problems.append("rate %s Gb/s (%s), expected %s" % (port["rate_gbps"],
                                                                port.get("rate_detail"), rate))
        measured = "%s %s Gb/s" % (port.get("state"), port.get("rate_gbps"))
        if fabric == "roce":
            gids = port.get("roce_v2_ipv4_gids")
            problems += _gid_problems(gids, ib.get("nccl_ib_gid_index"))
            measured += ", RoCE v2 IPv4 GID %s" % (
                ", ".join(map(str, gids)) if gids else "none")
        if not problems:
            active += 1
        out.append(check_result("ib_%s" % name.replace("/", "_port"),
                                FAIL if problems else PASS, measured, "ACTIVE %s Gb/s" % rate,
                                "%s: %s" % (name, "; ".join(problems)) if problems
                                else "port healthy"))
    out.append(check_result("ib_ports", PASS if active >= want else FAIL, active, want,
                            "%d healthy %s port(s) of %d expected" % (active, layer, want)))
    return out


def _gid_problems(gids, planned):
    """A RoCE port's GID table against NCCL: it needs a RoCE v2 IPv4-mapped entry, and the
    NCCL_IB_GID_INDEX of the node's /etc/nccl.conf must name it (unset or -1: NCCL picks the
    entry itself)."""
    if gids is None:
        return ["its GID table could not be read"]
    if not gids:
        return ["no RoCE v2 IPv4 GID (its network interface has no IPv4 address): NCCL cannot "
                "use it over RoCE v2"]
    try:
        index = int(planned)
    except (TypeError, ValueError):
        return [] if planned is None else ["NCCL_IB_GID_INDEX %r is not a number" % planned]
    if index >= 0 and index not in gids:
        return ["NCCL_IB_GID_INDEX %d is not its RoCE v2 IPv4 GID (index %s)"
                % (index, ", ".join(map(str, gids)))]
    return []


def _xid_checks(xid):
    if xid is None:
        return [check_result("xid", SKIP, None, "no fatal Xid", "kernel log not read")]
    fatal = [e for e in xid.get("events") or [] if e.get("fatal")]
    if fatal:
        desc = ", ".join("Xid %s on %s" % (e.get("xid"), e.get("pci")) for e in fatal[:5])
        return [check_result("xid", FAIL, len(fatal), 0,
                             "fatal Xid errors since boot: %s; drain and reset/RMA" % desc)]
    others = len(xid.get("events") or [])
    return [check_result("xid", WARN if others else PASS, others, 0,
                         "%d non-fatal Xid event(s) since boot" % others if others
                         else "no Xid errors since boot")]


def _dcgm_checks(dcgm, exp):
    if dcgm and dcgm.get("skipped"):
        return [check_result("dcgm_diag", SKIP, None, "pass", dcgm["skipped"])]
    if dcgm is None:
        status = FAIL if exp.get("dcgm_required") else SKIP
        return [check_result("dcgm_diag", status, None, "pass", "dcgmi not installed")]
    if dcgm.get("error"):
        return [check_result("dcgm_diag", FAIL, None, "pass",
                             "dcgmi diag failed: %s" % dcgm["error"])]
    failed = [t for t, r in (dcgm.get("results") or {}).items() if r == "Fail"]
    return [check_result("dcgm_diag", FAIL if failed else PASS, "fail: %s" % ", ".join(failed)
                         if failed else "pass", "pass",
                         "DCGM level-%s diagnostic failed: %s"
                         % (dcgm.get("level"), ", ".join(failed))
                         if failed else "DCGM level-%s diagnostic passed" % dcgm.get("level"))]


def _mig_checks(mig, expected):
    """One check per GPU, ``gpu<i>_mig``: its MIG mode and instances against the plan.
    ``mig``: {modes: {index: bool}, instances: mig.parse_lgi, error}."""
    planned = expected.get("mig_layout")
    if planned is None:
        return []
    if not mig or mig.get("error"):
        why = (mig or {}).get("error") or "not read"
        return [check_result("mig_layout", FAIL, None, "as planned",
                             "cannot read the MIG layout: %s" % why)]
    out = []
    for index, want in enumerate(planned):
        name = "gpu%d_mig" % index
        on = mig["modes"].get(index)
        have = sorted(i["name"] for i in mig["instances"].get(index, []))
        if on is None:
            out.append(check_result(name, SKIP, None, want,
                                    "GPU %d not listed (gpu_count judges it)" % index))
        elif want is None:
            out.append(check_result(
                name, FAIL if on else PASS, "enabled" if on else "disabled", "disabled",
                "MIG is on, the plan has it off" if on else "MIG off as planned"))
        elif not on:
            out.append(check_result(name, FAIL, "disabled", sorted(want),
                                    "MIG is off, the plan has %s" % ", ".join(want)))
        else:
            ok = same_layout(have, want)
            out.append(check_result(
                name, PASS if ok else FAIL, have, sorted(want),
                "MIG instances as planned: %s" % ", ".join(have) if ok else
                "MIG instances %s, the plan has %s" % (", ".join(have) or "none", ", ".join(want))))
    return out
