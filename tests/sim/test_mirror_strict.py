"""The simulated mirror makes pinning matter: beside every pinned package version it publishes
an older and a newer release no stack pins, in each OS's repository with that OS's revisions,
so an unpinned or wrongly pinned install ends on another version."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from provisioner.matrix import COMPONENTS, FLAVORS, load_matrix
from provisioner.matrix.packages import stack_pins
from provisioner.sim.stand_in_packages import (
    APT_OS_DIRS,
    CTK_REPO,
    build_mirror,
    cuda_repo,
    decoy_versions,
)

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv")),
    reason="needs dpkg-deb, apt-ftparchive, gpg and gpgv",
)


def dpkg_lt(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False).returncode == 0


def index(repo: Path) -> dict[str, set[str]]:
    """{package: {versions}} of a flat repository's Packages.gz (what apt reads)."""
    out: dict[str, set[str]] = defaultdict(set)
    text = gzip.decompress((repo / "Packages.gz").read_bytes()).decode()
    for stanza in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
        if "Package" in fields:
            out[fields["Package"]].add(fields["Version"])
    return out


def pins_of(os_dir: str) -> dict[str, set[str]]:
    """Every version any stack of ``os_dir`` pins, by package (the matrix, read directly)."""
    matrix = load_matrix()
    out: dict[str, set[str]] = defaultdict(set)
    for stack in matrix.stacks.values():
        if os_dir not in stack.os_support:
            continue
        for component in COMPONENTS:
            # The driver and the fabric manager are named and versioned per OS family (Ubuntu's
            # fabric manager takes the Ubuntu revision where stacks.yml says so); the rest are
            # the same packages on every apt OS.
            family = APT_OS_DIRS[os_dir] if component in ("driver", "fabricmanager") else "apt"
            for flavor in FLAVORS:
                for name, version in stack_pins(stack, matrix.naming_facts, component, family,
                                                flavor):
                    out[name].add(version)
    return out


@pytest.fixture(scope="module")
def mirror_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("m") / "mirror"
    from provisioner.matrix import STACKS_FILE

    build_mirror(root, STACKS_FILE)
    return root


@pytest.mark.parametrize(("version", "taken", "older", "newer"), [
    ("570.124.06-1", set(), "570.124.05-1", "570.124.07-1"),
    ("570.124.06-0ubuntu1", set(), "570.124.05-0ubuntu1", "570.124.07-0ubuntu1"),
    ("2.21.5-1+cuda12.4", {"2.21.6-1+cuda12.4", "2.21.4-1+cuda12.4"},
     "2.21.3-1+cuda12.4", "2.21.7-1+cuda12.4"),
    ("1:3.3.6", set(), "1:3.3.5", "1:3.3.7"),
    ("9.8.0-1", set(), "9.8.0~pre1-1", "9.8.1-1"),
    ("3:580.95.05-1.el9", set(), "3:580.95.04-1.el9", "3:580.95.06-1.el9"),
])
def test_decoys_bracket_the_pin_and_avoid_every_pinned_version(
        version: str, taken: set[str], older: str, newer: str) -> None:
    assert decoy_versions(version, taken | {version}) == (older, newer)
    assert dpkg_lt(older, version) and dpkg_lt(version, newer)


@pytest.mark.parametrize("os_dir", sorted(APT_OS_DIRS))
def test_every_pin_has_an_older_and_a_newer_release_and_the_newest_is_no_pin(
        mirror_root: Path, os_dir: str) -> None:
    published = index(mirror_root / cuda_repo(os_dir))
    for name, versions in index(mirror_root / CTK_REPO).items():
        published[name] |= versions
    pins = pins_of(os_dir)
    assert pins, f"no stack supports {os_dir}"
    for name, pinned in pins.items():
        offered = published.get(name, set())
        for version in pinned:
            assert version in offered, f"{os_dir}: {name} {version} is not published"
            assert any(dpkg_lt(v, version) for v in offered), f"{name}: nothing older"
            assert any(dpkg_lt(version, v) for v in offered), f"{name}: nothing newer"
        newest = max(offered, key=lambda v: sum(dpkg_lt(o, v) for o in offered))
        # What `apt-get install NAME` takes with no pin: never a version any stack plans.
        assert newest not in pinned, f"{os_dir}: unpinned {name} installs the pin {newest}"


def test_each_repository_carries_its_own_os_driver_revisions(mirror_root: Path) -> None:
    """cuda-12.8's R570 driver: -1 on Debian 12, -0ubuntu1 on Ubuntu (matrix facts), and
    never the other OS's revision, so a wrong revision pin finds no package."""
    debian = index(mirror_root / cuda_repo("debian12"))
    ubuntu = index(mirror_root / cuda_repo("ubuntu2404"))
    assert "570.124.06-1" in debian["cuda-drivers-570"]
    assert "570.124.06-0ubuntu1" not in debian["cuda-drivers-570"]
    assert "570.124.06-0ubuntu1" in ubuntu["cuda-drivers-570"]
    assert "570.124.06-1" not in ubuntu["cuda-drivers-570"]
    assert "nvidia-driver-570-open" in ubuntu and "nvidia-driver-570-open" not in debian
    assert "nvidia-kernel-open-dkms" in debian and "nvidia-kernel-open-dkms" not in ubuntu
    # cuda-13.0's fabric manager: -1 on Debian 12, -1ubuntu1 on Ubuntu (package_exceptions).
    assert "580.159.04-1" in debian["nvidia-fabricmanager"]
    assert "580.159.04-1ubuntu1" not in debian["nvidia-fabricmanager"]
    assert "580.159.04-1ubuntu1" in ubuntu["nvidia-fabricmanager"]
    assert "580.159.04-1" not in ubuntu["nvidia-fabricmanager"]
    for os_dir in APT_OS_DIRS:
        repo = mirror_root / cuda_repo(os_dir)
        assert {"Packages", "Packages.gz", "Release", "InRelease", "Release.gpg"} <= {
            p.name for p in repo.iterdir()}
