"""SIMULATED dcgmi (gpu-cluster-provisioner): ``--version``, ``diag -r 1|2|3`` and ``health -c``
in DCGM's table format, failing the checks an injected fault (/etc/gpu-sim/faults) would fail,
and refusing to run on MIG-enabled GPUs the way DCGM's diagnostic does.

Installed as ``/usr/bin/dcgmi`` by a simulated DCGM package, bundled with its version (see
provisioner.sim.bundle).
"""

from __future__ import annotations

import json
import sys

from provisioner.sim.faults import has_fault, read_fault_file
from provisioner.sim.tools.node import (
    FAULTS_FILE,
    PROFILE_FILE,
    read_mig_instances,
    read_mig_modes,
    read_text,
)

TESTS = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks",
         "Persistence Mode", "Environment Variables", "Page Retirement/Row Remap",
         "Graphics Processes", "Inforom"]
# dcgmi's exit status when a diagnostic test failed.
EXIT_DIAG_FAILED = 226


def row(name: str, result: str) -> str:
    return f"| {name:<25} | {result:<46} |"


def mig_refusal() -> str | None:
    """Why DCGM's diagnostic will not run on this node's MIG configuration, or None. The checks
    and messages of DCGM's NvidiaValidationSuite::BuildCommonGpusList, GPU by GPU (all of the
    node's: the diagnostic's default group): a GPU or compute instance smaller than the whole
    GPU ("GPU 0's MIG configuration is incompatible with the diagnostic because it prevents
    access to the entire GPU.", as dcgmi prints it on a real A100 in MIG mode), a MIG-enabled
    GPU among several, a MIG-enabled GPU without compute instances."""
    try:
        profile = json.loads(read_text(PROFILE_FILE) or "{}")
        count = int(profile.get("gpu_count", 0))
    except (ValueError, TypeError, AttributeError):
        return None
    raw_profiles = profile.get("mig_profiles")
    slices = [p.get("slices") for p in raw_profiles if isinstance(p, dict)] \
        if isinstance(raw_profiles, list) else []
    max_slices = max((s for s in slices if isinstance(s, int)), default=7)
    faults = read_fault_file(read_text(FAULTS_FILE) or "")
    present = [slot for slot in range(count)
               if not has_fault([f for f in faults if f.gpu == slot], "missing")]
    modes = read_mig_modes(str(profile.get("architecture", "hopper")).strip().lower())
    instances = read_mig_instances()
    for gpu_id, slot in enumerate(present):
        if not modes.get(slot, False):
            continue
        gpu_instances = instances.get(slot, [])
        compute_instances = [ci for gi in gpu_instances for ci in gi["compute_instances"]]
        if any(item["slices"] != max_slices for item in [*gpu_instances, *compute_instances]):
            return (f"GPU {gpu_id}'s MIG configuration is incompatible with the diagnostic "
                    "because it prevents access to the entire GPU.")
        if len(present) > 1:
            return ("Cannot run diagnostic: CUDA does not support enumerating GPUs with MIG mode "
                    f"enabled, yet GPU {gpu_id} is MIG enabled and the diagnostic is attempting "
                    f"to run on {len(present)} GPUs.")
        if not compute_instances:
            return ("Cannot run diagnostic: MIG is enabled, but no compute instances are "
                    "configured. CUDA needs to execute on a compute instance if MIG is enabled.")
    return None


def diag(version: str) -> int:
    refusal = mig_refusal()
    if refusal:
        # dcgmi prints the diagnostic's system error alone; its exit status here is assumed to
        # be the diagnostic's error (DCGM_ST_NVVS_ERROR, as for a failed test): not confirmed.
        sys.stdout.write(refusal + "\n")
        return EXIT_DIAG_FAILED
    bad: dict[str, list[int]] = {}
    for fault in read_fault_file(read_text(FAULTS_FILE) or ""):
        if fault.kind.key == "ecc-uncorrectable" and fault.gpu is not None:
            bad.setdefault("Page Retirement/Row Remap", []).append(fault.gpu)
    out = ["Successfully ran diagnostic for group.",
           "+---------------------------+------------------------------------------------+",
           "| Diagnostic                | Result                                         |",
           "+===========================+================================================+",
           "|-----  Metadata  ----------+------------------------------------------------|",
           row("DCGM Version", f"{version} (SIMULATED)"),
           "|-----  Deployment  --------+------------------------------------------------|"]
    for test in TESTS:
        if test in bad:
            out.append(row(test, "Fail"))
            out += [row(f"   GPU: {gpu}", "Fail - pending row remapping") for gpu in bad[test]]
        else:
            out.append(row(test, "Pass"))
    out.append("+---------------------------+------------------------------------------------+")
    sys.stdout.write("\n".join(out) + "\n")
    return EXIT_DIAG_FAILED if bad else 0


def health_row(name: str, result: str) -> str:
    return f"| {name:<25} | {result:<56} |"


def health() -> int:
    """``dcgmi health -c``: the health watches' verdict, failing for the GPU memory and NVLink
    faults a watch would see."""
    incidents: list[tuple[int, str]] = []
    for fault in read_fault_file(read_text(FAULTS_FILE) or ""):
        if fault.gpu is None:
            continue
        if fault.kind.key == "ecc-uncorrectable":
            incidents.append((fault.gpu, "Memory system: Failure"))
        elif fault.kind.key in ("nvlink-down", "nvlink-link-down"):
            incidents.append((fault.gpu, "NVLink system: Failure"))
    border = "+" + "-" * 27 + "+" + "-" * 58 + "+"
    out = [border, "| Health Monitor Report" + " " * 64 + "|",
           border.replace("-", "="),
           health_row("Overall Health", "Failure" if incidents else "Healthy")]
    for gpu, text in incidents:
        out += [health_row(f"GPU ID: {gpu}", "Failure"), health_row("", text)]
    out.append(border)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


def main(argv: list[str], version: str) -> int:
    if not argv or argv[0] in ("-v", "--version"):
        sys.stdout.write(f"dcgmi  version: {version} (SIMULATED)\n")
        return 0
    if argv[0] == "diag":
        return diag(version)
    if argv[0] == "health" and ("-c" in argv or "--check" in argv):
        return health()
    if argv[0] == "health" and ("-s" in argv or "--set" in argv):
        sys.stdout.write("Health monitor systems set successfully.\n")
        return 0
    sys.stderr.write(f"dcgmi (SIMULATED): unsupported command: {' '.join(argv)}\n")
    return 2
