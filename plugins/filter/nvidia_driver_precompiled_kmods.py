"""The driver role's rules of where the kernel modules come from: DKMS, or NVIDIA's precompiled
per-kernel packages (the module_utils precompiled policy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.precompiled import (
    kernel_states,
    kmod_names,
)

DOCUMENTATION = r"""
name: nvidia_driver_precompiled_kmods
short_description: The precompiled kernel module package of each kernel
description:
  - Fills the plan's C(nvidia_driver_precompiled_kmod) (C(kmod-nvidia-<driver>-@K@)) with each
    kernel release, its dist and architecture tags removed (C(5.14.0-427.13.1.el9_4.x86_64)
    gives C(kmod-nvidia-<driver>-5.14.0-427.13.1)), as NVIDIA's precompiled streams name them.
    An empty template (modules from DKMS) gives an empty mapping.
  - "C(nvidia_driver_precompiled_query) (this file): C(kmods | nvidia_driver_precompiled_query)
    is the probe's command reading which of those packages are installed
    (C({precompiled: [rpm, -q, ...]})), C({}) when there are none."
  - "C(nvidia_driver_precompiled_states) (this file): C(kmods |
    nvidia_driver_precompiled_states(lines)) is C({kernel: installed | missing}), from the
    package names C(rpm -q) or C(dnf repoquery) printed."
  - "C(nvidia_driver_dkms_wanted) (this file): C(source | nvidia_driver_dkms_wanted(check)) is
    whether DKMS builds the modules and is checked: the source is C(dkms) and
    C(nvidia_driver_dkms_check) is on."
positional: _input, kernels
options:
  _input:
    description: The plan's C(nvidia_driver_precompiled_kmod).
    type: str
    required: true
  kernels:
    description: Kernel releases.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: The precompiled module package of every kernel a reboot may bring up
  ansible.builtin.debug:
    msg: >-
      {{ nvidia_driver_precompiled_kmod
         | gpucluster.provisioner.nvidia_driver_precompiled_kmods(kernels) }}
"""

RETURN = r"""
_value:
  description: "C({kernel release: package name})."
  type: dict
"""


def nvidia_driver_precompiled_kmods(template: Any, kernels: Any) -> dict[str, str]:
    return kmod_names(str(template or ""), [str(k) for k in kernels or []])


def nvidia_driver_precompiled_query(kmods: Any) -> dict[str, list[str]]:
    names = list(kmods.values()) if isinstance(kmods, Mapping) else []
    return {"precompiled": ["rpm", "-q", "--qf", "%{NAME}\n", *names]} if names else {}


def nvidia_driver_precompiled_states(kmods: Any, present: Any) -> dict[str, str]:
    kmods = kmods if isinstance(kmods, Mapping) else {}
    return kernel_states(kmods, [str(line) for line in present or []])


def nvidia_driver_dkms_wanted(source: Any, check: Any) -> bool:
    return str(source) == "dkms" and boolean(check, strict=False)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_precompiled_kmods": nvidia_driver_precompiled_kmods,
                "nvidia_driver_precompiled_query": nvidia_driver_precompiled_query,
                "nvidia_driver_precompiled_states": nvidia_driver_precompiled_states,
                "nvidia_driver_dkms_wanted": nvidia_driver_dkms_wanted}
