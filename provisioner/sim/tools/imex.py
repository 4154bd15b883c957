"""SIMULATED IMEX (gpu-cluster-provisioner): NVIDIA's Internode Memory Exchange service of a
multi-node NVLink domain, its daemon ``nvidia-imex`` and its ``nvidia-imex-ctl``.

Installed on simulated nodes of a multi-node NVLink profile, as a site's node image has IMEX
(this project does not install it). Each node's daemon listens on TCP port PORT of every
address; the domain is the addresses in ``/etc/nvidia-imex/nodes_config.cfg``, one per line,
as the real service reads them. The connections are real: a daemon reports a peer CONNECTED
when that peer's daemon answers on the network now, so a stopped service, a node that is down
or an address missing from the list shows exactly as it would.

``nvidia-imex-ctl -N -j`` prints the domain as the real tool's JSON does (top-level ``status``
"UP" or "DOWN", each node's ``status`` "READY" or "UNAVAILABLE", its ``host``, ``version`` and
``connections`` to every other node, "CONNECTED" or "INVALID"; the shape of real GB200 output
quoted in aws/aws-parallelcluster's GB200 integration test), with a ``simulated`` key;
``-q`` prints ``READY`` when the local daemon answers. Other options are refused saying they
are not imitated. Standard library only: it runs on the node's python3.
"""

from __future__ import annotations

import json
import socket
import socketserver
import sys
import time
from typing import Any

from provisioner.sim.tools.node import DRIVER_VERSION_FILE, read_text

NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
PORT = 50000
TIMEOUT = 1.5


def domain_addresses() -> list[str]:
    out = []
    for line in (read_text(NODES_CONFIG) or "").splitlines():
        address = line.split("#", 1)[0].strip()
        if address:
            out.append(address)
    return out


def ask(address: str, request: str, timeout: float | None = None) -> str | None:
    """The answer of the daemon at ``address`` to one request line; None when none answers
    within ``timeout`` seconds (default TIMEOUT)."""
    try:
        with socket.create_connection((address, PORT), timeout=timeout or TIMEOUT) as conn:
            conn.sendall(request.encode() + b"\n")
            return conn.makefile("r", encoding="utf-8").readline().strip() or None
    except OSError:
        return None


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        request = self.rfile.readline().decode(errors="replace").strip()
        if request == "PING":
            self.wfile.write(b"PONG\n")
            return
        if request != "STATUS":
            return
        here = self.connection.getsockname()[0]
        links = {}
        for index, address in enumerate(domain_addresses()):
            if address != here:
                links[str(index)] = {"host": address, "status": "CONNECTED"
                                     if ask(address, "PING") == "PONG" else "INVALID"}
        version = (read_text(DRIVER_VERSION_FILE) or "").strip() or None
        answer = {"status": "READY", "host": here, "version": version, "connections": links}
        self.wfile.write(json.dumps(answer).encode() + b"\n")


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def serve(bind: str = "0.0.0.0") -> int:
    print(f"nvidia-imex (SIMULATED) listening on {bind} port {PORT}", flush=True)
    with _Server((bind, PORT), _Handler) as server:
        server.serve_forever()
    return 0


def domain_status() -> dict[str, Any]:
    """Every node of the domain as its own daemon reports it (UNAVAILABLE where none answers)."""
    addresses = domain_addresses()
    nodes: dict[str, Any] = {}
    # A daemon answers STATUS after pinging each peer, each ping up to TIMEOUT (a peer that is
    # down lets it run out): its answer may take that long for every peer.
    wait = TIMEOUT * (len(addresses) + 1)
    for index, address in enumerate(addresses):
        raw = ask(address, "STATUS", wait)
        try:
            node = json.loads(raw) if raw else None
        except ValueError:
            node = None
        if not isinstance(node, dict):
            node = {"status": "UNAVAILABLE", "host": address, "version": None,
                    "connections": {str(i): {"host": peer, "status": "INVALID"}
                                    for i, peer in enumerate(addresses) if i != index}}
        nodes[str(index)] = node
    up = all(n.get("status") == "READY" and all(
        link.get("status") == "CONNECTED" for link in n.get("connections", {}).values())
        for n in nodes.values())
    now = time.time()
    stamp = time.strftime("%m/%d/%Y %H:%M:%S", time.localtime(now)).lstrip("0")
    return {"nodes": nodes, "timestamp": f"{stamp}.{int(now * 1000) % 1000:03d}",
            "status": "UP" if up and nodes else "DOWN", "simulated": True}


def ctl(argv: list[str]) -> int:
    if argv == ["-q"]:
        local = [a for a in domain_addresses() if ask(a, "PING") == "PONG" and _is_local(a)]
        print("READY" if local else "UNAVAILABLE")
        return 0 if local else 1
    if sorted(argv) == ["-N", "-j"]:
        print(json.dumps(domain_status(), indent=2))
        return 0
    asked = " ".join(argv)
    sys.stderr.write("SIMULATED nvidia-imex-ctl: only -N -j and -q are imitated "
                     f"(asked: {asked})\n")
    return 2


def _is_local(address: str) -> bool:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((address, 0))
        return True
    except OSError:
        return False


def main(argv: list[str], role: str = "ctl") -> int:
    return serve() if role == "daemon" else ctl(argv)
