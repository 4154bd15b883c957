"""The simulated mirror's Prometheus release tarballs for linux-arm64 (sim/releases.py): built
beside the amd64 ones only when asked, from Debian's arm64 builds, both listed in the release's
sha256sums.txt, and the inventory sums of each architecture's tarball at hand. Fake .debs built
here (dpkg-deb) stand in for Debian's, so nothing is downloaded."""

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

DEBS = {
    "prometheus": ("2.42.0+ds-5+deb12u1", ("usr/bin/prometheus", "usr/bin/promtool")),
    "prometheus-alertmanager": ("0.25.0-1+b4", ("usr/bin/prometheus-alertmanager",
                                                "usr/bin/amtool")),
    "prometheus-node-exporter": ("1:1.5.0-1+b6", ("usr/bin/prometheus-node-exporter",)),
}


def fake_deb(cache: Path, package: str, version: str, arch: str, files: tuple[str, ...]) -> Path:
    root = cache / f"build-{package}-{arch}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: {arch}\n"
        "Maintainer: test <test@example.invalid>\nDescription: test\n")
    for path in files:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(f"{arch} {path}".encode())
        (root / path).chmod(0o755)
    deb = cache / f"{package}_{version.rsplit(':', maxsplit=1)[-1]}_{arch}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)], check=True,
                   capture_output=True)
    shutil.rmtree(root)
    return deb


def fill(cache: Path, *arches: str) -> None:
    for arch in arches:
        for package, (version, files) in DEBS.items():
            fake_deb(cache, package, version, arch, files)


def test_arm64_is_opt_in(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    fill(cache, "amd64", "arm64")
    mirror = tmp_path / "mirror"
    releases.build_releases(mirror, cache)
    assert not list(mirror.rglob("*linux-arm64*"))
    for sums in mirror.rglob("sha256sums.txt"):
        assert len(sums.read_text().splitlines()) == 1 and "linux-amd64" in sums.read_text()


def test_arm64_tarballs_hold_the_arm64_binaries(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    fill(cache, "amd64", "arm64")
    mirror = tmp_path / "mirror"
    versions = releases.build_releases(mirror, cache, ("amd64", "arm64"))
    assert versions == {"prometheus": "2.42.0", "alertmanager": "0.25.0", "node_exporter": "1.5.0"}
    where = mirror / "prometheus-releases/node_exporter/releases/download/v1.5.0"
    names = ["node_exporter-1.5.0.linux-amd64.tar.gz", "node_exporter-1.5.0.linux-arm64.tar.gz"]
    assert sorted(p.name for p in where.iterdir()) == sorted([*names, "sha256sums.txt"])
    assert (where / "sha256sums.txt").read_text() == "".join(
        f"{hashlib.sha256((where / n).read_bytes()).hexdigest()}  {n}\n" for n in names)
    with tarfile.open(where / names[1]) as tar:
        member = tar.extractfile("node_exporter-1.5.0.linux-arm64/node_exporter")
        assert member is not None
        assert member.read() == b"arm64 usr/bin/prometheus-node-exporter"
        marker = tar.extractfile("node_exporter-1.5.0.linux-arm64/SIMULATED")
        assert marker is not None and b"linux-arm64.tar.gz" in marker.read()


def test_the_amd64_tarball_is_the_same_with_arm64_beside_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    fill(cache, "amd64", "arm64")
    alone, both = tmp_path / "alone", tmp_path / "both"
    releases.build_releases(alone, cache)
    releases.build_releases(both, cache, ("amd64", "arm64"))
    for project, version in (("prometheus", "2.42.0"), ("node_exporter", "1.5.0")):
        assert releases.tarball_sha256(alone, project, version) == releases.tarball_sha256(
            both, project, version)


def test_inventory_sums_of_each_architecture(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    fill(cache, "amd64", "arm64")
    mirror = tmp_path / "mirror"
    versions = releases.build_releases(mirror, cache, ("amd64", "arm64"))
    arm = releases.release_sums(mirror, versions, "arm64")
    amd = releases.release_sums(mirror, versions, "amd64")
    assert set(arm) == {"monitoring_prometheus_sha256", "monitoring_alertmanager_sha256",
                        "node_health_node_exporter_sha256"}
    assert arm["node_health_node_exporter_sha256"] == releases.tarball_sha256(
        mirror, "node_exporter", "1.5.0", "arm64")
    assert all(arm[name] != amd[name] for name in arm)


def test_each_architecture_takes_its_own_deb(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An arm64 .deb in the cache is not taken for amd64 (nor the other way round), and a
    missing arm64 one is fetched through the arm64-only apt state, never the machine's."""
    cache = tmp_path / "cache"
    cache.mkdir()
    fill(cache, "amd64")
    amd = releases._deb("prometheus", cache)
    assert amd.name.endswith("_amd64.deb")
    fill(cache, "arm64")
    assert releases._deb("prometheus", cache) == amd
    assert releases._deb("prometheus", cache, "arm64").name.endswith("_arm64.deb")

    calls: list[list[str]] = []

    def apt(args: list[str], cwd: Path | None = None) -> str:
        calls.append(args)
        if "download" in args and cwd is not None:
            fake_deb(cwd, "newpkg", "1.0-1", "arm64", ("usr/bin/x",))
        return ""

    monkeypatch.setattr(releases, "_run", apt)
    monkeypatch.setattr(releases.shutil, "which", lambda _tool: "/usr/bin/apt-get")
    fetched = releases._deb("newpkg", cache, "arm64")
    assert fetched == cache / "newpkg_1.0-1_arm64.deb" and fetched.is_file()
    update, download = calls
    assert update[-2:] == ["update", "-q"] and download[-3:] == ["download", "-q", "newpkg"]
    state = cache / "apt-arm64"
    for options in (update, download):
        assert "APT::Architecture=arm64" in options and "APT::Architectures=arm64" in options
        assert f"Dir::State::Lists={state / 'lists'}" in options
        assert f"Dir::State::status={state / 'status'}" in options


def test_a_version_that_differs_between_architectures_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    fill(cache, "amd64")
    for package, (_version, files) in DEBS.items():
        fake_deb(cache, package, "9.9.9-1", "arm64", files)
    with pytest.raises(EnvironmentProblem, match=r"arm64 build of prometheus is prometheus 9\.9\.9"):
        releases.build_releases(tmp_path / "mirror", cache, ("amd64", "arm64"))


def test_unknown_architectures_are_refused(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentProblem, match="not riscv64"):
        releases.build_releases(tmp_path / "mirror", tmp_path, ("riscv64",))
