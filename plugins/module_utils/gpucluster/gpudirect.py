# -*- coding: utf-8 -*-
"""Which GPUDirect RDMA path a node has: the NIC reading and writing GPU memory over dma_buf,
through nvidia-peermem, or neither (NCCL then stages every transfer through host memory).

Read-only, no tool run: the loaded NVIDIA module's own banner (/proc/driver/nvidia/version says
"Open Kernel Module" for the open flavour), the running kernel's release, whether nvidia_peermem
is loaded (/sys/module/nvidia_peermem, where NCCL looks too: NVIDIA/nccl 2.30.7 @ 5067397
src/transport/net_ib/gdr.cc), and, where the CUDA driver library is there, its own answer: the
device attribute CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (124 in cuda.h of CUDA 13.0; NCCL
2.30.7's src/init.cc uses dma_buf only where it is non-zero). A lent H200 (open module
580.159.04, kernel 6.18 built without CONFIG_DMABUF_MOVE_NOTIFY) answered 1: NVIDIA's exporter
pins its pages, so that option is no requirement.

Without the library (a node before the driver's user space, or a container) the path is
derived from NVIDIA's requirements for dma_buf (GPU Operator, "GPUDirect RDMA and GPUDirect
Storage", NVIDIA/cloud-native-docs @ 52dcb7b gpu-operator/gpu-operator-rdma.rst): "An Open
Kernel module driver is required", CUDA 11.7 or higher (every open-module driver, R515 on, has
it), Turing or newer (the open module's own floor), Linux "5.12 or higher"; "NVIDIA recommends
using the DMA-BUF rather than using the nvidia-peermem kernel module", which it calls legacy.
The NIC side (rdma-core's ibv_reg_dmabuf_mr, from v34.0) is not judged here.

Stdlib only, Python 3.9 syntax: runs on managed nodes inside gpu_node_facts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from .checks import FAIL, PASS, SKIP, check_result

NVIDIA_PROC_VERSION = "/proc/driver/nvidia/version"
SYS_MODULE = "/sys/module"
# cuda.h (CUDA 13.0, read on the lent H200): CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124,
# "Device supports buffer sharing with dma_buf mechanism."
CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124
# The kernel dma_buf GPUDirect RDMA needs: "5.12 or higher" (the GPU Operator's table, above).
DMA_BUF_MIN_KERNEL = (5, 12)
PATH_DMA_BUF, PATH_PEERMEM, PATH_NONE = "dma_buf", "nvidia-peermem", "none"
_RELEASE = re.compile(r"^(\d+)\.(\d+)")


def module_flavour(text):
    """'open' or 'proprietary' from /proc/driver/nvidia/version's NVRM line, None without it.

    Open:        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release ..."
    Proprietary: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 ..."
    """
    for line in (text or "").splitlines():
        if line.startswith("NVRM version:"):
            return "open" if "Open Kernel Module" in line else "proprietary"
    return None


def kernel_at_least(release, minimum):
    """Whether kernel ``release`` ("6.1.0-28-amd64") is at least ``minimum`` (major, minor);
    None when the release does not parse."""
    match = _RELEASE.match(release or "")
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2))) >= tuple(minimum)


# Run in a child process (a GPU that fell off the bus can hang cuInit; the child is killed
# after CUDA_TIMEOUT_S). Prints a JSON list of each GPU's attribute, or a JSON string saying why.
_CUDA_PROBE = r"""
import ctypes, json, sys
try:
    cuda = ctypes.CDLL(sys.argv[1])
except OSError as exc:
    print(json.dumps("no CUDA driver library (%s)" % exc)); sys.exit()
rc = cuda.cuInit(0)
if rc:
    print(json.dumps("cuInit returned %d" % rc)); sys.exit()
count = ctypes.c_int()
rc = cuda.cuDeviceGetCount(ctypes.byref(count))
if rc:
    print(json.dumps("cuDeviceGetCount returned %d" % rc)); sys.exit()
values = []
for ordinal in range(count.value):
    device, value = ctypes.c_int(), ctypes.c_int()
    rc = cuda.cuDeviceGet(ctypes.byref(device), ordinal)
    rc = rc or cuda.cuDeviceGetAttribute(ctypes.byref(value), int(sys.argv[2]), device)
    if rc:
        print(json.dumps("the DMA_BUF_SUPPORTED attribute of device %d: CUDA error %d"
                         % (ordinal, rc))); sys.exit()
    values.append(value.value)
print(json.dumps(values))
"""
CUDA_TIMEOUT_S = 60


def dma_buf_by_rule(flavour, kernel):
    """NVIDIA's rule for dma_buf without asking the CUDA driver: the open kernel module on Linux
    5.12 or later. The rdma role decides by it whether nvidia-peermem is needed (with the planned
    flavour, before the module is loaded); validate falls back on it without the library."""
    return flavour == "open" and bool(kernel_at_least(kernel, DMA_BUF_MIN_KERNEL))


def cuda_dma_buf_supported(library="libcuda.so.1", timeout=CUDA_TIMEOUT_S):
    """Each GPU's CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED as the CUDA driver answers it (a list
    of 0/1 by device ordinal), or None and why when the library is absent or does not answer.
    cuInit and attribute queries create no context: nothing on the GPUs changes."""
    try:
        done = subprocess.run([sys.executable, "-c", _CUDA_PROBE, library,
                               str(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)],
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, "the CUDA driver did not answer in %d s" % timeout
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, "the CUDA probe failed (exit %d): %s" % (
            done.returncode, (done.stderr.strip().splitlines() or ["no output"])[-1])
    if isinstance(answer, list):
        return answer, None
    return None, str(answer)


def read_gpudirect(proc_version=NVIDIA_PROC_VERSION, sys_module=SYS_MODULE, cuda=True):
    """The node's facts for :func:`gpudirect_path`."""
    try:
        with open(proc_version, encoding="utf-8", errors="replace") as handle:
            banner = handle.read()
    except OSError:
        banner = None
    facts = {"kernel_module": module_flavour(banner), "kernel": os.uname().release,
             "peermem_loaded": os.path.isdir(os.path.join(sys_module, "nvidia_peermem")),
             "cuda_dma_buf": None, "cuda_error": None}
    if cuda:
        facts["cuda_dma_buf"], facts["cuda_error"] = cuda_dma_buf_supported()
    return facts


def gpudirect_path(facts):
    """(path, why): dma_buf, nvidia-peermem or none, and what it was judged from."""
    cuda = facts.get("cuda_dma_buf")
    flavour = facts.get("kernel_module")
    kernel = facts.get("kernel")
    floor = "%d.%d" % DMA_BUF_MIN_KERNEL
    if cuda:
        if all(cuda):
            return PATH_DMA_BUF, ("the CUDA driver reports dma_buf support on all %d GPU(s) "
                                  "(DMA_BUF_SUPPORTED); %s kernel module, kernel %s"
                                  % (len(cuda), flavour or "unknown", kernel))
        why = ("the CUDA driver reports no dma_buf support on GPU(s) %s"
               % ", ".join(str(i) for i, v in enumerate(cuda) if not v))
    elif dma_buf_by_rule(flavour, kernel):
        return PATH_DMA_BUF, ("open kernel module on kernel %s (dma_buf needs the open module "
                              "and Linux %s or later; no CUDA driver library to ask)"
                              % (kernel, floor))
    elif flavour is None:
        why = "no NVIDIA kernel module loaded (no %s)" % NVIDIA_PROC_VERSION
    elif flavour != "open":
        why = "the %s kernel module has no dma_buf export" % flavour
    else:
        why = "kernel %s predates Linux %s" % (kernel, floor)
    if facts.get("peermem_loaded"):
        return PATH_PEERMEM, "nvidia_peermem loaded; no dma_buf: %s" % why
    return PATH_NONE, why + "; nvidia_peermem not loaded"


def gpudirect_checks(facts, expected):
    """One check, ``gpudirect``: a GPU node of an RDMA fabric (infiniband, roce) must have a
    GPUDirect RDMA path; elsewhere the path is reported, not judged."""
    if not facts or facts.get("error"):
        why = (facts or {}).get("error") or "not read"
        return [check_result("gpudirect", FAIL, None, "dma_buf or nvidia-peermem",
                             "cannot read the GPUDirect RDMA state: %s" % why)]
    path, why = gpudirect_path(facts)
    fabric = expected.get("fabric")
    if fabric not in ("infiniband", "roce"):
        return [check_result("gpudirect", SKIP, path, None,
                             "fabric %s has no RDMA: GPUDirect RDMA %s (%s)" % (fabric, path, why))]
    if path == PATH_NONE:
        return [check_result("gpudirect", FAIL, path, "dma_buf or nvidia-peermem",
                             "no GPUDirect RDMA path: %s; NCCL would stage every transfer "
                             "between nodes through host memory" % why)]
    return [check_result("gpudirect", PASS, path, "dma_buf or nvidia-peermem",
                         "GPUDirect RDMA over %s: %s" % (path, why))]
