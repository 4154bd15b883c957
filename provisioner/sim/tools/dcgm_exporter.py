"""SIMULATED dcgm-exporter (gpu-cluster-provisioner): NVIDIA's Prometheus exporter stand-in.

Serves ``/metrics`` on ``--address`` (``:9400``, the real exporter's default) with the real
exporter's metric names, types and label set (``gpu``, ``UUID``, ``pci_bus_id``, ``device``,
``modelName``, ``Hostname``) for the GPUs the simulated nvidia-smi enumerates. Values are idle
readings unless ``/var/lib/gpu-sim/gpu-load`` sets them, one line per GPU index (or ``all``)::

    0 util=95 temp=88 fb_used=70000 power=650
    all util=40

which is how tests drive GpuUtilizationHigh and friends. ``DCGM_FI_DEV_XID_ERRORS`` is the
last Xid of the GPU in the node's kernel log. ``--once`` prints one scrape and exits.

``--web-config-file`` takes the exporter toolkit's web configuration, as the real exporter does:
``tls_server_config`` (``cert_file``, ``key_file``) serves HTTPS, ``basic_auth_users`` (name to
bcrypt hash, checked with the node's libcrypt) answers 401 without a matching login. The users
are read again for every request, as the toolkit does. JSON only (a YAML subset; the roles
write JSON), ``#`` comment lines allowed.

Installed as ``/usr/bin/dcgm-exporter`` by the simulated ``dcgm-exporter`` package, bundled
with its version (see provisioner.sim.bundle). Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import ctypes.util
import http.server
import json
import re
import socket
import ssl
import sys
import time
from typing import Any

from provisioner.sim.faults import read_fault_file
from provisioner.sim.tools.node import (
    CUDA_VERSION_FILE,
    DRIVER_VERSION_FILE,
    FAULTS_FILE,
    GPU_LOAD_FILE,
    KERNEL_LOG,
    read_text,
)
from provisioner.sim.tools.nvidia_smi import Gpu, Node, load_profile

# (name, type, help) as dcgm-exporter's default-counters.csv declares them.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
     "Total number of NVLink bandwidth counters for all lanes."),
)
_XID = re.compile(r"NVRM: Xid \(PCI:[0-9a-fA-F]{4}:(?P<bus>[0-9a-fA-F]{2}):\d\d\): (?P<xid>\d+)")
STARTED = time.time()


def load_overrides(count: int) -> dict[int, dict[str, float]]:
    """Per GPU index: the values gpu-load sets (util, temp, fb_used, power)."""
    out: dict[int, dict[str, float]] = {i: {} for i in range(count)}
    for line in (read_text(GPU_LOAD_FILE) or "").splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        targets = list(out) if parts[0] == "all" else (
            [int(parts[0])] if parts[0].isdigit() and int(parts[0]) in out else [])
        for pair in parts[1:]:
            key, _sep, value = pair.partition("=")
            try:
                number = float(value)
            except ValueError:
                continue
            for index in targets:
                out[index][key] = number
    return out


def last_xids() -> dict[int, int]:
    """PCI bus number -> the last Xid the kernel log reports for it."""
    found: dict[int, int] = {}
    for match in _XID.finditer(read_text(KERNEL_LOG) or ""):
        found[int(match.group("bus"), 16)] = int(match.group("xid"))
    return found


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def values(gpu: Gpu, load: dict[str, float], xid: int) -> dict[str, float]:
    util = load.get("util", 0.0)
    fb_used = load.get("fb_used", float(gpu.memory_used))
    usable = gpu.memory_total - gpu.memory_reserved
    power = load.get("power", gpu.power_draw + util / 100.0 * (gpu.power_limit - gpu.power_draw))
    uptime = time.time() - STARTED
    links_up = gpu.active_links
    return {
        "DCGM_FI_DEV_SM_CLOCK": float(gpu.sm_max if util else gpu.sm_clock),
        "DCGM_FI_DEV_MEM_CLOCK": float(gpu.mem_max),
        "DCGM_FI_DEV_GPU_TEMP": load.get("temp", float(gpu.temperature)),
        "DCGM_FI_DEV_POWER_USAGE": power,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": float(int(power * uptime * 1000)),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
        "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_DEV_MEM_COPY_UTIL": load.get("mem_util", util / 2),
        "DCGM_FI_DEV_XID_ERRORS": float(xid),
        "DCGM_FI_DEV_FB_FREE": max(0.0, usable - fb_used),
        "DCGM_FI_DEV_FB_USED": fb_used,
        # Grows with time and load over the links that are up, like the real counter.
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": float(int(uptime * links_up * (1 + util) * 1000)),
    }


def scrape() -> str:
    """One scrape of every simulated GPU, in Prometheus text format."""
    driver = (read_text(DRIVER_VERSION_FILE) or "").strip()
    profile = load_profile()
    if not driver or profile is None:
        return ""  # no driver loaded: the real exporter has no GPU to report either
    faults = read_fault_file(read_text(FAULTS_FILE) or "")
    cuda = (read_text(CUDA_VERSION_FILE) or "").strip() or "N/A"
    node = Node(profile, driver, cuda, faults)
    loads = load_overrides(len(node.gpus))
    xids = last_xids()
    rows: dict[str, list[str]] = {name: [] for name, _type, _help in METRICS}
    for gpu in node.gpus:
        labels = ",".join(f'{key}="{_label(value)}"' for key, value in (
            ("gpu", gpu.index), ("UUID", gpu.uuid), ("pci_bus_id", gpu.bus_id),
            ("device", f"nvidia{gpu.slot}"), ("modelName", gpu.name),
            ("Hostname", node.hostname)))
        for name, value in values(gpu, loads[gpu.index], xids.get(gpu.bus, 0)).items():
            text = f"{int(value)}" if float(value).is_integer() else f"{value:.6g}"
            rows[name].append(f"{name}{{{labels}}} {text}")
    out: list[str] = []
    for name, kind, help_text in METRICS:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *rows[name]]
    return "\n".join(out) + "\n"


def read_web_config(path: str) -> dict[str, Any]:
    """The web configuration file (JSON, ``#`` lines skipped); {} without one."""
    if not path:
        return {}
    with open(path, encoding="utf-8") as fh:
        text = "".join(line for line in fh if not line.lstrip().startswith("#"))
    data = json.loads(text) if text.strip() else {}
    return data if isinstance(data, dict) else {}


def bcrypt_matches(password: str, hashed: str) -> bool:
    """Whether ``password`` matches the bcrypt ``hashed``, by the C library's crypt(3)
    (libxcrypt knows $2b$/$2y$/$2a$)."""
    lib = ctypes.CDLL(ctypes.util.find_library("crypt") or "libcrypt.so.1")
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    out = lib.crypt(password.encode(), hashed.encode())
    return bool(out) and out.decode() == hashed


def authorized(header: str | None, users: dict[str, str]) -> bool:
    if not users:
        return True
    if not header or not header.startswith("Basic "):
        return False
    try:
        name, _sep, password = base64.b64decode(header[6:]).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return False
    return name in users and bcrypt_matches(password, str(users[name]))


class Handler(http.server.BaseHTTPRequestHandler):
    web_config_file = ""

    def do_GET(self) -> None:
        users = read_web_config(self.web_config_file).get("basic_auth_users") or {}
        if not authorized(self.headers.get("Authorization"), users):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="dcgm-exporter"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404, "only /metrics is served")
            return
        body = scrape().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return  # a scrape every few seconds would flood the journal


def main(argv: list[str], version: str) -> int:
    parser = argparse.ArgumentParser(prog="dcgm-exporter",
                                     description="SIMULATED dcgm-exporter")
    parser.add_argument("-a", "--address", default=":9400")
    parser.add_argument("-v", "--version", action="store_true")
    parser.add_argument("--once", action="store_true", help="print one scrape and exit")
    parser.add_argument("--web-config-file", default="")
    opts, _unknown = parser.parse_known_args(argv)  # accept the real exporter's other flags
    if opts.version:
        sys.stdout.write(f"dcgm-exporter version {version} (SIMULATED)\n")
        return 0
    if opts.once:
        sys.stdout.write(scrape())
        return 0
    host, _sep, port = opts.address.rpartition(":")
    if not port.isdigit():
        sys.stderr.write(f"dcgm-exporter (SIMULATED): bad --address {opts.address}\n")
        return 2
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Server(http.server.ThreadingHTTPServer):
        address_family = family

    Handler.web_config_file = opts.web_config_file
    server = Server((host.strip("[]") or "", int(port)), Handler)
    tls = read_web_config(opts.web_config_file).get("tls_server_config") or {}
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls["cert_file"], tls["key_file"])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0
