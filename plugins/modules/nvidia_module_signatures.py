#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read the signature of every NVIDIA kernel module of every installed kernel, and judge it
against the node's Secure Boot state and enrolled Machine Owner Keys."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_module_signatures
short_description: Signatures of the NVIDIA kernel modules of every installed kernel, judged under Secure Boot
description:
  - Finds the NVIDIA kernel modules (C(nvidia), C(nvidia-uvm), C(nvidia-modeset), C(nvidia-drm),
    C(nvidia-peermem) where built) under each kernel's directory in O(modules_root), compressed
    or not, and reads each one with C(modinfo) (its C(signer) and C(sig_hashalgo)).
  - Reads Secure Boot from the C(SecureBoot) EFI variable under O(efivars_root). With it on,
    every module must be signed, and the key that signed it enrolled in the MOK list; for each
    signer whose certificate is among O(certificates) (matched by the certificate's commonName),
    C(mokutil --test-key) says whether it is enrolled, pending (imported, waiting for a reboot
    and the MokManager console confirmation) or not.
  - One C(module_signatures:<kernel>) check per kernel with NVIDIA modules. Secure Boot on, an
    unsigned module or a key not enrolled fails, naming the kernel and the modules; a signer with
    no local certificate warns. Secure Boot off (or no EFI), the signers are reported and
    nothing fails.
  - Read-only.
options:
  modules_root:
    description: The directory holding one directory per installed kernel.
    type: path
    default: /lib/modules
  efivars_root:
    description: Where the EFI variables are read (efivarfs); C(SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c)
      is read there. A missing directory means a machine without EFI.
    type: path
    default: /sys/firmware/efi/efivars
  certificates:
    description: The MOK certificates modules may be signed with (DER or PEM), whose enrolment
      C(mokutil --test-key) is asked about; the defaults are where dkms keeps its pair
      (C(/var/lib/dkms/mok.pub)) and Ubuntu's shim-signed keeps its own (C(/var/lib/shim-signed/mok/MOK.der)).
    type: list
    elements: path
    default: [/var/lib/dkms/mok.pub, /var/lib/shim-signed/mok/MOK.der]
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: NVIDIA driver | Read the modules' signatures
  gpucluster.provisioner.nvidia_module_signatures:
  register: signatures
"""

RETURN = r"""
secure_boot:
  description: The Secure Boot state read, one of enabled, disabled, not-efi, unknown.
  returned: always
  type: str
kernels:
  description: For each kernel with NVIDIA modules, each module's path, signer (empty when
    unsigned) and signature hash.
  returned: always
  type: dict
keys:
  description: For each signer with a certificate among O(certificates), that certificate and
    its enrolment (enrolled, pending, not-enrolled, blocked, unknown; read only with Secure Boot
    on).
  returned: always
  type: dict
checks:
  description: One entry per kernel with name, status (pass/fail/warn), measured, expected,
    detail.
  returned: always
  type: list
  elements: dict
failed_checks:
  description: Names of the checks with status fail.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.dkms import (
    release_key,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.modsign import (
    judge,
    module_name,
    parse_modinfo,
    parse_subject_cn,
    parse_test_key,
    read_secure_boot,
)

_SBIN = ["/sbin", "/usr/sbin", "/usr/local/sbin"]


def module_files(modules_root):
    """{kernel: {module: path}} of the NVIDIA modules under each kernel's directory (the first
    found per module name: DKMS' updates/ comes before kernel/ in depmod's search order, and
    is listed first here)."""
    out = {}
    try:
        kernels = sorted(os.listdir(modules_root), key=release_key)
    except OSError:
        return out
    for kernel in kernels:
        top = os.path.join(modules_root, kernel)
        if not os.path.isdir(top):
            continue
        found = {}
        for dirpath, dirnames, filenames in os.walk(top):
            # build/ and source/ are the headers, not modules; updates/ first (depmod.conf's
            # default "search updates built-in").
            dirnames[:] = sorted((d for d in dirnames if d not in ("build", "source")),
                                 key=lambda d: (d != "updates", d))
            for filename in sorted(filenames):
                name = module_name(filename)
                if name and name not in found:
                    found[name] = os.path.join(dirpath, filename)
        if found:
            out[kernel] = found
    return out


def certificate_cn(module, openssl, path):
    for form in ("DER", "PEM"):
        rc, out, _err = module.run_command([openssl, "x509", "-inform", form, "-in", path,
                                            "-noout", "-subject", "-nameopt", "multiline"])
        if rc == 0:
            return parse_subject_cn(out)
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            modules_root=dict(type="path", default="/lib/modules"),
            efivars_root=dict(type="path", default="/sys/firmware/efi/efivars"),
            certificates=dict(type="list", elements="path",
                              default=["/var/lib/dkms/mok.pub",
                                       "/var/lib/shim-signed/mok/MOK.der"]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    secure_boot = read_secure_boot(p["efivars_root"])
    files = module_files(p["modules_root"])
    kernels = {}
    if files:
        modinfo = module.get_bin_path("modinfo", required=True, opt_dirs=_SBIN)
        for kernel, found in files.items():
            kernels[kernel] = {}
            for name, path in found.items():
                rc, out, err = module.run_command([modinfo, path])
                if rc != 0:
                    module.fail_json(msg="modinfo %s failed" % path, rc=rc, stdout=out,
                                     stderr=err)
                info = parse_modinfo(out)
                kernels[kernel][name] = {"path": path, "signer": info.get("signer", ""),
                                         "hash": info.get("sig_hashalgo", "")}
    signers = set(m["signer"] for k in kernels.values() for m in k.values() if m["signer"])
    keys = {}
    openssl = module.get_bin_path("openssl")
    if signers and not openssl and secure_boot == "enabled":
        # Without openssl the certificates' names cannot be read: every signer is unknown.
        keys = dict((signer, {"certificate": None, "enrolment": "unknown",
                              "error": "openssl is not installed, the MOK certificates' names "
                                       "cannot be read"}) for signer in signers)
    if signers and openssl:
        mokutil = module.get_bin_path("mokutil", opt_dirs=_SBIN)
        for cert in p["certificates"]:
            if not os.path.isfile(cert):
                continue
            cn = certificate_cn(module, openssl, cert)
            if cn not in signers or cn in keys:
                continue
            key = {"certificate": cert, "enrolment": "unknown"}
            if secure_boot != "enabled":
                key["error"] = "not asked: Secure Boot is %s" % secure_boot
            elif not mokutil:
                key["error"] = "mokutil is not installed"
            else:
                rc, out, err = module.run_command([mokutil, "--test-key", cert])
                key["enrolment"] = parse_test_key(out + err)
                if key["enrolment"] == "unknown":
                    key["error"] = "mokutil --test-key exited %d: %s" % (
                        rc, (err or out).strip()[:200])
            keys[cn] = key
    checks = judge(secure_boot, kernels, keys)
    module.exit_json(changed=False, secure_boot=secure_boot, kernels=kernels, keys=keys,
                     checks=checks,
                     failed_checks=[c["name"] for c in checks if c["status"] == "fail"])


if __name__ == "__main__":
    main()
