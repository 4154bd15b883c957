"""Whether the driver role's install call read what its later steps would read again (the
service's loaded module and persistence daemon, verify's view of the driver)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.registered import (
    changed,
    skipped,
)

DOCUMENTATION = r"""
name: nvidia_driver_reading_stands
short_description: Whether the driver's install call's reading of the node still stands
description:
  - True when the install call (C(pinned_packages) with a C(probe)) read the loaded module and
    the persistence daemon, and nothing may have changed either since (none of the role's files
    written by that call, its C(changed_files) empty, as the daemon's drop-in reloads systemd; no
    DKMS build started). A package change alone is verify's to judge. The service step then
    reads the node only when this is false.
  - "C(is changed) as ansible-core decides it (module_utils/gpucluster/registered.py)."
  - "C(nvidia_driver_verify_reading_stands) (this file) is verify's rule.
    C(install | nvidia_driver_verify_reading_stands(install_stands, reboot_required, reboot))
    is true when I(install_stands) (this filter's answer) is, the install call changed nothing,
    read the pins and nvidia-smi, no reboot is pending (I(reboot_required)) and the reboot task
    did not run (I(reboot) is skipped; pass C(| default({'skipped': true})) where it is not
    registered). nvidia-smi is not asked while a reboot is pending."
positional: _input, dkms_autoinstall
options:
  _input:
    description: The install call's registered result (its C(probe) holds the reading, its
      C(changed_files) the role's files it wrote).
    type: dict
    required: true
  dkms_autoinstall:
    description: The registered result of the loop of C(dkms autoinstall -k) calls (C({}) when
      it has not run).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Read the loaded module unless the install call did
  gpucluster.provisioner.node_probe:
    files:
      loaded: {path: /sys/module/nvidia/version, read: true}
  when: >-
    not (install | gpucluster.provisioner.nvidia_driver_reading_stands(autoinstall | default({})))
"""

RETURN = r"""
_value:
  description: Whether the install call's reading of the module and the daemon stands.
  type: bool
"""


def _probe(install: Any) -> Mapping[str, Any]:
    probe = install.get("probe") if isinstance(install, Mapping) else None
    return probe if isinstance(probe, Mapping) else {}


def _has(section: Any, key: str) -> bool:
    return isinstance(section, Mapping) and key in section


def nvidia_driver_reading_stands(install: Any, dkms_autoinstall: Any) -> bool:
    probe = _probe(install)
    if not (_has(probe.get("files"), "loaded") and _has(probe.get("commands"), "persistenced")):
        return False
    if install.get("changed_files"):
        return False
    builds = dkms_autoinstall.get("results") if isinstance(dkms_autoinstall, Mapping) else None
    return len(builds or []) == 0


def nvidia_driver_verify_reading_stands(install: Any, install_stands: Any,
                                        reboot_required: Any, reboot: Any) -> bool:
    if not install_stands or changed(install):
        return False
    probe = _probe(install)
    if not ("packages" in probe and _has(probe.get("commands"), "smi")):
        return False
    return not reboot_required and skipped(reboot)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nvidia_driver_reading_stands": nvidia_driver_reading_stands,
                "nvidia_driver_verify_reading_stands": nvidia_driver_verify_reading_stands}
