"""The simulated mokutil on a node's EFI variables: mokutil 0.6.0's words and exit statuses for
--sb-state, --test-key, --import, --list-new and --list-enrolled; an import is only a request
(MokNew) until a boot with the mok-enrolled fault (the person at the MokManager console) moves
it into the MOK list. Then the whole Secure Boot path on one simulated node: the simulated dkms
signs, the driver role's module check reads the modules with real modinfo and asks this
mokutil, and fails until the key is enrolled."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from provisioner.sim.cluster import BOOT_SCRIPT
from provisioner.sim.faults import HEADERS_CONFIG
from provisioner.sim.tools import kmodule
from provisioner.sim.tools.node import EFIVARS, secure_boot_vars
from tests.sim.conftest import Bundled, run_tool

MODINFO = shutil.which("modinfo") or next(
    (p for p in ("/usr/sbin/modinfo", "/sbin/modinfo") if os.access(p, os.X_OK)), None)
pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")

CERT = "/var/lib/dkms/mok.pub"
V, KERNEL = "580.95.05", "6.1.0-18-amd64"


def efi_node(root: Path, secure_boot: bool) -> Path:
    (root / EFIVARS.lstrip("/")).mkdir(parents=True)
    for path, data in secure_boot_vars(secure_boot):
        (root / path.lstrip("/")).write_bytes(data)
    (root / "etc/gpu-sim").mkdir(parents=True)
    (root / "etc/gpu-sim/faults").write_text("")
    return root


def with_key(root: Path) -> Path:
    (root / "var/lib/dkms").mkdir(parents=True, exist_ok=True)
    kmodule.generate_key(str(root / "var/lib/dkms/mok.key"), str(root / CERT.lstrip("/")),
                         "/CN=DKMS module signing key")
    return root


def mokutil(bundled: Bundled, root: Path, *args: str,
            stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([bundled("mokutil"), *args], input=stdin, capture_output=True,
                          text=True, timeout=30, check=False,
                          env={**os.environ, "GPU_SIM_ROOT": str(root)})


def boot(root: Path) -> None:
    """The MOK step of the simulated node's boot script, run against ``root``."""
    lines = BOOT_SCRIPT.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("request="))
    end = next(i for i in range(start, len(lines)) if lines[i] == "fi")
    script = "\n".join(lines[start:end + 1])
    for prefix in ("/var/lib/gpu-sim", "/etc/gpu-sim"):
        script = script.replace(prefix, f"{root}{prefix}")
    subprocess.run(["sh", "-c", script], check=True)


def test_sb_state_says_what_the_variable_says(bundled: Bundled, tmp_path: Path) -> None:
    on = mokutil(bundled, efi_node(tmp_path / "on", True), "--sb-state")
    assert (on.returncode, on.stdout) == (0, "SecureBoot enabled\n")
    off = mokutil(bundled, efi_node(tmp_path / "off", False), "--sb-state")
    assert (off.returncode, off.stdout) == (0, "SecureBoot disabled\n")
    bios = mokutil(bundled, tmp_path / "bios", "--sb-state")
    assert (bios.returncode, bios.stderr) == (
        1, "EFI variables are not supported on this system\n")


def test_an_import_is_pending_until_the_console_confirms_it(bundled: Bundled,
                                                            tmp_path: Path) -> None:
    root = with_key(efi_node(tmp_path, True))
    cert = str(root / CERT.lstrip("/"))
    first = mokutil(bundled, root, "--test-key", cert)
    # mokutil 0.6.0: "not enrolled" exits 0, "already enrolled"/"in the request" exit 1.
    assert (first.returncode, first.stdout) == (0, f"{cert} is not enrolled\n")
    # The password the console asks for, twice, from the terminal.
    mismatch = mokutil(bundled, root, "--import", cert, stdin="secret1\nsecret2\n\n\n")
    assert mismatch.returncode == 255 and "password doesn't match" in mismatch.stderr
    imported = mokutil(bundled, root, "--import", cert, stdin="secret1\nsecret1\n")
    assert imported.returncode == 0, imported.stderr
    assert "input password: " in imported.stdout and "input password again: " in imported.stdout
    pending = mokutil(bundled, root, "--test-key", cert)
    assert (pending.returncode, pending.stdout) == (
        1, f"{cert} is already in the enrollment request\n")
    listed = mokutil(bundled, root, "--list-new").stdout
    assert listed.startswith("[key 1]\nSHA1 Fingerprint: ")
    assert "CN = DKMS module signing key" in listed
    assert mokutil(bundled, root, "--list-enrolled").stdout == ""
    again = mokutil(bundled, root, "--import", cert, "--root-pw")
    assert again.stdout == f"SKIP: {cert} is already in the enrollment request\n"

    boot(root)  # nobody at the console
    assert "already in the enrollment request" in mokutil(bundled, root, "--test-key", cert).stdout
    (root / "etc/gpu-sim/faults").write_text("mok-enrolled\n")
    boot(root)
    done = mokutil(bundled, root, "--test-key", cert)
    assert (done.returncode, done.stdout) == (1, f"{cert} is already enrolled\n")
    assert "CN = DKMS module signing key" in mokutil(bundled, root, "--list-enrolled").stdout
    assert mokutil(bundled, root, "--list-new").stdout == ""


def test_a_file_that_is_no_certificate_is_refused(bundled: Bundled, tmp_path: Path) -> None:
    root = efi_node(tmp_path, True)
    (tmp_path / "junk.der").write_bytes(b"not a certificate")
    out = mokutil(bundled, root, "--test-key", str(tmp_path / "junk.der"))
    assert (out.returncode, out.stderr) == (255, "Not a valid x509 certificate\n")


@pytest.mark.skipif(MODINFO is None, reason="needs kmod's modinfo")
def test_a_secure_boot_node_fails_the_signature_check_until_its_key_is_enrolled(
        bundled: Bundled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.collection_module import load_module

    root = efi_node(tmp_path / "node", True)
    (root / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\n')
    (root / f"usr/src/nvidia-{V}").mkdir(parents=True)
    (root / f"usr/src/nvidia-{V}/dkms.conf").write_text(
        f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{V}"\n'
        + "".join(f'BUILT_MODULE_NAME[{i}]="{n}"\n' for i, n in enumerate(kmodule.NVIDIA_MODULES)))
    (root / f"usr/src/linux-headers-{KERNEL}").mkdir(parents=True)
    (root / f"usr/src/linux-headers-{KERNEL}/.config").write_bytes(HEADERS_CONFIG)
    (root / f"lib/modules/{KERNEL}").mkdir(parents=True)
    (root / f"lib/modules/{KERNEL}/build").symlink_to(f"/usr/src/linux-headers-{KERNEL}")
    dkms = bundled("dkms")
    assert run_tool(dkms, root, "add", f"nvidia/{V}").returncode == 0
    assert run_tool(dkms, root, "install", f"nvidia/{V}", "-k", KERNEL).returncode == 0
    cert = str(root / CERT.lstrip("/"))

    module: Any = load_module("nvidia_module_signatures")
    bins = {"modinfo": MODINFO, "openssl": shutil.which("openssl"),
            "mokutil": str(bundled("mokutil"))}
    monkeypatch.setenv("GPU_SIM_ROOT", str(root))

    class Done(Exception):
        pass

    class Module:
        def __init__(self, argument_spec: dict[str, Any], supports_check_mode: bool) -> None:
            self.params = {"modules_root": str(root / "lib/modules"),
                           "efivars_root": str(root / EFIVARS.lstrip("/")),
                           "certificates": [cert]}

        def get_bin_path(self, name: str, required: bool = False,
                         opt_dirs: list[str] | None = None) -> str | None:
            return bins.get(name)

        def run_command(self, args: list[str]) -> tuple[int, str, str]:
            proc = subprocess.run(args, capture_output=True, text=True, check=False)
            return proc.returncode, proc.stdout, proc.stderr

        def exit_json(self, **result: Any) -> None:
            raise Done(result)

        def fail_json(self, **result: Any) -> None:
            raise AssertionError(result)

    monkeypatch.setattr(module, "AnsibleModule", Module)

    def check() -> dict[str, Any]:
        with pytest.raises(Done) as done:
            module.main()
        result: dict[str, Any] = done.value.args[0]
        assert result["secure_boot"] == "enabled"
        assert {m["signer"] for m in result["kernels"][KERNEL].values()} == {
            "DKMS module signing key"}
        return result

    assert "is not enrolled" in check()["checks"][0]["detail"]
    mokutil(bundled, root, "--import", cert, "--hash-file", hash_file(tmp_path))
    boot(root)
    pending = check()
    assert pending["keys"]["DKMS module signing key"]["enrolment"] == "pending"
    assert pending["failed_checks"] == [f"module_signatures:{KERNEL}"]
    (root / "etc/gpu-sim/faults").write_text("secure-boot\nmok-enrolled\n")
    boot(root)
    enrolled = check()
    assert enrolled["failed_checks"] == [] and enrolled["checks"][0]["status"] == "pass"


def load_module(root: Path, bundled: Bundled) -> subprocess.CompletedProcess[str]:
    """The simulated node's module load (what its boot and the driver package run), against
    ``root``, with this test's mokutil and the machine's modinfo."""
    from provisioner.sim.tools.node import load_module_sh

    script = load_module_sh()
    for prefix in ("/var/lib/gpu-sim", "/run/gpu-sim", "/usr/lib/gpu-sim"):
        script = script.replace(prefix, f"{root}{prefix}")
    script = script.replace("ko=/lib/modules", f"ko={root}/lib/modules")
    tools = root / "test-bin"
    tools.mkdir(exist_ok=True)
    if not (tools / "mokutil").exists():
        (tools / "mokutil").symlink_to(bundled("mokutil"))
    env = {**os.environ, "GPU_SIM_ROOT": str(root),
           "PATH": f"{tools}:{os.path.dirname(str(MODINFO))}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True,
                          check=False)


@pytest.mark.skipif(MODINFO is None, reason="needs kmod's modinfo")
@pytest.mark.parametrize("secure_boot", [True, False])
def test_secure_boot_refuses_a_module_whose_key_is_not_enrolled(
        bundled: Bundled, tmp_path: Path, secure_boot: bool) -> None:
    running = os.uname().release
    root = with_key(efi_node(tmp_path, secure_boot))
    (root / "usr/lib/gpu-sim").mkdir(parents=True)
    (root / "usr/lib/gpu-sim/driver-version").write_text(f"{V}\n")
    ko = root / f"lib/modules/{running}/updates/dkms/nvidia.ko"
    ko.parent.mkdir(parents=True)
    ko.write_bytes(kmodule.sign(kmodule.elf_module(kmodule.modinfo_strings("nvidia", V, running)),
                                str(root / "var/lib/dkms/mok.key"), str(root / CERT.lstrip("/")),
                                "sha256"))
    loaded = root / "run/gpu-sim/module/nvidia/version"
    out = load_module(root, bundled)
    assert out.returncode == 0, out.stderr
    if not secure_boot:
        assert loaded.read_text() == f"{V}\n"
        return
    assert not loaded.exists()
    assert (root / "var/lib/gpu-sim/dmesg").read_text() == (
        "[    4.000000] Lockdown: modprobe: unsigned module loading is restricted; see man "
        "kernel_lockdown.7\n")
    imported = mokutil(bundled, root, "--import", str(root / CERT.lstrip("/")),
                       "--hash-file", hash_file(tmp_path))
    assert imported.returncode == 0, imported.stderr
    (root / "etc/gpu-sim/faults").write_text("secure-boot\nmok-enrolled\n")
    boot(root)
    assert load_module(root, bundled).returncode == 0
    assert loaded.read_text() == f"{V}\n"


# A SHA-512 crypt(3) string, as `mkpasswd -m sha-512` or `openssl passwd -6` writes one.
SHA512_HASH = ("$6$gpucsalt$dbeEjvDbXP2w5.ZSVvEP3szf14N2xGhBCThpYffNchnbsG3n"
               "SiYEYUlGSpba0fmOD7abxwcZXVjSEcnoxlq6l/")  # openssl passwd -6 -salt gpucsalt mok-console-1


def hash_file(tmp_path: Path, text: str = SHA512_HASH) -> str:
    path = tmp_path / "mok.hash"
    path.write_text(text + "\n")
    return str(path)


@pytest.mark.parametrize(("shadow", "ok"), [
    ("root:*:19000:0:99999:7:::", False),  # locked, as a cloud image's root
    ("root:$y$j9T$abc$defghijkl:19000:0:99999:7:::", False),  # yescrypt, Debian 12's default
    (f"root:{SHA512_HASH}:19000:0:99999:7:::", True),
])
def test_root_pw_needs_a_root_password_hash_mokutil_can_read(
        bundled: Bundled, tmp_path: Path, shadow: str, ok: bool) -> None:
    root = with_key(efi_node(tmp_path, True))
    (root / "etc/shadow").write_text(shadow + "\n")
    out = mokutil(bundled, root, "--import", str(root / CERT.lstrip("/")), "--root-pw")
    if ok:
        assert out.returncode == 0, out.stderr
    else:
        assert (out.returncode, out.stderr) == (255, "Failed to get root password hash\n")


@pytest.mark.parametrize(("text", "ok"), [(SHA512_HASH, True), ("not a hash", False)])
def test_hash_file_must_hold_a_crypt_hash(bundled: Bundled, tmp_path: Path, text: str,
                                          ok: bool) -> None:
    root = with_key(efi_node(tmp_path, True))
    out = mokutil(bundled, root, "--import", str(root / CERT.lstrip("/")),
                  "--hash-file", hash_file(tmp_path, text))
    assert out.returncode == (0 if ok else 255), out.stderr
    assert ok or out.stderr == "Failed to read hash\n"
