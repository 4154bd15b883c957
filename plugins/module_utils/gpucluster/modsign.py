# -*- coding: utf-8 -*-
"""Kernel module signatures under Secure Boot: pure functions turning what ``modinfo``,
``mokutil`` and the EFI variables say into checks.

With Secure Boot on, a kernel built with module signature enforcement (lockdown; Debian, Ubuntu
and RHEL kernels do this under Secure Boot) refuses a module without a signature from a key it
trusts: its built-in keys, or a Machine Owner Key (MOK) enrolled through shim. DKMS signs the
NVIDIA modules it builds with a MOK pair on the node; that key only counts once it is enrolled,
which takes ``mokutil --import``, a reboot and a person confirming it at the MokManager console.
So the check is: every NVIDIA module of every installed kernel is signed, and by a key enrolled
(not merely requested). With Secure Boot off the signatures are reported, not required.

Shared by the ``nvidia_module_signatures`` and ``node_preflight`` modules and unit tests. Stdlib
only, Python 3.6+ syntax tolerant (runs on managed nodes).
"""

from __future__ import annotations

import os
import re

from .checks import FAIL, PASS, WARN, check_result

# The UEFI specification's global variable (EFI_GLOBAL_VARIABLE GUID), as efivarfs names it.
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
EFIVARS_ROOT = "/sys/firmware/efi/efivars"

# The modules NVIDIA's driver builds (its dkms.conf's BUILT_MODULE_NAME list); nvidia-peermem
# only where it was built.
NVIDIA_MODULES = ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm", "nvidia-peermem")
_MODULE_FILE = re.compile(r"^(?P<name>[A-Za-z0-9_-]+)\.ko(?:\.(?:xz|zst|gz))?$")

# Where dkms keeps the public half of the pair it signs with (dell/dkms @ 793fdab, dkms.in
# prepare_mok): /var/lib/dkms/mok.pub everywhere but Ubuntu, shim-signed's MOK.der there.
MOK_CERTIFICATES = ("/var/lib/dkms/mok.pub", "/var/lib/shim-signed/mok/MOK.der")


def secure_boot_state(data):
    """"enabled", "disabled" or "unknown" from the bytes of efivarfs' SecureBoot file: 4 bytes
    of attributes, then the variable's 1-byte value (efivarfs as the kernel's
    Documentation/filesystems/efivarfs.rst describes it; mokutil reads the value the same way,
    lcp/mokutil src/mokutil.c sb_state)."""
    if data is None or len(data) < 5:
        return "unknown"
    return "enabled" if data[4:5] == b"\x01" else "disabled"


def read_secure_boot(efivars_root):
    """enabled, disabled, not-efi (no EFI variables: the directory is missing) or unknown, from
    the SecureBoot variable under ``efivars_root`` (efivarfs)."""
    if not os.path.isdir(efivars_root):
        return "not-efi"
    try:
        with open(os.path.join(efivars_root, SECURE_BOOT_VAR), "rb") as fh:
            return secure_boot_state(fh.read())
    except OSError:
        return "unknown"


def module_name(filename):
    """The NVIDIA module a file is (``nvidia-uvm.ko``, ``nvidia_uvm.ko.zst`` -> nvidia-uvm), or
    None for any other file."""
    match = _MODULE_FILE.match(filename)
    if not match:
        return None
    name = match.group("name").replace("_", "-")
    return name if name in NVIDIA_MODULES else None


def parse_modinfo(text):
    """``modinfo FILE`` as {field: first value}: ``signer``, ``sig_hashalgo``, ``version``,
    ``vermagic``... (continuation lines of ``signature`` are left out)."""
    out = {}
    for line in (text or "").splitlines():
        if not line or line[0].isspace():
            continue
        key, sep, value = line.partition(":")
        if sep and key not in out:
            out[key.strip()] = value.strip()
    return out


def parse_test_key(text):
    """What ``mokutil --test-key FILE`` printed, as an enrolment state: "enrolled" (in the MOK
    list, or in db), "pending" (in the enrollment request, MokNew: confirmation at the
    MokManager console is outstanding), "not-enrolled", "blocked" (dbx, MokListX) or "unknown".
    The words are mokutil's (lcp/mokutil @ 9ae73db, src/mokutil.c test_key and
    print_skip_message); its exit status is not read: it flipped in 2025 (4d2b704: not enrolled
    exits 1, 0.6.0 exits 0)."""
    text = text or ""
    if "is not enrolled" in text:
        return "not-enrolled"
    if "is already in the enrollment request" in text:
        return "pending"
    if "is already enrolled" in text or "is already in db" in text:
        return "enrolled"
    if "is blocked in" in text:
        return "blocked"
    return "unknown"


def parse_subject_cn(text):
    """The commonName of ``openssl x509 -noout -subject -nameopt multiline`` output
    (``    commonName                = DKMS module signing key``), or None."""
    for line in (text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() in ("commonName", "CN"):
            return value.strip()
    return None


def _signed_by(modules):
    """{signer: [module...]} and the unsigned modules of one kernel, in NVIDIA_MODULES order."""
    signers, unsigned = {}, []
    for name in sorted(modules, key=_order):
        signer = (modules[name] or {}).get("signer") or ""
        if signer:
            signers.setdefault(signer, []).append(name)
        else:
            unsigned.append(name)
    return signers, unsigned


def _order(name):
    return NVIDIA_MODULES.index(name) if name in NVIDIA_MODULES else len(NVIDIA_MODULES)


def _key_problem(kernel, signer, names, key):
    """(status, sentence) of modules signed by ``signer`` given what is known of its key."""
    state = (key or {}).get("enrolment")
    cert = (key or {}).get("certificate") or "its certificate"
    mods = ", ".join(names)
    if key is None:
        return WARN, ("kernel %s: %s signed by %r, and no MOK certificate on this node has "
                      "that name, so its enrolment cannot be tested: the kernel loads them only "
                      "if that key is built in, in db or in the MOK list" % (kernel, mods, signer))
    if state == "enrolled":
        return PASS, "%s signed by %r (enrolled)" % (mods, signer)
    if state == "pending":
        return FAIL, ("kernel %s: %s signed by %r, whose enrolment is pending (%s was imported "
                      "with mokutil --import): reboot and confirm the enrolment at the "
                      "MokManager console; until then the kernel refuses these modules"
                      % (kernel, mods, signer, cert))
    if state == "not-enrolled":
        return FAIL, ("kernel %s: %s signed by %r, whose certificate %s is not enrolled: "
                      "mokutil --import it, reboot and confirm the enrolment at the MokManager "
                      "console" % (kernel, mods, signer, cert))
    if state == "blocked":
        return FAIL, ("kernel %s: %s signed by %r, whose certificate %s is blocked (dbx or "
                      "MokListX): sign with another key" % (kernel, mods, signer, cert))
    return WARN, ("kernel %s: %s signed by %r; whether %s is enrolled could not be read (%s)"
                  % (kernel, mods, signer, cert, (key or {}).get("error") or state))


def judge(secure_boot, kernels, keys):
    """One check per kernel (``module_signatures:<kernel>``), in release order as given.

    ``secure_boot``: "enabled", "disabled", "not-efi" or "unknown"; ``kernels``: {kernel:
    {module: {"signer": str, ...}}} of the kernels that have NVIDIA modules; ``keys``: {signer
    CN: {"certificate": path, "enrolment": enrolled|pending|not-enrolled|blocked|unknown}} of
    the local MOK certificates. Secure Boot on: an unsigned module or a key not enrolled fails;
    off: the signers are reported (pass); unknown: what would fail warns."""
    checks = []
    enforced = secure_boot == "enabled"
    for kernel in kernels:
        modules = kernels[kernel] or {}
        signers, unsigned = _signed_by(modules)
        measured = dict((name, (modules[name] or {}).get("signer") or "")
                        for name in sorted(modules, key=_order))
        expected = ("every NVIDIA module signed by an enrolled key" if enforced
                    else "signatures reported (Secure Boot %s)" % secure_boot)
        if not enforced:
            said = ["%s: %s" % (n, s or "unsigned") for n, s in measured.items()]
            status = PASS
            if secure_boot == "unknown" and unsigned:
                status = WARN
            checks.append(check_result(
                "module_signatures:" + kernel, status, measured, expected,
                "kernel %s (Secure Boot %s, signatures not required): %s"
                % (kernel, secure_boot, "; ".join(said))))
            continue
        results = []
        if unsigned:
            results.append((FAIL, "kernel %s: %s carr%s no signature: with Secure Boot on the "
                                  "kernel refuses to load %s; sign them with a key enrolled in "
                                  "the MOK list (dkms signs with its mok_signing_key and "
                                  "mok_certificate)"
                            % (kernel, ", ".join(unsigned), "ies" if len(unsigned) == 1
                               else "y", "it" if len(unsigned) == 1 else "them")))
        for signer, names in signers.items():
            results.append(_key_problem(kernel, signer, names, keys.get(signer)))
        statuses = [result[0] for result in results]
        worst = FAIL if FAIL in statuses else (WARN if WARN in statuses else PASS)
        if worst == PASS:
            detail = "kernel %s: %s" % (kernel, "; ".join(result[1] for result in results))
        else:
            detail = "; ".join(t for s, t in results if s != PASS)
        checks.append(check_result("module_signatures:" + kernel, worst, measured, expected,
                                   detail))
    return checks
