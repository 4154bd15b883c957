"""The simulated cluster's package mirror: a static HTTP server over the mirror directory (apt
and dnf repositories, the wheelhouse), as ``python3 -m http.server`` serves it, plus the mirror
faults of ``provisioner.sim.faults`` (``mirror-503xN``, ``mirror-tampered-wheels``).

It reads its fault file (``--faults``, written by ``sim up``) at every request; each line is a
rule, ``#`` starts a comment, a line that is no rule is ignored:

- ``STATUS COUNT`` (``mirror-503xN``, the first such line counts): the first COUNT requests for
  each package file (``.deb``, ``.rpm``) get STATUS, the next ones the file, as from an
  overloaded mirror or a caching proxy whose upstream is slow. A change of the file's text
  starts every count again. Repository indexes, keys and wheels are served.
- ``tamper-wheels`` (``mirror-tampered-wheels``): every ``.whl`` is served with its size and
  headers but a region in its middle inverted, as an attacker on the network path would swap
  it, so only a client that checks the file's sha256 notices. Other files are served untouched.

Each request is logged on stderr (``podman logs``) with its status, in http.server's format; a
tampered one ends with TAMPERED_MARK.

Standard library only: it runs on the mirror container's python3.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import io
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

PACKAGE_SUFFIXES = (".deb", ".rpm")
WHEEL_SUFFIX = ".whl"
# The fault file's line of mirror-tampered-wheels (provisioner.sim.faults.MIRROR_TAMPER_WHEELS).
TAMPER_WHEELS = "tamper-wheels"
TAMPERED_MARK = "(tampered: wheel bytes changed in transit)"
# How many bytes in the middle of a wheel are inverted: inside the zip's compressed data for any
# real wheel, so the size and the archive's start and end (what a quick look shows) are the
# original's; the whole file when it is smaller.
TAMPER_SPAN = 64


def tamper_span(size: int) -> tuple[int, int]:
    """The [start, end) of a file of ``size`` bytes that tampering inverts."""
    start = max(0, size // 2 - TAMPER_SPAN // 2)
    return start, min(size, start + TAMPER_SPAN)


def tamper(data: bytes) -> bytes:
    """``data`` with its tamper_span inverted: the same length, another sha256 (unless it is
    empty), the same output every time."""
    start, end = tamper_span(len(data))
    return data[:start] + bytes(b ^ 0xFF for b in data[start:end]) + data[end:]


class TamperedFile(io.RawIOBase):
    """A served file read through, its tamper_span inverted on the way: streamed as http.server
    streams the file (a torch wheel is GBs), with the size http.server announced."""

    def __init__(self, raw: BinaryIO, size: int) -> None:
        super().__init__()
        self.raw = raw
        self.start, self.end = tamper_span(size)
        self.pos = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        chunk = self.raw.read(len(view))
        # The span's part within this chunk, in the chunk's offsets.
        lo = max(self.start, self.pos) - self.pos
        hi = min(self.end, self.pos + len(chunk)) - self.pos
        if lo < hi:
            chunk = chunk[:lo] + bytes(b ^ 0xFF for b in chunk[lo:hi]) + chunk[hi:]
        view[:len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)

    def close(self) -> None:
        self.raw.close()
        super().close()


def _url_file(url_path: str) -> str:
    return url_path.split("?", 1)[0].split("#", 1)[0]


class FaultState:
    """The fault file's current rules and how many times each path got its error."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.text = ""
        self.served: dict[str, int] = {}

    def _read(self) -> str:
        """The fault file's text; a change of it starts the error counts again."""
        try:
            text = self.path.read_text()
        except OSError:
            text = ""
        if text != self.text:
            self.text, self.served = text, {}
        return text

    def rule(self) -> tuple[int, int] | None:
        """The first ``STATUS COUNT`` line, or None."""
        for line in self._read().splitlines():
            fields = line.split("#", 1)[0].split()
            if len(fields) == 2 and all(f.isdigit() for f in fields):
                return int(fields[0]), int(fields[1])
        return None

    def error_for(self, url_path: str) -> int | None:
        """The status to answer instead of the file, or None to serve it."""
        path = _url_file(url_path)
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

    def tampers(self, url_path: str) -> bool:
        """Whether the file of ``url_path`` is to be served tampered with (a wheel, while the
        fault file has the ``tamper-wheels`` line)."""
        if not _url_file(url_path).endswith(WHEEL_SUFFIX):
            return False
        with self.lock:
            text = self._read()
        return any(line.split("#", 1)[0].split() == [TAMPER_WHEELS] for line in text.splitlines())


class Handler(http.server.SimpleHTTPRequestHandler):
    faults: FaultState
    tampered = False

    def send_head(self):  # type: ignore[no-untyped-def]
        # Decided before the headers go out, so this request's log line carries the mark.
        self.tampered = self.faults.tampers(self.path)
        status = self.faults.error_for(self.path)
        if status is not None:
            self.send_error(status)  # the standard reason phrase, as a real mirror sends it
            return None
        body: BinaryIO | None = super().send_head()
        if body is None or not self.tampered:
            return body
        # http.server announced the file's size as Content-Length; tampering keeps it.
        return TamperedFile(body, os.fstat(body.fileno()).st_size)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if isinstance(code, http.HTTPStatus):
            code = code.value
        if self.tampered and code == 200:
            self.log_message('"%s" %s %s %s', self.requestline, str(code), str(size),
                             TAMPERED_MARK)
        else:
            super().log_request(code, size)


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
