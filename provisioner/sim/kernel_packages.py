"""The kernel's own packages of a simulated Debian or Ubuntu node, as empty stand-ins.

A node image has no kernel packages (a container runs the controller's kernel). What the roles
read and hold through dpkg must still be there: the running kernel's image and headers, and the
metapackages that upgrade them, named as the distribution names them on the node's
architecture. The files themselves (/boot/vmlinuz-K, the headers) come with the node's
simulated files; these packages carry none. Built per OS and architecture, arm64 only for a
cluster that has an arm64 node.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from provisioner.errors import InputError
from provisioner.sim.mirror import SimPackage

# The kernel flavour in the metapackages' names (linux-image-<flavour>, linux-headers-<flavour>),
# by OS family and Debian architecture:
# - Debian: linux-image-amd64 / linux-headers-amd64; on arm64 linux-image-arm64 ("Linux for
#   64-bit ARMv8 machines (meta-package)", bookworm 6.1: packages.debian.org/bookworm/
#   linux-image-arm64) and linux-headers-arm64 ("Header files for Linux arm64 configuration
#   (meta-package)", packages.debian.org/forky/linux-headers-arm64, listed for bookworm too).
# - Ubuntu: linux-image-generic on both (packages.ubuntu.com/noble/arm64/linux-image-generic;
#   the -generic-64k flavour is the other arm64 choice, not the default).
KERNEL_FLAVOURS: dict[tuple[str, str], str] = {
    ("debian", "amd64"): "amd64",
    ("debian", "arm64"): "arm64",
    ("ubuntu", "amd64"): "generic",
    ("ubuntu", "arm64"): "generic",
}
ARCHITECTURES = ("amd64", "arm64")
_STAND_IN = "SIMULATED stand-in: no kernel inside"


def node_kernel() -> str:
    """The kernel release every simulated node runs: the controller's (a container runs its
    host's kernel), e.g. 6.1.0-27-amd64. Its headers are simulated on every node (sim_files),
    its image and headers packages stand in on Debian-family nodes (kernel_packages), and the
    rpm mirror carries precompiled NVIDIA modules for it (sim/precompiled_kmod.py)."""
    return os.uname().release


def kernel_flavour(os_name: str, architecture: str = "amd64") -> str | None:
    """The metapackage flavour of a node OS (debian12, ubuntu2404, ...), None for an rpm one."""
    if architecture not in ARCHITECTURES:
        raise InputError(f"no kernel stand-ins for architecture {architecture!r}: choose one "
                         f"of {', '.join(ARCHITECTURES)}")
    return next((flavour for (family, arch), flavour in KERNEL_FLAVOURS.items()
                 if os_name.startswith(family) and arch == architecture), None)


def kernel_packages(os_name: str, kernel: str, architecture: str = "amd64"
                    ) -> list[SimPackage]:
    """The stand-in kernel packages of a Debian-family node (none for an rpm-based one):
    linux-image-K and linux-headers-K of the running kernel release K, and the flavour's
    metapackages depending on them, all of the node's architecture."""
    flavour = kernel_flavour(os_name, architecture)
    if flavour is None:
        return []
    release = kernel.lower()
    # A kernel release carries no Debian revision: the stand-ins claim version 1 of it.
    version = re.sub(r"[^0-9A-Za-z.+~]", ".", release.split("-", 1)[0]) + "-1"
    return [
        SimPackage(name=f"linux-image-{release}", version=version, description=_STAND_IN,
                   architecture=architecture),
        SimPackage(name=f"linux-headers-{release}", version=version, description=_STAND_IN,
                   architecture=architecture),
        SimPackage(name=f"linux-image-{flavour}", version=version, description=_STAND_IN,
                   depends=(f"linux-image-{release}",), architecture=architecture),
        SimPackage(name=f"linux-headers-{flavour}", version=version, description=_STAND_IN,
                   depends=(f"linux-headers-{release}",), architecture=architecture),
    ]


def kernel_debs_dir(state_dir: Path, os_name: str, architecture: str = "amd64") -> Path:
    """Where the stand-ins of one OS and architecture are built: ``kernel-debs/<os>`` for amd64
    (where they always were), ``kernel-debs/<os>-<arch>`` for another architecture."""
    suffix = "" if architecture == "amd64" else f"-{architecture}"
    return state_dir / "kernel-debs" / f"{os_name}{suffix}"
