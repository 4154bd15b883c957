"""The Prometheus project's release tarballs, as the simulated mirror serves them to EL nodes.

EL 9 has no Prometheus, Alertmanager or node_exporter package in its own repositories: the
monitoring and node_health roles install the project's release tarballs there, laid out as the
project publishes them (``URL/<project>/releases/download/v<V>/<project>-<V>.linux-amd64.tar.gz``,
with a ``sha256sums.txt`` beside each) and checked by SHA-256 before anything is unpacked.

The real tarballs are not reachable from here. The simulator builds tarballs of the same
layout from Debian 12's builds of the same programs (downloaded once with ``apt-get download``
and cached): the version in each name is the upstream version Debian built, which is what the
binaries report, so the roles' version checks measure the real thing. Each tarball holds a
``SIMULATED`` file that says where its binaries come from. Identical inputs leave every file
(and its mtime) as it is.

Tarballs are built for linux-amd64, and for linux-arm64 too when asked (an aarch64 node): from
Debian's arm64 builds, fetched through a private apt state that sees arm64 only (the
controller's own dpkg architectures and apt lists stay as they are).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import EnvironmentProblem

# Where the tarballs go under the mirror's root (served at http://MIRROR:PORT/<this>/).
RELEASES_DIR = "prometheus-releases"
# Every timestamp inside a tarball: identical inputs give byte-identical tarballs.
_MTIME = 1704067200  # 2024-01-01T00:00:00Z
_TIMEOUT_S = 300
# The architectures tarballs are built for: Debian's names, which are also the Go names the
# project's tarballs carry (linux-amd64, linux-arm64) and the roles' __*_release_arch.
ARCHITECTURES = ("amd64", "arm64")
# The inventory variable that pins each project's tarball sum (the roles' own pins are the
# project's real sums, per version and architecture, which these builds cannot match).
SUM_VARIABLES = {
    "prometheus": "monitoring_prometheus_sha256",
    "alertmanager": "monitoring_alertmanager_sha256",
    "node_exporter": "node_health_node_exporter_sha256",
}


@dataclass(frozen=True)
class Project:
    """A project of the Prometheus organisation, its Debian package and which of the
    package's files become which of the release tarball's binaries."""

    name: str
    package: str
    binaries: tuple[tuple[str, str], ...]  # (path in the .deb, name in the tarball)


PROJECTS = (
    Project("prometheus", "prometheus",
            (("usr/bin/prometheus", "prometheus"), ("usr/bin/promtool", "promtool"))),
    Project("alertmanager", "prometheus-alertmanager",
            (("usr/bin/prometheus-alertmanager", "alertmanager"), ("usr/bin/amtool", "amtool"))),
    Project("node_exporter", "prometheus-node-exporter",
            (("usr/bin/prometheus-node-exporter", "node_exporter"),)),
)


def upstream_version(debian_version: str) -> str:
    """``2.42.0`` from Debian's ``2.42.0+ds-5+deb12u1`` (epoch, repack suffix and revision
    dropped): the version the binary itself reports."""
    match = re.match(r"(?:\d+:)?(\d+(?:\.\d+)*)", debian_version)
    if match is None:
        raise EnvironmentProblem(f"cannot read an upstream version from Debian's "
                                 f"{debian_version!r}")
    return match.group(1)


def tarball_name(project: str, version: str, arch: str = "amd64") -> str:
    return f"{project}-{version}.linux-{arch}.tar.gz"


def tarball_sha256(mirror_root: Path, project: str, version: str, arch: str = "amd64") -> str:
    """The SHA-256 of the tarball ``build_releases`` served for ``project`` ``version`` and
    ``arch``: what a site that builds (or checks once and mirrors) its own tarballs pins in its
    inventory. The roles pin the project's real sums, which these builds cannot match."""
    where = mirror_root / RELEASES_DIR / project / "releases" / "download" / f"v{version}"
    return hashlib.sha256((where / tarball_name(project, version, arch)).read_bytes()).hexdigest()


def release_sums(mirror_root: Path, versions: dict[str, str], arch: str = "amd64"
                 ) -> dict[str, str]:
    """The inventory variables that pin the served tarballs of ``arch`` (SUM_VARIABLES), for
    the hosts of that architecture: ``{"monitoring_prometheus_sha256": "...", ...}``."""
    return {SUM_VARIABLES[project]: tarball_sha256(mirror_root, project, version, arch)
            for project, version in versions.items()}


def _run(args: list[str], cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                              timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"{args[0]}: {exc}") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(f"{' '.join(args)} failed (exit {proc.returncode}): {last}")
    return proc.stdout


def _deb(package: str, cache: Path, arch: str = "amd64") -> Path:
    """Debian's .deb of ``package`` for ``arch``, downloaded into ``cache`` once."""
    found = sorted(cache.glob(f"{package}_*_{arch}.deb"))
    if found:
        return found[-1]
    if shutil.which("apt-get") is None:
        raise EnvironmentProblem("apt-get is needed to fetch Debian's Prometheus builds for the "
                                 "simulated EL mirror")
    cache.mkdir(parents=True, exist_ok=True)
    options = [] if arch == "amd64" else _arch_only_apt(cache, arch)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        _run(["apt-get", *options, "download", "-q", package], cwd=Path(tmp))
        [deb] = Path(tmp).glob(f"{package}_*_{arch}.deb")
        return deb.replace(cache / deb.name)


def _arch_only_apt(cache: Path, arch: str) -> list[str]:
    """apt-get options for a private apt state under ``cache/apt-<arch>`` that takes the
    controller's sources but sees ``arch``'s packages only (its own lists, an empty dpkg
    status), its lists fetched once. The controller's dpkg and apt lists are not touched."""
    state = cache / f"apt-{arch}"
    for directory in (state / "lists" / "partial", state / "archives" / "partial"):
        directory.mkdir(parents=True, exist_ok=True)
    status = state / "status"
    status.touch()
    options = ["-o", f"APT::Architecture={arch}", "-o", f"APT::Architectures={arch}",
               "-o", f"Dir::State::Lists={state / 'lists'}", "-o", f"Dir::State::status={status}",
               "-o", f"Dir::Cache={state}", "-o", f"Dir::Cache::archives={state / 'archives'}"]
    if not any(state.joinpath("lists").glob("*_Packages*")):
        _run(["apt-get", *options, "update", "-q"])
    return options


def _tarball(project: Project, version: str, deb: Path, arch: str = "amd64") -> bytes:
    top = f"{project.name}-{version}.linux-{arch}"
    marker = (f"SIMULATED: built by gpu-cluster-provisioner for a simulated cluster, laid out as "
              f"the Prometheus project's {tarball_name(project.name, version, arch)}.\nThe "
              f"binaries are Debian's build of {project.name} {version} ({deb.name}).\n").encode()
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp:
        _run(["dpkg-deb", "-x", str(deb), tmp])
        # gzip level 1 (up to 100 MB of binaries, built once per cache), no time in its header.
        with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w") as tar:
            info = tarfile.TarInfo(top)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _MTIME
            tar.addfile(info)
            members: list[tuple[str, bytes, int]] = [(f"{top}/SIMULATED", marker, 0o644)]
            members += [(f"{top}/{name}", (Path(tmp) / source).read_bytes(), 0o755)
                        for source, name in project.binaries]
            for name, data, mode in sorted(members):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), mode, _MTIME
                info.uname = info.gname = "root"
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _write_if_changed(path: Path, data: bytes) -> None:
    if path.is_file() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def build_releases(mirror_root: Path, cache: Path,
                   architectures: tuple[str, ...] = ("amd64",)) -> dict[str, str]:
    """Write each project's tarball for each of ``architectures`` (amd64; add arm64 for
    aarch64 nodes: Debian's arm64 builds are fetched for it) and its sha256sums.txt under
    ``mirror_root/RELEASES_DIR``; return the version of each project (``{"prometheus":
    "2.42.0", ...}``), which must be the same on every architecture asked for."""
    unknown = [arch for arch in architectures if arch not in ARCHITECTURES]
    if unknown or not architectures:
        raise EnvironmentProblem(f"release tarballs are built for {', '.join(ARCHITECTURES)}, "
                                 f"not {', '.join(unknown) or 'no architecture'}")
    versions: dict[str, str] = {}
    for project in PROJECTS:
        for arch in dict.fromkeys(architectures):
            deb = _deb(project.package, cache, arch)
            version = upstream_version(_run(["dpkg-deb", "-f", str(deb), "Version"]).strip())
            if versions.setdefault(project.name, version) != version:
                raise EnvironmentProblem(
                    f"Debian's {arch} build of {project.package} is {project.name} {version}, "
                    f"its {architectures[0]} build is {versions[project.name]}: remove the "
                    f"older .deb from {cache} to fetch the current one")
            where = (mirror_root / RELEASES_DIR / project.name / "releases" / "download"
                     / f"v{version}")
            name = tarball_name(project.name, version, arch)
            stamp = cache / f"{name}.from"  # which .deb the served tarball was built from
            if not ((where / name).is_file() and stamp.is_file()
                    and stamp.read_text() == deb.name):
                data = _tarball(project, version, deb, arch)
                _write_if_changed(where / name, data)
                _write_if_changed(stamp, deb.name.encode())
        # One line per tarball served, as the project's own sha256sums.txt lists every
        # platform's.
        where = (mirror_root / RELEASES_DIR / project.name / "releases" / "download"
                 / f"v{versions[project.name]}")
        served = sorted(where.glob(f"{project.name}-{versions[project.name]}.linux-*.tar.gz"))
        _write_if_changed(where / "sha256sums.txt", "".join(
            f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n"
            for path in served).encode())
    return versions


def runtime_files(cache: Path) -> dict[str, bytes]:
    """What Debian's builds read at run time under /usr/share/prometheus (Alertmanager's default
    notification templates, Prometheus' classic UI), which the project's own builds carry
    inside the binary: the simulated EL nodes get them at the same paths, relative ones here
    (``usr/share/prometheus/alertmanager/default.tmpl``)."""
    out: dict[str, bytes] = {}
    for project in PROJECTS:
        deb = _deb(project.package, cache)
        with tempfile.TemporaryDirectory() as tmp:
            _run(["dpkg-deb", "-x", str(deb), tmp])
            share = Path(tmp) / "usr" / "share" / "prometheus"
            for path in sorted(share.rglob("*")) if share.is_dir() else []:
                if path.is_file() and not path.is_symlink():
                    out[str(path.relative_to(tmp))] = path.read_bytes()
    return out
