"""The kernel's stand-in packages (sim/kernel_packages.py): on amd64 exactly what the cluster
installs today, on arm64 Debian's arm64 flavour (linux-image-arm64, linux-headers-arm64) built
as arm64 packages, none for an rpm-based node."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner.errors import InputError
from provisioner.sim.kernel_packages import kernel_debs_dir, kernel_flavour, kernel_packages
from provisioner.sim.mirror import build_packages

KERNEL = "6.1.0-27-cloud-amd64"


@pytest.mark.parametrize(("os_name", "flavour"), [
    ("debian12", "amd64"), ("debian13", "amd64"), ("ubuntu2204", "generic"),
    ("ubuntu2404", "generic"), ("rocky9", None)])
def test_amd64_stand_ins_are_the_ones_the_cluster_installs(os_name: str,
                                                          flavour: str | None) -> None:
    """What the cluster installed before arm64 existed: the running kernel's image and headers
    and the flavour's metapackages depending on them, amd64, version 1 of the release."""
    packages = kernel_packages(os_name, KERNEL)
    if flavour is None:
        assert packages == []
        return
    assert [p.name for p in packages] == [
        f"linux-image-{KERNEL}", f"linux-headers-{KERNEL}",
        f"linux-image-{flavour}", f"linux-headers-{flavour}"]
    assert [p.depends for p in packages[2:]] == [(f"linux-image-{KERNEL}",),
                                                 (f"linux-headers-{KERNEL}",)]
    assert {p.version for p in packages} == {"6.1.0-1"}
    assert {p.architecture for p in packages} == {"amd64"}
    assert kernel_debs_dir(Path("/s"), os_name) == Path(f"/s/kernel-debs/{os_name}")


def test_debian_arm64_names_the_arm64_flavour() -> None:
    packages = kernel_packages("debian12", "6.1.0-27-arm64", "arm64")
    assert [p.name for p in packages] == [
        "linux-image-6.1.0-27-arm64", "linux-headers-6.1.0-27-arm64",
        "linux-image-arm64", "linux-headers-arm64"]
    assert {p.architecture for p in packages} == {"arm64"}
    assert packages[2].depends == ("linux-image-6.1.0-27-arm64",)
    assert packages[3].depends == ("linux-headers-6.1.0-27-arm64",)
    assert {p.version for p in packages} == {"6.1.0-1"}


def test_flavours_by_os_and_architecture() -> None:
    assert kernel_flavour("debian12") == "amd64"
    assert kernel_flavour("debian12", "arm64") == "arm64"
    assert kernel_flavour("ubuntu2404", "arm64") == "generic"
    assert kernel_flavour("rocky9", "arm64") is None
    assert kernel_packages("rocky9", KERNEL, "arm64") == []
    with pytest.raises(InputError, match="architecture 'armhf'"):
        kernel_packages("debian12", KERNEL, "armhf")


def test_each_architecture_builds_in_its_own_directory(tmp_path: Path) -> None:
    assert kernel_debs_dir(tmp_path, "debian12") == tmp_path / "kernel-debs" / "debian12"
    assert kernel_debs_dir(tmp_path, "debian12", "arm64") == (
        tmp_path / "kernel-debs" / "debian12-arm64")


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_the_arm64_stand_ins_build_as_arm64_debs(tmp_path: Path) -> None:
    debs = build_packages(kernel_packages("debian12", KERNEL, "arm64"),
                          kernel_debs_dir(tmp_path, "debian12", "arm64"))
    assert [deb.name for deb in debs][2:] == ["linux-image-arm64_6.1.0-1_arm64.deb",
                                              "linux-headers-arm64_6.1.0-1_arm64.deb"]
    for deb in debs:
        arch = subprocess.run(["dpkg-deb", "-f", str(deb), "Architecture"], capture_output=True,
                              text=True, check=True).stdout.strip()
        assert arch == "arm64"
