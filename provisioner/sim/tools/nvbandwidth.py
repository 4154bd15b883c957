"""SIMULATED nvbandwidth (gpu-cluster-provisioner): NVIDIA's copy bandwidth benchmark, answering
from the node's simulated hardware in the real tool's output formats.

Installed as ``/usr/local/bin/nvbandwidth`` on simulated GPU nodes (where a site that builds
NVIDIA/nvbandwidth from source installs it), bundled by provisioner.sim.bundle. It runs the
three testcases the burn-in tier reads -- ``host_to_device_memcpy_ce``,
``device_to_host_memcpy_ce``, ``device_local_copy`` -- and waives every other one (saying so on
stderr). Its formats are nvbandwidth v0.8's (``output.cpp``: plain text; ``json_output.cpp``:
``-j``); the plain text says SIMULATED in its "Built from Git version" line, the JSON in its
``git_version`` value.

The figures derive from the simulated hardware as the simulated nvidia-smi reports it
(provisioner.sim.tools.nvidia_smi): host<->device from each GPU's *current* PCIe link (a
``gpuN-pcie-downgrade`` GPU trains one generation lower at half width, a quarter of the rate),
times COPY_EFFICIENCY; the local copy from the profile's ``memory_bandwidth_gbps`` (half of it:
a copy reads and writes every byte) times LOCAL_COPY_EFFICIENCY. A GPU that fell off the bus
(``gpuN-missing``) is not enumerated, as CUDA would not.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from provisioner.pcie import pcie_gbps
from provisioner.sim.tools.node import CUDA_VERSION_FILE, DRIVER_VERSION_FILE, read_text
from provisioner.sim.tools.nvidia_smi import Gpu, Node, load_faults, load_profile

VERSION = "v0.8"
GIT_VERSION = "SIMULATED (gpu-cluster-provisioner)"
# The share of the PCIe line rate a simulated copy reaches, and of half the memory bandwidth a
# simulated local copy reaches: the simulation's choice, set where large copies on healthy
# hardware land (well above the profiles' floors of 60% and 60%), not a measurement.
COPY_EFFICIENCY = {"host_to_device_memcpy_ce": 0.85, "device_to_host_memcpy_ce": 0.87}
LOCAL_COPY_EFFICIENCY = 0.8
# The local copy of a profile without memory_bandwidth_gbps (GB/s, simulated).
DEFAULT_MEMORY_GBPS = 2000.0
DESCRIPTIONS = {
    "host_to_device_memcpy_ce": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
    "device_to_host_memcpy_ce": "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)",
    "device_local_copy": "memcpy local GPU(column) bandwidth (GB/s)",
}
LIST_TEXT = {
    "host_to_device_memcpy_ce": "\tHost to device CE memcpy using cuMemcpyAsync",
    "device_to_host_memcpy_ce": "\tDevice to host CE memcpy using cuMemcpyAsync",
    "device_local_copy": "\tMeasures bandwidth of cuMemcpyAsync between device buffers local to "
                         "the GPU.\n",
}
NOTE = ("NOTE: The reported results may not reflect the full capabilities of the platform.\n"
        "Performance can vary with software drivers, hardware clocks, and system topology.\n\n")


class UsageError(Exception):
    """Bad arguments: the real tool prints them and exits 1."""


def parse(argv: list[str]) -> dict[str, Any]:
    """-t/--testcase (one or more names, repeatable), -j/--json, -l/--list, -h/--help; options
    that take a value (-b, -i, -p, --loopCount) are accepted and do not change the figures."""
    request: dict[str, Any] = {"tests": [], "json": False, "list": False, "help": False}
    position = 0
    while position < len(argv):
        arg = argv[position]
        if arg in ("-t", "--testcase"):
            position += 1
            while position < len(argv) and not argv[position].startswith("-"):
                request["tests"].append(argv[position])
                position += 1
            continue
        if arg in ("-j", "--json"):
            request["json"] = True
        elif arg in ("-l", "--list"):
            request["list"] = True
        elif arg in ("-h", "--help"):
            request["help"] = True
        elif arg in ("-b", "--bufferSize", "-i", "--testSamples", "-p", "--testcasePrefixes",
                     "--loopCount"):
            position += 1
        elif arg not in ("-v", "--verbose", "-s", "--skipVerification", "-d",
                         "--disableAffinity", "-m", "--useMean"):
            raise UsageError(arg)
        position += 1
    return request


def _jitter(node: Node, gpu: Gpu, test: str) -> float:
    """A steady +-1% per GPU and testcase, so the figures vary like a real node's."""
    digest = hashlib.sha256(f"{node.hostname}:{gpu.slot}:{test}".encode()).digest()
    return 0.99 + digest[0] / 255 * 0.02


def bandwidth(node: Node, gpu: Gpu, test: str) -> float:
    """The simulated GB/s of one GPU in one testcase (see the module's description)."""
    if test == "device_local_copy":
        memory = float(node.profile.get("memory_bandwidth_gbps") or DEFAULT_MEMORY_GBPS)
        figure = memory / 2 * LOCAL_COPY_EFFICIENCY
    else:
        figure = pcie_gbps(gpu.pcie_gen, gpu.pcie_width) * COPY_EFFICIENCY[test]
    return figure * _jitter(node, gpu, test)


def bus_id(gpu: Gpu) -> str:
    """As CUDA names it: domain:bus:device, lower case, no function (00000000:19:00)."""
    return gpu.bus_id.lower().rsplit(".", 1)[0]


def _cuda_version(cuda: str) -> int:
    """"12.4" -> 12040, as cuDriverGetVersion returns it."""
    major, _, minor = cuda.partition(".")
    return int(major) * 1000 + int(minor.split(".")[0] or "0") * 10 if major.isdigit() else 0


def text_matrix(values: list[float]) -> str:
    """nvbandwidth's PeerValueMatrix printed: a header of column ids, one row, fixed 2."""
    header = "  " + "".join(f"{column:>10}" for column in range(len(values)))
    row = f"{0:>2}" + "".join(f"{value:>10.2f}" for value in values)
    return f"{header}\n{row}\n"


def render_text(node: Node, tests: list[str], results: dict[str, list[float]],
                cuda: int) -> str:
    out = [f"nvbandwidth Version: {VERSION}", f"Built from Git version: {GIT_VERSION}", "",
           f"CUDA Runtime Version: {cuda}", f"CUDA Driver Version: {cuda}",
           f"Driver Version: {node.driver}", "", node.hostname]
    out += [f"Device {g.index}: {g.name} ({bus_id(g)})" for g in node.gpus]
    out.append("")
    text = "\n".join(out) + "\n"
    for test in tests:
        if test not in results:
            text += "Waived: \n"
            continue
        values = results[test]
        text += (f"Running {test}.\n{DESCRIPTIONS[test]}\n{text_matrix(values)}\n"
                 f"SUM {test} {sum(values):.2f}\n\n")
    return text + NOTE


def render_json(node: Node, tests: list[str], results: dict[str, list[float]],
                cuda: int) -> str:
    cases: list[dict[str, Any]] = []
    for test in tests:
        if test not in results:
            cases.append({"name": test, "status": "Waived"})
            continue
        values = results[test]
        cases.append({"name": test, "status": "Passed",
                      "bandwidth_description": DESCRIPTIONS[test],
                      "bandwidth_matrix": [[f"{value:.6g}" for value in values]],
                      "sum": round(sum(values), 6)})
    devices = [f"{g.index}: {g.name} ({bus_id(g)}): ({node.hostname})" for g in node.gpus]
    document = {"nvbandwidth": {
        "CUDA Runtime Version": cuda, "Driver Version": node.driver,
        "GPU Device list": devices, "git_version": GIT_VERSION, "testcases": cases,
        "version": VERSION}}
    # jsoncpp's styled writer: keys sorted, three-space indent, " : " after a key.
    return json.dumps(document, indent=3, separators=(",", " : "), sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    try:
        request = parse(argv)
    except UsageError as exc:
        sys.stdout.write(f"nvbandwidth Version: {VERSION}\nBuilt from Git version: "
                         f"{GIT_VERSION}\n\nERROR: Invalid Arguments \n{' '.join(argv)} "
                         f"(SIMULATED: {exc} is not an option)\n")
        return 1
    if request["help"] or request["list"]:
        sys.stdout.write(f"nvbandwidth Version: {VERSION}\nBuilt from Git version: "
                         f"{GIT_VERSION}\n\nIndex, Name:\n\tDescription\n"
                         "=======================\n" + "".join(
                             f"{i}, {name}:\n{LIST_TEXT[name]}\n\n"
                             for i, name in enumerate(DESCRIPTIONS)))
        return 0
    driver = (read_text(DRIVER_VERSION_FILE) or "").strip()
    profile = load_profile()
    if not driver or profile is None:
        sys.stderr.write("SIMULATED nvbandwidth: cuInit failed: CUDA_ERROR_NO_DEVICE (no NVIDIA "
                         "driver loaded)\n")
        return 1
    node = Node(profile, driver, (read_text(CUDA_VERSION_FILE) or "").strip(), load_faults())
    tests = request["tests"] or list(DESCRIPTIONS)
    results = {test: [bandwidth(node, g, test) for g in node.gpus]
               for test in tests if test in DESCRIPTIONS}
    for test in tests:
        if test not in results:
            sys.stderr.write(f"SIMULATED nvbandwidth: testcase {test} is not simulated: "
                             "waived\n")
    cuda = _cuda_version(node.cuda)
    render = render_json if request["json"] else render_text
    sys.stdout.write(render(node, tests, results, cuda))
    return 0
