"""A small typed wrapper over the podman CLI (the only place the simulation shells out to it)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Sequence
from typing import Any

from provisioner.errors import EnvironmentProblem

LABEL = "gpu-cluster-provisioner.managed"
SCOPE_LABEL = "gpu-cluster-provisioner.scope"

_HINT = (
    "install podman, runc, netavark and aardvark-dns (make deps does it) and set "
    "[engine] runtime = \"runc\" in /etc/containers/containers.conf"
)


def podman_bin() -> str:
    path = shutil.which("podman")
    if path is None:
        raise EnvironmentProblem(f"podman not found on PATH: {_HINT}")
    return path


def run(args: Sequence[str], *, input_bytes: bytes | None = None, check: bool = True,
        timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
    cmd = [podman_bin(), *args]
    try:
        proc = subprocess.run(cmd, input=input_bytes, capture_output=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        what = " ".join(args[:3])
        raise EnvironmentProblem(f"`podman {what}` timed out after {timeout}s") from exc
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        last = err[-1] if err else f"exit {proc.returncode}"
        raise EnvironmentProblem(f"`podman {' '.join(args[:3])}` failed: {last}")
    return proc


def text(args: Sequence[str]) -> str:
    return run(args).stdout.decode()


def check_usable() -> None:
    """Fail with one line when podman is missing or cannot run containers here."""
    proc = run(["info", "--format", "json"], check=False, timeout=60)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        last = err[-1] if err else "no output"
        raise EnvironmentProblem(f"podman is not usable ({last}): {_HINT}")
    info = json.loads(proc.stdout)
    runtime = info.get("host", {}).get("ociRuntime", {}).get("name", "")
    if runtime == "crun":
        raise EnvironmentProblem(
            "podman uses crun, which fails on this host's cgroups: " + _HINT)


def list_ids(kind: str, labels: dict[str, str]) -> list[str]:
    """IDs (or names, for networks) of containers/networks carrying all ``labels``."""
    filters: list[str] = []
    for key, value in labels.items():
        filters += ["--filter", f"label={key}={value}"]
    if kind == "container":
        out = text(["ps", "-a", "--format", "{{.Names}}", *filters])
    elif kind == "network":
        out = text(["network", "ls", "--format", "{{.Name}}", *filters])
    else:
        raise ValueError(kind)
    return [line for line in out.splitlines() if line.strip()]


def inspect(kind: str, name: str) -> dict[str, Any] | None:
    proc = run([kind, "inspect", name], check=False)
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout)
    return data[0] if data else None


def copy_into(container: str, archive: bytes) -> None:
    """Unpack a tar archive at the container's root (`podman cp -`), sent without the zero
    blocks that pad it after its end-of-archive marker. podman 4.3's extraction stops reading
    at that marker and closes its end of the pipe: several kilobytes of padding still to write
    then fail the copy with "io: read/write on closed pipe" (Python's tarfile pads every archive
    to 10 KiB, so whether it failed depended on the archive's size)."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as reader:
        reader.getmembers()
        end = reader.offset  # where the last member's data ends: the end-of-archive marker
    run(["cp", "--archive=false", "-", f"{container}:/"],
        input_bytes=archive[:end] + b"\0" * (2 * tarfile.BLOCKSIZE))
