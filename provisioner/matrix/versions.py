"""The matrix's vocabulary: the shapes of its versions, comparable version tuples, and the
names of module flavours, package families and components. Shared by every matrix module."""

from __future__ import annotations

import re
from typing import Literal, get_args

Flavor = Literal["open", "proprietary"]
FLAVORS: tuple[str, ...] = get_args(Flavor)
# apt: debian12; apt_ubuntu: ubuntu2204/2404 (Ubuntu's CUDA repository names its driver
# packages differently); dnf: rhel9.
PackageFamily = Literal["apt", "apt_ubuntu", "dnf"]
FAMILIES: tuple[str, ...] = get_args(PackageFamily)
# In install order.
Component = Literal["driver", "fabricmanager", "cuda_toolkit", "cudnn", "nccl",
                    "container_toolkit", "dcgm"]
COMPONENTS: tuple[str, ...] = get_args(Component)

# NVIDIA's data-center driver lifecycle designations [LIFE].
Designation = Literal["long-term support", "production", "new feature"]
DESIGNATIONS: tuple[str, ...] = get_args(Designation)

DEBIAN_REVISION_RE = re.compile(r"^[0-9A-Za-z.~+]+$")
DRIVER_RE = re.compile(r"^(\d{3})\.\d{1,3}(\.\d{1,3})?$")
CUDA_RE = re.compile(r"^(\d{1,2})\.(\d{1,2})$")
TOOLKIT_RE = re.compile(r"^(\d{1,2})\.(\d{1,2})\.(\d{1,3})$")
CUDNN_RE = re.compile(r"^9\.\d{1,2}\.\d{1,2}\.\d{1,4}$")
CUDNN_SHORT_RE = re.compile(r"^9\.\d{1,2}\.\d{1,2}$")
NCCL_RE = re.compile(r"^2\.\d{1,2}\.\d{1,2}-\d+\+cuda(\d{1,2})\.(\d{1,2})$")
CTK_RE = re.compile(r"^1\.\d{1,2}\.\d{1,2}$")
DCGM_RE = re.compile(r"^\d\.\d{1,2}\.\d{1,2}$")
# cuda-X.Y, or cuda-X.Y-SUFFIX for a second stack of one CUDA release (a site's own, e.g. on
# another driver release: cuda-13.0-r580-178).
STACK_NAME_RE = re.compile(r"^cuda-\d{1,2}\.\d{1,2}(-[a-z0-9][a-z0-9.-]{0,31})?$")


def version_tuple(version: str) -> tuple[int, ...]:
    """Dotted version as a comparable tuple (``570.26`` < ``570.124.06``)."""
    return tuple(int(part) for part in version.split("."))


def cuda_key(cuda: str) -> tuple[int, int]:
    """``X.Y`` as a comparable pair (``12.10`` > ``12.9``)."""
    major, minor = cuda.split(".")
    return int(major), int(minor)


def driver_branch(driver_version: str) -> int:
    """``580.95.05`` -> 580."""
    return int(driver_version.split(".", maxsplit=1)[0])
