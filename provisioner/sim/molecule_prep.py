"""Prepare molecule runs: make sure the node image exists, clear stale molecule containers of
ours, write the simulation tarballs the scenarios unpack, and give each scenario that has a
``molecule/<scenario>/inventory/hosts.yml`` an inventory directory the way a user runs plain
Ansible: that inventory, the simulated cluster's variables (mirror, key, stand-in paths) and
the plan ``provisioner plan`` writes for them (molecule.yml links the directory as ``hosts``).
Prints the environment lines the Makefile exports (MOLECULE_NODE_IMAGE, MOLECULE_SIM_FILES,
MOLECULE_MIRROR_URL, MOLECULE_MIRROR_FINGERPRINT, MOLECULE_INVENTORIES). ``--cleanup`` only
removes our molecule containers."""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
import time
from pathlib import Path

import yaml

from provisioner import plan as plan_mod
from provisioner.errors import EnvironmentProblem, ProvisionerError
from provisioner.paths import cache_dir, project_root
from provisioner.profiles import load_profiles
from provisioner.sim import podman
from provisioner.sim.cluster import mirror_dir, sim_files, sim_inventory_vars
from provisioner.sim.image import ensure_image
from provisioner.sim.stand_in_packages import build_mirror


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


def write_inventories(dest: Path, mirror_url: str, fingerprint: str,
                      scenarios: Path | None = None) -> Path:
    """dest/<scenario>/{hosts.yml, sim.yml, plan.yml} for every scenario that has an
    inventory/hosts.yml."""
    scenarios = scenarios or project_root() / "molecule"
    if dest.exists():
        shutil.rmtree(dest)
    for source in sorted(scenarios.glob("*/inventory/hosts.yml")):
        out = dest / source.parent.parent.name
        out.mkdir(parents=True)
        shutil.copyfile(source, out / "hosts.yml")
        extra = {"gpu_package_source": mirror_url,
                 "nvidia_repo_mirror_key_fingerprint": fingerprint, **sim_inventory_vars()}
        (out / "sim.yml").write_text(
            "# Written by provisioner.sim.molecule_prep: the simulated nodes' variables.\n"
            + yaml.safe_dump({"all": {"vars": extra}}, sort_keys=True))
        # Planned from the two files above, written next to them (Ansible reads all three).
        plan_mod.build(out).write_inventory(out / "plan.yml")
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


def build_shared() -> None:
    """What molecule and the simulated cluster both read and either would build when missing:
    the node image and the signed mirror's files. Built before `make test` runs the two side by
    side, so they never build them at once (afterwards each only finds them, or refreshes the
    mirror without a write)."""
    from provisioner.matrix import STACKS_FILE

    ensure_image()
    build_mirror(mirror_dir(), STACKS_FILE)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        podman.check_usable()
        if args == ["--shared"]:
            build_shared()
            return 0
        clear_stale()
        if args == ["--cleanup"]:
            return 0
        image = ensure_image()
        files = write_tarballs(cache_dir() / "molecule")
        url, fingerprint = start_mirror(image.name)
        inventories = write_inventories(cache_dir() / "molecule" / "inventories", url,
                                        fingerprint)
    except ProvisionerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"MOLECULE_NODE_IMAGE={image.name}")
    print(f"MOLECULE_SIM_FILES={files}")
    print(f"MOLECULE_MIRROR_URL={url}")
    print(f"MOLECULE_MIRROR_FINGERPRINT={fingerprint}")
    print(f"MOLECULE_INVENTORIES={inventories}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
