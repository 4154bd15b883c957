"""The reviewed lock of the smoke job's wheels: every wheel a node installs, by name, version,
file and sha256, per requirement set and node platform (provisioner/data/wheels.lock.json).

Why: the nodes install the smoke job as root. Hashes that come from the server that serves the
wheels prove nothing (whoever swaps a wheel swaps its hash), and a controller's download cache
holds whatever the index served. So the hashes live in the project, where a change is reviewed
like code; the controller checks every downloaded wheel against them, and hands them to each
node over the Ansible connection, where pip installs with ``--require-hashes`` from a
requirements file the controller wrote (roles/smoke_job). A wheel that differs anywhere on the
way is refused.

A requirement set is the framework and the kind of cluster: ``pytorch-sim`` (the CPU build the
simulated cluster runs), ``pytorch-gpu``, ``tensorflow-sim`` (``tensorflow-cpu``),
``tensorflow-gpu`` (``tensorflow[and-cuda]``). A set or platform the project's lock does not
hold is refused in one line; a site locks its own with this module (on a controller that
reaches the index, reviewed before use) and names the file with ``smoke_job_wheel_lock``::

    python -m provisioner.wheellock --set pytorch-gpu --platform cp312-x86_64 -o site.lock.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from provisioner.errors import EnvironmentProblem, InputError
from provisioner.files import sha256_file
from provisioner.profiles import DATA_DIR

LOCK_FILE = DATA_DIR / "wheels.lock.json"
SCHEMA = 1


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    file: str
    sha256: str

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


Lock = dict[str, dict[str, list[LockedWheel]]]


def set_name(framework: str, simulated: bool) -> str:
    """``pytorch-sim``, ``tensorflow-gpu``...: the requirement set a cluster installs."""
    return f"{framework}-{'sim' if simulated else 'gpu'}"


def load_lock(path: Path | None = None) -> Lock:
    """{set: {platform key: wheels}} of a lock file (default: the project's)."""
    path = path or LOCK_FILE
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"wheel lock {path}: cannot read it ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise InputError(f"wheel lock {path}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InputError(f"wheel lock {path}: not a schema {SCHEMA} wheel lock")
    out: Lock = {}
    try:
        for name, platforms in (data.get("sets") or {}).items():
            out[str(name)] = {str(key): [LockedWheel(**wheel) for wheel in wheels]
                              for key, wheels in platforms.items()}
    except (AttributeError, TypeError) as exc:
        raise InputError(f"wheel lock {path}: malformed entry ({exc})") from exc
    return out


def merged(*locks: Lock) -> Lock:
    """The locks together; a later lock's platform entry replaces an earlier one's."""
    out: Lock = {}
    for lock in locks:
        for name, platforms in lock.items():
            out.setdefault(name, {}).update(platforms)
    return out


def locked_wheels(lock: Lock, name: str, platform_key: str) -> list[LockedWheel]:
    """The wheels of set ``name`` for ``platform_key``; refused in one line when unlocked."""
    wheels = lock.get(name, {}).get(platform_key)
    if not wheels:
        raise EnvironmentProblem(
            f"smoke job wheels: no reviewed lock for {name} on {platform_key} (the nodes' "
            "CPython and machine); lock them on a controller that reaches the package index "
            f"(python -m provisioner.wheellock --set {name} --platform {platform_key} -o "
            "FILE), review the file and set smoke_job_wheel_lock: FILE")
    return wheels


def requirements_text(wheels: Sequence[LockedWheel]) -> str:
    """A requirements file for ``pip install --require-hashes --no-deps``: every wheel pinned
    by version with the one sha256 the lock allows."""
    lines = ["# The smoke job's wheels, as gpu-cluster-provisioner's reviewed lock pins them."]
    lines += [f"{w.pin} --hash=sha256:{w.sha256}" for w in sorted(wheels, key=lambda w: w.name)]
    return "\n".join(lines) + "\n"


def check_files(directory: Path, wheels: Sequence[LockedWheel],
                known: Mapping[str, str] | None = None) -> None:
    """Every locked wheel is in ``directory`` with its locked sha256 (``known``: digests
    already computed, by file name)."""
    for wheel in wheels:
        path = directory / wheel.file
        if not path.is_file():
            raise EnvironmentProblem(f"smoke job wheels: {wheel.file} is not in {directory}; "
                                     "the download did not give the locked file")
        digest = (known or {}).get(wheel.file) or sha256_file(path)
        if digest != wheel.sha256:
            raise EnvironmentProblem(
                f"smoke job wheels: {path} has sha256 {digest}, the reviewed lock says "
                f"{wheel.sha256}; remove it (the index or the cache served another file) "
                "and run again")


# --------------------------------------------------------------------------- locking


def lock_platform(requirements: Sequence[str], python: str, machine: str,
                  download: Path) -> list[LockedWheel]:
    """Resolve and download ``requirements`` for CPython ``python`` on ``machine`` into
    ``download`` and describe every wheel of the closure."""
    from provisioner.wheelhouse import NodePlatform, download_command

    node = NodePlatform(python, machine)
    cmd = download_command(download, requirements, node)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise EnvironmentProblem(f"pip download for {node.key} failed: {tail[0]}")
    wheels = []
    for path in sorted(download.glob("*.whl")):
        try:
            name, version, _build, _tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        wheels.append(LockedWheel(str(name), str(version), path.name, sha256_file(path)))
    return wheels


def write_lock(path: Path, lock: Lock) -> None:
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "comment": "Reviewed hashes of the smoke job's wheels (provisioner/wheellock.py): "
                   "regenerate with python -m provisioner.wheellock, review the diff.",
        "sets": {name: {key: [asdict(w) for w in sorted(wheels, key=lambda w: w.name)]
                        for key, wheels in sorted(platforms.items())}
                 for name, platforms in sorted(lock.items())},
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    from provisioner.wheelhouse import requirements_of_set

    parser = argparse.ArgumentParser(prog="python -m provisioner.wheellock",
                                     description="Lock the smoke job's wheels for node "
                                                 "platforms (download, hash, write).")
    parser.add_argument("--set", required=True, dest="set_name",
                        choices=["pytorch-sim", "pytorch-gpu", "tensorflow-sim",
                                 "tensorflow-gpu"])
    parser.add_argument("--platform", action="append", required=True, metavar="cpXY-MACHINE",
                        help="e.g. cp312-x86_64 (repeat for several)")
    parser.add_argument("-o", "--output", type=Path, default=LOCK_FILE,
                        help="the lock file to add to (default: the project's)")
    args = parser.parse_args(argv)
    lock = load_lock(args.output) if args.output.exists() else {}
    for key in args.platform:
        py, _, machine = key.partition("-")
        if not py.startswith("cp") or not py[2:].isdigit() or not machine:
            parser.error(f"--platform {key}: expected cpXY-MACHINE, e.g. cp312-x86_64")
        python = f"{py[2]}.{py[3:]}"
        with tempfile.TemporaryDirectory() as tmp:
            wheels = lock_platform(requirements_of_set(args.set_name), python, machine,
                                   Path(tmp))
        lock.setdefault(args.set_name, {})[key] = wheels
        print(f"{args.set_name} {key}: {len(wheels)} wheels")
    write_lock(args.output, lock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
