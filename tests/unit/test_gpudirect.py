"""The GPUDirect RDMA path policy (module_utils gpudirect): dma_buf where the CUDA driver says so,
else where the open kernel module runs on Linux 5.12 or later; nvidia-peermem where it is loaded
and dma_buf is not there; none otherwise, which fails a GPU node of an RDMA fabric. The open
module's banner is our own capture from a lent H200 (tests/fixtures/device-h200)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpucluster import gpudirect
from gpucluster.gpudirect import (
    gpudirect_checks,
    gpudirect_path,
    kernel_at_least,
    module_flavour,
    read_gpudirect,
)
from gpucluster.validate import evaluate

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "device-h200"
OPEN_BANNER = (H200 / "proc-driver-nvidia-version.txt").read_text()
# The proprietary flavour's banner as users post it (no "Open"; the build date follows).
PROPRIETARY_BANNER = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 "
                      "22:42:15 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")


def test_the_flavour_is_read_from_the_banner() -> None:
    assert module_flavour(OPEN_BANNER) == "open"
    assert module_flavour(PROPRIETARY_BANNER) == "proprietary"
    assert module_flavour("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.65.06  "
                          "Release Build") == "open"
    assert module_flavour("") is None and module_flavour(None) is None
    assert module_flavour("GCC version:  gcc version 15.3.0 (GCC)\n") is None


@pytest.mark.parametrize(("release", "expected"), [
    ("6.18.44-fc-v657-gpu", True), ("5.12.0", True), ("5.11.22-generic", False),
    ("4.18.0-553.el8_10.x86_64", False), ("6.1.0-28-amd64", True), ("garbage", None)])
def test_kernel_release_against_the_floor(release: str, expected: bool | None) -> None:
    assert kernel_at_least(release, (5, 12)) is expected


@pytest.mark.parametrize(("facts", "path", "words"), [
    # What the lent H200 answered: the CUDA attribute decides, whatever the rule would say.
    ({"kernel_module": "open", "kernel": "6.18.44-fc-v657-gpu", "peermem_loaded": False,
      "cuda_dma_buf": [1]}, "dma_buf", "the CUDA driver reports dma_buf support on all 1 GPU"),
    ({"kernel_module": "open", "kernel": "6.1.0-28-amd64", "peermem_loaded": False,
      "cuda_dma_buf": [1, 0]}, "none", "no dma_buf support on GPU(s) 1; nvidia_peermem not"),
    ({"kernel_module": "open", "kernel": "6.1.0-28-amd64", "peermem_loaded": True,
      "cuda_dma_buf": [0]}, "nvidia-peermem", "nvidia_peermem loaded; no dma_buf: the CUDA"),
    # No CUDA library: NVIDIA's rule.
    ({"kernel_module": "open", "kernel": "6.1.0-28-amd64", "peermem_loaded": True,
      "cuda_dma_buf": None}, "dma_buf", "open kernel module on kernel 6.1.0-28-amd64"),
    ({"kernel_module": "open", "kernel": "5.4.0-200-generic", "peermem_loaded": False,
      "cuda_dma_buf": None}, "none", "kernel 5.4.0-200-generic predates Linux 5.12"),
    ({"kernel_module": "proprietary", "kernel": "6.8.0-49-generic", "peermem_loaded": True,
      "cuda_dma_buf": None}, "nvidia-peermem", "the proprietary kernel module has no dma_buf"),
    ({"kernel_module": "proprietary", "kernel": "6.8.0-49-generic", "peermem_loaded": False,
      "cuda_dma_buf": None}, "none", "the proprietary kernel module has no dma_buf export; "
                                     "nvidia_peermem not loaded"),
    ({"kernel_module": None, "kernel": "6.8.0-49-generic", "peermem_loaded": False,
      "cuda_dma_buf": None}, "none", "no NVIDIA kernel module loaded"),
])
def test_the_path(facts: dict, path: str, words: str) -> None:
    got, why = gpudirect_path(facts)
    assert got == path and words in why, why


def test_an_rdma_fabric_judges_the_path_and_ethernet_reports_it() -> None:
    none = {"kernel_module": "proprietary", "kernel": "6.8.0", "peermem_loaded": False,
            "cuda_dma_buf": None}
    for fabric in ("infiniband", "roce"):
        [check] = gpudirect_checks(none, {"fabric": fabric})
        assert (check["name"], check["status"], check["measured"]) == ("gpudirect", "fail", "none")
        assert "NCCL would stage every transfer" in check["detail"]
    [check] = gpudirect_checks(none, {"fabric": "ethernet"})
    assert (check["status"], check["measured"], check["expected"]) == ("skip", "none", None)
    assert check["detail"].startswith("fabric ethernet has no RDMA: GPUDirect RDMA none")
    good = dict(none, kernel_module="open")
    [check] = gpudirect_checks(good, {"fabric": "infiniband"})
    assert (check["status"], check["measured"]) == ("pass", "dma_buf")
    [check] = gpudirect_checks({"error": "boom"}, {"fabric": "infiniband"})
    assert check["status"] == "fail" and "boom" in check["detail"]
    # validate.evaluate judges the subset when it was read, and only then.
    assert [c["name"] for c in evaluate({"gpudirect": good}, {"fabric": "roce"})] == ["gpudirect"]
    assert evaluate({}, {"fabric": "roce"}) == []


def test_the_node_is_read_from_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    banner = tmp_path / "version"
    banner.write_text(OPEN_BANNER)
    modules = tmp_path / "module"
    (modules / "nvidia_peermem").mkdir(parents=True)
    monkeypatch.setattr(gpudirect, "cuda_dma_buf_supported", lambda: ([1, 1], None))
    facts = read_gpudirect(str(banner), str(modules))
    assert facts == {"kernel_module": "open", "kernel": os.uname().release,
                     "peermem_loaded": True, "cuda_dma_buf": [1, 1], "cuda_error": None}
    facts = read_gpudirect(str(tmp_path / "absent"), str(tmp_path / "none"), cuda=False)
    assert (facts["kernel_module"], facts["peermem_loaded"], facts["cuda_dma_buf"]) == (
        None, False, None)


def test_no_cuda_library_is_said_not_raised() -> None:
    values, why = gpudirect.cuda_dma_buf_supported("libcuda-that-does-not-exist.so.1")
    assert values is None and why.startswith("no CUDA driver library")


def test_the_cuda_probe_runs_in_a_child_and_reads_each_gpu(tmp_path: Path) -> None:
    # A stand-in libcuda answering 2 GPUs, DMA_BUF_SUPPORTED 1 and 0, built from C here when a
    # compiler exists: the probe's ctypes calls and its JSON answer, end to end.
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build a stand-in CUDA driver library")
    source = tmp_path / "cuda.c"
    source.write_text(
        "int cuInit(unsigned f){return 0;}\n"
        "int cuDeviceGetCount(int *n){*n=2;return 0;}\n"
        "int cuDeviceGet(int *d,int o){*d=o;return 0;}\n"
        "int cuDeviceGetAttribute(int *v,int a,int d){if(a!=124)return 1;*v=(d==0);return 0;}\n")
    library = tmp_path / "libcuda.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    assert gpudirect.cuda_dma_buf_supported(str(library)) == ([1, 0], None)
    source.write_text("int cuInit(unsigned f){return 100;}\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    assert gpudirect.cuda_dma_buf_supported(str(library)) == (None, "cuInit returned 100")
