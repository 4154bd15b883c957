"""The prefixes unattended-upgrades and dnf-automatic must leave alone (nvidia_repo's
nvidia_repo_auto_upgrade_exclude) cover every package the stack matrix can plan, in every
package family and flavour, and no package of the OS itself. A new component, or a renamed
package outside the prefixes, fails here before a node upgrades it behind the pins' back."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import yaml

from provisioner.matrix import FAMILIES, load_matrix
from provisioner.matrix.packages import every_name
from provisioner.matrix.versions import COMPONENTS

ROOT = Path(__file__).resolve().parents[2]
PREFIXES: list[str] = yaml.safe_load(
    (ROOT / "roles/nvidia_repo/defaults/main.yml").read_text())["nvidia_repo_auto_upgrade_exclude"]
MATRIX = load_matrix()

# Packages of the OS (and its kernel) that automatic security upgrades must keep reaching,
# among them the fabric manager's prerequisites from the distribution.
OS_PACKAGES = ("linux-image-amd64", "linux-headers-generic", "kernel-core", "openssh-server",
               "libc6", "glibc", "python3", "rdma-core", "libibumad3", "libibumad",
               "infiniband-diags", "ibverbs-utils", "perftest", "dkms", "systemd", "openssl")


def uu_blocks(name: str) -> bool:
    """unattended-upgrades' Package-Blacklist test: each entry a regular expression matched
    from the start of the name (as the role writes it: escaped)."""
    return any(re.match(re.escape(prefix), name) for prefix in PREFIXES)


def dnf_blocks(name: str) -> bool:
    """dnf's excludepkgs: globs, as the role writes them (prefix + "*")."""
    return any(fnmatch.fnmatchcase(name, f"{prefix}*") for prefix in PREFIXES)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("component", COMPONENTS)
def test_every_name_the_matrix_can_plan_is_excluded(component: str, family: str) -> None:
    names = every_name(MATRIX, component, family)
    assert names, f"the matrix plans no {component} package for {family}"
    blocked = dnf_blocks if family == "dnf" else uu_blocks
    assert not [n for n in sorted(names) if not blocked(n)]


def test_the_monitoring_roles_exporter_is_excluded() -> None:
    """dcgm-exporter comes from NVIDIA's repositories too and is built against one DCGM."""
    name = yaml.safe_load((ROOT / "roles/monitoring/defaults/main.yml").read_text())[
        "monitoring_dcgm_exporter_package"]
    assert uu_blocks(name) and dnf_blocks(name)


@pytest.mark.parametrize("name", OS_PACKAGES)
def test_os_packages_keep_their_automatic_upgrades(name: str) -> None:
    assert not uu_blocks(name) and not dnf_blocks(name)


def test_prefixes_are_plain_package_names() -> None:
    """Plain names: escaped as regular expressions and globbed, each means the same prefix."""
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", p) for p in PREFIXES), PREFIXES
