"""gpuc_pairbw: TCP bandwidth between two nodes, both directions at once (gpu-cluster-provisioner).

One side listens on its cluster address (``--listen ADDRESS``) and takes one connection, from
``--peer`` only; the other connects (``--connect ADDRESS``). Both then send for ``--seconds``
while they receive what the other sends, so each side's egress is measured by what the other
receives. Each side prints one JSON line: the bytes it received and over how long, as Gbit/s
(10^9 bit/s). A node whose network is slow (a bad cable, a misnegotiated link, a throttled port)
is slow in every pair it is in: ``provisioner certify`` judges the pairs together.

Run by Ansible's script module (nothing stays on the node). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

CHUNK = 1 << 20


def _accept(address: str, port: int, peer: str, deadline: float) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    server = socket.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(4)
    allowed = {info[4][0] for info in socket.getaddrinfo(peer, None)}
    try:
        while True:
            server.settimeout(max(0.1, deadline - time.monotonic()))
            conn, (host, *_rest) = server.accept()
            if host in allowed:
                return conn
            conn.close()  # not the peer this round pairs us with
    finally:
        server.close()


def _connect(address: str, port: int, deadline: float) -> socket.socket:
    while True:
        try:
            return socket.create_connection((address, port), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def measure(conn: socket.socket, seconds: float) -> dict[str, float]:
    conn.settimeout(seconds + 60)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got = {"bytes": 0, "first": 0.0, "last": 0.0}  # written by the reader thread
    sent = 0

    def receive() -> None:
        while True:
            data = conn.recv(CHUNK)
            if not data:
                return
            now = time.monotonic()
            if not got["first"]:
                got["first"] = now
            got["last"] = now
            got["bytes"] += len(data)

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    payload = b"\0" * CHUNK
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sent += conn.send(payload)
    conn.shutdown(socket.SHUT_WR)
    reader.join(seconds + 60)
    conn.close()
    span = max(got["last"] - got["first"], 1e-6)
    return {"received_bytes": got["bytes"], "sent_bytes": sent,
            "receive_s": round(span, 3), "rx_gbps": round(got["bytes"] * 8 / span / 1e9, 4)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuc_pairbw")
    side = parser.add_mutually_exclusive_group(required=True)
    side.add_argument("--listen", metavar="ADDRESS")
    side.add_argument("--connect", metavar="ADDRESS")
    parser.add_argument("--peer", required=True, help="the partner's address")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--wait", type=float, default=60.0,
                        help="how long to wait for the partner")
    opts = parser.parse_args(argv)
    deadline = time.monotonic() + opts.wait
    try:
        conn = (_accept(opts.listen, opts.port, opts.peer, deadline) if opts.listen
                else _connect(opts.connect, opts.port, deadline))
        result = measure(conn, opts.seconds)
    except OSError as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        return 1
    print(json.dumps({**result, "seconds": opts.seconds, "peer": opts.peer}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
