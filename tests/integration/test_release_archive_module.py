"""The release_archive module through ansible-playbook on localhost, against tarballs served by a
local HTTP server that counts the requests: a first install (files, modes, links, record), a rerun
that downloads nothing, the checksum (pinned and from sha256sums.txt), unsafe archives refused with
nothing written, a wrong top directory, check mode, an occupied link path, and a new version beside
the old one taking the links."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import subprocess
import tarfile
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.localplay import run_module

SCRIPT = b"#!/bin/sh\necho prometheus 2.53.4\n"


class Server:
    """A ThreadingHTTPServer on 127.0.0.1 serving ``root``; ``hits`` counts GETs per path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hits: Counter[str] = Counter()
        hits = self.hits

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self) -> None:
                hits[self.path] += 1
                super().do_GET()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "srv"
    root.mkdir()
    srv = Server(root)
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()
    thread.join(5)


def member(name: str, data: bytes = b"", mode: int = 0o644, kind: bytes = tarfile.REGTYPE,
           linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = 1700000000
    info.linkname = linkname
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def release(top: str, version: str = "2.53.4") -> list[tuple[tarfile.TarInfo, bytes]]:
    """Upstream's layout: one top directory, two executables, a licence, a console file."""
    script = SCRIPT.replace(b"2.53.4", version.encode())
    return [member(top + "/", mode=0o755, kind=tarfile.DIRTYPE),
            member(top + "/prometheus", script, 0o6775),  # setuid/setgid, group write: dropped
            member(top + "/promtool", script, 0o755),
            member(top + "/LICENSE", b"Apache\n", 0o664),
            member(top + "/consoles/", mode=0o775, kind=tarfile.DIRTYPE),
            member(top + "/consoles/index.html", b"<html/>\n"),
            member(top + "/tool", kind=tarfile.SYMTYPE, linkname="promtool")]


def publish(srv: Server, name: str, members: list[tuple[tarfile.TarInfo, bytes]],
            sums: dict[str, str] | None = None) -> str:
    """Write the tarball (and sha256sums.txt: every published tarball's line, or ``sums``);
    its sha256."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    (srv.root / name).write_bytes(buf.getvalue())
    digest = hashlib.sha256(buf.getvalue()).hexdigest()
    if sums is None:
        sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(srv.root.glob("*.tar.gz"))}
    (srv.root / "sha256sums.txt").write_text("".join(f"{d}  {n}\n" for n, d in sums.items()))
    return digest


def run(tmp_path: Path, args: dict[str, Any], *extra: str) -> dict[str, Any]:
    """One play running release_archive; what it registered."""
    return run_module(tmp_path, "gpucluster.provisioner.release_archive", args, *extra)


TOP = "prometheus-2.53.4.linux-amd64"
NAME = TOP + ".tar.gz"


def tree(path: Path) -> dict[str, str]:
    """Every path under ``path`` (relative) to its kind and mode, or a link's target."""
    out = {}
    for p in sorted(path.rglob("*")):
        rel = str(p.relative_to(path))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        else:
            out[rel] = ("d" if p.is_dir() else "f") + oct(p.stat().st_mode & 0o7777)
    return out


def test_installs_links_and_records_and_a_rerun_downloads_nothing(tmp_path: Path,
                                                                  server: Server) -> None:
    digest = publish(server, NAME, release(TOP))
    opt, bin_dir = tmp_path / "opt", tmp_path / "bin"
    args = {"url": f"{server.url}/{NAME}", "dest": str(opt),
            "links": {str(bin_dir / "prometheus"): "prometheus",
                      str(bin_dir / "promtool"): "promtool"}}
    out = run(tmp_path, args)
    top = opt / TOP
    assert {k: out[k] for k in ("changed", "path", "sha256", "downloaded", "links_changed")} == {
        "changed": True, "path": str(top), "sha256": digest, "downloaded": True,
        "links_changed": [str(bin_dir / "prometheus"), str(bin_dir / "promtool")]}
    assert server.hits == {"/sha256sums.txt": 1, "/" + NAME: 1}
    assert tree(opt) == {
        TOP: "d0o755",
        f"{TOP}/.release_archive.json": "f0o644",
        f"{TOP}/LICENSE": "f0o644",
        f"{TOP}/consoles": "d0o755",
        f"{TOP}/consoles/index.html": "f0o644",
        f"{TOP}/prometheus": "f0o755",
        f"{TOP}/promtool": "f0o755",
        f"{TOP}/tool": "-> promtool",
    }
    assert (top / "prometheus").read_bytes() == SCRIPT
    assert (top / "prometheus").stat().st_mtime == 1700000000
    assert os.readlink(bin_dir / "prometheus") == str(top / "prometheus")
    assert os.readlink(bin_dir / "promtool") == str(top / "promtool")
    assert subprocess.run([str(bin_dir / "prometheus")], capture_output=True,
                          check=True).stdout == b"prometheus 2.53.4\n"
    assert json.loads((top / ".release_archive.json").read_text()) == {
        "url": f"{server.url}/{NAME}", "sha256": digest,
        "files": ["LICENSE", "consoles/index.html", "prometheus", "promtool", "tool"]}

    again = run(tmp_path, args)
    assert again == {**out, "changed": False, "downloaded": False, "links_changed": []}
    assert server.hits == {"/sha256sums.txt": 1, "/" + NAME: 1}  # nothing fetched

    # A link removed by hand is put back, still without a download; a file of the record
    # missing means a new install.
    (bin_dir / "promtool").unlink()
    (bin_dir / "prometheus").unlink()
    (bin_dir / "prometheus").symlink_to("/nonexistent")
    out = run(tmp_path, args)
    assert (out["changed"], out["downloaded"], out["links_changed"]) == (
        True, False, [str(bin_dir / "prometheus"), str(bin_dir / "promtool")])
    assert os.readlink(bin_dir / "prometheus") == str(top / "prometheus")
    assert server.hits == {"/sha256sums.txt": 1, "/" + NAME: 1}
    (top / "consoles" / "index.html").unlink()
    out = run(tmp_path, args)
    assert (out["changed"], out["downloaded"], out["links_changed"]) == (True, True, [])
    assert (top / "consoles" / "index.html").read_bytes() == b"<html/>\n"
    assert server.hits == {"/sha256sums.txt": 2, "/" + NAME: 2}
    assert sorted(p.name for p in opt.iterdir()) == [TOP]  # no temporary file or directory left


def test_a_pinned_sum_is_used_and_a_mismatch_installs_nothing(tmp_path: Path,
                                                              server: Server) -> None:
    digest = publish(server, NAME, release(TOP))
    opt = tmp_path / "opt"
    args = {"url": f"{server.url}/{NAME}", "dest": str(opt), "sha256": "0" * 64,
            "links": {str(tmp_path / "bin" / "prometheus"): "prometheus"}}
    out = run(tmp_path, args)
    assert out["failed"] and out["msg"] == (
        f"checksum mismatch for {server.url}/{NAME}: expected {'0' * 64}, got {digest}")
    assert list(opt.iterdir()) == [] and not (tmp_path / "bin").exists()
    assert "/sha256sums.txt" not in server.hits  # a pinned sum reads no checksums file

    out = run(tmp_path, {**args, "sha256": digest.upper()})
    assert (out["changed"], out["downloaded"], out["sha256"]) == (True, True, digest)
    assert (opt / TOP / "promtool").is_file()
    assert server.hits == {"/" + NAME: 2}
    # The record holds the pinned sum: the rerun fetches nothing; another pin reinstalls.
    assert run(tmp_path, {**args, "sha256": digest})["changed"] is False
    out = run(tmp_path, {**args, "sha256": "1" * 64})
    assert out["failed"] and out["msg"].startswith("checksum mismatch")
    assert (opt / TOP / "promtool").is_file()  # the installed version is left as it was
    assert server.hits == {"/" + NAME: 3}

    out = run(tmp_path, {**args, "sha256": "abc"})
    assert out["failed"] and out["msg"] == "sha256 must be 64 hexadecimal digits, not 'abc'"


def test_the_sums_file_must_name_the_tarball(tmp_path: Path, server: Server) -> None:
    publish(server, NAME, release(TOP), sums={"alertmanager-0.27.0.linux-amd64.tar.gz": "1" * 64})
    opt = tmp_path / "opt"
    out = run(tmp_path, {"url": f"{server.url}/{NAME}", "dest": str(opt)})
    assert out["failed"] and out["msg"] == (
        f"the checksums file {server.url}/sha256sums.txt has no sha256 line for {NAME}")
    assert "/" + NAME not in server.hits and not opt.exists()

    # A checksums file elsewhere (checksums_url), with the binary-mode '*' mark.
    digest = hashlib.sha256((server.root / NAME).read_bytes()).hexdigest()
    (server.root / "SUMS").write_text(f"{'2' * 64}  other.tar.gz\n{digest} *{NAME}\n")
    out = run(tmp_path, {"url": f"{server.url}/{NAME}", "dest": str(opt),
                         "checksums_url": f"{server.url}/SUMS"})
    assert (out["changed"], out["sha256"]) == (True, digest)
    assert (opt / TOP / "prometheus").is_file()

    # A missing checksums file: the URL and the server's answer in one line.
    out = run(tmp_path, {"url": f"{server.url}/{NAME}", "dest": str(tmp_path / "other"),
                         "checksums_url": f"{server.url}/missing.txt"})
    assert out["failed"] and out["msg"] == (
        f"cannot download {server.url}/missing.txt: HTTP 404 File not found")
    # Nothing listening: the connection's error.
    port = server.httpd.server_address[1]
    server.httpd.shutdown()
    server.httpd.server_close()
    out = run(tmp_path, {"url": f"http://127.0.0.1:{port}/{NAME}", "dest": str(tmp_path / "o2")})
    assert out["failed"] and out["msg"].startswith(
        f"cannot download http://127.0.0.1:{port}/sha256sums.txt: ")
    assert "onnection refused" in out["msg"] and "\n" not in out["msg"]


@pytest.mark.parametrize(("bad", "reason"), [
    (member("../evil", b"x"), "member '../evil' has a '..' component"),
    (member(f"{TOP}/../../evil", b"x"), f"member '{TOP}/../../evil' has a '..' component"),
    (member("/ABS/evil", b"x"), "member '/ABS/evil' has an absolute path"),
    (member(f"{TOP}/hard", kind=tarfile.LNKTYPE, linkname=f"{TOP}/promtool"),
     f"member '{TOP}/hard' is a hard link"),
    (member(f"{TOP}/null", kind=tarfile.CHRTYPE),
     f"member '{TOP}/null' is a device, FIFO or other special file"),
    (member(f"{TOP}/out", kind=tarfile.SYMTYPE, linkname="../../evil"),
     f"symbolic link '{TOP}/out' points outside the top directory (../../evil)"),
    (member(f"{TOP}/etc", kind=tarfile.SYMTYPE, linkname="/etc"),
     f"symbolic link '{TOP}/etc' points outside the top directory (/etc)"),
    (member("evil.txt", b"x"), "member 'evil.txt' is not a directory at the top"),
])
def test_unsafe_members_are_refused_and_nothing_is_written(tmp_path: Path, server: Server,
                                                           bad: Any, reason: str) -> None:
    if bad[0].name.startswith("/ABS"):
        bad[0].name = str(tmp_path / "evil")
        reason = reason.replace("/ABS/evil", str(tmp_path / "evil"))
    publish(server, NAME, [*release(TOP), bad])
    opt = tmp_path / "a" / "b" / "opt"
    out = run(tmp_path, {"url": f"{server.url}/{NAME}", "dest": str(opt),
                         "links": {str(tmp_path / "bin" / "prometheus"): "prometheus"}})
    assert out["failed"] and out["msg"] == f"refusing to unpack {server.url}/{NAME}: {reason}"
    assert list(opt.iterdir()) == []  # no download or scratch directory left either
    assert sorted(p.name for p in tmp_path.rglob("*evil*")) == []
    assert not (tmp_path / "bin").exists()


def test_a_link_chain_out_of_the_top_directory_is_refused(tmp_path: Path, server: Server) -> None:
    """Each link alone stays inside lexically; resolved on disk, the second leaves."""
    publish(server, NAME, [*release(TOP),
                           member(f"{TOP}/sub/", mode=0o755, kind=tarfile.DIRTYPE),
                           member(f"{TOP}/sub/up", kind=tarfile.SYMTYPE, linkname=".."),
                           member(f"{TOP}/esc", kind=tarfile.SYMTYPE, linkname="sub/up/../..")])
    opt = tmp_path / "opt"
    out = run(tmp_path, {"url": f"{server.url}/{NAME}", "dest": str(opt)})
    assert out["failed"] and out["msg"] == (f"refusing to unpack {server.url}/{NAME}: symbolic "
                                            f"link '{TOP}/esc' leads outside the top directory")
    assert list(opt.iterdir()) == []


def test_a_wrong_top_directory_is_refused(tmp_path: Path, server: Server) -> None:
    publish(server, NAME, release("prometheus-2.53.3.linux-amd64"))
    out = run(tmp_path, {"url": f"{server.url}/{NAME}", "dest": str(tmp_path / "opt")})
    assert out["failed"] and out["msg"] == (
        f"refusing to unpack {server.url}/{NAME}: its top directory is "
        f"prometheus-2.53.3.linux-amd64/, not {TOP}/ (expected from the file name)")
    assert list((tmp_path / "opt").iterdir()) == []
    out = run(tmp_path, {"url": f"{server.url}/prometheus.zip", "dest": str(tmp_path / "opt")})
    assert out["failed"] and out["msg"] == (
        f"the file name of {server.url}/prometheus.zip must end in .tar.gz or .tgz")


def test_check_mode_downloads_and_changes_nothing(tmp_path: Path, server: Server) -> None:
    digest = publish(server, NAME, release(TOP))
    opt, link = tmp_path / "opt", tmp_path / "bin" / "prometheus"
    args = {"url": f"{server.url}/{NAME}", "dest": str(opt), "links": {str(link): "prometheus"}}
    out = run(tmp_path, args, "--check")
    assert {k: out[k] for k in ("changed", "path", "sha256", "downloaded", "links_changed")} == {
        "changed": True, "path": str(opt / TOP), "sha256": "", "downloaded": False,
        "links_changed": [str(link)]}
    assert not opt.exists() and not link.parent.exists() and server.hits == {}

    run(tmp_path, args)
    link.unlink()
    out = run(tmp_path, args, "--check")
    assert (out["changed"], out["sha256"], out["links_changed"]) == (True, digest, [str(link)])
    assert not os.path.lexists(link)
    assert run(tmp_path, args, "--check")["changed"] is True
    run(tmp_path, args)
    assert run(tmp_path, args, "--check")["changed"] is False
    assert server.hits == {"/sha256sums.txt": 1, "/" + NAME: 1}


def test_an_occupied_link_path_is_refused_before_anything_changes(tmp_path: Path,
                                                                  server: Server) -> None:
    publish(server, NAME, release(TOP))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "promtool").write_text("a distro's promtool\n")
    (bin_dir / "consoles").mkdir()
    args = {"url": f"{server.url}/{NAME}", "dest": str(tmp_path / "opt"),
            "links": {str(bin_dir / "prometheus"): "prometheus",
                      str(bin_dir / "promtool"): "promtool"}}
    out = run(tmp_path, args)
    assert out["failed"] and out["msg"] == (
        f"links: {bin_dir / 'promtool'} is a file, not a symbolic link: refusing to replace it")
    out = run(tmp_path, {**args, "links": {str(bin_dir / "consoles"): "consoles"}})
    assert out["failed"] and out["msg"] == (
        f"links: {bin_dir / 'consoles'} is a directory, not a symbolic link: refusing to replace it")
    assert server.hits == {} and not (tmp_path / "opt").exists()
    assert sorted(p.name for p in bin_dir.iterdir()) == ["consoles", "promtool"]
    assert (bin_dir / "promtool").read_text() == "a distro's promtool\n"

    # A link to a path the archive lacks: refused after the download, nothing installed.
    out = run(tmp_path, {**args, "links": {str(bin_dir / "x"): "no/such"}})
    assert out["failed"] and out["msg"] == f"links point to no/such, not in {server.url}/{NAME}"
    assert list((tmp_path / "opt").iterdir()) == [] and not (bin_dir / "x").exists()
    out = run(tmp_path, {**args, "links": {str(bin_dir / "x"): "../etc/passwd"}})
    assert out["failed"] and "must be a path inside the top directory" in out["msg"]


def test_a_new_version_installs_beside_the_old_one_and_takes_the_links(tmp_path: Path,
                                                                       server: Server) -> None:
    publish(server, NAME, release(TOP))
    new_top = "prometheus-3.0.1.linux-amd64"
    new_digest = publish(server, new_top + ".tar.gz", release(new_top, "3.0.1"))
    opt, link = tmp_path / "opt", tmp_path / "bin" / "prometheus"
    links = {str(link): "prometheus", str(tmp_path / "bin" / "tool"): "tool"}
    run(tmp_path, {"url": f"{server.url}/{NAME}", "dest": str(opt), "links": links})
    old_tree = tree(opt / TOP)
    out = run(tmp_path, {"url": f"{server.url}/{new_top}.tar.gz", "dest": str(opt),
                         "links": links})
    assert {k: out[k] for k in ("changed", "path", "sha256", "downloaded", "links_changed")} == {
        "changed": True, "path": str(opt / new_top), "sha256": new_digest, "downloaded": True,
        "links_changed": sorted(links)}
    assert sorted(p.name for p in opt.iterdir()) == [TOP, new_top]
    assert tree(opt / TOP) == old_tree  # the old version is left as it was
    assert os.readlink(link) == str(opt / new_top / "prometheus")
    assert subprocess.run([str(link)], capture_output=True, check=True).stdout == (
        b"prometheus 3.0.1\n")
    assert subprocess.run([str(tmp_path / "bin" / "tool")], capture_output=True,
                          check=True).stdout == b"prometheus 3.0.1\n"
    # Back to the old URL: its record still matches, so only the links move.
    out = run(tmp_path, {"url": f"{server.url}/{NAME}", "dest": str(opt), "links": links})
    assert (out["changed"], out["downloaded"], out["links_changed"]) == (
        True, False, sorted(links))
    assert os.readlink(link) == str(opt / TOP / "prometheus")


def test_a_directory_without_a_record_is_replaced(tmp_path: Path, server: Server) -> None:
    publish(server, NAME, release(TOP))
    stale = tmp_path / "opt" / TOP
    stale.mkdir(parents=True)
    (stale / "prometheus").write_text("half unpacked by hand\n")
    out = run(tmp_path, {"url": f"{server.url}/{NAME}", "dest": str(tmp_path / "opt")})
    assert (out["changed"], out["downloaded"]) == (True, True)
    assert (stale / "prometheus").read_bytes() == SCRIPT
    assert sorted(p.name for p in (tmp_path / "opt").iterdir()) == [TOP]
