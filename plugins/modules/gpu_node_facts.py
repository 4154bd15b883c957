#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read a GPU node's hardware state and judge it against its hardware profile."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_node_facts
short_description: GPU, NVLink, InfiniBand, Xid, DCGM and error counter facts of a node, judged against its profile
description:
  - Runs C(nvidia-smi -q -x), C(nvidia-smi nvlink -s), C(nvidia-smi topo -m), reads
    C(/sys/class/infiniband), the kernel log since boot (Xid errors) and, when present and asked
    for, C(dcgmi diag). Parses everything with the shared parsers of module_utils/gpucluster and
    evaluates it against O(expected).
  - The C(counters) subset reads the InfiniBand ports' error counters and the PCIe AER counters
    of the GPUs (with the C(gpu) subset, which names their PCI addresses) and RDMA devices, and
    judges how much they rose since O(counters_before), the reading of the last run (returned
    as C(facts.counters.now) for the next one); without it the reading is a baseline.
  - The C(imex) subset, read only where O(expected) says C(multi_node_nvlink), is the IMEX
    service of the node's NVLink domain - C(systemctl is-active nvidia-imex), the addresses in
    O(imex_nodes_config), C(nvidia-imex-ctl -N -j) and the IMEX channels - judged against the
    plan's C(nvlink_domain_hosts). Each GPU's NVLink fabric registration (C(nvidia-smi -q -x)
    C(fabric)) is judged there too.
  - The C(gpudirect) subset says which GPUDirect RDMA path the node has - dma_buf, nvidia-peermem
    or none - from the CUDA driver's C(DMA_BUF_SUPPORTED) device attribute where the library is
    there, else from the loaded module's flavour (O(nvidia_proc_version)) and the kernel release;
    on an InfiniBand or RoCE fabric a node without one fails.
  - The C(roce_qos) subset, read only where O(expected) says the fabric is C(roce), is each RoCE
    port's PFC and ECN as the node shows them - its interface (the GID table's
    C(gid_attrs/ndevs)), the ECN enable files of MLNX_OFED's mlx5 driver under
    O(net_sysfs_root) and C(dcb pfc show dev) (iproute2), else C(mlnx_qos -i) - one
    C(roce_qos_<dev>_port<n>) check per port, report-only. It passes when PFC or ECN is on for a
    priority, warns when everything read is off and skips naming what could not be read. The
    switches are not read and nothing is configured.
  - The C(mig) subset, read only where O(expected) has a C(mig_layout) (the plan's, one entry
    per GPU), is each GPU's MIG mode (C(nvidia-smi -q -x)) and GPU instances
    (C(nvidia-smi mig -lgi)), one C(gpu<i>_mig) check per GPU. On a node with MIG on, C(dcgmi
    diag) is not run (it does not run on MIG GPUs); the C(dcgm_diag) check is skipped, saying so.
  - Read-only.
options:
  expected:
    description: Hardware profile fields (gpu_count, gpu_model, nvlink_links_per_gpu, ...) plus
      driver_version and fabric.
    type: dict
    required: true
  subsets:
    description: What to read.
    type: list
    elements: str
    choices: [gpu, nvlink, topo, ib, xid, dcgm, counters, imex, gpudirect, mig, roce_qos]
    default: [gpu, nvlink, topo, ib, xid, dcgm, counters, imex, gpudirect, mig, roce_qos]
  ib_sysfs_root:
    description: Root of the InfiniBand class directory.
    type: path
    default: /sys/class/infiniband
  net_sysfs_root:
    description: Root of the network interfaces' class directory (the RoCE ports' ECN files
      are read under it, C(<root>/<interface>/ecn/)).
    type: path
    default: /sys/class/net
  nccl_conf:
    description: NCCL's system-wide settings file; on a RoCE fabric its C(NCCL_IB_GID_INDEX) is
      judged against every port's GID table (it must name the RoCE v2 IPv4-mapped entry).
    type: path
    default: /etc/nccl.conf
  imex_nodes_config:
    description: The IMEX service's list of the NVLink domain's node addresses.
    type: path
    default: /etc/nvidia-imex/nodes_config.cfg
  nvidia_proc_version:
    description: The loaded NVIDIA module's banner (its flavour, open or proprietary).
    type: path
    default: /proc/driver/nvidia/version
  pci_sysfs_root:
    description: Where the PCI functions are listed by address (the GPUs' PCIe AER counters
      are read there; an RDMA device's through its C(device) link).
    type: path
    default: /sys/bus/pci/devices
  counters_before:
    description: The error counter reading of the last run (its C(facts.counters.now)). Omitted,
      this run's reading is the baseline and the counters are not judged.
    type: dict
  kernel_log:
    description: A file holding the kernel log to scan for Xid errors. Empty reads the kernel
      log since boot with C(journalctl -k -b), else C(dmesg).
    type: str
    default: ""
  dcgm_level:
    description: DCGM diagnostic level (1 is quick, 2-3 take minutes).
    type: int
    default: 1
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: Validate | Read and judge the node
  gpucluster.provisioner.gpu_node_facts:
    expected: {gpu_count: 8, gpu_model: "NVIDIA H100 80GB HBM3", nvlink_links_per_gpu: 18}
"""

RETURN = r"""
facts:
  description: Parsed facts per subset (gpu, nvlink, topo, ib, xid, dcgm, counters, ...); a subset
    that could not be read has an error key. C(counters) holds C(now), this run's reading, and
    C(before), the one it was judged against.
  returned: always
  type: dict
checks:
  description: name, status (pass/fail/warn/skip), measured, expected, detail.
  returned: always
  type: list
  elements: dict
failed_checks:
  description: Names of failed checks.
  returned: always
  type: list
  elements: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.counters import (
    take_reading,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.dcgm import (
    parse_dcgmi_diag,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.fabric import (
    IMEX_CHANNELS,
    parse_imex_domain,
    parse_nodes_config,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.gpudirect import (
    NVIDIA_PROC_VERSION,
    read_gpudirect,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.ib_sysfs import (
    read_ib_sysfs,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.mig import (
    read_layout,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.nvlink import (
    parse_nvlink_status,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.nvsmi_xml import (
    parse_nvidia_smi_xml,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.roce_qos import (
    NET_ROOT,
    read_roce_qos,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.topo import (
    parse_topo_matrix,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.validate import (
    evaluate,
)
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.xid import (
    FATAL_XIDS,
    parse_xid,
)

SUBSETS = ["gpu", "nvlink", "topo", "ib", "xid", "dcgm", "counters", "imex", "gpudirect", "mig",
           "roce_qos"]


def run_tool(module, args):
    path = module.get_bin_path(args[0])
    if not path:
        return None, "%s not found" % args[0]
    rc, out, err = module.run_command([path] + args[1:])
    if rc != 0:
        return None, (err or out).strip().splitlines()[-1:] or ["exit %d" % rc]
    return out, None


def guarded(parse, text, err):
    if err:
        return {"error": err if isinstance(err, str) else err[0]}
    try:
        return parse(text)
    except Exception as exc:  # a parser bug must not hide the other subsets
        return {"error": "parse failed: %s" % exc}


def kernel_log(module, path):
    if path:
        try:
            with open(path) as fh:
                return fh.read(), None
        except OSError as exc:
            return None, "cannot read %s: %s" % (path, exc.strerror or exc)
    journal = module.get_bin_path("journalctl")
    if journal:
        rc, out, err = module.run_command([journal, "-k", "-b", "--no-pager", "-q"])
        if rc == 0:
            return out, None
    return run_tool(module, ["dmesg"])


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def nccl_setting(path, key):
    """KEY's value in NCCL's KEY=value settings file (the last one wins, as NCCL reads it);
    None when the file or the key is absent."""
    value = None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                name, sep, rest = line.strip().partition("=")
                if sep and name.strip() == key:
                    value = rest.strip()
    except OSError:
        return None
    return value


def read_imex(module, nodes_config):
    """The IMEX service's state, its node list, the domain as nvidia-imex-ctl reports it and
    the IMEX channels present."""
    out = {}
    systemctl = module.get_bin_path("systemctl")
    if systemctl:
        rc, state, err = module.run_command([systemctl, "is-active", "nvidia-imex"])
        lines = (state or err).strip().splitlines()
        out["service"] = lines[-1] if lines else "exit %d" % rc
    try:
        with open(nodes_config, encoding="utf-8", errors="replace") as fh:
            out["nodes_config"] = parse_nodes_config(fh.read())
    except OSError as exc:
        out["nodes_config"] = None
        out["nodes_config_error"] = exc.strerror or str(exc)
    out["domain"] = guarded(parse_imex_domain,
                            *run_tool(module, ["nvidia-imex-ctl", "-N", "-j"]))
    try:
        out["channels"] = sorted(os.listdir(IMEX_CHANNELS))
    except OSError:
        out["channels"] = []
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            expected=dict(type="dict", required=True),
            subsets=dict(type="list", elements="str",
                         default=SUBSETS, choices=SUBSETS),
            imex_nodes_config=dict(type="path", default="/etc/nvidia-imex/nodes_config.cfg"),
            nvidia_proc_version=dict(type="path", default=NVIDIA_PROC_VERSION),
            ib_sysfs_root=dict(type="path", default="/sys/class/infiniband"),
            net_sysfs_root=dict(type="path", default=NET_ROOT),
            nccl_conf=dict(type="path", default="/etc/nccl.conf"),
            pci_sysfs_root=dict(type="path", default="/sys/bus/pci/devices"),
            counters_before=dict(type="dict"),
            dcgm_level=dict(type="int", default=1),
            kernel_log=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    facts = {}
    if "gpu" in p["subsets"]:
        facts["gpu"] = guarded(parse_nvidia_smi_xml, *run_tool(module, ["nvidia-smi", "-q", "-x"]))
    if "nvlink" in p["subsets"]:
        facts["nvlink"] = guarded(parse_nvlink_status,
                                  *run_tool(module, ["nvidia-smi", "nvlink", "-s"]))
    if "topo" in p["subsets"]:
        facts["topo"] = guarded(parse_topo_matrix, *run_tool(module, ["nvidia-smi", "topo", "-m"]))
    if "ib" in p["subsets"]:
        root = p["ib_sysfs_root"]
        facts["ib"] = read_ib_sysfs(root) if os.path.isdir(root) else {
            "error": "%s does not exist (no RDMA devices or driver)" % root}
        if "error" not in facts["ib"]:
            facts["ib"]["nccl_ib_gid_index"] = nccl_setting(p["nccl_conf"], "NCCL_IB_GID_INDEX")
    if "xid" in p["subsets"]:
        text, err = kernel_log(module, p["kernel_log"])
        if err:
            facts["xid"] = None
        else:
            events = parse_xid(text)
            for event in events:
                event["fatal"] = event.get("xid") in FATAL_XIDS
            facts["xid"] = {"events": events}
    mig_gpus = [g["index"] for g in (facts.get("gpu") or {}).get("gpus") or [] if g.get("mig_mode")]
    if "mig" in p["subsets"] and p["expected"].get("mig_layout") is not None:
        facts["mig"] = read_layout(module.run_command,
                                   module.get_bin_path("nvidia-smi") or "nvidia-smi",
                                   facts.get("gpu"))
    if "dcgm" in p["subsets"] and mig_gpus:
        # DCGM's diagnostic refuses a node with MIG on ("GPU N's MIG configuration is
        # incompatible with the diagnostic because it prevents access to the entire GPU",
        # NVIDIA/DCGM issues #31 and #70: any GPU's layout blocks the others too): the reason
        # is the check's, not a failure of the node.
        facts["dcgm"] = {"skipped": "MIG is on (GPU %s): dcgmi diag does not run on MIG GPUs"
                                    % ", ".join(map(str, mig_gpus))}
    elif "dcgm" in p["subsets"]:
        dcgmi = module.get_bin_path("dcgmi")
        if dcgmi:
            # dcgmi exits non-zero when a test fails: judge by the table, not the exit code.
            rc, out, err = module.run_command([dcgmi, "diag", "-r", str(p["dcgm_level"])])
            if "Diagnostic" in out:
                facts["dcgm"] = guarded(parse_dcgmi_diag, out, None)
                facts["dcgm"]["level"] = p["dcgm_level"]
            else:
                facts["dcgm"] = {"error": (err or out).strip()[-300:] or "exit %d" % rc}
        else:
            facts["dcgm"] = None
    if "imex" in p["subsets"] and p["expected"].get("multi_node_nvlink"):
        facts["imex"] = read_imex(module, p["imex_nodes_config"])
    if "gpudirect" in p["subsets"]:
        facts["gpudirect"] = read_gpudirect(p["nvidia_proc_version"])
    if "roce_qos" in p["subsets"] and p["expected"].get("fabric") == "roce":
        try:
            facts["roce_qos"] = read_roce_qos(p["ib_sysfs_root"], p["net_sysfs_root"],
                                              lambda args: run_tool(module, args))
        except Exception as exc:  # a reader bug must not hide the other subsets
            facts["roce_qos"] = {"error": "read failed: %s" % exc}
    if "counters" in p["subsets"]:
        root = p["ib_sysfs_root"]
        ib = facts.get("ib")
        if ib is None and os.path.isdir(root):
            ib = read_ib_sysfs(root)
        reading = take_reading(ib, facts.get("gpu"), p["expected"], root, p["pci_sysfs_root"],
                               time.time(), boot_id())
        facts["counters"] = {"now": reading, "before": p["counters_before"]}
    checks = evaluate(facts, p["expected"])
    module.exit_json(changed=False, facts=facts, checks=checks,
                     failed_checks=[c["name"] for c in checks if c["status"] == "fail"])


if __name__ == "__main__":
    main()
