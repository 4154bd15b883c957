"""The simulated package mirror's server (provisioner/sim/tools/mirror_server.py), run here on
a loopback port over a temporary mirror directory: files as http.server serves them, and the
mirror-503xN fault counted per package file, and mirror-tampered-wheels changing every wheel's
bytes but not its size."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.sim.tools import mirror_server

WHEEL = "torch-2.7.1-cp311-cp311-manylinux_2_28_x86_64.whl"
# Larger than the tampered span and than one of http.server's reads (64 KiB): served in two.
WHEEL_BYTES = b"PK\x03\x04" + bytes(range(256)) * 300 + b"PK\x05\x06"
WHEEL_SHA = hashlib.sha256(WHEEL_BYTES).hexdigest()


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "mirror"
    (root / "pool").mkdir(parents=True)
    (root / "pool" / "libnccl2_2.27.7-1_amd64.deb").write_bytes(b"deb bytes")
    (root / "pool" / "cuda-12-8.rpm").write_bytes(b"rpm bytes")
    (root / "Packages").write_text("Package: libnccl2\n")
    (root / "cp311-x86_64").mkdir()
    (root / "cp311-x86_64" / WHEEL).write_bytes(WHEEL_BYTES)
    (root / "cp311-x86_64" / "requirements.txt").write_text(f"torch --hash=sha256:{WHEEL_SHA}\n")
    faults = tmp_path / "faults"
    handler = functools.partial(mirror_server.Handler, directory=str(root))
    monkeypatch.setattr(mirror_server.Handler, "faults", mirror_server.FaultState(faults),
                        raising=False)
    logger = logging.getLogger("mirror-test")
    monkeypatch.setattr(mirror_server.Handler, "log_message",
                        lambda _self, fmt, *args: logger.info(fmt, *args))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", faults
    finally:
        server.shutdown()
        server.server_close()


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_without_a_fault_every_file_is_served(mirror: tuple[str, Path]) -> None:
    base, _faults = mirror
    assert [status(f"{base}/pool/libnccl2_2.27.7-1_amd64.deb") for _ in range(3)] == [200] * 3
    with urllib.request.urlopen(f"{base}/pool/libnccl2_2.27.7-1_amd64.deb", timeout=10) as r:
        assert r.read() == b"deb bytes"


def test_the_first_n_requests_of_each_package_get_503_and_indexes_are_served(
        mirror: tuple[str, Path]) -> None:
    base, faults = mirror
    faults.write_text("503 2\n")
    deb = f"{base}/pool/libnccl2_2.27.7-1_amd64.deb"
    assert status(f"{base}/Packages") == 200
    assert [status(deb) for _ in range(4)] == [503, 503, 200, 200]
    # Counted per file: the rpm has its own two.
    assert [status(f"{base}/pool/cuda-12-8.rpm") for _ in range(3)] == [503, 503, 200]
    assert status(f"{base}/pool/missing.deb") == 503  # the fault answers before the lookup


def test_a_new_fault_text_starts_the_counts_again_and_an_empty_one_heals(
        mirror: tuple[str, Path]) -> None:
    base, faults = mirror
    deb = f"{base}/pool/libnccl2_2.27.7-1_amd64.deb"
    faults.write_text("503 1\n")
    assert [status(deb) for _ in range(2)] == [503, 200]
    faults.write_text("503 3\n")
    assert [status(deb) for _ in range(4)] == [503, 503, 503, 200]
    faults.write_text("")
    assert status(deb) == 200
    faults.write_text("junk line\n")  # a line that is no rule is ignored
    assert status(deb) == 200


def fetch(url: str) -> tuple[bytes, str | None]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read(), response.headers["Content-Length"]


def test_tampered_wheels_keep_their_size_but_not_their_sha256_until_the_fault_is_gone(
        mirror: tuple[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    base, faults = mirror
    wheel = f"{base}/cp311-x86_64/{WHEEL}"
    deb = f"{base}/pool/libnccl2_2.27.7-1_amd64.deb"
    faults.write_text("tamper-wheels\n")
    with caplog.at_level(logging.INFO, logger="mirror-test"):
        body, length = fetch(wheel)
    assert length == str(len(WHEEL_BYTES)) and len(body) == len(WHEEL_BYTES)
    assert hashlib.sha256(body).hexdigest() != WHEEL_SHA
    assert body == mirror_server.tamper(WHEEL_BYTES)
    assert fetch(wheel)[0] == body  # the same swap every time
    # Changed in the middle: the zip's start and end (what a quick look shows) are the original's.
    changed = [i for i, (a, b) in enumerate(zip(body, WHEEL_BYTES, strict=True)) if a != b]
    size = len(WHEEL_BYTES)
    assert changed and size // 4 < changed[0] and changed[-1] < size * 3 // 4
    # http.server's line (its size is always "-") with the mark.
    assert [record.getMessage() for record in caplog.records] == [
        f'"GET /cp311-x86_64/{WHEEL} HTTP/1.1" 200 - {mirror_server.TAMPERED_MARK}']
    # Everything else is the mirror's own: packages, indexes, the hashed requirements.
    assert fetch(deb)[0] == b"deb bytes"
    assert fetch(f"{base}/Packages")[0] == b"Package: libnccl2\n"
    assert fetch(f"{base}/cp311-x86_64/requirements.txt")[0].decode().endswith(f"{WHEEL_SHA}\n")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mirror-test"):
        fetch(deb)
    assert caplog.records and all(mirror_server.TAMPERED_MARK not in record.getMessage()
                                  for record in caplog.records)

    faults.write_text("")
    assert fetch(wheel) == (WHEEL_BYTES, str(len(WHEEL_BYTES)))


def test_a_head_request_for_a_tampered_wheel_announces_the_files_size(
        mirror: tuple[str, Path]) -> None:
    base, faults = mirror
    faults.write_text("tamper-wheels\n")
    request = urllib.request.Request(f"{base}/cp311-x86_64/{WHEEL}", method="HEAD")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Length"] == str(len(WHEEL_BYTES))
        assert response.read() == b""


def test_both_mirror_faults_at_once(mirror: tuple[str, Path]) -> None:
    base, faults = mirror
    faults.write_text("503 1\ntamper-wheels\n")
    deb = f"{base}/pool/libnccl2_2.27.7-1_amd64.deb"
    assert [status(deb) for _ in range(2)] == [503, 200]
    assert fetch(deb)[0] == b"deb bytes"
    body, length = fetch(f"{base}/cp311-x86_64/{WHEEL}")
    assert length == str(len(WHEEL_BYTES)) and body == mirror_server.tamper(WHEEL_BYTES)
    faults.write_text("tamper-wheels  # a comment is ignored\n")
    assert status(deb) == 200
    assert fetch(f"{base}/cp311-x86_64/{WHEEL}")[0] != WHEEL_BYTES


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 1000])
def test_tamper_keeps_the_length_and_changes_every_non_empty_file(size: int) -> None:
    data = bytes(i % 251 for i in range(size))
    out = mirror_server.tamper(data)
    assert len(out) == size and (out != data or size == 0)
    changed = sum(a != b for a, b in zip(out, data, strict=True))
    assert changed == min(size, mirror_server.TAMPER_SPAN)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 16])
def test_the_streamed_wheel_is_tampered_alike_whatever_the_read_size(chunk: int) -> None:
    stream = mirror_server.TamperedFile(io.BytesIO(WHEEL_BYTES), len(WHEEL_BYTES))
    parts = iter(lambda: stream.read(chunk), b"")
    assert b"".join(parts) == mirror_server.tamper(WHEEL_BYTES)
    stream.close()
