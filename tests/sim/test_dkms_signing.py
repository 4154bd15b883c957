"""The simulated dkms's module files read by the real tools: kmod's ``modinfo`` parses the ELF
object and its appended signature (signer, hash), ``openssl cms -verify`` checks the signature
over the module, and each OS signs where its real dkms signs (Debian: a key pair generated on
first use; Ubuntu: shim-signed's MOK pair only when present; 3.0.11 and later: only with the
kernel config's hash)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from provisioner.sim.faults import HEADERS_CONFIG
from provisioner.sim.tools import kmodule
from tests.sim.conftest import Bundled, run_tool
from tests.sim.module_signature import verify_appended_signature

V = "580.95.05"
KERNEL = "6.1.0-18-amd64"
MODINFO = shutil.which("modinfo") or next(
    (p for p in ("/usr/sbin/modinfo", "/sbin/modinfo") if os.access(p, os.X_OK)), None)
OPENSSL = shutil.which("openssl")

pytestmark = pytest.mark.skipif(MODINFO is None or OPENSSL is None,
                                reason="needs kmod's modinfo and openssl")

OS_RELEASE = {
    "debian12": 'ID=debian\nVERSION_ID="12"\n',
    "ubuntu2404": 'ID=ubuntu\nVERSION_ID="24.04"\n',
    "ubuntu2204": 'ID=ubuntu\nVERSION_ID="22.04"\n',
    "rocky9": 'ID="rocky"\nVERSION_ID="9.6"\n',
}


def modinfo(path: Path, field: str | None = None) -> str:
    args = [str(MODINFO), *(["-F", field] if field else []), str(path)]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def node(root: Path, os_name: str, config: bool = True) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text(OS_RELEASE[os_name])
    src = root / f"usr/src/nvidia-{V}"
    src.mkdir(parents=True)
    (src / "dkms.conf").write_text(
        f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{V}"\nAUTOINSTALL="yes"\n'
        + "".join(f'BUILT_MODULE_NAME[{i}]="{n}"\n' for i, n in enumerate(kmodule.NVIDIA_MODULES)))
    headers = root / f"usr/src/linux-headers-{KERNEL}"
    headers.mkdir(parents=True)
    if config:
        (headers / ".config").write_bytes(HEADERS_CONFIG)
    (root / f"lib/modules/{KERNEL}").mkdir(parents=True)
    (root / f"lib/modules/{KERNEL}/build").symlink_to(f"/usr/src/linux-headers-{KERNEL}")
    return root


def install(bundled: Bundled, root: Path) -> subprocess.CompletedProcess[str]:
    dkms = bundled("dkms")
    assert run_tool(dkms, root, "add", f"nvidia/{V}").returncode == 0
    out = run_tool(dkms, root, "install", f"nvidia/{V}", "-k", KERNEL)
    assert out.returncode == 0, out.stderr
    assert run_tool(dkms, root, "status").stdout == f"nvidia/{V}, {KERNEL}, x86_64: installed\n"
    return out


def installed(root: Path, name: str) -> Path:
    return root / f"lib/modules/{KERNEL}/updates/dkms/{name}.ko"


def make_pair(key: Path, cert: Path, cn: str) -> None:
    key.parent.mkdir(parents=True, exist_ok=True)
    kmodule.generate_key(str(key), str(cert), f"/CN={cn}")


def test_modinfo_reads_the_elf_object_unsigned(tmp_path: Path) -> None:
    ko = tmp_path / "nvidia-uvm.ko"
    ko.write_bytes(kmodule.elf_module(kmodule.modinfo_strings("nvidia-uvm", V, KERNEL)))
    text = modinfo(ko)
    assert f"filename:       {ko}\n" in text
    assert "license:        Dual MIT/GPL\n" in text
    assert f"version:        {V}\n" in text
    assert "name:           nvidia_uvm\n" in text
    assert f"vermagic:       {KERNEL} SMP preempt mod_unload modversions" in text
    assert "signer" not in text
    assert modinfo(ko, "signer") == ""
    assert modinfo(ko, "version") == f"{V}\n"


def test_a_signed_module_names_its_signer_and_the_signature_verifies(tmp_path: Path) -> None:
    key, cert = tmp_path / "mok.key", tmp_path / "mok.pub"
    make_pair(key, cert, "Site module signing key")
    module = kmodule.elf_module(kmodule.modinfo_strings("nvidia", V, KERNEL, "proprietary"))
    signed = kmodule.sign(module, str(key), str(cert), "sha256")
    ko = tmp_path / "nvidia.ko"
    ko.write_bytes(signed)
    assert signed.startswith(module) and signed.endswith(kmodule.MODULE_SIG_MAGIC)
    text = modinfo(ko)
    assert "license:        NVIDIA\n" in text
    assert "sig_id:         PKCS#7\n" in text
    assert "signer:         Site module signing key\n" in text
    assert "sig_hashalgo:   sha256\n" in text
    assert modinfo(ko, "signer") == "Site module signing key\n"
    # The CMS message covers the module as built: openssl verifies it against the certificate.
    verify = verify_appended_signature(signed, module, cert, tmp_path)
    assert verify.returncode == 0, verify.stderr


def test_debian_dkms_generates_its_key_and_signs_every_module(bundled: Bundled,
                                                            tmp_path: Path) -> None:
    root = node(tmp_path, "debian12")
    out = install(bundled, root)
    assert "generating self signed certificate for MOK" in out.stdout
    key = root / "var/lib/dkms/mok.key"
    assert key.is_file() and (root / "var/lib/dkms/mok.pub").is_file()
    assert key.stat().st_mode & 0o077 == 0
    for name in kmodule.NVIDIA_MODULES:
        assert modinfo(installed(root, name), "signer") == "DKMS module signing key\n", name
        assert modinfo(installed(root, name), "sig_hashalgo") == "sha256\n"
    # The pair is made once: a second kernel's modules are signed with the same key.
    fingerprint = key.read_bytes()
    dkms = bundled("dkms")
    other = "6.1.1-18-amd64"
    (root / f"lib/modules/{other}").mkdir()
    (root / f"lib/modules/{other}/build").symlink_to(f"/usr/src/linux-headers-{KERNEL}")
    assert run_tool(dkms, root, "autoinstall", "-k", other).returncode == 0
    assert key.read_bytes() == fingerprint
    assert modinfo(root / f"lib/modules/{other}/updates/dkms/nvidia.ko", "vermagic").startswith(
        other)


def test_debian_3_0_10_signs_with_sha512_without_a_kernel_config(bundled: Bundled,
                                                                 tmp_path: Path) -> None:
    root = node(tmp_path, "debian12", config=False)
    install(bundled, root)
    assert modinfo(installed(root, "nvidia"), "sig_hashalgo") == "sha512\n"


def test_ubuntu_signs_only_with_shim_signed_mok_pair(bundled: Bundled, tmp_path: Path) -> None:
    bare = node(tmp_path / "bare", "ubuntu2404")
    out = install(bundled, bare)
    assert "update-secureboot-policy not found, modules won't be signed" in out.stdout
    assert modinfo(installed(bare, "nvidia"), "signer") == ""
    assert not (bare / "var/lib/dkms/mok.key").exists()

    keyed = node(tmp_path / "keyed", "ubuntu2404")
    mok = keyed / "var/lib/shim-signed/mok"
    make_pair(mok / "MOK.priv", mok / "MOK.der", "node1 Secure Boot Module Signature key")
    install(bundled, keyed)
    for name in kmodule.NVIDIA_MODULES:
        assert modinfo(installed(keyed, name), "signer") == (
            "node1 Secure Boot Module Signature key\n")


def test_dkms_3_0_11_and_later_sign_nothing_without_the_kernel_config(bundled: Bundled,
                                                                       tmp_path: Path) -> None:
    root = node(tmp_path, "rocky9", config=False)
    out = install(bundled, root)
    assert f"Kernel config /lib/modules/{KERNEL}/build/.config not found" in out.stdout
    assert modinfo(installed(root, "nvidia"), "signer") == ""
    rocky = node(tmp_path / "with-config", "rocky9")
    install(bundled, rocky)
    assert modinfo(installed(rocky, "nvidia-drm"), "signer") == "DKMS module signing key\n"
