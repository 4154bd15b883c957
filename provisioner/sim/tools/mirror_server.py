"""The simulated cluster's package mirror: a static HTTP server over the mirror directory (apt
and dnf repositories, the wheelhouse), as ``python3 -m http.server`` serves it, plus the mirror
faults of ``provisioner.sim.faults`` (``mirror-503xN``).

It reads its fault file (``--faults``, one ``STATUS COUNT`` line, written by ``sim up``) at
every package request: the first COUNT requests for each package file (``.deb``, ``.rpm``) get
STATUS, the next ones the file, as from an overloaded mirror or a caching proxy whose upstream
is slow. A change of the file's text starts every count again. Repository indexes, keys and
wheels are always served. Each request is logged on stderr (``podman logs``) with its status,
in http.server's format.

Standard library only: it runs on the mirror container's python3.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import threading
from pathlib import Path

PACKAGE_SUFFIXES = (".deb", ".rpm")


class FaultState:
    """The fault file's current rule and how many times each path got its error."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.text = ""
        self.served: dict[str, int] = {}

    def rule(self) -> tuple[int, int] | None:
        try:
            text = self.path.read_text()
        except OSError:
            text = ""
        if text != self.text:
            self.text, self.served = text, {}
        for line in text.splitlines():
            fields = line.split("#", 1)[0].split()
            if len(fields) == 2 and all(f.isdigit() for f in fields):
                return int(fields[0]), int(fields[1])
        return None

    def error_for(self, url_path: str) -> int | None:
        """The status to answer instead of the file, or None to serve it."""
        path = url_path.split("?", 1)[0]
        if not path.endswith(PACKAGE_SUFFIXES):
            return None
        with self.lock:
            rule = self.rule()
            if rule is None:
                return None
            status, count = rule
            done = self.served.get(path, 0)
            if done >= count:
                return None
            self.served[path] = done + 1
            return status


class Handler(http.server.SimpleHTTPRequestHandler):
    faults: FaultState

    def send_head(self):  # type: ignore[no-untyped-def]
        status = self.faults.error_for(self.path)
        if status is not None:
            self.send_error(status)  # the standard reason phrase, as a real mirror sends it
            return None
        return super().send_head()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--directory", default="/srv/mirror")
    parser.add_argument("--faults", required=True,
                        help="the fault file (provisioner.sim.faults.MIRROR_FAULTS)")
    args = parser.parse_args(argv)
    handler = functools.partial(Handler, directory=args.directory)
    Handler.faults = FaultState(Path(args.faults))
    server = http.server.ThreadingHTTPServer(("", args.port), handler)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
