"""One rule names a node's NVIDIA repository directory: preflight's os_dir (os-release) and the
nvidia_repo role's filter (Ansible facts) give the same answer, and no role variable file names
the directory a second way."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.collection_module import load_plugin

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("distribution", "version", "os_release_id", "expected"), [
    ("Debian", "12", "debian", "debian12"),
    ("Debian", "13.1", "debian", "debian13"),
    ("Ubuntu", "22.04", "ubuntu", "ubuntu2204"),
    ("Ubuntu", "24.04", "ubuntu", "ubuntu2404"),
    ("RedHat", "9.4", "rhel", "rhel9"),
    ("Rocky", "9.5", "rocky", "rhel9"),
    ("AlmaLinux", "8.10", "almalinux", "rhel8"),
])
def test_the_filter_and_preflight_agree(distribution: str, version: str, os_release_id: str,
                                        expected: str) -> None:
    from gpucluster.preflight import os_dir

    flt = load_plugin("filter", "nvidia_repo_os_dir")
    facts = {"distribution": distribution, "distribution_version": version}
    assert flt.nvidia_repo_os_dir(facts) == expected
    assert os_dir(os_release_id, version) == expected
    assert flt.FilterModule().filters()["nvidia_repo_os_dir"] is flt.nvidia_repo_os_dir


def test_no_role_names_the_directory_another_way() -> None:
    setters = [str(p.relative_to(ROOT)) for p in (ROOT / "roles").rglob("*.yml")
               if "__nvidia_repo_os_dir:" in p.read_text(encoding="utf-8")]
    assert setters == ["roles/nvidia_repo/vars/main.yml"]
    assert "gpucluster.provisioner.nvidia_repo_os_dir" in (
        ROOT / "roles/nvidia_repo/vars/main.yml").read_text(encoding="utf-8")
