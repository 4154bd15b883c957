"""Which MOK certificates the driver role asks shim to enrol under Secure Boot."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DOCUMENTATION = r"""
name: nvidia_driver_mok_to_import
short_description: The signing certificates whose enrolment the driver role requests
description:
  - From the result of the C(nvidia_module_signatures) module (I(_input)), the certificate of
    every key that signs NVIDIA modules and that the MOK list neither holds nor has a request
    for (its C(enrolment) is C(not-enrolled)), each once, in the order the module lists them.
  - A key whose certificate is unknown, or whose enrolment could not be read, is left out.
positional: _input
options:
  _input:
    description: The registered result of C(nvidia_module_signatures) (its C(keys) mapping of
      signer to C(certificate) and C(enrolment)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Certificates to enrol
  ansible.builtin.debug:
    msg: "{{ signatures | gpucluster.provisioner.nvidia_driver_mok_to_import }}"
"""

RETURN = r"""
_value:
  description: Certificate paths.
  type: list
  elements: str
"""


def nvidia_driver_mok_to_import(signatures: Any) -> list[str]:
    keys = signatures.get("keys") if isinstance(signatures, Mapping) else None
    out: list[str] = []
    for key in (keys or {}).values() if isinstance(keys, Mapping) else ():
        if not isinstance(key, Mapping) or key.get("enrolment") != "not-enrolled":
            continue
        cert = key.get("certificate")
        if cert and str(cert) not in out:
            out.append(str(cert))
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_mok_to_import": nvidia_driver_mok_to_import}
