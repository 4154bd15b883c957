"""SIMULATED dcgmi (gpu-cluster-provisioner): ``--version``, ``diag -r 1|2|3`` and ``health -c``
in DCGM's table format, failing the checks an injected fault (/etc/gpu-sim/faults) would fail.

Installed as ``/usr/bin/dcgmi`` by a simulated DCGM package, bundled with its version (see
provisioner.sim.bundle).
"""

from __future__ import annotations

import sys

from provisioner.sim.faults import read_fault_file
from provisioner.sim.tools.node import FAULTS_FILE, read_text

TESTS = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks",
         "Persistence Mode", "Environment Variables", "Page Retirement/Row Remap",
         "Graphics Processes", "Inforom"]
# dcgmi's exit status when a diagnostic test failed.
EXIT_DIAG_FAILED = 226


def row(name: str, result: str) -> str:
    return f"| {name:<25} | {result:<46} |"


def diag(version: str) -> int:
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
