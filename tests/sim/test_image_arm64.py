"""The emulated arm64 node image (sim/image.py): named after its own recipe beside the amd64
one (which keeps its name), built by a foreign debootstrap only after the machine's qemu-aarch64
registration is checked, imported as linux/arm64 with the stop signal systemd halts on under
qemu, and carrying the emulation fixes. podman and debootstrap are faked: nothing is built."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from provisioner.errors import InputError
from provisioner.sim import image as image_mod
from provisioner.sim.image import (
    ARM64_SETUP,
    EMULATED_STOP_SIGNAL,
    NODE_OSES,
    image_for,
)


def test_arm64_images_have_their_own_names_and_amd64_keeps_its_own() -> None:
    amd64 = image_for("debian12")
    arm64 = image_for("debian12", "arm64")
    assert amd64 == image_for("debian12", "amd64") == image_for("bookworm")
    assert amd64.architecture == "amd64" and not amd64.emulated
    assert "arm64" not in amd64.name
    assert arm64.name.startswith("localhost/gpuc-node:debian12-arm64-")
    assert (arm64.os, arm64.suite, arm64.architecture) == ("debian12", "bookworm", "arm64")
    assert image_for("bookworm", "arm64") == arm64
    assert image_for("trixie", "arm64").name.startswith("localhost/gpuc-node:debian13-arm64-")
    every = {image_for(os_name).name for os_name in NODE_OSES} | {arm64.name}
    assert len(every) == len(NODE_OSES) + 1


def test_the_arm64_name_follows_its_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    before = image_for("debian12", "arm64").name
    monkeypatch.setattr(image_mod, "ARM64_SETUP", ARM64_SETUP + "true\n")
    assert image_for("debian12", "arm64").name != before


def test_imitated_oses_and_unknown_architectures_are_refused_on_arm64() -> None:
    with pytest.raises(InputError, match="'rocky9' is not imitated on arm64"):
        image_for("rocky9", "arm64")
    with pytest.raises(InputError, match="unknown node architecture 'riscv64'"):
        image_for("debian12", "riscv64")


def test_run_options_and_stop_signal() -> None:
    assert image_for("debian12").run_options() == []
    assert image_for("debian12").stop_signal == "SIGRTMIN+3"
    arm64 = image_for("debian12", "arm64")
    assert arm64.stop_signal == EMULATED_STOP_SIGNAL == "SIGRTMIN+5"
    assert arm64.run_options() == ["--arch", "arm64", "--stop-signal", "SIGRTMIN+5"]


def test_the_arm64_setup_empties_credentials_and_masks_binfmt() -> None:
    assert "LoadCredential=" in ARM64_SETUP and "/etc/systemd/system/$name.d/" in ARM64_SETUP
    for unit in ("systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount",
                 "proc-sys-fs-binfmt_misc.mount"):
        assert unit in ARM64_SETUP
    assert subprocess.run(["sh", "-n", "-c", ARM64_SETUP], check=False).returncode == 0


def test_the_arm64_setup_writes_a_drop_in_per_unit_with_credentials(tmp_path: Path) -> None:
    """Run against a fake unit directory: each unit with a LoadCredential= line gets a drop-in
    that empties it; the others get none."""
    units = tmp_path / "lib" / "systemd" / "system"
    units.mkdir(parents=True)
    (units / "systemd-sysctl.service").write_text("[Service]\nLoadCredential=sysctl.extra\n")
    (units / "ssh.service").write_text("[Service]\nExecStart=/usr/sbin/sshd -D\n")
    script = (ARM64_SETUP.replace("/lib/systemd/system", str(units))
              .replace("/etc/systemd/system", str(tmp_path / "etc"))
              .replace("systemctl mask", "true"))
    subprocess.run(["sh", "-c", script], check=True)
    dropins = sorted(p.relative_to(tmp_path / "etc") for p in (tmp_path / "etc").rglob("*.conf"))
    assert dropins == [Path("systemd-sysctl.service.d/50-gpuc-emulated.conf")]
    assert (tmp_path / "etc" / dropins[0]).read_text() == "[Service]\nLoadCredential=\n"


class FakePodman:
    def __init__(self, exists: bool = False) -> None:
        self.exists = exists
        self.calls: list[list[str]] = []

    def run(self, args: list[str], **_kwargs: Any) -> Any:
        self.calls.append(list(args))
        code = 0 if args[:2] != ["image", "exists"] or self.exists else 1
        return type("Result", (), {"returncode": code})()


def test_ensure_image_arm64_registers_binfmt_builds_foreign_and_imports_as_arm64(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    order: list[str] = []
    fake = FakePodman()
    monkeypatch.setattr(image_mod.podman, "run", fake.run)
    monkeypatch.setattr(image_mod, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(image_mod.binfmt, "ensure_registered",
                        lambda arch: order.append(f"binfmt {arch}"))

    def foreign(suite: str, architecture: str, tarball: Path) -> None:
        order.append(f"debootstrap {suite} {architecture}")
        tarball.parent.mkdir(parents=True, exist_ok=True)
        tarball.write_bytes(b"rootfs")

    monkeypatch.setattr(image_mod, "_build_foreign_rootfs_tar", foreign)
    monkeypatch.setattr(image_mod, "_build_rootfs_tar",
                        lambda *_a: pytest.fail("the amd64 builder ran for arm64"))
    built = image_mod.ensure_image("debian12", "arm64")
    assert order == ["binfmt arm64", "debootstrap bookworm arm64"]
    assert (tmp_path / "images" / f"{built.name.split(':')[1]}.tar").read_bytes() == b"rootfs"
    [imported] = [call for call in fake.calls if call[0] == "import"]
    assert imported[1:5] == ["--os", "linux", "--arch", "arm64"]
    assert "STOPSIGNAL SIGRTMIN+5" in imported and 'CMD ["/sbin/init"]' in imported
    assert imported[-1] == built.name


def test_an_arm64_image_podman_has_still_needs_binfmt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Running the image needs the registration as much as building it."""
    registered: list[str] = []
    monkeypatch.setattr(image_mod.podman, "run", FakePodman(exists=True).run)
    monkeypatch.setattr(image_mod.binfmt, "ensure_registered", registered.append)
    image_mod.ensure_image("debian12", "arm64")
    assert registered == ["arm64"]


def test_the_amd64_import_is_unchanged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = FakePodman()
    monkeypatch.setattr(image_mod.podman, "run", fake.run)
    monkeypatch.setattr(image_mod, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(image_mod.binfmt, "ensure_registered",
                        lambda arch: pytest.fail("binfmt checked for amd64"))

    def native(suite: str, tarball: Path) -> None:
        tarball.parent.mkdir(parents=True, exist_ok=True)
        tarball.write_bytes(b"rootfs")

    monkeypatch.setattr(image_mod, "_build_rootfs_tar", native)
    built = image_mod.ensure_image("debian12")
    [imported] = [call for call in fake.calls if call[0] == "import"]
    assert imported == ["import", "--change", 'CMD ["/sbin/init"]',
                        "--change", f"LABEL {image_mod.podman.LABEL}=true",
                        "--change", "STOPSIGNAL SIGRTMIN+3", "-", built.name]


@pytest.mark.skipif(shutil.which("debootstrap") is None, reason="needs debootstrap")
def test_the_foreign_debootstrap_runs_two_stages_then_both_setups(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    commands: list[list[str]] = []

    def check(cmd: list[str], what: str, timeout: float = 600) -> None:
        commands.append(cmd)
        if cmd[0] == "tar":
            Path(cmd[cmd.index("-cf") + 1]).write_bytes(b"tar")

    monkeypatch.setattr(image_mod, "_check", check)
    image_mod._build_foreign_rootfs_tar("bookworm", "arm64", tmp_path / "images" / "x.tar")
    first, second, post, arm64, tar = commands
    assert first[:4] == ["debootstrap", "--arch=arm64", "--foreign", "--variant=minbase"]
    assert first[-2] == "bookworm"
    assert second[0] == "chroot" and second[2:] == ["/debootstrap/debootstrap", "--second-stage"]
    assert post[-1] == image_mod.POST_SETUP and arm64[-1] == ARM64_SETUP
    assert tar[0] == "tar" and (tmp_path / "images" / "x.tar").read_bytes() == b"tar"
