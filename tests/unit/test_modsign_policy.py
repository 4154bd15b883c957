"""The module signature policy under Secure Boot (module_utils modsign): what modinfo, mokutil
and the SecureBoot EFI variable say, turned into one check per kernel."""

from __future__ import annotations

from typing import Any

import pytest
from gpucluster.modsign import (
    judge,
    module_name,
    parse_modinfo,
    parse_subject_cn,
    parse_test_key,
    secure_boot_state,
)

OLD, NEW = "6.1.0-18-amd64", "6.1.1-18-amd64"
KEY = "DKMS module signing key"
CERT = "/var/lib/dkms/mok.pub"


def signed(*names: str, signer: str = KEY) -> dict[str, dict[str, str]]:
    return {name: {"signer": signer} for name in names}


ALL = ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm")


def checks(secure_boot: str, kernels: dict[str, Any],
           keys: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in judge(secure_boot, kernels, keys or {})}


@pytest.mark.parametrize(("data", "state"), [
    (b"\x06\x00\x00\x00\x01", "enabled"),
    (b"\x06\x00\x00\x00\x00", "disabled"),
    (b"\x06\x00\x00\x00", "unknown"),
    (None, "unknown"),
])
def test_the_secure_boot_variable_is_attributes_then_value(data: bytes | None,
                                                           state: str) -> None:
    assert secure_boot_state(data) == state


@pytest.mark.parametrize(("filename", "name"), [
    ("nvidia.ko", "nvidia"), ("nvidia-uvm.ko", "nvidia-uvm"), ("nvidia_drm.ko.zst", "nvidia-drm"),
    ("nvidia-peermem.ko.xz", "nvidia-peermem"), ("nvidia-modeset.ko.gz", "nvidia-modeset"),
    ("nvidiafb.ko", None), ("nouveau.ko", None), ("nvidia.ko.sig", None), ("nvidia.o", None),
])
def test_nvidia_module_files_are_recognised_compressed_or_not(filename: str,
                                                              name: str | None) -> None:
    assert module_name(filename) == name


def test_modinfo_fields_keep_their_first_value_and_skip_continuations() -> None:
    text = ("filename:       /lib/modules/6.1.0-18-amd64/updates/dkms/nvidia.ko\n"
            "license:        NVIDIA\nversion:        580.95.05\nsig_id:         PKCS#7\n"
            "signer:         DKMS module signing key\n"
            "sig_key:        07:0B:FE:15\nsig_hashalgo:   sha256\n"
            "signature:      29:87:1B:3A:\n\t\tEE:DB:64:9D\n")
    info = parse_modinfo(text)
    assert info["signer"] == KEY and info["sig_hashalgo"] == "sha256"
    assert info["signature"] == "29:87:1B:3A:" and info["version"] == "580.95.05"
    assert "signer" not in parse_modinfo("filename: /x.ko\nlicense: GPL\n")


@pytest.mark.parametrize(("text", "state"), [
    # lcp/mokutil src/mokutil.c test_key and print_skip_message, word for word.
    ("/var/lib/dkms/mok.pub is not enrolled\n", "not-enrolled"),
    ("/var/lib/dkms/mok.pub is already enrolled\n", "enrolled"),
    ("/var/lib/dkms/mok.pub is already in the enrollment request\n", "pending"),
    ("/var/lib/dkms/mok.pub is already in db\n", "enrolled"),
    ("/var/lib/dkms/mok.pub is blocked in dbx\n", "blocked"),
    ("EFI variables are not supported on this system\n", "unknown"),
])
def test_mokutil_test_key_words_are_read_not_its_exit_status(text: str, state: str) -> None:
    assert parse_test_key(text) == state


def test_the_certificate_commonname_is_read_from_openssl_multiline_subject() -> None:
    assert parse_subject_cn("subject=\n    commonName                = DKMS module signing key\n"
                            ) == KEY
    assert parse_subject_cn("subject=\n    organizationName          = ACME\n") is None


def test_secure_boot_on_every_module_signed_by_an_enrolled_key_passes() -> None:
    got = checks("enabled", {OLD: signed(*ALL), NEW: signed(*ALL, "nvidia-peermem")},
                 {KEY: {"certificate": CERT, "enrolment": "enrolled"}})
    assert [c["status"] for c in got.values()] == ["pass", "pass"]
    assert got[f"module_signatures:{NEW}"]["measured"]["nvidia-peermem"] == KEY


def test_secure_boot_on_an_unsigned_module_fails_naming_kernel_and_module() -> None:
    kernels = {OLD: signed(*ALL), NEW: {**signed("nvidia", "nvidia-modeset", "nvidia-drm"),
                                        "nvidia-uvm": {"signer": ""}}}
    got = checks("enabled", kernels, {KEY: {"certificate": CERT, "enrolment": "enrolled"}})
    assert got[f"module_signatures:{OLD}"]["status"] == "pass"
    bad = got[f"module_signatures:{NEW}"]
    assert bad["status"] == "fail"
    assert bad["detail"].startswith(f"kernel {NEW}: nvidia-uvm carries no signature")
    assert bad["measured"]["nvidia-uvm"] == ""


def test_secure_boot_on_a_pending_enrolment_fails_asking_for_the_console() -> None:
    got = checks("enabled", {OLD: signed(*ALL)},
                 {KEY: {"certificate": CERT, "enrolment": "pending"}})
    check = got[f"module_signatures:{OLD}"]
    assert check["status"] == "fail"
    assert "enrolment is pending" in check["detail"]
    assert "reboot and confirm the enrolment at the MokManager console" in check["detail"]
    assert CERT in check["detail"] and OLD in check["detail"]


def test_secure_boot_on_a_key_not_enrolled_fails_saying_how_to_enrol() -> None:
    check = checks("enabled", {OLD: signed(*ALL)},
                   {KEY: {"certificate": CERT, "enrolment": "not-enrolled"}}
                   )[f"module_signatures:{OLD}"]
    assert check["status"] == "fail"
    assert f"certificate {CERT} is not enrolled: mokutil --import it" in check["detail"]


def test_secure_boot_on_a_signer_without_a_local_certificate_warns() -> None:
    vendor = "Canonical Ltd. Kernel Module Signing"
    check = checks("enabled", {OLD: signed(*ALL, signer=vendor)})[f"module_signatures:{OLD}"]
    assert check["status"] == "warn"
    assert "no MOK certificate on this node has that name" in check["detail"]


@pytest.mark.parametrize(("state", "status"), [
    ("disabled", "pass"), ("not-efi", "pass"), ("unknown", "warn")])
def test_secure_boot_off_reports_signers_without_failing(state: str, status: str) -> None:
    kernels = {OLD: {**signed("nvidia"), "nvidia-uvm": {"signer": ""}}}
    check = checks(state, kernels)[f"module_signatures:{OLD}"]
    assert check["status"] == status
    assert check["detail"] == (f"kernel {OLD} (Secure Boot {state}, signatures not required): "
                               f"nvidia: {KEY}; nvidia-uvm: unsigned")
