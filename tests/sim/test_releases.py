"""The simulated mirror's Prometheus release tarballs (sim/releases.py): laid out as the project
publishes them, their sha256sums.txt right, the versions read from Debian's, rebuilt only when
the .deb changes. Fake .debs built here (dpkg-deb), so nothing is downloaded."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from provisioner.errors import EnvironmentProblem
from provisioner.sim import releases

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")


def fake_deb(cache: Path, package: str, version: str, files: dict[str, bytes]) -> Path:
    root = cache / f"build-{package}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: amd64\n"
        "Maintainer: test <test@example.invalid>\nDescription: test\n")
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        (root / path).chmod(0o755)
    deb = cache / f"{package}_{version.rsplit(':', maxsplit=1)[-1]}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)], check=True,
                   capture_output=True)
    shutil.rmtree(root)
    return deb


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir()
    fake_deb(cache, "prometheus", "2.42.0+ds-5+deb12u1",
             {"usr/bin/prometheus": b"#!/bin/sh\necho prometheus\n",
              "usr/bin/promtool": b"#!/bin/sh\necho promtool\n"})
    fake_deb(cache, "prometheus-alertmanager", "0.25.0-1+b4",
             {"usr/bin/prometheus-alertmanager": b"am", "usr/bin/amtool": b"amtool"})
    fake_deb(cache, "prometheus-node-exporter", "1:1.5.0-1+b6",
             {"usr/bin/prometheus-node-exporter": b"ne"})
    return cache


@pytest.mark.parametrize(("debian", "upstream"), [
    ("2.42.0+ds-5+deb12u1", "2.42.0"), ("0.25.0-1+b4", "0.25.0"), ("1:1.5.0-1+b6", "1.5.0"),
    ("3.5.0", "3.5.0")])
def test_upstream_version_drops_epoch_repack_and_revision(debian: str, upstream: str) -> None:
    assert releases.upstream_version(debian) == upstream


def test_upstream_version_refuses_what_is_not_a_version() -> None:
    with pytest.raises(EnvironmentProblem, match="cannot read an upstream version"):
        releases.upstream_version("latest")


def test_tarballs_are_laid_out_as_the_project_publishes_them(tmp_path: Path, cache: Path) -> None:
    mirror = tmp_path / "mirror"
    versions = releases.build_releases(mirror, cache)
    assert versions == {"prometheus": "2.42.0", "alertmanager": "0.25.0", "node_exporter": "1.5.0"}
    expected = {
        "prometheus": ("2.42.0", {"prometheus": b"#!/bin/sh\necho prometheus\n",
                                  "promtool": b"#!/bin/sh\necho promtool\n"}),
        "alertmanager": ("0.25.0", {"alertmanager": b"am", "amtool": b"amtool"}),
        "node_exporter": ("1.5.0", {"node_exporter": b"ne"}),
    }
    for project, (version, binaries) in expected.items():
        where = mirror / "prometheus-releases" / project / "releases" / "download" / f"v{version}"
        name = f"{project}-{version}.linux-amd64.tar.gz"
        assert sorted(p.name for p in where.iterdir()) == sorted([name, "sha256sums.txt"])
        digest = hashlib.sha256((where / name).read_bytes()).hexdigest()
        assert (where / "sha256sums.txt").read_text() == f"{digest}  {name}\n"
        top = f"{project}-{version}.linux-amd64"
        with tarfile.open(where / name) as tar:
            members = {m.name: m for m in tar.getmembers()}
            assert set(members) == {top, f"{top}/SIMULATED", *(f"{top}/{b}" for b in binaries)}
            assert members[top].isdir()
            for binary, data in binaries.items():
                member = members[f"{top}/{binary}"]
                assert member.mode == 0o755 and member.uid == 0
                extracted = tar.extractfile(member)
                assert extracted is not None and extracted.read() == data
            marker = tar.extractfile(members[f"{top}/SIMULATED"])
            assert marker is not None and b"SIMULATED" in marker.read()


def test_a_second_build_changes_no_file_and_a_new_deb_rebuilds(tmp_path: Path,
                                                               cache: Path) -> None:
    mirror = tmp_path / "mirror"
    releases.build_releases(mirror, cache)
    files = sorted(p for p in mirror.rglob("*") if p.is_file())
    before = {p: p.stat().st_mtime_ns for p in files}
    releases.build_releases(mirror, cache)
    assert {p: p.stat().st_mtime_ns for p in files} == before

    # Debian's next build of node_exporter: a new tarball and sum beside the old release.
    for old in cache.glob("prometheus-node-exporter_*.deb"):
        old.unlink()
    fake_deb(cache, "prometheus-node-exporter", "1.5.1-1", {"usr/bin/prometheus-node-exporter": b"new"})
    versions = releases.build_releases(mirror, cache)
    assert versions["node_exporter"] == "1.5.1"
    new = mirror / "prometheus-releases/node_exporter/releases/download/v1.5.1"
    assert (new / "node_exporter-1.5.1.linux-amd64.tar.gz").is_file()


def test_runtime_files_are_what_debians_builds_read_under_usr_share(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    fake_deb(cache, "prometheus", "2.42.0+ds-5",
             {"usr/bin/prometheus": b"p", "usr/bin/promtool": b"t",
              "usr/share/prometheus/web/static/css/alerts.css": b"css"})
    fake_deb(cache, "prometheus-alertmanager", "0.25.0-1",
             {"usr/bin/prometheus-alertmanager": b"a", "usr/bin/amtool": b"t",
              "usr/share/prometheus/alertmanager/default.tmpl": b"{{ define }}",
              "usr/share/doc/prometheus-alertmanager/copyright": b"not this"})
    fake_deb(cache, "prometheus-node-exporter", "1.5.0-1", {"usr/bin/prometheus-node-exporter": b"n"})
    assert releases.runtime_files(cache) == {
        "usr/share/prometheus/web/static/css/alerts.css": b"css",
        "usr/share/prometheus/alertmanager/default.tmpl": b"{{ define }}",
    }
