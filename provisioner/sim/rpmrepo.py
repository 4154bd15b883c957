"""The simulated mirror's rpm repositories, for imitated Rocky 9 nodes.

Laid out like NVIDIA's: ``cuda/rhel9/x86_64/`` (with the driver shipped as dnf module streams,
a ``modules.yaml`` in its repodata) and ``libnvidia-container/stable/rpm/x86_64/``. Packages are
built with ``rpmbuild`` from the same SIMULATED stand-ins as the apt mirror (an older and a newer
release beside every pin), signed with the mirror's key (``rpmsign``, so ``gpgcheck=1`` is
real), indexed with ``createrepo_c``; ``modifyrepo_c`` adds the module metadata, so dnf's
modular filtering hides the driver until its stream is enabled. Beside the DKMS streams, the
precompiled ones (``<B>``, ``latest``) with NVIDIA's precompiled kernel module packages for the
nodes' kernel (``sim/precompiled_kmod.py``) and the certificate of their signing key.

Idempotent like the apt mirror: unchanged inputs rebuild nothing and leave the repodata alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from provisioner.errors import InputError
from provisioner.files import sha256_file
from provisioner.sim.mirror import (
    SOURCE_DATE_EPOCH,
    SigningKey,
    SimPackage,
    _gpg_agent,
    _read_manifest,
    _run,
    _write_if_changed,
    require_tools,
)
from provisioner.sim.precompiled_kmod import (
    CERTIFICATE_NAME,
    USER_SPACE_PACKAGE,
    certificate_path,
    is_precompiled_kmod,
    precompiled_kmods,
)
from provisioner.sim.precompiled_kmod import ensure_signing_key as ensure_module_signing_key

CTK_RPM_REPO = "libnvidia-container/stable/rpm/x86_64"
ARCH = "x86_64"
_BUILD_MANIFEST = ".simulated-build-manifest.json"
_REPO_DIGEST = ".simulated-repo-digest"
# Debian paths the stand-ins use -> where the EL packages put the same files.
_EL_PATHS = (
    ("/usr/include/x86_64-linux-gnu/", "/usr/include/"),  # cudnn_version_v9.h (libcudnn9-devel)
    ("/lib/systemd/system/", "/usr/lib/systemd/system/"),
)
_MODULE_PACKAGES = {
    # NVIDIA's RHEL 8/9 streams: <branch>-open carries the open kernel modules, <branch>-dkms
    # the proprietary ones, both the user space [DIG] (NVIDIA driver installation guide, "Red
    # Hat Enterprise Linux 9": `dnf module enable nvidia-driver:<stream>`).
    "open": ("kmod-nvidia-open-dkms", "nvidia-driver-cuda"),
    "dkms": ("kmod-nvidia-latest-dkms", "nvidia-driver-cuda"),
}


def evr(version: str) -> tuple[str, str, str]:
    """'3:570.124.06-1.el9' -> ('3', '570.124.06', '1.el9'); no epoch -> ''."""
    epoch, _, rest = version.rpartition(":")
    upstream, dash, release = rest.rpartition("-")
    if not dash:
        raise InputError(f"rpm version {version!r} has no release")
    return epoch, upstream, release


def rpm_filename(pkg: SimPackage) -> str:
    _epoch, version, release = evr(pkg.version)
    return f"{pkg.name}-{version}-{release}.{ARCH}.rpm"


def nevra(pkg: SimPackage) -> str:
    epoch, version, release = evr(pkg.version)
    return f"{pkg.name}-{epoch or '0'}:{version}-{release}.{ARCH}"


def _el_path(path: str) -> str:
    for debian, el in _EL_PATHS:
        if path.startswith(debian):
            return el + path[len(debian):]
    return path


def _scriptlet(section: str, script: str) -> list[str]:
    """``script`` (sh) as an rpm scriptlet in rpm's built-in Lua, which calls sh: a %post in
    sh would make the package require /bin/sh, which no rpm of an imitated node provides (its
    userland is Debian's). rpm expands macros in the spec, so every % is doubled."""
    if "]]" in script:
        raise ValueError(f"{section}: the script may not contain ']]'")
    return [f"{section} -p <lua>",
            "os.execute([[" + script.replace("%", "%%").rstrip("\n") + "\n]])"]


def _spec(pkg: SimPackage, files: Iterable[str]) -> str:
    epoch, version, release = evr(pkg.version)
    # Scriptlets only for packages whose scripts work on every imitated OS (scripts_on_rpm),
    # in Lua (see _scriptlet). No automatic dependencies: nothing on the node provides them;
    # the package's own rpm_relations only.
    lines = [f"Name: {pkg.name}"] + ([f"Epoch: {epoch}"] if epoch else []) + [
        f"Version: {version}", f"Release: {release}", f"Summary: {pkg.summary}",
        "License: LicenseRef-simulated", f"BuildArch: {ARCH}", "AutoReqProv: no",
        *pkg.rpm_relations,
        "%description", "Built by gpu-cluster-provisioner for a simulated cluster: it contains "
        "no NVIDIA software.", "%install", "cp -a %{_stagedir}/. %{buildroot}/"]
    if pkg.scripts_on_rpm and pkg.postinst:
        lines += _scriptlet("%post", pkg.postinst)
    if pkg.scripts_on_rpm and pkg.prerm:
        lines += _scriptlet("%preun", pkg.prerm)
    if pkg.scripts_on_rpm and pkg.rpm_postun:
        lines += _scriptlet("%postun", pkg.rpm_postun)
    lines += ["%files"] + [f'"{path}"' for path in sorted(files)]
    lines += [_ghost(path, pkg.rpm_ghosts) for path in sorted(pkg.rpm_ghosts)]
    return "\n".join(lines) + "\n"


def _ghost(path: str, ghosts: Iterable[str]) -> str:
    """The %files line of a %ghost path: a directory when other ghosts lie under it."""
    if any(other.startswith(path + "/") for other in ghosts):
        return f'%ghost %dir %attr(0755,root,root) "{path}"'
    return f'%ghost %attr(0644,root,root) "{path}"'


def _digest(pkg: SimPackage) -> str:
    data: dict[str, object] = {
        "name": pkg.name, "version": pkg.version, "summary": pkg.summary,
        "scripts": [pkg.postinst, pkg.prerm] if pkg.scripts_on_rpm else None,
        "files": {p: hashlib.sha256(d).hexdigest() for p, d in pkg.all_files().items()},
        "modes": {p: pkg.modes[p] for p in sorted(pkg.modes)}, "recipe": 1}
    # Only where set, so the packages without them keep the digest they always had.
    rpm_only = {"relations": list(pkg.rpm_relations), "ghosts": sorted(pkg.rpm_ghosts),
                "postun": pkg.rpm_postun if pkg.scripts_on_rpm else None}
    data.update({key: value for key, value in rpm_only.items() if value})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def build_rpms(pkgs: Iterable[SimPackage], outdir: Path, key: SigningKey) -> list[Path]:
    """Build and sign each package into ``outdir`` (skipping those whose inputs did not
    change); returns the .rpm paths in the order given."""
    require_tools("rpmbuild", "rpmsign", "gpg")
    outdir.mkdir(parents=True, exist_ok=True)
    manifest_path = outdir / _BUILD_MANIFEST
    manifest = _read_manifest(manifest_path)
    updated = dict(manifest)
    out: list[Path] = []
    fresh: list[Path] = []
    for pkg in pkgs:
        target = outdir / rpm_filename(pkg)
        digest = _digest(pkg) + key.fingerprint
        entry = manifest.get(target.name, {})
        if not (target.is_file() and entry.get("input") == digest
                and entry.get("sha256") == sha256_file(target)):
            _build_one(pkg, target)
            fresh.append(target)
            updated[target.name] = {"input": digest}
        out.append(target)
    if fresh:
        _sign(fresh, key)  # in place: the recorded checksum is the signed file's
    for target in fresh:
        updated[target.name]["sha256"] = sha256_file(target)
    if updated != manifest:
        _write_if_changed(manifest_path,
                          (json.dumps(updated, indent=2, sort_keys=True) + "\n").encode())
    return out


def _build_one(pkg: SimPackage, target: Path) -> None:
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".rpmbuild-") as tmp:
        stage = Path(tmp) / "stage"
        files: list[str] = []
        for path, data in pkg.all_files().items():
            el = _el_path(path)
            dest = stage / el.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            dest.chmod(pkg.modes.get(path, 0o644))
            files.append(el)
        spec = Path(tmp) / f"{pkg.name}.spec"
        spec.write_text(_spec(pkg, files), encoding="utf-8")
        top = Path(tmp) / "top"
        _run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}",
              "--define", f"_stagedir {stage}", "--define", "__os_install_post %{nil}",
              "--define", "_build_id_links none", "--define", "debug_package %{nil}",
              "--define", "use_source_date_epoch_as_buildtime 1", str(spec)],
             env={"SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)})
        built = top / "RPMS" / ARCH / target.name
        os.replace(built, target)


def _sign(rpms: list[Path], key: SigningKey) -> None:
    with _gpg_agent(key.gnupghome):
        _run(["rpmsign", "--define", f"_gpg_path {key.gnupghome}",
              "--define", f"_gpg_name {key.fingerprint}", "--define", "__gpg /usr/bin/gpg",
              "--define", "_gpg_sign_cmd_extra_args --pinentry-mode loopback --passphrase ''",
              "--addsign", *map(str, rpms)])


def _streams(pkgs: Iterable[SimPackage]) -> dict[str, tuple[list[SimPackage], tuple[str, ...]]]:
    """{stream: (its packages, its default profile's rpms)}: per driver branch B, B-open and
    B-dkms; B where precompiled kernel modules of B are among ``pkgs`` (its user space and those
    modules), and latest, the same as the newest such branch."""
    streams: dict[str, tuple[list[SimPackage], tuple[str, ...]]] = {}
    user_space: dict[str, list[SimPackage]] = {}
    precompiled: dict[str, list[SimPackage]] = {}
    for pkg in pkgs:
        _epoch, version, _release = evr(pkg.version)
        branch = re.match(r"\d+", version)
        if not branch:
            continue
        for kind, names in _MODULE_PACKAGES.items():
            if pkg.name in names:
                streams.setdefault(f"{branch.group(0)}-{kind}", ([], names))[0].append(pkg)
        if pkg.name == USER_SPACE_PACKAGE:
            user_space.setdefault(branch.group(0), []).append(pkg)
        if is_precompiled_kmod(pkg):
            precompiled.setdefault(branch.group(0), []).append(pkg)
    # The precompiled streams' default profile: the user space, which the module supplements
    # (NVIDIA's genmodules.py lists nvidia-driver alone in the default profile of B and latest,
    # and the kmod packages among the artifacts; NVIDIA/yum-packaging-precompiled-kmod).
    for number in sorted(precompiled, key=int):
        streams[number] = ([*user_space.get(number, []), *precompiled[number]],
                           (USER_SPACE_PACKAGE,))
    if precompiled:
        # genmodules.py: "Add 'latest' branch with the same version as the highest-versioned
        # other branch".
        streams["latest"] = streams[max(precompiled, key=int)]
    return streams


def _defaults(streams: Iterable[str]) -> str:
    """The modulemd-defaults document: the default profile of the precompiled streams, so
    `dnf module install nvidia-driver:<B>` needs no /default (UEFI.md, "Precompiled driver").
    NVIDIA's genmodules.py names every stream's default profile and makes latest the default
    stream; here no stream is a default (nothing is enabled until a node enables a stream) and
    the DKMS streams keep needing /default, as the mirror always served them."""
    return ("---\ndocument: modulemd-defaults\nversion: 1\ndata:\n  module: nvidia-driver\n"
            "  profiles:\n" + "".join(f'    "{s}": [default]\n' for s in streams) + "...\n")


def modules_yaml(pkgs: Iterable[SimPackage]) -> str:
    """modulemd v2 documents of the nvidia-driver streams (_streams), each listing every
    release of its packages as artifacts (NEVRA), and, with precompiled streams, the defaults
    document of their profiles (_defaults)."""
    streams = _streams(pkgs)
    docs = []
    for stream in sorted(streams):
        members, profile = streams[stream]
        artifacts = sorted({nevra(p) for p in members})
        docs.append(
            "---\ndocument: modulemd\nversion: 2\ndata:\n  name: nvidia-driver\n"
            f"  stream: \"{stream}\"\n  version: 20240101000000\n  context: \"00000000\"\n"
            f"  arch: {ARCH}\n  summary: SIMULATED NVIDIA driver stream {stream}\n"
            "  description: >-\n    SIMULATED module stream built by gpu-cluster-provisioner.\n"
            "  license:\n    module: [LicenseRef-simulated]\n"
            "  dependencies:\n  - buildrequires:\n      platform: [el9]\n"
            "    requires:\n      platform: [el9]\n"
            "  profiles:\n    default:\n      rpms:\n"
            + "".join(f"      - {name}\n" for name in profile)
            + "  artifacts:\n    rpms:\n"
            + "".join(f"    - {a}\n" for a in artifacts) + "...\n")
    precompiled = [s for s in sorted(streams) if "-" not in s]  # B and latest
    if precompiled:
        docs.append(_defaults(precompiled))
    return "".join(docs)


def build_rpm_repo(rpms: Iterable[Path], repo_dir: Path,
                   modules: str | None = None) -> None:
    """Make ``repo_dir`` an rpm repository of exactly ``rpms`` (createrepo_c), with
    ``modules`` as its module metadata (modifyrepo_c --mdtype=modules)."""
    require_tools("createrepo_c", "modifyrepo_c")
    wanted = {p.name: p for p in rpms}
    repo_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(json.dumps(
        [sorted((n, sha256_file(p)) for n, p in wanted.items()), modules]).encode()).hexdigest()
    marker = repo_dir / _REPO_DIGEST
    if marker.is_file() and marker.read_text() == digest and (repo_dir / "repodata").is_dir():
        return
    for name, rpm in wanted.items():
        dest = repo_dir / name
        if not (dest.is_file() and sha256_file(dest) == sha256_file(rpm)):
            shutil.copyfile(rpm, dest)
    for stale in repo_dir.glob("*.rpm"):
        if stale.name not in wanted:
            stale.unlink()
    with tempfile.TemporaryDirectory(dir=repo_dir, prefix=".repodata-") as tmp:
        _run(["createrepo_c", "--quiet", "--no-database", "--outputdir", tmp, str(repo_dir)])
        repodata = Path(tmp) / "repodata"
        if modules:
            yaml_path = Path(tmp) / "modules.yaml"
            yaml_path.write_text(modules, encoding="utf-8")
            _run(["modifyrepo_c", "--mdtype=modules", str(yaml_path),
                  str(repodata)])
        old = repo_dir / "repodata"
        if old.exists():
            shutil.rmtree(old)
        os.replace(repodata, old)
    marker.write_text(digest)


def precompiled_certificate(state_dir: Path | None = None) -> Path:
    """The simulated NVIDIA certificate (DER) the precompiled modules are signed with, on the
    controller (``state_dir``: the mirror root's parent; by default the simulated cluster's,
    where `sim up` builds its mirror); the mirror serves it as
    ``cuda/rhel9/x86_64/NVIDIA2019-public_key.der``."""
    if state_dir is None:
        from provisioner.sim.cluster import sim_state_dir

        state_dir = sim_state_dir()
    return certificate_path(state_dir)


def build_rpm_mirror(root: Path, cuda: Mapping[str, list[SimPackage]],
                     ctk: list[SimPackage], key: SigningKey,
                     kernels: Sequence[str] = ()) -> None:
    """The rpm repositories under ``root``: ``cuda`` maps a repository directory (relative to
    root) to its packages; ``ctk`` is the container toolkit's. With ``kernels`` (the kernel
    releases the nodes run), each CUDA repository also carries the precompiled kernel modules
    of its proprietary driver releases for those kernels, with the certificate of their
    signing key at its root."""
    pool = root.parent / "mirror-pool-rpm"
    module_key = ensure_module_signing_key(root.parent) if kernels else None
    for repo, served in cuda.items():
        pkgs = served if module_key is None else [
            *served, *precompiled_kmods(served, kernels, module_key)]
        rpms = build_rpms(pkgs, pool / "cuda", key)
        build_rpm_repo(rpms, root / repo, modules_yaml(pkgs))
        if module_key is not None:
            # UEFI.md, "Download the X.509 certificate public key": NVIDIA2019-public_key.der
            # at the repository root, .../cuda/repos/rhel9/x86_64/.
            _write_if_changed(root / repo / CERTIFICATE_NAME,
                              module_key.certificate.read_bytes())
    build_rpm_repo(build_rpms(ctk, pool / "ctk", key), root / CTK_RPM_REPO)
