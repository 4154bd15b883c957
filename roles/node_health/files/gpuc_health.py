"""gpuc-health: the node's own health check, run by a systemd timer, by Slurm's
HealthCheckProgram or by hand. Standard library only.

It reads the node (nvidia-smi, the kernel log, the InfiniBand sysfs tree and its error counters,
the PCIe AER counters, systemd, dcgmi) and judges it with the same policy the controller's
validate uses: the gpucluster package of the collection's module_utils, installed next to this
program (../lib/gpuc-health/gpucluster) by the node_health role. What it compares with is the
expectations file the role writes from the plan (--expectations), and for the error counters the
baseline it keeps in its state file (--state).

With --quick (Slurm's Prolog runs it before each job, through gpuc-slurm-health) it judges only
what says whether a job can start on the node now: the GPUs the plan names (count, model, none
fallen off the bus), their memory (no uncorrectable ECC error, no pending row remap or page
retirement), PCIe width, the loaded driver, NVLink and the RDMA ports where planned, the
fabric manager on NVSwitch systems, and each GPU's MIG instances where the plan has a layout. It
reads them from one `nvidia-smi -q -x`, with `nvidia-smi nvlink -s` beside it where the plan has
NVLink, `nvidia-smi mig -lgi` where a GPU has MIG on, the RDMA sysfs tree and `systemctl is-active`,
and leaves out what is slow or needs history: the kernel log's Xid events (journalctl reads the
whole boot's log, which grows with the uptime, and the events are judged against the last run's
state), DCGM's health watches (dcgmi asks the host engine), the error counters (judged by their
rise against a baseline) and the installed CUDA toolkit and NCCL (they change with an install,
not between two jobs). It reads and writes no state, and no textfile. A tool that does not
answer within its quick bound (QUICK_TOOL_TIMEOUT) makes it "could not check" (exit 3), not unhealthy.

Exit status: 0 healthy, 1 degraded, 2 unhealthy, 3 could not check (bad usage included).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

LIB = os.environ.get("GPUC_HEALTH_LIB") or os.path.join(
    os.path.dirname(os.path.realpath(__file__)), os.pardir, "lib", "gpuc-health")
sys.path.insert(0, os.path.abspath(LIB))

from gpucluster import counters  # noqa: E402
from gpucluster import node_health_policy as policy  # noqa: E402
from gpucluster.ib_sysfs import read_ib_sysfs  # noqa: E402
from gpucluster.mig import read_layout  # noqa: E402
from gpucluster.nvlink import parse_nvlink_status  # noqa: E402
from gpucluster.nvsmi_xml import parse_nvidia_smi_xml  # noqa: E402
from gpucluster.xid import FATAL_XIDS, parse_xid  # noqa: E402

TOOL_TIMEOUT = 10  # seconds; a hung nvidia-smi is itself a finding
TIMED_OUT = 124  # run()'s exit status for a tool past its bound (timeout(1)'s)
# --quick runs before each job (Slurm's Prolog), each tool bounded by this, within
# gpuc-slurm-health's bound on the whole check (PROLOG_TIMEOUT there, which must exceed it).
# A tool past it is "could not check" there, not a finding: without persistence mode a driver
# client "may incur a short (order of 1-3 second) startup cost per GPU due to ECC scrubbing"
# (NVIDIA's Driver Persistence guide, Overview), which a healthy 8-GPU node can exceed; the full
# check, with TOOL_TIMEOUT, judges a hung tool.
QUICK_TOOL_TIMEOUT = 6
EXIT_UNKNOWN = policy.UNKNOWN


class Usage(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's exit 2 means "unhealthy" here
        sys.stderr.write(f"gpuc-health: {message}\n")
        sys.exit(EXIT_UNKNOWN)


def run(args: list[str], timeout: float = TOOL_TIMEOUT) -> tuple[int, str, str] | None:
    """(rc, stdout, stderr) of a tool, None when it is not installed."""
    path = shutil.which(args[0])
    if path is None:
        return None
    try:
        done = subprocess.run([path, *args[1:]], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return TIMED_OUT, "", f"{' '.join(args)} did not answer within {timeout:g} s"
    return done.returncode, done.stdout, done.stderr


def last_line(rc: int, out: str, err: str) -> str:
    lines = (err or out).strip().splitlines()
    return lines[-1] if lines else f"exit {rc}"


def parsed(parse: Any, answer: tuple[int, str, str] | None, tool: str) -> dict[str, Any]:
    if answer is None:
        return {"error": f"{tool} not found"}
    rc, out, err = answer
    if rc != 0:
        return {"error": last_line(rc, out, err)}
    try:
        return dict(parse(out))
    except ValueError as exc:
        return {"error": f"cannot parse {tool}: {exc}"}


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def kernel_log(path: str) -> str | None:
    if path:
        return read_text(path)
    for args in (["journalctl", "-k", "-b", "--no-pager", "-q"], ["dmesg"]):
        answer = run(args)
        if answer is not None and answer[0] == 0:
            return answer[1]
    return None


def planned_cuda_root(stack: dict[str, Any]) -> str:
    """Where the planned toolkit lives (/usr/local/cuda-X.Y, as NVIDIA's packages install it);
    /usr/local/cuda (the alternatives link, whichever toolkit it points at) without a plan."""
    version = str((stack or {}).get("cuda_version") or "")
    return f"/usr/local/cuda-{version}" if re.fullmatch(r"\d+\.\d+", version) else "/usr/local/cuda"


def cuda_toolkit(root: str) -> str | None:
    text = read_text(os.path.join(root, "version.json"))
    try:
        return str(json.loads(text or "")["cuda"]["version"])
    except (ValueError, KeyError, TypeError):
        return None


def nccl_header(path: str) -> str | None:
    text = read_text(path) or ""
    parts = [re.search(rf"#define\s+NCCL_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m) if all(parts) else None


def dcgm_health() -> dict[str, Any] | None:
    answer = run(["dcgmi", "health", "-c"])
    if answer is None:
        return None
    rc, out, err = answer
    found = policy.parse_dcgmi_health(out)
    if found["overall"] is None:
        return {"error": last_line(rc, out, err)}
    return found


def load_json(path: str) -> Any:
    text = read_text(path)
    return json.loads(text) if text else None


def write_atomic(directory: str, name: str, text: str) -> None:
    """temp file in the same directory, then rename: node_exporter never reads half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_plan(path: str) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(expected, stack, problems) from the expectations file the node_health role writes."""
    problems: list[str] = []
    try:
        plan = load_json(path)
    except ValueError as exc:
        plan, problems = None, [f"{path}: not JSON ({exc})"]
    if not isinstance(plan, dict) and not problems:
        problems.append(f"{path}: missing or empty (run the node_health role)")
    plan = plan if isinstance(plan, dict) else {}
    expected = dict(plan.get("expected") or {})
    stack = dict(plan.get("stack") or {})
    if stack.get("driver_version") and not expected.get("driver_version"):
        expected["driver_version"] = stack["driver_version"]
    return expected, stack, problems


def start_device_reads(pool: concurrent.futures.Executor, opts: argparse.Namespace,
                       expected: dict[str, Any], timeout: float) -> dict[str, Any]:
    """What both modes read, started at once: `nvidia-smi -q -x`, `nvidia-smi nvlink -s` where
    the plan has NVLink, the fabric manager's state where it has NVSwitch."""
    return {
        "smi": pool.submit(run, ["nvidia-smi", "-q", "-x"], timeout),
        "nvl": pool.submit(run, ["nvidia-smi", "nvlink", "-s"], timeout)
        if expected.get("nvlink_links_per_gpu") else None,
        "fm": pool.submit(run, ["systemctl", "is-active", opts.fabricmanager_unit], timeout)
        if expected.get("nvswitch") else None,
    }


def device_facts(reads: dict[str, Any], opts: argparse.Namespace, expected: dict[str, Any],
                 problems: list[str]) -> dict[str, Any]:
    """The facts of start_device_reads (waiting for them), and the RDMA ports where planned."""
    facts: dict[str, Any] = {}
    smi = reads["smi"].result()
    if smi is None:
        problems.append("nvidia-smi not found (is the driver installed?)")
    facts["gpu"] = parsed(parse_nvidia_smi_xml, smi, "nvidia-smi")
    nvl = reads["nvl"]
    facts["nvlink"] = {} if nvl is None else parsed(parse_nvlink_status, nvl.result(),
                                                    "nvidia-smi nvlink")
    answer = reads["fm"].result() if reads["fm"] is not None else None
    facts["fabricmanager"] = answer[1].strip() if answer else None
    if expected.get("ib_hcas"):
        root = opts.ib_sysfs_root
        facts["ib"] = read_ib_sysfs(root) if os.path.isdir(root) else {
            "error": f"{root} does not exist (no RDMA devices or driver)"}
    else:
        facts["ib"] = {}
    if expected.get("mig_layout") is not None:
        # The planned MIG layout (gpuc-mig.service restores it at boot): a GPU left without its
        # instances fails here, and Slurm drains the node naming the GPU.
        facts["mig"] = read_layout(lambda argv: run(argv) or (127, "", "nvidia-smi not found"),
                                   "nvidia-smi", facts["gpu"])
    return facts


def check_quick(opts: argparse.Namespace) -> dict[str, Any]:
    """--quick: the devices only (see the module's docstring), no state."""
    started = time.time()
    expected, stack, problems = read_plan(opts.expectations)
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        reads = start_device_reads(pool, opts, expected, QUICK_TOOL_TIMEOUT)
        facts = device_facts(reads, opts, expected, problems)
    answers = [read.result() for read in reads.values() if read is not None]
    problems.extend(f"{a[2]} (--quick's bound; the full check judges a tool that hangs)"
                    for a in answers if a is not None and a[0] == TIMED_OUT)
    gpu = facts["gpu"]
    measured = {"driver": gpu.get("driver_version"), "driver_cuda": gpu.get("cuda_version")}
    checks = policy.judge_quick(facts, expected) if not problems else []
    return dict(policy.result(socket.gethostname(), checks, problems, stack, measured, started,
                              time.time(), mode="quick"))


def check_node(opts: argparse.Namespace) -> dict[str, Any]:
    started = time.time()
    expected, stack, problems = read_plan(opts.expectations)
    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        reads = start_device_reads(pool, opts, expected, TOOL_TIMEOUT)
        dcgm = pool.submit(dcgm_health)
        log = pool.submit(kernel_log, opts.kernel_log)
        facts = device_facts(reads, opts, expected, problems)
        facts["dcgm_health"] = dcgm.result()
        text = log.result()
    boot_id = (read_text("/proc/sys/kernel/random/boot_id") or "").strip()
    try:
        state_before = load_json(opts.state) if opts.state else None
    except ValueError:
        state_before = None  # a damaged state file: start over
    state_before = state_before if isinstance(state_before, dict) else {}
    state = dict(state_before)
    if text is None:
        facts["xid"] = None
    else:
        events = parse_xid(text)
        for event in events:
            event["fatal"] = event.get("xid") in FATAL_XIDS
        xid_before = state_before
        if opts.clear_xid:  # acknowledged: everything logged so far counts as reported
            xid_before = {"boot_id": boot_id, "xid_seen": len(events), "xid_fatal": []}
        judged, xid_state = policy.xid_since_last_run(events, xid_before, boot_id)
        facts["xid"] = {"events": judged}
        state.update(xid_state)
    # The error counters: judged by their rise since the baseline the state keeps (none: this
    # reading is the baseline), which the next run keeps until it is an hour old.
    reading = counters.take_reading(facts["ib"], facts["gpu"], expected, opts.ib_sysfs_root,
                                    opts.pci_sysfs_root, time.time(), boot_id or None)
    baseline = state_before.get("counters")
    if opts.counters_from:
        try:
            other = load_json(opts.counters_from)
        except ValueError:
            other = None
        baseline = other.get("counters") if isinstance(other, dict) else None
    facts["counters"] = {"now": reading, "before": baseline}
    state["counters"] = counters.next_baseline(state_before.get("counters"), reading)
    if opts.state:
        os.makedirs(os.path.dirname(opts.state) or ".", exist_ok=True)
        write_atomic(os.path.dirname(opts.state) or ".", os.path.basename(opts.state),
                     json.dumps(state))
    gpu = facts["gpu"]
    facts["measured"] = {
        "driver": gpu.get("driver_version"),
        "driver_cuda": gpu.get("cuda_version"),
        "cuda_toolkit": cuda_toolkit(opts.cuda_root or planned_cuda_root(stack)),
        "nccl": nccl_header(opts.nccl_header),
    }
    checks = policy.judge(facts, expected, stack) if not problems else []
    host = socket.gethostname()
    return policy.result(host, checks, problems, stack, facts["measured"], started, time.time())


def ping_peers(opts: argparse.Namespace) -> int:
    def probe(peer: str) -> float | None:
        name, _sep, address = peer.partition("=")
        address = address or name
        answer = run(["ping", "-q", "-n", "-c", "3", "-i", "0.2", "-W", "1", address])
        return policy.parse_ping_rtt(answer[1]) if answer and answer[0] == 0 else None

    if shutil.which("ping") is None:
        sys.stderr.write("gpuc-health: ping not found (install iputils-ping)\n")
        return EXIT_UNKNOWN
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        found = list(pool.map(probe, opts.ping))
    rtts = {peer.partition("=")[0]: found[i] for i, peer in enumerate(opts.ping)}
    text = policy.render_latency_textfile(rtts)
    if opts.textfile:
        write_atomic(opts.textfile, policy.LATENCY_TEXTFILE_NAME, text)
    if opts.json:
        sys.stdout.write(json.dumps({"latency_seconds": rtts}, indent=2) + "\n")
    elif not opts.textfile:
        sys.stdout.write(text)
    return 0 if all(r is not None for r in rtts.values()) else policy.DEGRADED


def main(argv: list[str]) -> int:
    parser = Usage(prog="gpuc-health", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--textfile", metavar="DIR",
                        help="also write Prometheus metrics into DIR (node_exporter's textfile "
                             "collector directory), atomically")
    parser.add_argument("--expectations", default="/etc/gpuc-health/expected.json")
    parser.add_argument("--state", default="/var/lib/gpuc-health/state.json",
                        help="remembers the Xid events already reported and the error "
                             "counters' baseline (empty: no state, every counter reading is a "
                             "first one)")
    parser.add_argument("--counters-from", metavar="STATE", default="",
                        help="judge the error counters against the baseline in STATE (another "
                             "run's --state, e.g. the timer's) without writing it")
    parser.add_argument("--clear-xid", action="store_true",
                        help="forget fatal Xid events reported before (after a GPU reset)")
    parser.add_argument("--kernel-log", default="",
                        help="a file holding the kernel log (default: journalctl -k -b, dmesg)")
    parser.add_argument("--ib-sysfs-root", default="/sys/class/infiniband")
    parser.add_argument("--pci-sysfs-root", default="/sys/bus/pci/devices",
                        help="where the GPUs' PCI functions are (their PCIe AER counters)")
    parser.add_argument("--cuda-root", default="",
                        help="the CUDA toolkit to read (default: the planned /usr/local/cuda-X.Y)")
    parser.add_argument("--nccl-header", default="/usr/include/nccl.h")
    parser.add_argument("--fabricmanager-unit", default="nvidia-fabricmanager")
    parser.add_argument("--ping", action="append", metavar="PEER",
                        help="latency probe mode: ping PEER (NAME or NAME=ADDRESS, repeatable) "
                             "instead of checking")
    parser.add_argument("--quick", action="store_true",
                        help="only the devices a job needs now (Slurm's Prolog): nvidia-smi, "
                             "NVLink, RDMA ports, fabric manager; no kernel log, DCGM, "
                             "counters or toolkit, and no state (--state, --kernel-log, "
                             "--pci-sysfs-root and the like are accepted and not used)")
    opts = parser.parse_args(argv)
    if opts.textfile and not os.path.isdir(opts.textfile):
        parser.error(f"--textfile {opts.textfile}: not a directory")
    if opts.quick and (opts.textfile or opts.ping):
        # The textfile holds the full check's metrics; a quick run would drop the others.
        parser.error("--quick takes neither --textfile nor --ping")
    if opts.ping:
        return ping_peers(opts)
    try:
        res = check_quick(opts) if opts.quick else check_node(opts)
    except OSError as exc:
        sys.stderr.write(f"gpuc-health: {exc}\n")
        return EXIT_UNKNOWN
    if opts.textfile:
        write_atomic(opts.textfile, policy.TEXTFILE_NAME, policy.render_textfile(res))
    if opts.json:
        sys.stdout.write(json.dumps(res, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(policy.render_text(res))
    return int(res["status"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
