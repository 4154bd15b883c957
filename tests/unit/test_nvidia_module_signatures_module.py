"""The nvidia_module_signatures module against a node tree in a temporary directory: the NVIDIA
module files of every kernel found (compressed or not, headers skipped, updates/ first), one
``modinfo`` per file, ``mokutil --test-key`` only with Secure Boot on and only for a signer's
certificate, and the per-kernel checks. The tools are scripts on a private PATH that answer
from files of the test (what modinfo prints per module, what mokutil says per certificate)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.collection_module import load_module

nms: Any = load_module("nvidia_module_signatures")

OLD, NEW = "6.1.0-18-amd64", "6.1.1-18-amd64"
KEY = "DKMS module signing key"
SB_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


class Exited(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("exit_json")
        self.result = result


class Failed(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["msg"])
        self.result = result


class Node:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        self.signers: dict[str, str] = {}  # module file -> signer ('' unsigned)
        self.enrolment: dict[str, str] = {}  # certificate -> mokutil's line
        self.commands: list[list[str]] = []
        self.tool("modinfo", """
import json, os, sys
signer = json.load(open(os.environ["FAKE_SIGNERS"])).get(sys.argv[-1])
if signer is None:
    sys.exit("modinfo: ERROR: Module %s not found." % sys.argv[-1])
print("filename:       %s\\nlicense:        NVIDIA\\nversion:        580.95.05" % sys.argv[-1])
if signer:
    print("sig_id:         PKCS#7\\nsigner:         %s\\nsig_hashalgo:   sha256" % signer)
""")
        self.tool("openssl", """
import sys
print("subject=\\n    commonName                = DKMS module signing key")
""")
        self.tool("mokutil", """
import json, os, sys
print(json.load(open(os.environ["FAKE_ENROLMENT"]))[sys.argv[-1]])
""")

    def tool(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text("#!/usr/bin/env python3\n" + body)
        path.chmod(0o755)

    def module(self, kernel: str, rel: str, signer: str) -> str:
        path = self.root / "lib/modules" / kernel / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x7fELF")
        self.signers[str(path)] = signer
        return str(path)

    def secure_boot(self, on: bool) -> None:
        efivars = self.root / "efivars"
        efivars.mkdir(exist_ok=True)
        (efivars / SB_VAR).write_bytes(b"\x06\x00\x00\x00" + bytes([on]))

    def certificate(self, line: str) -> str:
        cert = self.root / "var/lib/dkms/mok.pub"
        cert.parent.mkdir(parents=True, exist_ok=True)
        cert.write_bytes(b"0\x82")
        self.enrolment[str(cert)] = line.replace("CERT", str(cert))
        return str(cert)


def run(monkeypatch: pytest.MonkeyPatch, node: Node, **params: Any) -> dict[str, Any]:
    signers, enrolment = node.root / "signers.json", node.root / "enrolment.json"
    signers.write_text(json.dumps(node.signers))
    enrolment.write_text(json.dumps(node.enrolment))
    monkeypatch.setenv("FAKE_SIGNERS", str(signers))
    monkeypatch.setenv("FAKE_ENROLMENT", str(enrolment))
    defaults = {"modules_root": str(node.root / "lib/modules"),
                "efivars_root": str(node.root / "efivars"),
                "certificates": [str(node.root / "var/lib/dkms/mok.pub"),
                                 str(node.root / "var/lib/shim-signed/mok/MOK.der")]}

    class FakeAnsibleModule:
        def __init__(self, argument_spec: dict[str, Any], supports_check_mode: bool) -> None:
            assert supports_check_mode and set(params) <= set(argument_spec)
            self.params = {**defaults, **params}

        def get_bin_path(self, name: str, required: bool = False,
                         opt_dirs: list[str] | None = None) -> str | None:
            path = node.bin / name
            if path.exists():
                return str(path)
            if required:
                self.fail_json(msg=f"Failed to find required executable {name}")
            return None

        def run_command(self, args: list[str]) -> tuple[int, str, str]:
            node.commands.append([os.path.basename(args[0]), *args[1:]])
            proc = subprocess.run(args, capture_output=True, text=True, check=False)
            return proc.returncode, proc.stdout, proc.stderr

        def exit_json(self, **result: Any) -> None:
            raise Exited(result)

        def fail_json(self, **result: Any) -> None:
            raise Failed(result)

    monkeypatch.setattr(nms, "AnsibleModule", FakeAnsibleModule)
    with pytest.raises(Exited) as done:
        nms.main()
    return done.value.result


@pytest.fixture
def node(tmp_path: Path) -> Node:
    node = Node(tmp_path)
    for name in ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm"):
        node.module(OLD, f"updates/dkms/{name}.ko", KEY)
        node.module(NEW, f"updates/dkms/{name}.ko.zst", KEY)
    # Headers and other modules are not read; the kernel's own nvidiafb is no NVIDIA driver.
    (tmp_path / f"lib/modules/{OLD}/build").mkdir()
    (tmp_path / f"lib/modules/{OLD}/build/nvidia.ko").write_bytes(b"")
    node.module(OLD, "kernel/drivers/video/fbdev/nvidia/nvidiafb.ko", "Debian")
    (tmp_path / "lib/modules/6.0.0-1-amd64").mkdir(parents=True)  # no NVIDIA module: absent
    return node


def test_secure_boot_off_reports_every_kernel_and_asks_mokutil_nothing(
        monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    node.secure_boot(False)
    node.module(NEW, "updates/dkms/nvidia-peermem.ko", "")
    result = run(monkeypatch, node)
    assert result["secure_boot"] == "disabled" and result["failed_checks"] == []
    assert list(result["kernels"]) == [OLD, NEW]
    assert sorted(result["kernels"][OLD]) == ["nvidia", "nvidia-drm", "nvidia-modeset",
                                              "nvidia-uvm"]
    assert result["kernels"][NEW]["nvidia-uvm"] == {
        "path": str(node.root / f"lib/modules/{NEW}/updates/dkms/nvidia-uvm.ko.zst"),
        "signer": KEY, "hash": "sha256"}
    assert result["kernels"][NEW]["nvidia-peermem"]["signer"] == ""
    assert [c["status"] for c in result["checks"]] == ["pass", "pass"]
    assert not any(cmd[0] == "mokutil" for cmd in node.commands)
    assert sum(cmd[0] == "modinfo" for cmd in node.commands) == 9


def test_no_efi_directory_is_not_efi(monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    result = run(monkeypatch, node)
    assert result["secure_boot"] == "not-efi" and result["failed_checks"] == []


def test_secure_boot_on_an_unsigned_module_of_the_newer_kernel_fails(
        monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    node.secure_boot(True)
    node.certificate("CERT is already enrolled")
    node.signers[str(node.root / f"lib/modules/{NEW}/updates/dkms/nvidia-drm.ko.zst")] = ""
    result = run(monkeypatch, node)
    assert result["keys"] == {KEY: {"certificate": str(node.root / "var/lib/dkms/mok.pub"),
                                    "enrolment": "enrolled"}}
    assert result["failed_checks"] == [f"module_signatures:{NEW}"]
    failed = result["checks"][1]
    assert failed["detail"].startswith(f"kernel {NEW}: nvidia-drm carries no signature")


@pytest.mark.parametrize(("line", "words"), [
    ("CERT is already in the enrollment request", "whose enrolment is pending"),
    ("CERT is not enrolled", "is not enrolled: mokutil --import it"),
])
def test_secure_boot_on_a_key_not_enrolled_fails_every_kernel(
        monkeypatch: pytest.MonkeyPatch, node: Node, line: str, words: str) -> None:
    node.secure_boot(True)
    node.certificate(line)
    result = run(monkeypatch, node)
    assert result["failed_checks"] == [f"module_signatures:{OLD}", f"module_signatures:{NEW}"]
    assert all(words in c["detail"] for c in result["checks"])
    assert [cmd for cmd in node.commands if cmd[0] == "mokutil"] == [
        ["mokutil", "--test-key", str(node.root / "var/lib/dkms/mok.pub")]]


def test_a_node_without_nvidia_modules_needs_no_modinfo(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    node = Node(tmp_path)
    (node.bin / "modinfo").unlink()
    node.secure_boot(True)
    result = run(monkeypatch, node)
    assert result["kernels"] == {} and result["checks"] == []


def test_modinfo_failing_fails_the_module(monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    del node.signers[str(node.root / f"lib/modules/{OLD}/updates/dkms/nvidia.ko")]
    with pytest.raises(Failed, match=r"modinfo .*/nvidia\.ko failed"):
        run(monkeypatch, node)


def test_without_openssl_the_signers_are_unknown_and_warn(monkeypatch: pytest.MonkeyPatch,
                                                          node: Node) -> None:
    node.secure_boot(True)
    node.certificate("CERT is already enrolled")
    (node.bin / "openssl").unlink()
    result = run(monkeypatch, node)
    assert [c["status"] for c in result["checks"]] == ["warn", "warn"]
    assert "openssl is not installed" in result["checks"][0]["detail"]
