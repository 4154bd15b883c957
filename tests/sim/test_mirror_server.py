"""The simulated package mirror's server (provisioner/sim/tools/mirror_server.py), run here on
a loopback port over a temporary mirror directory: files as http.server serves them, and the
mirror-503xN fault counted per package file."""

from __future__ import annotations

import functools
import http.server
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.sim.tools import mirror_server


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "mirror"
    (root / "pool").mkdir(parents=True)
    (root / "pool" / "libnccl2_2.27.7-1_amd64.deb").write_bytes(b"deb bytes")
    (root / "pool" / "cuda-12-8.rpm").write_bytes(b"rpm bytes")
    (root / "Packages").write_text("Package: libnccl2\n")
    faults = tmp_path / "faults"
    handler = functools.partial(mirror_server.Handler, directory=str(root))
    monkeypatch.setattr(mirror_server.Handler, "faults", mirror_server.FaultState(faults),
                        raising=False)
    monkeypatch.setattr(mirror_server.Handler, "log_message", lambda *_args: None)
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
