"""The burn-in tier of `provisioner certify` (``--level burn-in``): judged here, in one place.

After the pairs, every GPU node runs roles/certify/files/gpuc_burnin.py (playbooks/
certify_burnin.yml; read-only: Ansible's script module copies, runs and removes it) and
publishes what it measured, raw. Each check below becomes a report check (host, name, status,
measured, expected, detail); a failed one is a certify suspect, its component the GPU it names
(``gpu:<index>``, nvidia-smi's index) or ``node`` when it names none:

- ``burnin_gpuN_h2d``, ``_d2h``, ``_d2d``: copy bandwidth per GPU (nvbandwidth's
  host_to_device_memcpy_ce, device_to_host_memcpy_ce, device_local_copy, or the PyTorch copy
  test) at or above the profile's ``copy_h2d_gbps_min``, ``copy_d2h_gbps_min``,
  ``copy_d2d_gbps_min``; a profile without one skips the check, saying so.
- ``burnin_dcgm_diag``: ``dcgmi diag -r 3`` passes (skipped without dcgmi, or with MIG mode on);
  a failure names the GPUs the table names.
- ``burnin_gpuN_clocks``: no hardware slowdown reason (HW_SLOWDOWN_REASONS) active in any
  nvidia-smi sample taken while the GPUs were loaded.
- ``burnin_gpuN_tflops``: the PyTorch matrix-product loop's TFLOPS at or above the profile's
  ``burn_tflops_min``; without PyTorch with CUDA the load is DCGM's diagnostic and throughput is
  not measured (``burnin_tflops``, skipped, saying so).
- ``burnin_xid``: no Xid in the kernel log after the burn-in that was not there before.
- ``burnin_nccl_soak``: every all_reduce_perf cycle's busbw within SOAK_BAND of the median
  cycle (at least SOAK_MIN_CYCLES cycles); skipped without all_reduce_perf.

The profile floors are documented in provisioner/data/profiles.yml with their sources.
"""

from __future__ import annotations

import importlib
import json
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from provisioner.inspect import DCGMI_DIAG, DMESG_XID, NCCL_TESTS, parse_text
from provisioner.paths import enable_module_utils
from provisioner.plan import ClusterPlan
from provisioner.profiles import Profile
from provisioner.report import write_private
from provisioner.results import PlaybookResult, ProgressCallback
from provisioner.runner import run_playbook

PLAYBOOK = "certify_burnin.yml"
# The soak: every cycle's busbw within this share of the median cycle. The project's choice:
# NVIDIA publishes no bound on cycle-to-cycle variation; at 1 GiB a healthy node's cycles agree
# within a few percent, while a link that retrains or a GPU held down drops busbw far further.
SOAK_BAND = 0.10
# Fewer cycles than this cannot show a band: the soak fails (it was asked for and did not run).
SOAK_MIN_CYCLES = 3
# How often the GPUs are sampled under load (seconds): the project's choice, several samples in
# the shortest burn-in (10 s) without loading the node with nvidia-smi calls.
SAMPLE_INTERVAL_S = 5
BURN_SECONDS = 60
# dcgmi diag -r 3 "normally last[s] approximately 15 minutes" (DCGM, dcgmi diag reference):
# four times that before it is stopped.
DCGM_TIMEOUT_S = 3600


def _module_utils(name: str) -> Any:
    enable_module_utils()
    return importlib.import_module(f"gpucluster.{name}")


def hw_slowdown_reasons() -> tuple[str, ...]:
    """The clock event reasons that mean the hardware holds the clocks down: the node health
    policy's (module_utils/gpucluster/node_health_policy.py HW_THROTTLE_REASONS), defined once
    there."""
    return tuple(_module_utils("node_health_policy").HW_THROTTLE_REASONS)


def playbook_timeout(seconds: int) -> int:
    """The burn-in playbook's limit: the DCGM diagnostic's, the copy test's (30 min), the load's
    and the soak's (each ``seconds`` and 10 min of slack), and 10 min for the rest."""
    return DCGM_TIMEOUT_S + 1800 + 2 * (seconds + 600) + 600


@dataclass(frozen=True)
class BurnCheck:
    host: str
    name: str
    status: str  # pass | fail | skip
    measured: Any
    expected: Any
    detail: str
    # The GPUs (nvidia-smi indexes) a failure names; empty: the node.
    gpus: tuple[int, ...] = ()


@dataclass
class BurnIn:
    checks: list[BurnCheck] = field(default_factory=list)
    # Per node: which tool measured the copies, what the load was, the soak's cycles.
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    result: PlaybookResult | None = None

    @property
    def failed(self) -> list[BurnCheck]:
        return [c for c in self.checks if c.status == "fail"]


def _check(host: str, name: str, status: str, measured: Any, expected: Any, detail: str,
           gpus: Sequence[int] = ()) -> BurnCheck:
    return BurnCheck(host, name, status, measured, expected, detail, tuple(gpus))


def pci_key(address: str) -> tuple[int, str, str] | None:
    """(domain, bus, device) of a PCI address as nvidia-smi (00000000:19:00.0), CUDA
    (00000000:19:00) or the kernel log (0000:19:00) write it."""
    match = re.fullmatch(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.\d)?",
                         address.strip())
    if not match:
        return None
    return int(match.group(1), 16), match.group(2).lower(), match.group(3).lower()


def gpu_indexes(result: Mapping[str, Any]) -> dict[tuple[int, str, str], int]:
    """PCI address -> nvidia-smi index of the node's GPUs (as gpuc_burnin listed them)."""
    out = {}
    for gpu in (result.get("gpus") or {}).get("gpus") or []:
        key = pci_key(str(gpu.get("bus_id", "")))
        if key is not None:
            out[key] = int(gpu["index"])
    return out


# -- copy bandwidth -----------------------------------------------------------------------------

COPIES = (("h2d", "host_to_device_memcpy_ce", "copy_h2d_gbps_min"),
          ("d2h", "device_to_host_memcpy_ce", "copy_d2h_gbps_min"),
          ("d2d", "device_local_copy", "copy_d2d_gbps_min"))


def copy_figures(copy: Mapping[str, Any],
                 indexes: Mapping[tuple[int, str, str], int]) -> dict[int, dict[str, Any]]:
    """nvidia-smi index -> {"h2d": GB/s | None, ...} from what the node's copy test printed;
    ValueError when the test ran and its output says nothing usable."""
    if copy.get("tool") == "pytorch":
        return {int(i): {k: r.get(f"{k}_gbps") for k, _, _ in COPIES} | {"error": r.get("error")}
                for i, r in (copy.get("gpus") or {}).items()}
    if copy.get("rc") != 0:
        raise ValueError(f"nvbandwidth exit {copy.get('rc')}: "
                         f"{str(copy.get('stderr') or copy.get('stdout') or '').strip()[-300:]}")
    parsed = _module_utils("nvbandwidth").parse_nvbandwidth(str(copy.get("stdout", "")))
    ordinal = {d["index"]: indexes.get(pci_key(d["bus_id"]) or (-1, "", ""), d["index"])
               for d in parsed["devices"]}
    out: dict[int, dict[str, Any]] = {}
    for key, test, _ in COPIES:
        case = parsed["testcases"].get(test) or {}
        values = (case.get("matrix") or [[]])[0]
        for device, value in enumerate(values):
            entry = out.setdefault(ordinal.get(device, device), {"error": None})
            entry[key] = value
            if case.get("status") not in (None, "Passed"):
                entry[key] = None
                entry["error"] = f"{test}: {case.get('status')} {case.get('error') or ''}".strip()
    return out


def judge_copy(host: str, copy: Mapping[str, Any], profile: Profile | None,
               indexes: Mapping[tuple[int, str, str], int]) -> list[BurnCheck]:
    if not copy.get("tool"):
        return [_check(host, "burnin_copy", "skip", None, None,
                       str(copy.get("skipped") or "no copy test ran"))]
    try:
        figures = copy_figures(copy, indexes)
    except ValueError as exc:
        return [_check(host, "burnin_copy", "fail", None, None, str(exc))]
    out = []
    for gpu, entry in sorted(figures.items()):
        for key, test, floor_key in COPIES:
            name = f"burnin_gpu{gpu}_{key}"
            value = entry.get(key)
            floor = getattr(profile, floor_key) if profile is not None else None
            what = f"{copy['tool']} {test if copy['tool'] == 'nvbandwidth' else key}"
            if value is None:
                out.append(_check(host, name, "fail", None, floor,
                                  f"GPU {gpu}: {what} measured nothing "
                                  f"({entry.get('error') or 'no figure'})", [gpu]))
            elif floor is None:
                out.append(_check(host, name, "skip", value, None,
                                  f"GPU {gpu}: {what} {value} GB/s; profile has no floor "
                                  f"({floor_key})"))
            else:
                ok = value >= floor
                out.append(_check(host, name, "pass" if ok else "fail", value, floor,
                                  f"GPU {gpu}: {what} {value} GB/s "
                                  f"{'>=' if ok else '<'} {floor} GB/s ({floor_key} of "
                                  f"{profile.name if profile else '-'})", [] if ok else [gpu]))
    return out


# -- DCGM ---------------------------------------------------------------------------------------

_GPU_NAMED = re.compile(r"\bGPU\s*:?\s*(\d+)\b")


def dcgm_failed_gpus(parsed: Mapping[str, Any]) -> list[int]:
    """The GPUs a failed diag names: a failed test's per-GPU results (``Fail - GPU: 3``), a
    continuation row named after a GPU (``GPU: 3 | Fail - ...``) and its warnings
    (``GPU 3 has uncorrectable memory errors``)."""
    gpus: set[int] = set()
    for name, test in (parsed.get("tests") or {}).items():
        if test.get("result") != "Fail":
            continue
        gpus.update(int(g) for g, r in (test.get("gpus") or {}).items()
                    if r == "Fail" and str(g).isdigit())
        for text in [name, *(test.get("warnings") or [])]:
            gpus.update(int(n) for n in _GPU_NAMED.findall(str(text)))
    return sorted(gpus)


def judge_dcgm(host: str, dcgm: Mapping[str, Any]) -> list[BurnCheck]:
    name, level = "burnin_dcgm_diag", dcgm.get("level", 3)
    if dcgm.get("skipped"):
        return [_check(host, name, "skip", None, "Pass", str(dcgm["skipped"]))]
    try:
        parsed = parse_text(str(dcgm.get("stdout", "")), DCGMI_DIAG)
    except ValueError:
        return [_check(host, name, "fail", f"exit {dcgm.get('rc')}", "Pass",
                       f"dcgmi diag -r {level} exit {dcgm.get('rc')}, no result table: "
                       f"{str(dcgm.get('stderr') or dcgm.get('stdout') or '').strip()[-300:]}")]
    failed = list(parsed["failed_tests"])
    if parsed["passed"] is None:
        return [_check(host, name, "skip", "Skip", "Pass",
                       f"dcgmi diag -r {level}: every test was skipped")]
    if failed:
        gpus = dcgm_failed_gpus(parsed)
        where = f" (GPU {', '.join(map(str, gpus))})" if gpus else ""
        return [_check(host, name, "fail", "Fail", "Pass",
                       f"dcgmi diag -r {level} failed{where}: {', '.join(failed)}", gpus)]
    warned = list(parsed["warned_tests"])
    return [_check(host, name, "pass", "Pass", "Pass",
                   f"dcgmi diag -r {level} passed"
                   + (f" (warnings: {', '.join(warned)})" if warned else ""))]


# -- clocks under load --------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    t: float
    phase: str
    gpu: int
    sm_mhz: float | None
    active: tuple[str, ...]  # the hardware slowdown reasons active in this sample


def parse_samples(sampled: Mapping[str, Any], reasons: Sequence[str]) -> list[Sample]:
    """nvidia-smi --query-gpu CSV lines (gpuc_burnin's Sampler) -> one Sample per GPU and
    sample; a line that does not fit the fields is dropped."""
    fields = list(sampled.get("fields") or [])
    out = []
    for taken in sampled.get("samples") or []:
        if taken.get("rc") != 0:
            continue
        for line in taken.get("lines") or []:
            values = [v.strip() for v in str(line).split(",")]
            if len(values) != len(fields) or not values[0].isdigit():
                continue
            row = dict(zip(fields, values, strict=True))
            active = tuple(key.split(".", 1)[1] for key, value in row.items()
                           if "reasons." in key and key.split(".", 1)[1] in reasons
                           and value == "Active")
            sm = row.get("clocks.sm", "")
            out.append(Sample(float(taken.get("t", 0)), str(taken.get("phase", "")),
                              int(values[0]), float(sm) if _is_number(sm) else None, active))
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def judge_clocks(host: str, samples: Sequence[Sample], gpus: Sequence[int],
                 load: str) -> list[BurnCheck]:
    out = []
    for gpu in gpus:
        mine = [s for s in samples if s.gpu == gpu]
        name = f"burnin_gpu{gpu}_clocks"
        if not mine:
            out.append(_check(host, name, "skip", None, 0,
                              f"GPU {gpu}: no nvidia-smi sample under {load}"))
            continue
        hot = [s for s in mine if s.active]
        clocks = [s.sm_mhz for s in mine if s.sm_mhz is not None]
        span = f"SM clock {min(clocks):g}-{max(clocks):g} MHz" if clocks else "no SM clock"
        if hot:
            reasons = sorted({r for s in hot for r in s.active})
            out.append(_check(host, name, "fail", len(hot), 0,
                              f"GPU {gpu}: {', '.join(reasons)} active in {len(hot)} of "
                              f"{len(mine)} samples under {load} ({span}; nvidia-smi clock "
                              "event reasons)", [gpu]))
        else:
            out.append(_check(host, name, "pass", 0, 0,
                              f"GPU {gpu}: no hardware slowdown in {len(mine)} samples under "
                              f"{load} ({span})"))
    return out


# -- throughput ---------------------------------------------------------------------------------


def judge_throughput(host: str, load: Mapping[str, Any],
                     profile: Profile | None) -> list[BurnCheck]:
    if load.get("load") != "pytorch":
        what = ("DCGM's diagnostic" if load.get("load") == "dcgm" else "no load ran")
        return [_check(host, "burnin_tflops", "skip", None, None,
                       f"throughput not measured: {what} ({load.get('why') or 'no PyTorch'})")]
    floor = profile.burn_tflops_min if profile is not None else None
    out = []
    for index, got in sorted((load.get("gpus") or {}).items(), key=lambda kv: int(kv[0])):
        gpu, name = int(index), f"burnin_gpu{index}_tflops"
        tflops = got.get("tflops")
        if got.get("error") or tflops is None or got.get("finite") is False:
            why = got.get("error") or ("non-finite results" if got.get("finite") is False
                                       else "no figure")
            out.append(_check(host, name, "fail", tflops, floor,
                              f"GPU {gpu}: the matrix-product loop failed: {why}", [gpu]))
        elif floor is None:
            out.append(_check(host, name, "skip", tflops, None,
                              f"GPU {gpu}: {tflops} TFLOPS ({got.get('dtype')}); profile has no "
                              "floor (burn_tflops_min)"))
        else:
            ok = tflops >= floor
            out.append(_check(host, name, "pass" if ok else "fail", tflops, floor,
                              f"GPU {gpu}: {tflops} TFLOPS {'>=' if ok else '<'} {floor} "
                              f"(burn_tflops_min; {got.get('dtype')} {got.get('n')}x"
                              f"{got.get('n')} products over {got.get('seconds')} s)",
                              [] if ok else [gpu]))
    return out


# -- Xid ----------------------------------------------------------------------------------------


def judge_xid(host: str, before: Mapping[str, Any], after: Mapping[str, Any],
              indexes: Mapping[tuple[int, str, str], int]) -> list[BurnCheck]:
    name = "burnin_xid"
    error = before.get("error") or after.get("error")
    if error:
        return [_check(host, name, "skip", None, 0, f"kernel log not read: {error}")]
    new = Counter(after.get("lines") or []) - Counter(before.get("lines") or [])
    lines = [line for line in after.get("lines") or [] if new[line] > 0]
    if not lines:
        return [_check(host, name, "pass", 0, 0,
                       f"no new Xid in the kernel log ({after.get('source')}; "
                       f"{len(before.get('lines') or [])} from before the burn-in)")]
    events = parse_text("\n".join(lines), DMESG_XID)["events"]
    gpus = sorted({indexes[key] for e in events
                   if (key := pci_key(str(e["pci"]))) is not None and key in indexes})
    codes = ", ".join(f"Xid {e['xid']} on {e['pci']}" for e in events)
    return [_check(host, name, "fail", len(events), 0,
                   f"new in the kernel log during the burn-in: {codes}", gpus)]


# -- NCCL soak ----------------------------------------------------------------------------------


def soak_cycles(soak: Mapping[str, Any]) -> tuple[list[float], str]:
    """Each cycle's busbw (GB/s: the mean of its out-of-place and in-place busbw) over the
    soak's runs, and why the soak stopped early ('' when it did not)."""
    cycles: list[float] = []
    for run in soak.get("runs") or []:
        try:
            parsed = parse_text(str(run.get("stdout", "")), NCCL_TESTS)
        except ValueError:
            parsed = {"rows": []}
        # A count of wrong elements (#wrong, or -J's nwrong); older tables print the maximum
        # error instead, a rounding residue that is no failure.
        counts = parsed.get("error_column") in ("#wrong", "wrong", "nwrong")
        for row in parsed["rows"]:
            halves = [h for h in (row["out_of_place"], row["in_place"]) if h]
            if counts and any(h.get("wrong") for h in halves):
                return cycles, f"all_reduce_perf counted wrong results at cycle {len(cycles) + 1}"
            values = [h["busbw_gbps"] for h in halves if h.get("busbw_gbps") is not None]
            if values:
                cycles.append(sum(values) / len(values))
        if run.get("rc") != 0:
            return cycles, (f"all_reduce_perf exit {run.get('rc')}: "
                            f"{str(run.get('stderr') or '').strip()[-300:]}")
    return cycles, ""


def judge_soak(host: str, soak: Mapping[str, Any], band: float = SOAK_BAND) -> list[BurnCheck]:
    name = "burnin_nccl_soak"
    if soak.get("skipped"):
        return [_check(host, name, "skip", None, None, str(soak["skipped"]))]
    cycles, stopped = soak_cycles(soak)
    if stopped or len(cycles) < SOAK_MIN_CYCLES:
        why = stopped or f"{len(cycles)} cycles measured, {SOAK_MIN_CYCLES} needed"
        return [_check(host, name, "fail", len(cycles), SOAK_MIN_CYCLES,
                       f"NCCL all-reduce soak on {soak.get('gpus')} GPUs: {why}")]
    median = statistics.median(cycles)
    worst = max(cycles, key=lambda c: abs(c - median))
    low, high = round(median * (1 - band), 2), round(median * (1 + band), 2)
    ok = low <= worst <= high
    return [_check(host, name, "pass" if ok else "fail", round(worst, 2), [low, high],
                   f"NCCL all-reduce soak, {len(cycles)} cycles of 1 GiB on {soak.get('gpus')} "
                   f"GPUs: busbw {min(cycles):.1f}-{max(cycles):.1f} GB/s, median {median:.1f}; "
                   f"{'every cycle' if ok else 'a cycle is not'} within {band * 100:g}% of the "
                   "median")]


# -- a node, the cluster ------------------------------------------------------------------------


def judge_node(host: str, published: Mapping[str, Any], profile: Profile | None,
               reasons: Sequence[str]) -> tuple[list[BurnCheck], dict[str, Any]]:
    """Every check of one node from what it published (certify_report.burnin), and the facts
    the report keeps of it (which tool measured the copies, what the load was, the cycles)."""
    result = published.get("result")
    if published.get("rc") != 0 or not isinstance(result, Mapping):
        why = published.get("error") or f"exit {published.get('rc')}"
        return [_check(host, "burnin", "fail", None, None,
                       f"the burn-in did not run to its end on this node: {why}")], {}
    listed = result.get("gpus") or {}
    if listed.get("error") or not listed.get("gpus"):
        return [_check(host, "burnin", "fail", 0, profile.gpu_count if profile else None,
                       f"no GPU listed: {listed.get('error') or 'nvidia-smi listed none'}")], {}
    indexes = gpu_indexes(result)
    gpus = sorted(indexes.values())
    load = result.get("load") or {}
    dcgm = result.get("dcgm") or {}
    sampled = [s for s in (dcgm.get("sampled"), load.get("sampled")) if s]
    samples = [s for block in sampled for s in parse_samples(block, reasons)]
    what = {"pytorch": "the PyTorch matrix-product loop and DCGM's diagnostic",
            "dcgm": "DCGM's diagnostic"}.get(str(load.get("load")), "no load (idle)")
    checks = [*judge_copy(host, result.get("copy") or {}, profile, indexes),
              *judge_dcgm(host, dcgm),
              *judge_clocks(host, samples, gpus, what),
              *judge_throughput(host, load, profile),
              *judge_xid(host, result.get("xid_before") or {}, result.get("xid_after") or {},
                         indexes),
              *judge_soak(host, result.get("soak") or {})]
    facts = {"copy_tool": (result.get("copy") or {}).get("tool"), "load": load.get("load"),
             "torch": result.get("torch"), "samples": len(samples),
             "soak_cycles_gbps": [round(c, 2) for c in soak_cycles(result.get("soak") or {})[0]]}
    return checks, facts


def run(plan: ClusterPlan, run_dir: Path, seconds: int = BURN_SECONDS,
        on_progress: ProgressCallback | None = None) -> BurnIn:
    """The burn-in on every GPU node of ``plan``, judged (see the module's description)."""
    gpu_hosts = sorted(h for h, entry in plan.hosts.items() if entry.kind == "gpu")
    extravars = {"certify_burnin_seconds": seconds, "certify_burnin_hosts": ":".join(gpu_hosts),
                 "certify_burnin_sample_interval_s": SAMPLE_INTERVAL_S,
                 "certify_burnin_dcgm_timeout_s": DCGM_TIMEOUT_S}
    result = run_playbook(PLAYBOOK, [plan.inventory.source], run_dir, "03-certify-burnin",
                          extravars=extravars, timeout=playbook_timeout(seconds),
                          on_progress=on_progress)
    burn = BurnIn(result=result)
    reasons = hw_slowdown_reasons()
    for host in gpu_hosts:
        published = cast("Mapping[str, Any]",
                         ((result.reports.get(host) or {}).get("certify") or {}).get("burnin")
                         or {"rc": None, "error": "the node published no burn-in result"})
        checks, facts = judge_node(host, published, plan.hosts[host].profile, reasons)
        burn.checks += checks
        burn.nodes[host] = facts
        # The report keeps the judged facts; every tool's raw output (a node's can run to
        # hundreds of kilobytes) goes to burnin/<host>.json under the run.
        if host in result.reports:
            keep_raw(run_dir, host, published)
            result.reports[host]["certify"] = {"burnin": {
                "rc": published.get("rc"), "error": published.get("error"), **facts}}
    return burn


def keep_raw(run_dir: Path, host: str, published: Mapping[str, Any]) -> None:
    """What ``host`` published, as it published it: ``<run>/burnin/<host>.json`` (0600)."""
    folder = run_dir / "burnin"
    folder.mkdir(mode=0o700, exist_ok=True)
    write_private(folder / f"{host}.json", json.dumps(published, indent=1, default=str))


def section(burn: BurnIn, seconds: int) -> dict[str, Any]:
    """The report's certify.burnin: the thresholds, and per node what ran and what failed."""
    return {
        "seconds": seconds, "sample_interval_s": SAMPLE_INTERVAL_S,
        "soak_band": SOAK_BAND, "soak_min_cycles": SOAK_MIN_CYCLES,
        "hw_slowdown_reasons": list(hw_slowdown_reasons()),
        "nodes": burn.nodes,
        "failed": [f"{c.host}: {c.name}" + (f" (GPU {', '.join(map(str, c.gpus))})"
                                             if c.gpus else "") for c in burn.failed],
    }
