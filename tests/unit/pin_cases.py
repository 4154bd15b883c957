"""Host variables whose pins tests/fixtures/package_pins.json records: each override changes
what a package name or version is derived from (driver branch, CUDA major, cuDNN, NCCL,
Container Toolkit, fabric manager)."""

from __future__ import annotations

from typing import Any

OVERRIDE_CASES: dict[str, dict[str, Any]] = {
    # 550.127.05 is no release of stacks.yml: given in full, as the Ubuntu repository lists the
    # driver and, apart (it kept Debian's revision through R570), the fabric manager.
    "driver-same-branch": {"gpu_stack": "cuda-12.4",
                           "nvidia_driver_version": "550.127.05-0ubuntu1",
                           "nvidia_fabricmanager_version": "550.127.05-1"},
    "driver-to-r580": {"gpu_stack": "cuda-12.9", "nvidia_driver_version": "580.95.05"},
    "driver-open-old-branch": {"gpu_stack": "cuda-12.2", "nvidia_driver_version": "535.154.05",
                               "nvidia_driver_module_flavor": "open"},
    "cuda-13-on-12.8": {"gpu_stack": "cuda-12.8", "cuda_version": "13.0.2",
                        "nvidia_driver_version": "580.95.05", "cudnn_version": "9.13.0.50",
                        "nccl_version": "2.28.3-1+cuda13.0"},
    "cuda-minor": {"gpu_stack": "cuda-12.8", "cuda_version": "12.6"},
    "cudnn-short": {"gpu_stack": "cuda-12.6", "cudnn_version": "9.8.0"},
    "nccl": {"gpu_stack": "cuda-12.6", "nccl_version": "2.21.5-1+cuda12.4"},
    "ctk-with-suffix": {"gpu_stack": "cuda-12.4", "nvidia_container_toolkit_version": "1.17.7-1"},
    "fabricmanager": {"gpu_stack": "cuda-12.9", "nvidia_fabricmanager_version": "575.64.05"},
    # Ubuntu's driver revision becomes -1ubuntu1 inside R580 (stacks.yml ubuntu_driver_packages
    # lists 580.95.05 at -0ubuntu1): a release the matrix does not list is given in full.
    "driver-r580-ubuntu-revision": {"gpu_stack": "cuda-13.0",
                                    "nvidia_driver_version": "580.126.09-1ubuntu1"},
    "cuda-11.8-open": {"gpu_stack": "cuda-11.8", "nvidia_driver_module_flavor": "open"},
}
