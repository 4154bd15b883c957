"""Why the driver's DKMS module may be missing for a kernel: what the builds and DKMS said."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DOCUMENTATION = r"""
name: nvidia_driver_dkms_errors
short_description: The errors of building the driver's DKMS module
description:
  - The trimmed stderr of every C(dkms autoinstall -k) call (the loop's C(results), I(_input))
    that ran and did not exit 0, in order; then, when asking C(dkms status) before building
    did not exit 0 (or gave no exit status), its C(msg) (or its C(stderr), or an empty string).
  - The driver role's verify names the first non-empty one when a kernel lacks the module.
positional: _input, status
options:
  _input:
    description: The registered result of the loop of C(dkms autoinstall -k) calls (C({})
      when it has not run).
    type: dict
    required: true
  status:
    description: The reading of C(dkms status) before building (a command's result; C({})
      when there is none).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: What DKMS said
  ansible.builtin.debug:
    msg: "{{ builds | default({}) | gpucluster.provisioner.nvidia_driver_dkms_errors(status) }}"
"""

RETURN = r"""
_value:
  description: Error texts (some may be empty).
  type: list
  elements: str
"""


def nvidia_driver_dkms_errors(autoinstall: Any, status: Any) -> list[Any]:
    builds = autoinstall.get("results") if isinstance(autoinstall, Mapping) else None
    errors: list[Any] = [str(build.get("stderr", "")).strip() for build in builds or []
                         if isinstance(build, Mapping) and "rc" in build and build["rc"] != 0]
    status = status if isinstance(status, Mapping) else {}
    if status.get("rc", 1) != 0:
        errors.append(status["msg"] if "msg" in status else status.get("stderr", ""))
    return errors


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_dkms_errors": nvidia_driver_dkms_errors}
