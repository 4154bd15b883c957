#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Bring a node's GPUs to the planned MIG layout and make the MIG devices' capability files."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_mig
short_description: Apply a planned MIG layout (MIG mode, GPU and compute instances) and its device files
description:
  - Reads each GPU's MIG mode (C(nvidia-smi --query-gpu=index,mig.mode.current)) and GPU
    instances (C(nvidia-smi mig -lgi)). A GPU whose instances already hold O(layout)'s entry
    (order aside) is left alone; on any other, its compute and GPU instances are destroyed, MIG
    mode is set, and the planned instances are created with their default compute instance
    (C(nvidia-smi mig -cgi NAMES -C)).
  - Then makes the capability files of every MIG device, C(/dev/nvidia-caps/nvidia-cap<minor>)
    for the GPU instance's and the compute instance's C(access) (minors from
    C(<proc_root>/driver/nvidia-caps/mig-minors), major from C(<proc_root>/devices)), which Slurm's
    gres.conf C(MultipleFiles=) names, and returns each device with its files.
  - Check mode reports what would change and changes nothing.
options:
  layout:
    description: One entry per GPU index, the plan's gpu_mig_layout_planned - null (MIG off) or
      the GPU-instance profile names to create, largest first.
    type: list
    elements: raw
    required: true
  proc_root:
    description: Where the driver's /proc files (mig-minors, devices) are read.
    type: path
    default: /proc
  dev_root:
    description: The root under which /dev/nvidia-caps is made.
    type: path
    default: /
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: Apply the planned MIG layout
  gpucluster.provisioner.gpu_mig:
    layout: [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], null]
"""

RETURN = r"""
gpus:
  description: The GPU indices whose MIG mode or instances changed.
  returned: always
  type: list
  elements: int
devices:
  description: Every MIG device - gpu, gi, ci, name (its profile) and files (the GPU's device
    file, then the GPU and compute instances' capability files).
  returned: always
  type: list
  elements: dict
nodes_made:
  description: The capability files created (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.mig import (
    converge,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            layout=dict(type="list", elements="raw", required=True),
            proc_root=dict(type="path", default="/proc"),
            dev_root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    layout = [None if gpu is None else [str(name) for name in gpu] for gpu in p["layout"]]
    nvidia_smi = module.get_bin_path("nvidia-smi", required=True)
    try:
        result = converge(module.run_command, layout, nvidia_smi, p["proc_root"], p["dev_root"],
                          check=module.check_mode)
    except RuntimeError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
