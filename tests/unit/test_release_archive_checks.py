"""release_archive's pure parts: the top directory a tarball's name promises, the checksums
file's line, the checksums file's default place and the member checks (the module through
ansible-playbook: tests/integration/test_release_archive_module.py)."""

from __future__ import annotations

import tarfile
from typing import Any

import pytest

from tests.unit.collection_module import load_module

release_archive: Any = load_module("release_archive")
TOP = "prometheus-2.53.4.linux-amd64"


@pytest.mark.parametrize(("name", "top"), [
    (TOP + ".tar.gz", TOP),
    ("node_exporter-1.8.2.linux-amd64.tgz", "node_exporter-1.8.2.linux-amd64"),
    ("prometheus.zip", None),
    (".tar.gz", None),
    ("..tgz", None),
    ("prometheus.tar.xz", None),
])
def test_top_directory_from_the_file_name(name: str, top: str | None) -> None:
    assert release_archive.top_directory(name) == top


def test_url_basename_and_default_checksums_url() -> None:
    url = "https://u:p@example.org/v2.53.4/" + TOP + ".tar.gz?x=1#f"
    assert release_archive.url_basename(url) == TOP + ".tar.gz"
    assert release_archive.default_checksums_url(url) == (
        "https://u:p@example.org/v2.53.4/sha256sums.txt")
    assert release_archive.redact(url) == "https://example.org/v2.53.4/" + TOP + ".tar.gz?x=1#f"


def test_sum_for_reads_the_tarballs_line_only() -> None:
    text = ("a" * 64 + "  " + TOP + ".tar.gz.sig\n"
            + "B" * 64 + " *" + TOP + ".tar.gz\n"
            + "not a line\n")
    assert release_archive.sum_for(text, TOP + ".tar.gz") == "b" * 64
    assert release_archive.sum_for(text, "other.tar.gz") is None
    assert release_archive.sum_for("xyz  " + TOP + ".tar.gz\n", TOP + ".tar.gz") is None


def info(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = linkname
    return member


def test_check_members_accepts_upstreams_layout() -> None:
    members = [info(TOP + "/", tarfile.DIRTYPE), info(TOP + "/prometheus"),
               info(TOP + "/lib/libx.so.1"), info(TOP + "/lib/libx.so", tarfile.SYMTYPE, "libx.so.1"),
               info(TOP + "/up", tarfile.SYMTYPE, "lib/../prometheus")]
    checked = release_archive.check_members(members, TOP)
    assert [rel for rel, _m in checked] == ["", "prometheus", "lib/libx.so.1", "lib/libx.so", "up"]


@pytest.mark.parametrize(("members", "reason"), [
    ([info(TOP + "/a"), info(TOP + "/a")], f"member '{TOP}/a' appears twice"),
    ([info(TOP + "/d", tarfile.SYMTYPE, "sub"), info(TOP + "/d/x")],
     f"member '{TOP}/d/x' lies under the symbolic link '{TOP}/d'"),
    ([info(TOP + "/a"), info("other/b")],
     f"it has more than one top directory (other, {TOP}), not the single {TOP}/"),
    ([info(TOP + "/fifo", tarfile.FIFOTYPE)],
     f"member '{TOP}/fifo' is a device, FIFO or other special file"),
    ([info(TOP, tarfile.SYMTYPE, TOP)], f"member '{TOP}' is not a directory at the top"),
    ([info("./" + TOP + "/../x")], f"member './{TOP}/../x' has a '..' component"),
])
def test_check_members_refuses(members: list[tarfile.TarInfo], reason: str) -> None:
    assert release_archive.check_members(members, TOP) == reason
