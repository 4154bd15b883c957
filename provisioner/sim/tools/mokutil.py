"""SIMULATED mokutil (gpu-cluster-provisioner): the Machine Owner Key tool of shim, on the
simulated node's EFI variables (``tools/node.py`` EFIVARS).

Installed as ``/usr/local/bin/mokutil`` on every simulated node (first on PATH, sudo's
secure_path too). What it answers, its words and exit statuses are mokutil 0.6.0's, the release
Debian 12 and Ubuntu 22.04/24.04 ship (lcp/mokutil tag 0.6.0, src/mokutil.c; that RHEL 9's is
0.6.0 too is unconfirmed):

- ``--sb-state``: ``SecureBoot enabled`` or ``SecureBoot disabled`` (with ``Platform is in
  Setup Mode`` when SetupMode is 1), exit 0; ``This system doesn't support Secure Boot`` on
  stderr, exit 255, without a SecureBoot variable.
- ``--test-key FILE``: ``FILE is not enrolled`` (exit 0), ``FILE is already enrolled`` (in
  MokListRT) or ``FILE is already in the enrollment request`` (in MokNew), both exit 1. Later
  mokutil flips the status (lcp/mokutil 4d2b704 and 9ae73db, 2025: not enrolled exits 1,
  enrolled 0); callers should read the words.
- ``--list-enrolled`` / ``--list-new``: each certificate of MokListRT / MokNew as ``[key N]``,
  its ``SHA1 Fingerprint:`` and the certificate as OpenSSL prints it (``openssl x509 -text``,
  what mokutil's X509_print_fp writes).
- ``--import FILE...``: each certificate not already enrolled or requested joins the enrolment
  request (MokNew); the password the MokManager console asks for is read twice from the
  terminal (``input password:``), or not with ``--root-pw``/``--hash-file`` (kept nowhere here).
  ``--revoke-import`` drops the request.

An import is not an enrolment: shim's MokManager enrols MokNew at the next boot only when a
person confirms it at the console, with that password. The simulated node's boot does it only
when the node carries the ``mok-enrolled`` fault (provisioner/sim/faults.py), the stand-in for
that person; without it the request stays pending across reboots (whether shim keeps or drops an
unconfirmed request is unconfirmed here).
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import subprocess
import sys
import uuid

from provisioner.sim.tools.node import (
    EFI_ATTR_NV_BS_RT,
    EFI_CERT_X509_GUID,
    EFI_GLOBAL_GUID,
    EFIVARS,
    SHIM_LOCK_GUID,
    efivar_path,
    sim_path,
)

# mokutil.h: PASSWORD_MIN 1, PASSWORD_MAX 256.
_PASSWORD_MIN, _PASSWORD_MAX = 1, 256
# EFI_SIGNATURE_LIST header (type GUID, list size, header size, signature size) and the
# EFI_SIGNATURE_DATA owner GUID before each certificate.
_ESL = struct.Struct("<16sIII")


def _var(name: str, guid: str) -> bytes | None:
    try:
        with open(sim_path(efivar_path(name, guid)), "rb") as fh:
            return fh.read()
    except OSError:
        return None


def signature_lists(data: bytes | None) -> list[bytes]:
    """The X.509 certificates (DER) of a variable's EFI_SIGNATURE_LIST entries (its value after
    the 4 attribute bytes)."""
    out: list[bytes] = []
    body = (data or b"")[4:]
    x509 = uuid.UUID(EFI_CERT_X509_GUID).bytes_le
    while len(body) >= _ESL.size:
        kind, list_size, header_size, sig_size = _ESL.unpack_from(body)
        if list_size < _ESL.size or list_size > len(body) or sig_size <= 16:
            break
        entries = body[_ESL.size + header_size:list_size]
        if kind == x509:
            for i in range(0, len(entries) - sig_size + 1, sig_size):
                out.append(entries[i + 16:i + sig_size])
        body = body[list_size:]
    return out


def signature_list(cert: bytes) -> bytes:
    """One EFI_SIGNATURE_LIST holding ``cert`` owned by shim, as mokutil --import writes it."""
    return (_ESL.pack(uuid.UUID(EFI_CERT_X509_GUID).bytes_le, _ESL.size + 16 + len(cert), 0,
                      16 + len(cert))
            + uuid.UUID(SHIM_LOCK_GUID).bytes_le + cert)


def _valid_cert(data: bytes) -> bool:
    proc = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout"], input=data,
                          capture_output=True, check=False)
    return proc.returncode == 0


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def sb_state() -> int:
    secure_boot = _var("SecureBoot", EFI_GLOBAL_GUID)
    if secure_boot is None:
        sys.stderr.write("This system doesn't support Secure Boot\n")
        return 255
    setup = _var("SetupMode", EFI_GLOBAL_GUID)
    if setup is None:
        sys.stderr.write('Failed to read "SetupMode" variable: No such file or directory\n')
        return 255
    if secure_boot[4:5] == b"\x01" and setup[4:5] != b"\x01":
        print("SecureBoot enabled")
    else:
        print("SecureBoot disabled")
        if setup[4:5] == b"\x01":
            print("Platform is in Setup Mode")
    return 0


def test_key(path: str) -> int:
    cert = _read(path)
    if cert is None:
        sys.stderr.write(f"Failed to open {path}\n")
        return 255
    if not _valid_cert(cert):
        sys.stderr.write("Not a valid x509 certificate\n")
        return 255
    if cert in signature_lists(_var("MokListRT", SHIM_LOCK_GUID)):
        print(f"{path} is already enrolled")
        return 1
    if cert in signature_lists(_var("MokNew", SHIM_LOCK_GUID)):
        print(f"{path} is already in the enrollment request")
        return 1
    print(f"{path} is not enrolled")
    return 0


def list_keys(name: str) -> int:
    certs = signature_lists(_var(name, SHIM_LOCK_GUID))
    for i, cert in enumerate(certs):
        fingerprint = hashlib.sha1(cert).hexdigest()  # what mokutil prints
        print(f"[key {i + 1}]")
        print("SHA1 Fingerprint: " + ":".join(fingerprint[j:j + 2] for j in range(0, 40, 2)))
        text = subprocess.run(["openssl", "x509", "-inform", "DER", "-text", "-noout"],
                              input=cert, capture_output=True, check=False).stdout
        sys.stdout.write(text.decode(errors="replace"))
        if i < len(certs) - 1:
            print()
    return 0


def _password() -> bool:
    """mokutil's get_password: up to three tries at each prompt, from the terminal (stdin)."""
    first = None
    for _ in range(3):
        sys.stdout.write("input password: ")
        sys.stdout.flush()
        line = sys.stdin.readline().rstrip("\n")
        print()
        if _PASSWORD_MIN <= len(line) <= _PASSWORD_MAX:
            first = line
            break
        sys.stderr.write(f"password should be {_PASSWORD_MIN}~{_PASSWORD_MAX} characters\n")
    if first is None:
        return False
    for _ in range(3):
        sys.stdout.write("input password again: ")
        sys.stdout.flush()
        line = sys.stdin.readline().rstrip("\n")
        print()
        if line == first:
            return True
        sys.stderr.write("password doesn't match\n")
    return False


# A crypt(3) string mokutil's get_hash_from_file/get_password_from_shadow can decode: MD5,
# SHA-256 or SHA-512 ("$1$", "$5$", "$6$"; lcp/mokutil src/password-crypt.c decode_pass). A
# locked root ("!", "*") or another method (Debian 12 hashes yescrypt, "$y$") is not one.
_CRYPT = re.compile(r"^\$(1|5|6)\$(rounds=\d+\$)?[^$:]+\$[^$:]+$")


def _password_from(source: str, path: str | None) -> bool:
    """Where the console password's hash comes from: asked twice on the terminal ("ask"), the
    root password's hash in /etc/shadow ("root-pw"), or a file ("hash-file"); mokutil's
    messages when it cannot be had (src/mokutil.c issue_mok_request)."""
    if source == "ask":
        return _password()
    if source == "hash-file":
        text = (_read(path) or b"").decode(errors="replace").strip() if path else ""
        if not _CRYPT.match(text):
            sys.stderr.write("Failed to read hash\n")
            return False
        return True
    shadow = (_read(sim_path("/etc/shadow")) or b"").decode(errors="replace")
    root = next((line.split(":")[1] for line in shadow.splitlines()
                 if line.startswith("root:") and line.count(":") >= 1), "")
    if not _CRYPT.match(root):
        sys.stderr.write("Failed to get root password hash\n")
        return False
    return True


def import_keys(paths: list[str], password: tuple[str, str | None] = ("ask", None)) -> int:
    enrolled = signature_lists(_var("MokListRT", SHIM_LOCK_GUID))
    old = _var("MokNew", SHIM_LOCK_GUID)
    requested = signature_lists(old)
    new = b""
    for path in paths:
        cert = _read(path)
        if cert is None:
            sys.stderr.write(f"Failed to get file status, {path}\n")
            return 255
        if not _valid_cert(cert):
            sys.stderr.write(f"Abort!!! {path} is not a valid x509 certificate in DER format\n")
            return 255
        if cert in enrolled:
            print(f"SKIP: {path} is already enrolled")
        elif cert in requested:
            print(f"SKIP: {path} is already in the enrollment request")
        else:
            new += signature_list(cert)
            requested.append(cert)
    if not new:
        return 0
    if not _password_from(*password):
        return 255
    target = sim_path(efivar_path("MokNew", SHIM_LOCK_GUID))
    # The new keys, then the earlier request (mokutil issue_mok_request appends the old one).
    with open(target, "wb") as fh:
        fh.write(EFI_ATTR_NV_BS_RT + new + (old or b"")[4:])
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("Usage:\n  mokutil OPTIONS [ARGS...]\n\nOptions:\n  --sb-state\n"
              "  --test-key <der file>\n  --list-enrolled\n  --list-new\n"
              "  --import <der file...>\n  --revoke-import\n  --root-pw\n  --hash-file <file>")
        return 0
    if not os.path.isdir(sim_path(EFIVARS)):
        sys.stderr.write("EFI variables are not supported on this system\n")
        return 1
    args = list(argv)
    password: tuple[str, str | None] = ("ask", None)
    if "--root-pw" in args or "-P" in args:
        password = ("root-pw", None)
        args = [a for a in args if a not in ("--root-pw", "-P")]
    for flag in ("--hash-file", "-f"):
        if flag in args:
            i = args.index(flag)
            password = ("hash-file", args[i + 1] if i + 1 < len(args) else None)
            del args[i:i + 2]
    command, rest = args[0], args[1:]
    if command == "--sb-state":
        return sb_state()
    if command in ("--test-key", "-t") and rest:
        return test_key(rest[0])
    if command in ("--list-enrolled", "-l"):
        return list_keys("MokListRT")
    if command in ("--list-new", "-N"):
        return list_keys("MokNew")
    if command in ("--import", "-i") and rest:
        return import_keys(rest, password)
    if command == "--revoke-import":
        target = sim_path(efivar_path("MokNew", SHIM_LOCK_GUID))
        if os.path.exists(target):
            os.remove(target)
        return 0
    sys.stderr.write(f"SIMULATED mokutil: {' '.join(argv)} is not simulated\n")
    return 2
