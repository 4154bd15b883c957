# -*- coding: utf-8 -*-
"""Node health policy of ``gpuc-health``: the checks of ``validate`` (same functions, same
thresholds) plus the ones a recurring health check needs (CUDA as planned, retired pages, clock
throttle reasons, fabric manager, DCGM health watches, Xid events since the last run; the error
counters are judged against the baseline it keeps, counters.next_baseline), the
overall status, and the text, JSON and Prometheus textfile renderings.

Pure: the program on the node (roles/node_health/files/gpuc-health) reads the tools and files
and hands the facts here. Stdlib only, Python 3.9 syntax: it runs on the node's python3.

Exit statuses follow Slurm's HealthCheckProgram and node-problem-detector's custom plugins:
0 healthy, 1 degraded (a warning; NPD "NonOK" for a permanent condition), 2 unhealthy,
3 could not check (NPD "Unknown").
"""

from __future__ import annotations

import re
import time

from .checks import FAIL, PASS, SKIP, WARN, check_result
from .validate import evaluate

HEALTHY, DEGRADED, UNHEALTHY, UNKNOWN = 0, 1, 2, 3
STATUS_NAMES = {HEALTHY: "healthy", DEGRADED: "degraded", UNHEALTHY: "unhealthy",
                UNKNOWN: "unknown"}

# Clock event reasons that mean the hardware (not the workload or the operator) is holding the
# clocks down. sw_power_cap and gpu_idle are normal; applications_clocks_setting is a choice.
# Source: nvidia-smi -q documentation of "Clocks Event Reasons" (HW Slowdown, HW Thermal
# Slowdown, HW Power Brake Slowdown, SW Thermal Slowdown).
HW_THROTTLE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                       "sw_thermal_slowdown")

TEXTFILE_NAME = "gpucluster_health.prom"
LATENCY_TEXTFILE_NAME = "gpucluster_latency.prom"


def _major_minor(version):
    match = re.match(r"\s*(\d+)\.(\d+)", str(version or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def stack_checks(measured, stack):
    """CUDA toolkit as planned, and a driver that supports it. ``measured``: {cuda_toolkit
    (version.json's version or None), driver_cuda (nvidia-smi's CUDA version)}; ``stack``: the
    planned versions (cuda_version...)."""
    want = stack.get("cuda_version")
    if not want:
        return []
    out = []
    got = measured.get("cuda_toolkit")
    same = _major_minor(got) is not None and _major_minor(got) == _major_minor(want)
    out.append(check_result("cuda_version", PASS if same else FAIL, got, want,
                            "CUDA toolkit %s as planned" % got if same else
                            "CUDA toolkit %s installed, the plan says %s" % (got or "not", want)))
    driver_cuda = measured.get("driver_cuda")
    if driver_cuda is not None:
        ok = (_major_minor(driver_cuda) or (0, 0)) >= (_major_minor(want) or (0, 0))
        out.append(check_result("cuda_driver_support", PASS if ok else FAIL, driver_cuda, want,
                                "driver supports CUDA %s" % driver_cuda if ok else
                                "the driver supports CUDA up to %s, the toolkit is %s"
                                % (driver_cuda, want)))
    return out


def gpu_extra_checks(gpu):
    """Retired pages (pre-Ampere memory repair) and hardware clock throttling, per GPU."""
    out = []
    if not gpu or gpu.get("error"):
        return out
    for g in gpu.get("gpus") or []:
        idx = g.get("index")
        pages = g.get("retired_pages") or {}
        if any(pages.get(k) is not None for k in ("single_bit", "double_bit", "pending")):
            pending = pages.get("pending") is True
            out.append(check_result("gpu%s_retired_pages" % idx, FAIL if pending else PASS,
                                    {"double_bit": pages.get("double_bit"), "pending": pending},
                                    "no retirement pending",
                                    "GPU%s: a page retirement is pending (reset the GPU)" % idx
                                    if pending else "no page retirement pending"))
        reasons = g.get("clock_reasons")
        if reasons is None:
            continue
        hot = [r for r in reasons if r in HW_THROTTLE_REASONS]
        out.append(check_result("gpu%s_clocks" % idx, WARN if hot else PASS, hot or "none", "none",
                                "GPU%s clocks held down: %s (cooling, power delivery)"
                                % (idx, ", ".join(hot)) if hot else "no hardware clock slowdown"))
    return out


def fabricmanager_check(required, active):
    """``active``: the service's state (``systemctl is-active``) or None when unknown."""
    if not required:
        return [check_result("fabricmanager", SKIP, active, None, "no NVSwitch: not required")]
    ok = active == "active"
    return [check_result("fabricmanager", PASS if ok else FAIL, active, "active",
                         "fabric manager running" if ok else
                         "fabric manager is %s: NVSwitch systems need it for NVLink"
                         % (active or "absent"))]


_DCGM_ROW = re.compile(r"^\|\s*(?P<key>[^|]*?)\s*\|\s*(?P<value>[^|]*?)\s*\|\s*$")


def parse_dcgmi_health(text):
    """``dcgmi health -c``'s table: {overall: "Healthy" | "Warning" | "Failure" | None,
    incidents: [lines naming a GPU or subsystem that is not healthy]}."""
    overall = None
    incidents = []
    for raw in (text or "").splitlines():
        match = _DCGM_ROW.match(raw.strip())
        if not match:
            continue
        key, value = match.group("key"), match.group("value")
        if key.lower() == "overall health":
            overall = value or None
        elif value and value.lower() not in ("healthy", "pass"):
            incidents.append(("%s %s" % (key, value)).strip())
    return {"overall": overall, "incidents": incidents}


def dcgm_health_check(dcgm):
    """``dcgm``: None (DCGM absent), {error}, or parse_dcgmi_health's result."""
    if dcgm is None:
        return [check_result("dcgm_health", SKIP, None, "Healthy", "DCGM not installed")]
    if dcgm.get("error"):
        return [check_result("dcgm_health", WARN, None, "Healthy",
                             "DCGM health watches not readable: %s" % dcgm["error"])]
    overall = dcgm.get("overall")
    status = {"healthy": PASS, "warning": WARN}.get((overall or "").lower(), FAIL)
    detail = "DCGM health watches: %s" % (overall or "no verdict")
    if dcgm.get("incidents"):
        detail += " (%s)" % "; ".join(dcgm["incidents"][:5])
    return [check_result("dcgm_health", status, overall, "Healthy", detail)]


def xid_since_last_run(events, state, boot_id):
    """Split the kernel log's Xid events (parse_xid's, each with ``fatal``) into what this run
    reports and the state the next run starts from.

    Non-fatal events are reported once, by the first run that sees them. Fatal ones stay
    reported until the node reboots (a new ``boot_id``) or an operator clears the state: the
    GPU needs a reset before it is trusted again. Returns (events to judge, new state)."""
    state = state if isinstance(state, dict) else {}
    same_boot = state.get("boot_id") == boot_id
    seen = int(state.get("xid_seen") or 0) if same_boot else 0
    if seen > len(events):  # the log was rotated or cleared: everything is new
        seen = 0
    sticky = list(state.get("xid_fatal") or []) if same_boot else []
    new = events[seen:]
    keys = {(e.get("xid"), e.get("pci"), e.get("timestamp")) for e in sticky}
    for event in new:
        key = (event.get("xid"), event.get("pci"), event.get("timestamp"))
        if event.get("fatal") and key not in keys:
            sticky.append(event)
            keys.add(key)
    judged = sticky + [e for e in new if not e.get("fatal")]
    return judged, {"boot_id": boot_id, "xid_seen": len(events), "xid_fatal": sticky}


def judge(facts, expected, stack):
    """Every check of one run. ``facts``: {gpu, nvlink, ib, xid ({events} already reduced to
    this run's), counters ({now, before}: the error counter readings), measured
    ({cuda_toolkit, driver_cuda}), fabricmanager, dcgm_health}."""
    subsets = {k: facts[k] for k in ("gpu", "nvlink", "ib", "xid", "counters", "mig")
               if k in facts}
    checks = evaluate(subsets, expected)
    # validate's Xid wording says "since boot"; a health run judges what it was given.
    for item in checks:
        if item["name"] == "xid":
            item["detail"] = item["detail"].replace("since boot", "since the last run")
    checks.extend(gpu_extra_checks(facts.get("gpu")))
    checks.extend(stack_checks(facts.get("measured") or {}, stack))
    if "fabricmanager" in facts:
        checks.extend(fabricmanager_check(expected.get("nvswitch"), facts["fabricmanager"]))
    if "dcgm_health" in facts:
        checks.extend(dcgm_health_check(facts["dcgm_health"]))
    return checks


# What `gpuc-health --quick` (Slurm's Prolog, before each job) reads: one nvidia-smi -q -x (the
# GPUs, their memory, PCIe, driver, retired pages, clocks), nvidia-smi nvlink -s where NVLink is
# planned, the RDMA ports' sysfs where HCAs are, the fabric manager's state on NVSwitch
# systems, and the GPU instances (nvidia-smi mig -lgi) where the plan has a MIG layout. Not read
# there: the kernel log (xid), the error counters, DCGM's health watches and the installed CUDA
# toolkit and NCCL (the full check and validate judge those).
QUICK_FACTS = ("gpu", "nvlink", "ib", "fabricmanager", "mig")


def judge_quick(facts, expected):
    """The checks of one quick run, with the same functions and thresholds as judge: those of
    the QUICK_FACTS present in ``facts``. Whether a job can start on the node now: a fatal Xid
    that left the GPU unusable shows here as its symptom (fallen off the bus: gpu_count; an
    uncorrectable memory error or a pending remap: gpuN_memory), the Xid itself in the full
    check."""
    checks = evaluate({k: facts[k] for k in ("gpu", "nvlink", "ib", "mig") if k in facts},
                      expected)
    checks.extend(gpu_extra_checks(facts.get("gpu")))
    if "fabricmanager" in facts:
        checks.extend(fabricmanager_check(expected.get("nvswitch"), facts["fabricmanager"]))
    return checks


def overall(checks, problems=()):
    """The exit status: UNKNOWN when the program could not check (``problems``), else the
    worst check (fail -> UNHEALTHY, warn -> DEGRADED)."""
    if problems:
        return UNKNOWN
    statuses = {c["status"] for c in checks}
    if FAIL in statuses:
        return UNHEALTHY
    if WARN in statuses:
        return DEGRADED
    return HEALTHY


def result(host, checks, problems, stack, measured, started, finished, mode="full"):
    """``mode``: "full" (judge) or "quick" (judge_quick)."""
    status = overall(checks, problems)
    return {
        "host": host,
        "mode": mode,
        "status": status,
        "status_name": STATUS_NAMES[status],
        "problems": list(problems),
        "checks": checks,
        "stack": dict(stack),
        "measured": dict(measured),
        "timestamp": finished,
        "duration_seconds": round(finished - started, 3),
    }


def render_text(res):
    lines = ["%s: %s" % (res["host"], res["status_name"].upper())]
    lines.extend("  could not check: %s" % p for p in res["problems"])
    order = {FAIL: 0, WARN: 1, PASS: 2, SKIP: 3}
    for c in sorted(res["checks"], key=lambda c: (order.get(c["status"], 4), c["name"])):
        if c["status"] == SKIP:
            continue
        lines.append("  %-4s %-24s %s" % (c["status"].upper(), c["name"], c["detail"]))
    return "\n".join(lines) + "\n"


def _label(value):
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_textfile(res):
    """The run as Prometheus text exposition format (node_exporter's textfile collector)."""
    out = [
        "# HELP gpucluster_health_ok Whether a gpuc-health check passed (1) or warned/failed (0).",
        "# TYPE gpucluster_health_ok gauge",
    ]
    for c in sorted(res["checks"], key=lambda c: c["name"]):
        if c["status"] == SKIP:
            continue
        out.append('gpucluster_health_ok{check="%s"} %d'
                   % (_label(c["name"]), 1 if c["status"] == PASS else 0))
    measured, stack = res.get("measured") or {}, res.get("stack") or {}
    out += [
        "# HELP gpucluster_health_status Node health: 0 healthy, 1 degraded, 2 unhealthy, "
        "3 could not check.",
        "# TYPE gpucluster_health_status gauge",
        "gpucluster_health_status %d" % res["status"],
        "# HELP gpucluster_health_last_run_timestamp_seconds When gpuc-health last finished.",
        "# TYPE gpucluster_health_last_run_timestamp_seconds gauge",
        "gpucluster_health_last_run_timestamp_seconds %.3f" % res["timestamp"],
        "# HELP gpucluster_health_duration_seconds How long the last gpuc-health run took.",
        "# TYPE gpucluster_health_duration_seconds gauge",
        "gpucluster_health_duration_seconds %.3f" % res["duration_seconds"],
        "# HELP gpucluster_stack_info The NVIDIA stack on the node (measured where gpuc-health "
        "can, else as planned).",
        "# TYPE gpucluster_stack_info gauge",
        'gpucluster_stack_info{stack="%s",driver="%s",cuda="%s",nccl="%s"} 1' % (
            _label(stack.get("name")),
            _label(measured.get("driver") or stack.get("driver_version")),
            _label(measured.get("cuda_toolkit") or stack.get("cuda_version")),
            _label(measured.get("nccl") or stack.get("nccl_version"))),
    ]
    return "\n".join(out) + "\n"


_RTT = re.compile(r"=\s*(?P<min>[\d.]+)/(?P<avg>[\d.]+)/(?P<max>[\d.]+)/[\d.]+\s*ms")


def parse_ping_rtt(text):
    """Average round-trip time in seconds from iputils ``ping -q``'s summary, or None."""
    match = _RTT.search(text or "")
    return float(match.group("avg")) / 1000.0 if match else None


def render_latency_textfile(rtts, now=None):
    """``rtts``: {peer: seconds or None (unreachable)}."""
    out = [
        "# HELP gpucluster_peer_latency_seconds Average ICMP round-trip time to a peer node.",
        "# TYPE gpucluster_peer_latency_seconds gauge",
    ]
    out += ['gpucluster_peer_latency_seconds{peer="%s"} %.6f' % (_label(p), r)
            for p, r in sorted(rtts.items()) if r is not None]
    out += [
        "# HELP gpucluster_peer_reachable Whether the peer answered ping (1) or not (0).",
        "# TYPE gpucluster_peer_reachable gauge",
    ]
    out += ['gpucluster_peer_reachable{peer="%s"} %d' % (_label(p), 0 if r is None else 1)
            for p, r in sorted(rtts.items())]
    out += [
        "# HELP gpucluster_latency_last_run_timestamp_seconds When the latency probe last ran.",
        "# TYPE gpucluster_latency_last_run_timestamp_seconds gauge",
        "gpucluster_latency_last_run_timestamp_seconds %.3f" % (now or time.time()),
    ]
    return "\n".join(out) + "\n"
