"""The controller's qemu-aarch64 registration (sim/binfmt.py): read as the kernel shows it,
(re)registered with flags OCPF from qemu-user-static's import file when it lacks them, and one
clear line when it cannot be. A fake binfmt_misc directory stands in for the kernel's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from provisioner.errors import EnvironmentProblem
from provisioner.sim import binfmt

# /usr/share/binfmts/qemu-aarch64 as Debian 12's qemu-user-static 7.2 ships it.
DEBIAN_IMPORT_FILE = r"""package qemu-user-static
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
magic \x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00
offset 0
mask \xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff
credentials no
fix_binary yes
preserve yes
"""


def kernel_entry(flags: str, interpreter: str = "/usr/libexec/qemu-binfmt/aarch64-binfmt-P",
                 enabled: bool = True) -> str:
    """/proc/sys/fs/binfmt_misc/qemu-aarch64 as the kernel prints it."""
    return (f"{'enabled' if enabled else 'disabled'}\ninterpreter {interpreter}\n"
            f"flags: {flags}\noffset 0\nmagic 7f454c460201010000000000000000000200b700\n"
            "mask ffffffffffffff00fffffffffffffffffeffffff\n")


class FakeKernel:
    """binfmt_misc's control files: `register` creates an entry, `-1` to an entry removes it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.writes: list[tuple[str, str]] = []

    def write(self, path: Path, text: str) -> None:
        self.writes.append((path.name, text))
        if path.name == "register":
            _, name, _kind, _offset, _magic, _mask, interpreter, flags = text.split(":")
            (self.root / name).write_text(kernel_entry(
                "".join(f for f in "POCF" if f in flags), interpreter))
        elif text == "-1":
            path.unlink()


@pytest.fixture()
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, FakeKernel]:
    binfmt_dir = tmp_path / "binfmt_misc"
    binfmt_dir.mkdir()
    (binfmt_dir / "status").write_text("enabled\n")
    (binfmt_dir / "register").write_text("")
    imports = tmp_path / "binfmts"
    imports.mkdir()
    interpreter = tmp_path / "aarch64-binfmt-P"
    interpreter.write_text("qemu")
    (imports / "qemu-aarch64").write_text(
        DEBIAN_IMPORT_FILE.replace("/usr/libexec/qemu-binfmt/aarch64-binfmt-P", str(interpreter)))
    kernel = FakeKernel(binfmt_dir)
    monkeypatch.setattr(binfmt, "_kernel_write", kernel.write)
    return binfmt_dir, imports, kernel


def test_the_kernels_view_of_an_entry_is_read() -> None:
    entry = binfmt.parse_registration("qemu-aarch64", kernel_entry("POCF"))
    assert entry.enabled and entry.flags == frozenset("POCF") and entry.usable
    assert entry.interpreter == "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"
    assert not binfmt.parse_registration("qemu-aarch64", kernel_entry("PF")).usable
    assert not binfmt.parse_registration("q", kernel_entry("POCF", enabled=False)).usable


def test_debians_import_file_becomes_one_register_line_with_ocpf() -> None:
    recipe = binfmt.parse_recipe(DEBIAN_IMPORT_FILE, "qemu-aarch64")
    assert recipe.register_line("qemu-aarch64") == (
        r":qemu-aarch64:M:0:\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"
        r"\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff"
        r"\xfe\xff\xff\xff:/usr/libexec/qemu-binfmt/aarch64-binfmt-P:OCPF")


def test_a_usable_registration_is_left_alone(machine: tuple[Path, Path, FakeKernel]) -> None:
    binfmt_dir, imports, kernel = machine
    (binfmt_dir / "qemu-aarch64").write_text(kernel_entry("POCF"))
    found = binfmt.ensure_registered("arm64", binfmt_dir=binfmt_dir, binfmts_dir=imports)
    assert found.usable and kernel.writes == []


def test_debians_pf_registration_is_replaced_by_ocpf(
        machine: tuple[Path, Path, FakeKernel]) -> None:
    """Debian registers PF; without C sudo refuses to run in the node: removed, registered
    again with every flag."""
    binfmt_dir, imports, kernel = machine
    (binfmt_dir / "qemu-aarch64").write_text(kernel_entry("PF"))
    found = binfmt.ensure_registered("arm64", binfmt_dir=binfmt_dir, binfmts_dir=imports)
    assert [name for name, _ in kernel.writes] == ["qemu-aarch64", "register"]
    assert kernel.writes[0][1] == "-1" and kernel.writes[1][1].endswith(":OCPF")
    assert found.flags == frozenset("OCPF")


def test_a_missing_registration_is_made(machine: tuple[Path, Path, FakeKernel]) -> None:
    binfmt_dir, imports, kernel = machine
    found = binfmt.ensure_registered("arm64", binfmt_dir=binfmt_dir, binfmts_dir=imports)
    assert [name for name, _ in kernel.writes] == ["register"] and found.usable


def test_without_qemu_user_static_one_line_names_the_package(
        machine: tuple[Path, Path, FakeKernel]) -> None:
    binfmt_dir, imports, _kernel = machine
    (imports / "qemu-aarch64").unlink()
    with pytest.raises(EnvironmentProblem, match="install qemu-user-static") as error:
        binfmt.ensure_registered("arm64", binfmt_dir=binfmt_dir, binfmts_dir=imports)
    assert "\n" not in str(error.value)


def test_a_refused_write_says_to_run_as_root(machine: tuple[Path, Path, FakeKernel],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    binfmt_dir, imports, _kernel = machine

    def refuse(path: Path, text: str) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(binfmt, "_kernel_write", refuse)
    with pytest.raises(EnvironmentProblem, match=r"Permission denied.*run as root") as error:
        binfmt.ensure_registered("arm64", binfmt_dir=binfmt_dir, binfmts_dir=imports)
    assert "\n" not in str(error.value)


def test_flags_the_kernel_drops_are_reported(machine: tuple[Path, Path, FakeKernel],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel that keeps only some flags: the registration is not usable, and says so."""
    binfmt_dir, imports, kernel = machine

    def old_kernel(path: Path, text: str) -> None:
        kernel.write(path, text.rsplit(":", 1)[0] + ":PF" if path.name == "register" else text)

    monkeypatch.setattr(binfmt, "_kernel_write", old_kernel)
    with pytest.raises(EnvironmentProblem, match="flags FP, not OCPF"):
        binfmt.ensure_registered("arm64", binfmt_dir=binfmt_dir, binfmts_dir=imports)


def test_an_unmounted_binfmt_misc_is_mounted_or_fails_in_one_line(
        machine: tuple[Path, Path, FakeKernel], monkeypatch: pytest.MonkeyPatch) -> None:
    binfmt_dir, imports, _kernel = machine
    (binfmt_dir / "status").unlink()
    calls: list[list[str]] = []

    def mount(args: list[str], **_kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(args, 32, "", "mount: only root can do that\n")

    monkeypatch.setattr(binfmt.subprocess, "run", mount)
    with pytest.raises(EnvironmentProblem, match=r"cannot mount binfmt_misc.*only root") as error:
        binfmt.ensure_registered("arm64", binfmt_dir=binfmt_dir, binfmts_dir=imports)
    assert calls == [["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt_dir)]]
    assert "\n" not in str(error.value)


def test_only_known_architectures_have_an_emulator() -> None:
    assert binfmt.entry_name("arm64") == "qemu-aarch64"
    with pytest.raises(EnvironmentProblem, match="riscv64"):
        binfmt.entry_name("riscv64")
