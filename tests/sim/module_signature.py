"""Checks a signed kernel module's appended signature the way the kernel reads it: sign-file's
trailer (the CMS message, a 12-byte struct module_signature whose last 4 bytes are its length,
the magic), the message verified by openssl against the signer's certificate."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from provisioner.sim.tools import kmodule

OPENSSL = shutil.which("openssl")


def verify_appended_signature(signed: bytes, module: bytes, certificate: Path,
                              tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """openssl cms -verify of ``signed``'s signature over ``module`` (the unsigned bytes) with
    ``certificate`` (DER); returncode 0 when it verifies."""
    assert OPENSSL, "openssl is not installed"
    magic = len(kmodule.MODULE_SIG_MAGIC)
    assert signed.startswith(module) and signed.endswith(kmodule.MODULE_SIG_MAGIC)
    sig_len = int.from_bytes(signed[-magic - 4:-magic], "big")
    (tmp_path / "sig.der").write_bytes(signed[len(module):len(module) + sig_len])
    (tmp_path / "module.bin").write_bytes(module)
    pem = subprocess.run([OPENSSL, "x509", "-inform", "DER", "-in", str(certificate)],
                         capture_output=True, check=True).stdout
    (tmp_path / "cert.pem").write_bytes(pem)
    return subprocess.run(
        [OPENSSL, "cms", "-verify", "-binary", "-inform", "DER", "-in",
         str(tmp_path / "sig.der"), "-content", str(tmp_path / "module.bin"), "-certfile",
         str(tmp_path / "cert.pem"), "-noverify", "-out", os.devnull],
        capture_output=True, text=True, check=False)
