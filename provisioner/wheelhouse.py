"""A local wheelhouse: how nodes without internet get PyTorch (or TensorFlow) for the smoke job.

The controller downloads the wheels once per distinct node platform (:class:`NodePlatform`: the
nodes' CPython version and machine, from their facts) with ``pip download --only-binary=:all:
--platform ... --python-version ... --implementation cp --abi cpXY``, into ``<key>/`` (e.g.
``cp313-x86_64/``): exactly the wheels the project's reviewed lock pins for that platform
(provisioner/wheellock.py), each checked against the lock's sha256 before anything is served.
The nodes get the same hashes over the Ansible connection, never from the wheelhouse, and
install with ``pip install --no-index --find-links URL/<key>/ --require-hashes --no-deps -r
<their own copy>``. ``wheelhouse.json`` lists every file with its sha256 so reports can tell
exactly what was installed.
"""

from __future__ import annotations

import json
import platform as host_platform
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.errors import EnvironmentProblem, InputError
from provisioner.files import sha256_file
from provisioner.wheellock import LockedWheel, check_files, requirements_text

MANIFEST_NAME = "wheelhouse.json"
# What a lock is resolved from; the lock (provisioner/wheellock.py) then pins every wheel of the
# closure per node platform, numpy included (2.4.6 on CPython 3.11+, an older release on 3.10).
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


def requirements_of_set(name: str) -> tuple[str, ...]:
    """The requirements of a lock's requirement set (wheellock.set_name)."""
    framework, _, kind = name.rpartition("-")
    if kind not in ("sim", "gpu"):
        raise InputError(f"unknown requirement set {name!r}")
    return framework_requirements(framework, kind == "sim")


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
                     node: NodePlatform | None = None, *, no_deps: bool = False) -> list[str]:
    """The pip command filling ``dest``: wheels only (nodes install with --no-index and may
    have no compiler), for ``node``'s platform when given, else the controller's; with
    ``no_deps``, exactly the pins given (a lock's closure)."""
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
           "--no-input", "--only-binary=:all:", "--dest", str(dest)]
    if no_deps:
        cmd.append("--no-deps")
    if node is not None:
        for tag in node.platform_tags:
            cmd += ["--platform", tag]
        cmd += ["--python-version", node.python, "--implementation", "cp",
                "--abi", f"cp{node.python.replace('.', '')}"]
    return [*cmd, *requirements]


_SAFE_KEY = re.compile(r"^cp\d+-[a-z0-9_]+$")


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
        stat = path.stat()
        old = previous.get(path.name)
        if (old and old.get("size") == stat.st_size and old.get("mtime_ns") == stat.st_mtime_ns
                and isinstance(old.get("sha256"), str)):
            sha = old["sha256"]
        else:
            sha = sha256_file(path)
        files.append({"name": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                      "sha256": sha})
    manifest = {"schema": 1, "requirements": list(requirements), "files": files}
    if _read_manifest(manifest_path) == manifest:
        return
    tmp = manifest_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    tmp.replace(manifest_path)


def _pip_download(dest: Path, requirements: Sequence[str], timeout_s: float,
                  node: NodePlatform | None = None, no_deps: bool = False) -> None:
    cmd = download_command(dest, requirements, node, no_deps=no_deps)
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


def ensure_wheelhouse(dest: Path, wheels_for: Callable[[NodePlatform], Sequence[LockedWheel]],
                      *, timeout_s: float = DOWNLOAD_TIMEOUT_S,
                      platforms: Iterable[NodePlatform] = ()) -> Path:
    """Make ``dest/<platform key>/`` hold the locked wheels of each platform in ``platforms``
    (the controller's when none is given), each checked against its locked sha256, with a
    ``requirements.txt`` of those hashes; return ``dest``. ``wheels_for`` gives a platform's
    locked wheels (wheellock.locked_wheels, which refuses an unlocked platform).

    pip runs only for locked wheels the directory lacks, one exact pin each, without resolving
    dependencies (the lock is the closure), so a warm wheelhouse costs a listing and the
    hashes of the files that changed since the last check.
    """
    dest = Path(dest)
    for node in sorted(set(platforms)) or [controller_platform()]:
        if not _SAFE_KEY.match(node.key):
            raise EnvironmentProblem(f"node platform {node} gives no usable wheelhouse name")
        _ensure_one(dest / node.key, list(wheels_for(node)), timeout_s,
                    None if node == controller_platform() else node)
    return dest


def _ensure_one(dest: Path, wheels: list[LockedWheel], timeout_s: float,
                node: NodePlatform | None) -> None:
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create wheelhouse {dest}: {exc.strerror}") from None
    missing = [w.pin for w in wheels if not (dest / w.file).is_file()]
    if missing:
        _pip_download(dest, missing, timeout_s, node, no_deps=True)
    _write_manifest(dest, [w.pin for w in wheels])
    known = {entry["name"]: entry["sha256"]
             for entry in _read_manifest(dest / MANIFEST_NAME).get("files", [])
             if isinstance(entry, dict) and isinstance(entry.get("sha256"), str)}
    check_files(dest, wheels, known)
    text = requirements_text(wheels)
    target = dest / REQUIREMENTS_NAME
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
