"""A local wheelhouse: how nodes without internet get PyTorch (or TensorFlow) for the smoke job.

The controller downloads the wheels once per distinct node platform (:class:`NodePlatform`: the
nodes' CPython version and machine, from their facts) with ``pip download --only-binary=:all:
--platform ... --python-version ... --implementation cp --abi cpXY``, into ``<key>/`` (e.g.
``cp313-x86_64/``), and writes ``requirements.txt`` there: every downloaded wheel pinned with its
sha256, so nodes install with ``pip install --no-index --find-links URL/<key>/
--require-hashes -r URL/<key>/requirements.txt``. ``wheelhouse.json`` lists every file with its
sha256 so reports can tell exactly what was installed.
"""

from __future__ import annotations

import json
import platform as host_platform
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from provisioner.errors import EnvironmentProblem, InputError
from provisioner.files import sha256_file

MANIFEST_NAME = "wheelhouse.json"
DEFAULT_REQUIREMENTS = ("torch==2.13.0", "numpy")
# The smoke job's frameworks (`provisioner smoke --framework`); PyTorch is the default.
FRAMEWORKS = ("pytorch", "tensorflow")
# TensorFlow: the newest release on PyPI (2.21.0). Simulated nodes run the CPU-only build
# (`tensorflow-cpu`, no CUDA libraries to download); GPU nodes the Linux build with NVIDIA's CUDA,
# cuDNN and NCCL wheels (the `and-cuda` extra of TensorFlow's setup.py), so TensorFlow finds the
# CUDA 12 libraries it was built against whatever CUDA the stack put on the node.
TENSORFLOW_CPU_REQUIREMENTS = ("tensorflow-cpu==2.21.0",)
TENSORFLOW_GPU_REQUIREMENTS = ("tensorflow[and-cuda]==2.21.0",)
DOWNLOAD_TIMEOUT_S = 3600.0
_DIST_SUFFIXES = (".whl", ".tar.gz", ".zip")
REQUIREMENTS_NAME = "requirements.txt"
# manylinux tags pip may pick for a node, newest first: every PEP 600 glibc 2.17 .. 2.28 (the
# supported distributions have newer: EL9 2.34, Debian 12 2.36, Ubuntu 22.04 2.35). pip matches
# the tags given with --platform exactly, so a gap drops wheels: nvidia-nccl-cu13 2.29.7 is
# tagged manylinux_2_18 only.
_MANYLINUX = (*(f"manylinux_2_{minor}" for minor in range(28, 16, -1)), "manylinux2014")
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def framework_requirements(framework: str, simulated: bool) -> tuple[str, ...]:
    """What the smoke job of ``framework`` installs: PyTorch's wheels, or TensorFlow's CPU
    build on a simulated cluster and its GPU build on real GPU nodes."""
    if framework == "pytorch":
        return DEFAULT_REQUIREMENTS
    if framework == "tensorflow":
        return TENSORFLOW_CPU_REQUIREMENTS if simulated else TENSORFLOW_GPU_REQUIREMENTS
    raise InputError(f"unknown smoke job framework {framework!r}: choose one of "
                     f"{', '.join(FRAMEWORKS)}")


def framework_subdir(framework: str) -> str:
    """Where a framework's wheels go under the wheelhouse: PyTorch's at its top (as before the
    second framework), TensorFlow's under ``tensorflow/``; each platform directory's hashed
    requirements.txt pins every wheel in it, so the two sets never share one."""
    framework_requirements(framework, simulated=True)  # refuses an unknown framework
    return "" if framework == "pytorch" else framework


@dataclass(frozen=True, order=True)
class NodePlatform:
    """What a node's wheels must fit: CPython ``major.minor`` and the machine (x86_64...)."""

    python: str
    machine: str

    @property
    def key(self) -> str:
        """``cp313-x86_64``: the wheelhouse subdirectory; nodes compute the same from facts."""
        return f"cp{self.python.replace('.', '')}-{self.machine}"

    @property
    def platform_tags(self) -> list[str]:
        return [f"{tag}_{self.machine}" for tag in _MANYLINUX]


def controller_platform() -> NodePlatform:
    return NodePlatform(f"{sys.version_info.major}.{sys.version_info.minor}",
                        _MACHINES.get(host_platform.machine().lower(), host_platform.machine()))


def platform_from_facts(facts: Mapping[str, Any]) -> NodePlatform | None:
    """The platform of a node from its Ansible facts (``python`` and ``architecture``, as
    playbooks/facts.yml publishes them, or the ``ansible_`` names of injected facts); None
    when the facts do not say."""
    python = facts.get("ansible_python", facts.get("python"))
    machine = str(facts.get("ansible_architecture", facts.get("architecture")) or "")
    version = python.get("version") if isinstance(python, Mapping) else None
    if not isinstance(version, Mapping) or machine.lower() not in _MACHINES:
        return None
    try:
        return NodePlatform(f"{int(version['major'])}.{int(version['minor'])}",
                            _MACHINES[machine.lower()])
    except (KeyError, TypeError, ValueError):
        return None


def download_command(dest: Path, requirements: Sequence[str],
                     node: NodePlatform | None = None) -> list[str]:
    """The pip command filling ``dest``: wheels only (nodes install with --no-index and may
    have no compiler), for ``node``'s platform when given, else the controller's."""
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
           "--no-input", "--only-binary=:all:", "--dest", str(dest)]
    if node is not None:
        for tag in node.platform_tags:
            cmd += ["--platform", tag]
        cmd += ["--python-version", node.python, "--implementation", "cp",
                "--abi", f"cp{node.python.replace('.', '')}"]
    return [*cmd, *requirements]


def hashed_requirements(dest: Path) -> str:
    """requirements.txt for ``--require-hashes``: every wheel in ``dest`` pinned by version with
    its sha256 (pip needs every package of the install, dependencies too, pinned and hashed)."""
    lines = ["# Generated by gpu-cluster-provisioner from the wheels in this directory; install",
             "# with pip --no-index --find-links <this URL> --require-hashes -r <this file>"]
    # wheelhouse.json already holds the hashes (a torch wheel is GBs: hash it once).
    known = {entry.get("name"): entry.get("sha256")
             for entry in _read_manifest(dest / MANIFEST_NAME).get("files", [])
             if isinstance(entry, dict)}
    by_name: dict[str, list[str]] = {}
    versions: dict[str, str] = {}
    for wheel in sorted(dest.glob("*.whl")):
        try:
            name, version, _build, _tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        digest = known.get(wheel.name)
        by_name.setdefault(name, []).append(digest if isinstance(digest, str)
                                            else sha256_file(wheel))
        versions.setdefault(name, str(version))
    for project in sorted(by_name):
        hashes = " ".join(f"--hash=sha256:{digest}" for digest in sorted(set(by_name[project])))
        lines.append(f"{project}=={versions[project]} {hashes}")
    return "\n".join(lines) + "\n"


_SAFE_KEY = re.compile(r"^cp\d+-[a-z0-9_]+$")


def _parse_requirements(requirements: Sequence[str]) -> list[Requirement]:
    parsed = []
    for text in requirements:
        try:
            parsed.append(Requirement(text))
        except InvalidRequirement as exc:
            raise EnvironmentProblem(f"wheelhouse requirement {text!r} is invalid: {exc}") from None
    return parsed


def _has_wheel(dest: Path, requirement: Requirement) -> bool:
    """True when ``dest`` holds a wheel whose name and version satisfy ``requirement``."""
    wanted = canonicalize_name(requirement.name)
    for wheel in dest.glob("*.whl"):
        try:
            name, version, _build, _tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if name == wanted and requirement.specifier.contains(version, prereleases=True):
            return True
    return False


def _read_manifest(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_manifest(dest: Path, requirements: Sequence[str]) -> None:
    """Record every distribution in ``dest``; hashes of unchanged files are reused, so a warm
    wheelhouse with a multi-GB torch wheel is not re-hashed on every call."""
    manifest_path = dest / MANIFEST_NAME
    previous = {
        entry.get("name"): entry
        for entry in _read_manifest(manifest_path).get("files", [])
        if isinstance(entry, dict)
    }
    files = []
    for path in sorted(dest.iterdir()):
        if not path.is_file() or not path.name.endswith(_DIST_SUFFIXES):
            continue
        size = path.stat().st_size
        old = previous.get(path.name)
        if old and old.get("size") == size and isinstance(old.get("sha256"), str):
            sha = old["sha256"]
        else:
            sha = sha256_file(path)
        files.append({"name": path.name, "size": size, "sha256": sha})
    manifest = {"schema": 1, "requirements": list(requirements), "files": files}
    if _read_manifest(manifest_path) == manifest:
        return
    tmp = manifest_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    tmp.replace(manifest_path)


def _pip_download(dest: Path, requirements: Sequence[str], timeout_s: float,
                  node: NodePlatform | None = None) -> None:
    cmd = download_command(dest, requirements, node)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        raise EnvironmentProblem(
            f"pip download of {' '.join(requirements)} into {dest} took over {timeout_s:g}s; "
            "check the controller's access to the package index") from None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot run pip with {sys.executable}: {exc}") from None
    if proc.returncode != 0:
        lines = [line.strip() for line in (proc.stderr or proc.stdout or "").splitlines()]
        reason = next((line for line in reversed(lines) if line), "no output")
        raise EnvironmentProblem(
            f"pip download of {' '.join(requirements)} into {dest} failed "
            f"(rc {proc.returncode}): {reason}")


def ensure_wheelhouse(dest: Path, requirements: Sequence[str] = DEFAULT_REQUIREMENTS,
                      *, timeout_s: float = DOWNLOAD_TIMEOUT_S,
                      platforms: Iterable[NodePlatform] = ()) -> Path:
    """Make ``dest/<platform key>/`` hold a wheel for each requirement (and their
    dependencies) and a hashed ``requirements.txt``, for every platform in ``platforms`` (the
    controller's when none is given); return ``dest``.

    pip runs only for requirements without a matching wheel, so a warm wheelhouse costs a
    directory listing. ``wheelhouse.json`` is (re)written to match each directory.
    """
    dest = Path(dest)
    for node in sorted(set(platforms)) or [controller_platform()]:
        if not _SAFE_KEY.match(node.key):
            raise EnvironmentProblem(f"node platform {node} gives no usable wheelhouse name")
        _ensure_one(dest / node.key, requirements, timeout_s,
                    None if node == controller_platform() else node)
    return dest


def _ensure_one(dest: Path, requirements: Sequence[str], timeout_s: float,
                node: NodePlatform | None) -> None:
    parsed = _parse_requirements(requirements)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create wheelhouse {dest}: {exc.strerror}") from None
    missing = [str(req) for req in parsed if not _has_wheel(dest, req)]
    if missing:
        _pip_download(dest, missing, timeout_s, node)
        still_missing = [str(req) for req in parsed if not _has_wheel(dest, req)]
        if still_missing:
            raise EnvironmentProblem(
                f"pip download finished but {dest} has no wheel for {', '.join(still_missing)}; "
                "the index offers no wheel for this Python/platform")
    _write_manifest(dest, requirements)
    text = hashed_requirements(dest)
    target = dest / REQUIREMENTS_NAME
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
