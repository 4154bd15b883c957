#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The NCCL_IB_GID_INDEX of a RoCE node, read from its ports' GID tables."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_gid_index
short_description: The GID index for NCCL_IB_GID_INDEX, read from the node's RoCE GID tables
description:
  - Reads every RDMA port under O(sysfs_root) whose link layer is Ethernet (RoCE), and in its GID
    table (C(ports/N/gids/I) with C(ports/N/gid_attrs/types/I)) the entries that are RoCE v2 and
    IPv4-mapped (C(::ffff:a.b.c.d)), the entries NCCL must use for RoCE v2 over IPv4.
    NCCL_IB_GID_INDEX is one value for the whole node, so the answer is the lowest index that is
    such an entry on every RoCE port.
  - Read-only; runs the same in check mode.
options:
  sysfs_root:
    description: Where the kernel lists the RDMA devices.
    type: path
    default: /sys/class/infiniband
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: RDMA | Read the RoCE GID index
  gpucluster.provisioner.rdma_gid_index:
  register: __rdma_gid
"""

RETURN = r"""
index:
  description: The index for NCCL_IB_GID_INDEX; null when there is none (see problem).
  returned: always
  type: int
ports:
  description: Each RoCE port (C(mlx5_0/1)) and its RoCE v2 IPv4-mapped GID indexes.
  returned: always
  type: dict
problem:
  description: One line saying why there is no index (no RoCE port, a port without an IPv4
    entry, or ports with no index in common); null when there is one.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.ib_sysfs import (
    read_ib_sysfs,
    roce_gid_index,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(sysfs_root=dict(type="path", default="/sys/class/infiniband")),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **roce_gid_index(read_ib_sysfs(module.params["sysfs_root"])))


if __name__ == "__main__":
    main()
