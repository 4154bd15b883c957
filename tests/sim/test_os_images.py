"""Imitated node OSes: image names follow their recipe, the identity files say what Ansible
must read, and `sim up --os` refuses an unknown OS in one line."""

from __future__ import annotations

import pytest

from provisioner.cli import main
from provisioner.errors import InputError
from provisioner.sim.cluster import SimSpec
from provisioner.sim.image import IMITATIONS, NODE_OSES, image_for


def test_each_os_has_its_own_image_and_debian_keeps_its_name() -> None:
    names = {image_for(os_name).name for os_name in NODE_OSES}
    assert len(names) == len(NODE_OSES)
    assert image_for("debian12") == image_for("bookworm")
    assert image_for("ubuntu2404").name.startswith("localhost/gpuc-node:ubuntu2404-")
    assert image_for("rocky9").os == "rocky9" and image_for("rocky9").suite == "bookworm"
    with pytest.raises(InputError, match="unknown node OS 'centos7'"):
        image_for("centos7")


def test_ubuntu_identity_says_ubuntu_with_its_release() -> None:
    setup = IMITATIONS["ubuntu2404"].setup
    assert 'ID="ubuntu"' in setup and 'VERSION_ID="24.04"' in setup
    assert "DISTRIB_RELEASE=24.04" in setup and "Debian" not in setup
    assert 'VERSION_ID="22.04"' in IMITATIONS["ubuntu2204"].setup


def test_rocky_identity_has_the_platform_release_files_and_no_debian_marks() -> None:
    rocky = IMITATIONS["rocky9"]
    assert {"dnf", "python3-dnf", "rpm", "dnf-plugins-core"} <= set(rocky.packages)
    for needed in ('PLATFORM_ID="platform:el9"', "/etc/rocky-release", "/etc/redhat-release",
                   "rm -f /etc/debian_version", "/etc/dnf/vars/releasever",
                   "%_dbpath /var/lib/rpm", "/usr/bin/dpkg-query"):
        assert needed in rocky.setup, needed


def test_spec_digest_changes_with_the_os_only_off_debian() -> None:
    assert SimSpec().digest() == SimSpec(os="debian12").digest()
    assert SimSpec(os="ubuntu2404").digest() != SimSpec().digest()
    assert SimSpec(os="rocky9").image_key() == "rocky9"
    assert SimSpec(suite="trixie").image_key() == "trixie"


def test_sim_up_refuses_an_unknown_os_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "up", "--os", "centos7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--os" in err[0] and "rocky9" in err[0]


def test_a_debian_os_name_builds_from_its_suite(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: object) -> None:
    """`sim up --os debian13` asks for the image of "debian13": debootstrap must get the suite
    (trixie), since it has no script named after the OS."""
    from pathlib import Path

    from provisioner.sim import image as image_mod

    built: list[str] = []
    monkeypatch.setattr(image_mod.podman, "run",
                        lambda args, **_k: type("R", (), {"returncode": 1})())
    monkeypatch.setattr(image_mod, "cache_dir", lambda: Path(str(tmp_path)))

    def fake_build(suite: str, tarball: Path) -> None:
        built.append(suite)
        raise RuntimeError("stop here")

    monkeypatch.setattr(image_mod, "_build_rootfs_tar", fake_build)
    with pytest.raises(RuntimeError, match="stop here"):
        image_mod.ensure_image("debian13")
    assert built == ["trixie"]


def test_spec_digest_changes_with_the_architecture_only_off_amd64() -> None:
    """An arm64 cluster is another cluster (other image, nodes, mirror architectures); an amd64
    one keeps the digest it always had, so running clusters are reused."""
    assert SimSpec(arch="amd64").digest() == SimSpec().digest()
    assert SimSpec(arch="arm64").digest() != SimSpec().digest()
    assert SimSpec(arch="arm64", os="ubuntu2404").digest() != SimSpec(os="ubuntu2404").digest()


def test_sim_up_refuses_an_unknown_architecture_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "up", "--arch", "ppc64el"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--arch" in err[0] and "arm64" in err[0]


def test_an_arm64_rocky_cluster_is_refused_before_anything_starts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.sim import podman

    def no_podman(*args: object, **kwargs: object) -> None:
        raise AssertionError("podman must not be touched")

    monkeypatch.setattr(podman, "run", no_podman)
    monkeypatch.setattr(podman, "check_usable", lambda: None)
    assert main(["sim", "up", "--arch", "arm64", "--os", "rocky9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arm64" in err[0] and "rocky9" in err[0], err
