"""The simulated node's kernel module files: what the simulated dkms builds and installs.

A module is a minimal but valid ELF64 relocatable object (x86-64, little endian) whose
``.modinfo`` section holds the ``key=value`` strings the kernel's modpost writes there, so the
node's real ``modinfo`` (kmod) reads it as it reads a built module. There is no code in it.

Signing is the kernel's ``scripts/sign-file`` (GrapheneOS/kernel_common-6.1 @ a5721e2,
scripts/sign-file.c, the Linux 6.1 tool Debian 12's kernel builds): a CMS SignedData over the
whole module, detached, without certificates and without signed attributes (``CMS_NOCERTS |
CMS_BINARY | CMS_DETACHED``, signer added with ``CMS_NOCERTS | CMS_BINARY | CMS_NOSMIMECAP |
CMS_NOATTR``), DER encoded and appended to the module, then ``struct module_signature`` (algo 0,
hash 0, id_type 2 = PKEY_ID_PKCS7, signer_len 0, key_id_len 0, 3 pad bytes, the signature's
length as a big-endian 32-bit number) and the magic ``~Module signature appended~\\n``. The
CMS message is made by the node's real ``openssl cms`` with the matching options.

Standard library only: bundled into the simulated dkms (``provisioner.sim.bundle``).
"""

from __future__ import annotations

import os
import struct
import subprocess
import tempfile

# include/linux/module_signature.h: PKEY_ID_PKCS7 and the magic after the signature.
PKEY_ID_PKCS7 = 2
MODULE_SIG_MAGIC = b"~Module signature appended~\n"

# The kernel modules NVIDIA's driver builds with DKMS, as its dkms.conf names them
# (BUILT_MODULE_NAME[0..4]; seen in distribution packagings of NVIDIA's dkms.conf template,
# for example Arch Linux's nvidia PKGBUILDs; NVIDIA's own template was not read here).
NVIDIA_MODULES = ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm", "nvidia-peermem")

# ELF constants (the System V gABI; include/uapi/linux/elf.h).
_ET_REL, _EM_X86_64 = 1, 62
_SHT_PROGBITS, _SHT_STRTAB = 1, 3
_SHF_ALLOC = 2


def _license(module: str, flavor: str) -> str:
    """MODULE_LICENSE of an NVIDIA module: "Dual MIT/GPL" for the open modules (NVIDIA's
    open-gpu-kernel-modules are MIT/GPLv2; the exact string is unconfirmed here), "NVIDIA" for
    the proprietary nvidia.ko (the licence the kernel's "module license 'NVIDIA' taints kernel"
    names). That the proprietary nvidia-modeset says "NVIDIA" too and its other three modules
    "Dual MIT/GPL" is unconfirmed."""
    if flavor == "proprietary" and module in ("nvidia", "nvidia-modeset"):
        return "NVIDIA"
    return "Dual MIT/GPL"


_DEPENDS = {"nvidia": "", "nvidia-uvm": "nvidia", "nvidia-modeset": "nvidia",
            "nvidia-drm": "nvidia-modeset,drm_kms_helper,drm", "nvidia-peermem": "nvidia,ib_core"}


def modinfo_strings(module: str, version: str, kernel: str, flavor: str = "open") -> list[str]:
    """The ``.modinfo`` strings of an NVIDIA module built for ``kernel``: license, version,
    depends, retpoline, name (KBUILD_MODNAME: dashes become underscores) and vermagic (as
    Debian's amd64 kernels spell it). The real module's aliases, firmware and srcversion lines
    are left out."""
    return [f"license={_license(module, flavor)}", f"version={version}",
            f"depends={_DEPENDS.get(module, '')}", "retpoline=Y",
            f"name={module.replace('-', '_')}",
            f"vermagic={kernel} SMP preempt mod_unload modversions "]


def elf_module(modinfo: list[str]) -> bytes:
    """A relocatable ELF64 object with a ``.modinfo`` section holding ``modinfo`` (each string
    NUL-terminated), a ``.shstrtab`` and the section header table (null, .modinfo,
    .shstrtab)."""
    info = b"".join(s.encode() + b"\0" for s in modinfo)
    shstrtab = b"\0.modinfo\0.shstrtab\0"
    info_off = 64
    strtab_off = info_off + len(info)
    shoff = (strtab_off + len(shstrtab) + 7) & ~7
    header = struct.pack(
        "<4sBBBBB7sHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, b"\0" * 7,
        _ET_REL, _EM_X86_64, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 2)

    def section(name: int, kind: int, flags: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, flags, 0, offset, size, 0, 0, 1, 0)

    body = header + info + shstrtab
    body += b"\0" * (shoff - len(body))
    return (body + b"\0" * 64
            + section(1, _SHT_PROGBITS, _SHF_ALLOC, info_off, len(info))
            + section(10, _SHT_STRTAB, 0, strtab_off, len(shstrtab)))


def signature_trailer(cms_der: bytes) -> bytes:
    """What sign-file appends after the module: the CMS message, struct module_signature and
    the magic."""
    return cms_der + struct.pack(">BBBBB3sI", 0, 0, PKEY_ID_PKCS7, 0, 0, b"\0" * 3,
                                 len(cms_der)) + MODULE_SIG_MAGIC


class SigningError(Exception):
    """openssl could not sign (its stderr is the message)."""


def sign(module: bytes, key: str, certificate: str, hash_algo: str,
         openssl: str = "openssl") -> bytes:
    """``module`` with sign-file's signature appended, made with key file ``key`` (PEM) and
    certificate ``certificate`` (DER or PEM: openssl reads either, as sign-file does)."""
    with tempfile.TemporaryDirectory(prefix="gpu-sim-sign-") as tmp:
        unsigned, signed = os.path.join(tmp, "module.ko"), os.path.join(tmp, "module.p7s")
        with open(unsigned, "wb") as fh:
            fh.write(module)
        proc = subprocess.run(
            [openssl, "cms", "-sign", "-binary", "-noattr", "-nocerts", "-nosmimecap",
             "-md", hash_algo, "-signer", certificate, "-inkey", key, "-outform", "DER",
             "-in", unsigned, "-out", signed],
            capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SigningError(proc.stderr.strip() or f"openssl exited {proc.returncode}")
        with open(signed, "rb") as fh:
            return module + signature_trailer(fh.read())


def generate_key(key: str, certificate: str, subject: str, openssl: str = "openssl",
                 code_signing: bool = False) -> None:
    """A self-signed RSA 2048 key pair as dkms makes one: the key in PEM at ``key`` (0600),
    the certificate in DER at ``certificate``, valid 36500 days, subject ``subject``."""
    args = [openssl, "req", "-new", "-x509", "-nodes", "-days", "36500", "-subj", subject,
            "-newkey", "rsa:2048", "-keyout", key, "-outform", "DER", "-out", certificate]
    if code_signing:
        args[-4:-4] = ["-addext", "extendedKeyUsage=codeSigning"]
    old = os.umask(0o077)
    try:
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
    finally:
        os.umask(old)
    if proc.returncode != 0:
        raise SigningError(proc.stderr.strip() or f"openssl exited {proc.returncode}")
