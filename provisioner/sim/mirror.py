"""A signed, flat apt repository of SIMULATED NVIDIA packages for the simulated cluster.

The packages carry the real names and versions of a stack but tiny contents (a simulated
``nvidia-smi``, version files, markers), so the real repository, pinning, install and verify
paths of the roles run against them. The repository is laid out like NVIDIA's CUDA repository
(``deb [signed-by=KEYRING] URL/debian12/x86_64/ /``, ``.../sbsa/`` for arm64) and signed with a
throwaway local key.

Everything here is idempotent: identical inputs leave every file (and its mtime) untouched, so
rebuilding on each ``provisioner sim up`` costs a few hashes. The module never prints; it raises
``EnvironmentProblem`` (missing tool, failing tool) or ``InputError`` (bad package definition).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.errors import EnvironmentProblem, InputError
from provisioner.files import sha256_file
from provisioner.sim.tools.node import MODULE_VERSION_FILE, load_module_sh

ORIGIN = "gpu-cluster-provisioner simulated mirror"
MAINTAINER = "gpu-cluster-provisioner simulation <simulated@gpu-cluster-provisioner.invalid>"
KEY_EMAIL = "simulated-mirror@gpu-cluster-provisioner.invalid"
KEY_UID = f"{ORIGIN} (SIMULATED throwaway key) <{KEY_EMAIL}>"
KEYRING_NAME = "simulated-archive-keyring.gpg"
ARMORED_KEY_NAME = "simulated-archive-keyring.asc"
MARKER_NAME = "SIMULATED"
REPO_MARKER = (
    "SIMULATED: this apt repository was built by gpu-cluster-provisioner for a simulated "
    "cluster.\nIts packages carry real NVIDIA names and versions but contain no NVIDIA "
    "software.\n"
)
# Every timestamp inside a .deb: identical inputs then build byte-identical packages.
SOURCE_DATE_EPOCH = 1704067200  # 2024-01-01T00:00:00Z
_BUILD_MANIFEST = ".simulated-build-manifest.json"
_TIMEOUT_S = 120
# Tool -> the Debian/Ubuntu package that ships it.
_TOOL_PACKAGES = {
    "dpkg-deb": "dpkg",
    "apt-ftparchive": "apt-utils",
    "gpg": "gpg",
    "gpgv": "gpgv",
    "gpgconf": "gpgconf",
}
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
# "_" too, for an rpm release (2.el9_4: sim/precompiled_kmod.py); dpkg-deb refuses it in a .deb.
_VERSION_RE = re.compile(r"(?:\d+:)?\d[A-Za-z0-9.+~_-]*")
_ARCHITECTURES = ("amd64", "arm64", "all")
# The dependency tags a SimPackage may give its rpm (SimPackage.rpm_relations).
RPM_RELATION_TAGS = ("Provides", "Requires", "Conflicts", "Supplements")
# gpg-agent's socket lives in GNUPGHOME when /run/user/UID is absent; sun_path holds 108 bytes.
_MAX_GNUPGHOME_LEN = 80


class MirrorBuildError(EnvironmentProblem):
    """A packaging or signing tool failed while building the simulated mirror."""


@dataclass(frozen=True)
class SimPackage:
    """One simulated Debian package. ``files`` maps absolute install paths to contents;
    ``modes`` overrides the default 0644 of some of them."""

    name: str
    version: str
    depends: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    files: Mapping[str, bytes | str] = field(default_factory=dict)
    modes: Mapping[str, int] = field(default_factory=dict)
    postinst: str | None = None
    # Run before removal (and before an upgrade replaces it), as dpkg runs DEBIAN/prerm.
    prerm: str | None = None
    # The rpm build also runs postinst/prerm (as %post/%preun). Only for scripts that work on
    # every imitated OS (plain sh, no Debian-only tools).
    scripts_on_rpm: bool = False
    description: str = "simulated package"
    architecture: str = "amd64"
    # rpm only (sim/rpmrepo.py; the .deb ignores them): dependency lines of the spec as
    # "Tag: value" (RPM_RELATION_TAGS), a %postun script (run after removal), and %ghost files:
    # paths the package owns but does not carry (its %post makes them, rpm removes them with
    # the package).
    rpm_relations: tuple[str, ...] = ()
    rpm_postun: str | None = None
    rpm_ghosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        where = f"simulated package {self.name!r}"
        if not _NAME_RE.fullmatch(self.name):
            raise InputError(f"{where}: not a valid Debian package name")
        if not _VERSION_RE.fullmatch(self.version):
            raise InputError(f"{where}: version {self.version!r} is not a Debian version")
        if self.architecture not in _ARCHITECTURES:
            raise InputError(f"{where}: architecture {self.architecture!r} is not one of "
                             f"{', '.join(_ARCHITECTURES)}")
        for relation in (*self.depends, *self.provides):
            if not relation.strip() or any(c in relation for c in ",\n"):
                raise InputError(f"{where}: relation {relation!r} must be one non-empty entry")
        if "\n" in self.description or not self.description.strip():
            raise InputError(f"{where}: the description must be one non-empty line")
        for relation in self.rpm_relations:
            tag, colon, value = relation.partition(":")
            if tag not in RPM_RELATION_TAGS or not colon or not value.strip() or "\n" in value:
                raise InputError(f"{where}: rpm relation {relation!r} must be one line "
                                 f"'Tag: value' with Tag one of {', '.join(RPM_RELATION_TAGS)}")
        for path in (*self.files, *self.rpm_ghosts):
            parts = path.split("/")
            if not path.startswith("/") or path.endswith("/") or ".." in parts or "" in parts[1:]:
                raise InputError(f"{where}: file path {path!r} must be absolute and normalised")
            if parts[1] == "DEBIAN":
                raise InputError(f"{where}: {path} is reserved for package metadata")
        for path, mode in self.modes.items():
            if path not in self.files:
                raise InputError(f"{where}: mode given for {path}, which is not in files")
            if not 0 <= mode <= 0o7777:
                raise InputError(f"{where}: mode {mode:o} of {path} is not a permission mode")

    @property
    def deb_filename(self) -> str:
        """``name_version_arch.deb``, the epoch dropped as Debian pool filenames do."""
        version = self.version.split(":", 1)[1] if ":" in self.version else self.version
        return f"{self.name}_{version}_{self.architecture}.deb"

    @property
    def summary(self) -> str:
        text = self.description.strip()
        return text if text.startswith("SIMULATED:") else f"SIMULATED: {text}"

    def all_files(self) -> dict[str, bytes]:
        """Contents by install path, the SIMULATED doc marker included."""
        out = {path: _as_bytes(data) for path, data in self.files.items()}
        out.setdefault(
            f"/usr/share/doc/{self.name}/{MARKER_NAME}",
            f"{self.summary}\nBuilt by gpu-cluster-provisioner for a simulated cluster; this "
            "package contains no NVIDIA software.\n".encode(),
        )
        return out

    def control(self, installed_size_kib: int) -> str:
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            f"Architecture: {self.architecture}",
            f"Maintainer: {MAINTAINER}",
            f"Installed-Size: {installed_size_kib}",
        ]
        if self.depends:
            lines.append(f"Depends: {', '.join(self.depends)}")
        if self.provides:
            lines.append(f"Provides: {', '.join(self.provides)}")
        lines += [
            "Section: misc",
            "Priority: optional",
            f"Description: {self.summary}",
            " Built by gpu-cluster-provisioner for a simulated cluster: it contains no NVIDIA",
            " software, only stand-ins that let the real install and verify paths run.",
        ]
        return "\n".join(lines) + "\n"

    def input_digest(self) -> str:
        """Identifies everything that goes into the .deb (for the no-rebuild shortcut)."""
        canonical = {
            "name": self.name, "version": self.version, "architecture": self.architecture,
            "depends": list(self.depends), "provides": list(self.provides),
            "description": self.description, "postinst": self.postinst, "prerm": self.prerm,
            "files": {p: hashlib.sha256(d).hexdigest() for p, d in self.all_files().items()},
            "modes": {p: self.modes[p] for p in sorted(self.modes)},
            "epoch": SOURCE_DATE_EPOCH,
        }
        return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class SigningKey:
    """The mirror's throwaway signing key: its private GNUPGHOME and exported public key."""

    fingerprint: str
    gnupghome: Path
    keyring: Path  # binary export, for ``signed-by=``
    armored: Path  # the same key ASCII-armored


# ---------------------------------------------------------------------------------------------
# Packages
# ---------------------------------------------------------------------------------------------


def simulated_driver_package(
    name: str, version: str, cuda_version: str, nvidia_smi_script: bytes | str
) -> SimPackage:
    """A driver package installing the simulated ``/usr/bin/nvidia-smi`` and the version files
    it reads (no version files, no driver: the simulated tool then fails like the real one)."""
    upstream = version.split(":", 1)[-1].rsplit("-", 1)[0]
    return SimPackage(
        name=name,
        version=version,
        files={
            "/usr/bin/nvidia-smi": nvidia_smi_script,
            "/usr/lib/gpu-sim/driver-version": f"{upstream}\n",
            "/usr/lib/gpu-sim/cuda-version": f"{cuda_version}\n",
        },
        modes={"/usr/bin/nvidia-smi": 0o755},
        description=f"NVIDIA driver {upstream} (simulated nvidia-smi only)",
        postinst=_LOAD_MODULE_IF_NONE,
        scripts_on_rpm=True,
    )


# A node with no NVIDIA module loaded loads the new one on first use (nvidia-modprobe); a node
# running another driver's module keeps it until it reboots (tools/node.py MODULE_VERSION_FILE).
_LOAD_MODULE_IF_NONE = (
    f"if [ ! -s {MODULE_VERSION_FILE} ]; then\n" + load_module_sh("  ") + "fi\n"
)


def build_packages(pkgs: Iterable[SimPackage], outdir: Path) -> list[Path]:
    """Build each package into ``outdir`` with ``dpkg-deb --root-owner-group``.

    A package whose inputs and .deb are unchanged since the last build is not rebuilt; a
    rebuilt .deb identical to the existing one does not replace it. Returns the .deb paths
    in the order given.
    """
    packages = list(pkgs)
    seen: dict[str, str] = {}
    for pkg in packages:
        if pkg.deb_filename in seen:
            raise InputError(f"simulated package {pkg.deb_filename} is defined twice")
        seen[pkg.deb_filename] = pkg.name
    require_tools("dpkg-deb")
    outdir.mkdir(parents=True, exist_ok=True)
    manifest_path = outdir / _BUILD_MANIFEST
    manifest = _read_manifest(manifest_path)
    updated = dict(manifest)
    built: list[Path] = []
    for pkg in packages:
        target = outdir / pkg.deb_filename
        digest = pkg.input_digest()
        entry = manifest.get(pkg.deb_filename, {})
        if not (target.is_file() and entry.get("input") == digest
                and entry.get("sha256") == sha256_file(target)):
            _build_one(pkg, target)
        updated[pkg.deb_filename] = {"input": digest, "sha256": sha256_file(target)}
        built.append(target)
    if updated != manifest:
        _write_if_changed(manifest_path, (json.dumps(updated, indent=2, sort_keys=True) + "\n")
                          .encode())
    return built


def _build_one(pkg: SimPackage, target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        stage = Path(tmp) / "root"
        files = pkg.all_files()
        directories: set[Path] = {stage / "DEBIAN"}
        size_kib = 0
        for path, data in files.items():
            dest = stage / path.lstrip("/")
            directories.update(p for p in dest.parents if p != stage and stage in p.parents)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            dest.chmod(pkg.modes.get(path, 0o644))
            size_kib += math.ceil(len(data) / 1024)
        (stage / "DEBIAN").mkdir(parents=True, exist_ok=True)
        size_kib += len(directories) - 1
        control = stage / "DEBIAN" / "control"
        control.write_text(pkg.control(size_kib), encoding="utf-8")
        control.chmod(0o644)
        for name, body in (("postinst", pkg.postinst), ("prerm", pkg.prerm)):
            if body is None:
                continue
            script = body if body.startswith("#!") else "#!/bin/sh\nset -e\n" + body
            maintscript = stage / "DEBIAN" / name
            maintscript.write_text(script if script.endswith("\n") else script + "\n",
                                   encoding="utf-8")
            maintscript.chmod(0o755)
        for directory in [stage, *directories]:
            directory.chmod(0o755)
        for item in [*stage.rglob("*"), stage]:
            os.utime(item, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH), follow_symlinks=False)
        fresh = Path(tmp) / target.name
        _run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(stage), str(fresh)],
             env={"SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)})
        if not (target.is_file() and sha256_file(target) == sha256_file(fresh)):
            os.replace(fresh, target)


def _read_manifest(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): {str(a): str(b) for a, b in v.items()}
            for k, v in data.items() if isinstance(v, dict)}


# ---------------------------------------------------------------------------------------------
# Repository
# ---------------------------------------------------------------------------------------------


def build_flat_repo(debs: Iterable[Path], repo_dir: Path, key: SigningKey,
                    architectures: tuple[str, ...] = ("amd64", "all")) -> None:
    """Make ``repo_dir`` a flat apt repository of exactly ``debs``, signed with ``key``.

    Writes ``Packages``, ``Packages.gz``, ``Release`` (Origin/Label "gpu-cluster-provisioner
    simulated mirror", ``Architectures`` the given ones: apt skips a repository whose Release
    does not list the machine's), ``InRelease`` and ``Release.gpg``, plus a ``SIMULATED``
    marker. Other
    ``.deb`` files in ``repo_dir`` are removed so the index matches the given set. When the
    indexes are unchanged, ``Release`` keeps its date and the signatures are kept as long as
    they still verify against ``key``.
    """
    unknown = [arch for arch in architectures if arch not in _ARCHITECTURES]
    if unknown or not architectures:
        raise InputError(f"repository architectures {architectures!r}: each must be one of "
                         f"{', '.join(_ARCHITECTURES)}")
    wanted: dict[str, Path] = {}
    for deb in debs:
        if deb.name in wanted and sha256_file(wanted[deb.name]) != sha256_file(deb):
            raise InputError(f"two different packages are both named {deb.name}")
        if not deb.is_file():
            raise InputError(f"package {deb} does not exist: build it with build_packages()")
        wanted[deb.name] = deb
    require_tools("apt-ftparchive", "gpg", "gpgv", "gpgconf")
    repo_dir.mkdir(parents=True, exist_ok=True)
    for name, deb in wanted.items():
        dest = repo_dir / name
        if deb.resolve() != dest.resolve():
            _copy_if_changed(deb, dest)
    for stale in repo_dir.glob("*.deb"):
        if stale.name not in wanted:
            stale.unlink()
    _write_if_changed(repo_dir / MARKER_NAME, REPO_MARKER.encode())

    packages = _sorted_stanzas(_run(["apt-ftparchive", "packages", "."], cwd=repo_dir))
    _write_if_changed(repo_dir / "Packages", packages)
    _write_if_changed(repo_dir / "Packages.gz", gzip.compress(packages, 9, mtime=0))

    release_path = repo_dir / "Release"
    release = _release_text(repo_dir, architectures)
    if not (release_path.is_file() and _without_date(release_path.read_bytes())
            == _without_date(release)):
        _write_if_changed(release_path, release)
    if not _signatures_valid(repo_dir, key):
        _sign(repo_dir, key)


def _sorted_stanzas(index: bytes) -> bytes:
    """apt-ftparchive lists packages in directory order; sort them so the index is stable."""
    stanzas = [s.strip(b"\n") for s in index.split(b"\n\n") if s.strip()]
    stanzas.sort(key=_stanza_filename)
    return b"".join(s + b"\n\n" for s in stanzas)


def _stanza_filename(stanza: bytes) -> bytes:
    match = re.search(rb"^Filename: (.*)$", stanza, re.M)
    return match.group(1) if match else stanza


def _release_text(repo_dir: Path, architectures: tuple[str, ...]) -> bytes:
    # A scratch directory holding only the indexes: apt-ftparchive would otherwise also hash
    # the current Release and InRelease files it finds next to them.
    with tempfile.TemporaryDirectory(prefix=".release-", dir=repo_dir) as tmp:
        for name in ("Packages", "Packages.gz"):
            shutil.copyfile(repo_dir / name, Path(tmp) / name)
        prefix = "APT::FTPArchive::Release"
        return _run([
            "apt-ftparchive",
            "-o", f"{prefix}::Origin={ORIGIN}",
            "-o", f"{prefix}::Label={ORIGIN}",
            "-o", f"{prefix}::Architectures={' '.join(architectures)}",
            "-o", f"{prefix}::Description=SIMULATED packages for gpu-cluster-provisioner test "
                  "clusters, not NVIDIA software",
            "release", ".",
        ], cwd=Path(tmp))


def _without_date(release: bytes) -> bytes:
    return re.sub(rb"^Date: .*\n", b"", release, flags=re.M)


def _signatures_valid(repo_dir: Path, key: SigningKey) -> bool:
    release = repo_dir / "Release"
    inrelease = repo_dir / "InRelease"
    detached = repo_dir / "Release.gpg"
    if not (inrelease.is_file() and detached.is_file()):
        return False
    keyring = str(key.keyring.resolve())
    signed = _try_run(["gpgv", "--keyring", keyring, "--output", "-", str(inrelease)])
    if signed is None or signed != release.read_bytes():
        return False
    return _try_run(["gpgv", "--keyring", keyring, str(detached), str(release)]) is not None


def _sign(repo_dir: Path, key: SigningKey) -> None:
    gpg = ["gpg", "--batch", "--yes", "--homedir", str(key.gnupghome), "--pinentry-mode",
           "loopback", "--passphrase", "", "--local-user", key.fingerprint,
           "--digest-algo", "SHA512"]
    release = str(repo_dir / "Release")
    with _gpg_agent(key.gnupghome), tempfile.TemporaryDirectory(prefix=".sign-",
                                                                dir=repo_dir) as tmp:
        inrelease = Path(tmp) / "InRelease"
        detached = Path(tmp) / "Release.gpg"
        _run([*gpg, "--clearsign", "--output", str(inrelease), release])
        _run([*gpg, "--armor", "--detach-sign", "--output", str(detached), release])
        os.replace(inrelease, repo_dir / "InRelease")
        os.replace(detached, repo_dir / "Release.gpg")


# ---------------------------------------------------------------------------------------------
# Signing key
# ---------------------------------------------------------------------------------------------


def ensure_signing_key(keydir: Path) -> SigningKey:
    """The mirror's signing key, generated once (ed25519, no passphrase) and cached in
    ``keydir/gnupg``; its public key is exported to ``keydir`` for ``signed-by``."""
    require_tools("gpg", "gpgconf")
    keydir.mkdir(parents=True, exist_ok=True)
    home = keydir.resolve() / "gnupg"
    if len(str(home)) > _MAX_GNUPGHOME_LEN:
        raise InputError(f"signing key directory {home} is too long for gpg-agent's socket "
                         f"(over {_MAX_GNUPGHOME_LEN} characters): use a shorter state path")
    home.mkdir(mode=0o700, exist_ok=True)
    home.chmod(0o700)
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    with _locked(keydir / ".keygen.lock"), _gpg_agent(home):
        fingerprint = _find_key(gpg)
        if fingerprint is None:
            _run([*gpg, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
                  KEY_UID, "ed25519", "sign", "never"])
            fingerprint = _find_key(gpg)
        if fingerprint is None:
            raise MirrorBuildError(f"gpg created no signing key in {home}: remove that "
                                   "directory and retry")
        keyring = keydir / KEYRING_NAME
        armored = keydir / ARMORED_KEY_NAME
        _write_if_changed(keyring, _run([*gpg, "--export", fingerprint]))
        _write_if_changed(armored, _run([*gpg, "--armor", "--export", fingerprint]))
    return SigningKey(fingerprint=fingerprint, gnupghome=home, keyring=keyring, armored=armored)


def _find_key(gpg: list[str]) -> str | None:
    """Fingerprint of the mirror's secret key in this GNUPGHOME, if there is one."""
    listing = _run([*gpg, "--with-colons", "--list-secret-keys"]).decode()
    fingerprint: str | None = None
    in_secret_key = False
    for line in listing.splitlines():
        fields = line.split(":")
        if fields[0] == "sec":
            in_secret_key, fingerprint = True, None
        elif fields[0] == "ssb":
            in_secret_key = False
        elif fields[0] == "fpr" and in_secret_key and fingerprint is None:
            fingerprint = fields[9]
        elif fields[0] == "uid" and in_secret_key and KEY_EMAIL in fields[9] and fingerprint:
            return fingerprint
    return None


@contextmanager
def _gpg_agent(home: Path) -> Iterator[None]:
    """gpg starts an agent for this GNUPGHOME on demand; stop exactly that one afterwards."""
    try:
        yield
    finally:
        _try_run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"])


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def require_tools(*tools: str) -> None:
    """Raise EnvironmentProblem naming the package to install for the first missing tool."""
    for tool in tools:
        if shutil.which(tool) is None:
            package = _TOOL_PACKAGES.get(tool, tool)
            raise EnvironmentProblem(
                f"{tool} is not installed on the controller; the simulated package mirror "
                f"needs it: install the '{package}' package (apt-get install {package})"
            )


def _run(args: list[str], *, cwd: Path | None = None,
         env: Mapping[str, str] | None = None) -> bytes:
    try:
        proc = subprocess.run(args, cwd=cwd, capture_output=True, timeout=_TIMEOUT_S,
                              check=False, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        raise MirrorBuildError(f"`{' '.join(args[:3])}` timed out after {_TIMEOUT_S}s") from exc
    except OSError as exc:
        raise MirrorBuildError(f"cannot run {args[0]}: {exc}") from exc
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        detail = lines[-1] if lines else "no error output"
        raise MirrorBuildError(
            f"`{' '.join(args[:3])}` failed with exit code {proc.returncode}: {detail}"
        )
    return proc.stdout


def _try_run(args: list[str]) -> bytes | None:
    """stdout of a command that may legitimately fail (verification, cleanup), else None."""
    try:
        proc = subprocess.run(args, capture_output=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _as_bytes(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


def _write_if_changed(path: Path, data: bytes) -> None:
    """Atomically (re)write ``path`` only when its content differs, so mtimes mean change."""
    if path.is_file() and path.read_bytes() == data:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(0o644)
    os.replace(tmp, path)


def _copy_if_changed(source: Path, dest: Path) -> None:
    if dest.is_file() and sha256_file(dest) == sha256_file(source):
        return
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(source, tmp)
    tmp.chmod(0o644)
    os.replace(tmp, dest)
