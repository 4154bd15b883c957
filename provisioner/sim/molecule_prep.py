"""Prepare molecule runs: make sure the node image exists, clear stale molecule containers of
ours, and write the simulation tarballs the scenarios unpack. Prints the environment lines the
Makefile exports (MOLECULE_NODE_IMAGE, MOLECULE_SIM_FILES, MOLECULE_MIRROR_URL,
MOLECULE_MIRROR_FINGERPRINT). ``--cleanup`` only removes our molecule containers."""

from __future__ import annotations

import io
import os
import sys
import tarfile
import time
from pathlib import Path

from provisioner.errors import EnvironmentProblem, ProvisionerError
from provisioner.paths import cache_dir
from provisioner.profiles import load_profiles
from provisioner.sim import podman
from provisioner.sim.cluster import mirror_dir, sim_files
from provisioner.sim.image import ensure_image
from provisioner.sim.packages import build_mirror


def write_tarballs(dest: Path, profile: str = "sim-h100-8gpu") -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    profile_json = load_profiles()[profile].sim_json()
    kernel = os.uname().release
    for group in ("gpu_nodes", "cpu_nodes"):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path, data, mode in sim_files(group, profile_json, (), kernel):
                info = tarfile.TarInfo(path)
                info.mtime = int(time.time())
                if data is None:
                    info.type, info.mode = tarfile.DIRTYPE, mode
                    tar.addfile(info)
                elif mode == -1:
                    info.type, info.linkname = tarfile.SYMTYPE, data.decode()
                    tar.addfile(info)
                else:
                    info.size, info.mode = len(data), mode
                    tar.addfile(info, io.BytesIO(data))
        (dest / f"{group}.tar").write_bytes(buf.getvalue())
    return dest


MIRROR = "gpuc-mol-mirror"
LABELS = ["--label", f"{podman.LABEL}=true", "--label", f"{podman.SCOPE_LABEL}=molecule"]


def clear_stale() -> None:
    stale = podman.list_ids("container", {podman.SCOPE_LABEL: "molecule"})
    if stale:
        podman.run(["rm", "--force", "--time", "0", *stale], timeout=600)


def start_mirror(image: str) -> tuple[str, str]:
    """The simulated package mirror on podman's default network (molecule's scenarios use it,
    and destroy their own networks, so the mirror stays off those). Returns (url, fingerprint)."""
    from provisioner.matrix import STACKS_FILE

    # The same mirror directory `sim up` serves: built once, refreshed cheaply by either.
    root = mirror_dir()
    mirror = build_mirror(root, STACKS_FILE)
    podman.run(["run", "-d", "--name", MIRROR, *LABELS, "--volume", f"{root}:/srv/mirror:ro",
                "--entrypoint", "/usr/bin/python3", image, "-m", "http.server", "8080",
                "--directory", "/srv/mirror"])
    info = podman.inspect("container", MIRROR) or {}
    nets = info.get("NetworkSettings", {}).get("Networks", {}) or {}
    addr = next((n.get("IPAddress") for n in nets.values() if n.get("IPAddress")), None)
    addr = addr or info.get("NetworkSettings", {}).get("IPAddress")
    if not addr:
        raise EnvironmentProblem(f"{MIRROR} has no address on podman's default network")
    return f"http://{addr}:8080/", mirror.fingerprint


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        podman.check_usable()
        clear_stale()
        if args == ["--cleanup"]:
            return 0
        image = ensure_image()
        files = write_tarballs(cache_dir() / "molecule")
        url, fingerprint = start_mirror(image.name)
    except ProvisionerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"MOLECULE_NODE_IMAGE={image.name}")
    print(f"MOLECULE_SIM_FILES={files}")
    print(f"MOLECULE_MIRROR_URL={url}")
    print(f"MOLECULE_MIRROR_FINGERPRINT={fingerprint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
