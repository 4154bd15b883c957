"""Each policy once, with two callers. One rule names a node's NVIDIA repository directory:
preflight's os_dir (os-release) and the nvidia_repo role's filter (Ansible facts) give the same
answer, and no role variable file names the directory a second way. One rule turns a planned
package version into what the software reports: the judge and the roles' filters share it."""

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


@pytest.mark.parametrize(("planned", "reported", "three"), [
    ("2.28.9-1+cuda13.0", "2.28.9", "2.28.9"),
    ("1:3.3.6-1", "3.3.6", "3.3.6"),
    ("9.13.0.50", "9.13.0.50", "9.13.0"),
    ("1:2.3-rc1-1", "2.3-rc1", "2.3-rc1"),
])
def test_the_roles_filters_and_the_judge_share_the_version_policy(
        planned: str, reported: str, three: str) -> None:
    from provisioner.judge import first_three, upstream

    flt = load_plugin("filter", "version_policy")
    assert flt.upstream_version(planned) == upstream(planned) == reported
    assert flt.version_first_three(planned) == first_three(planned) == three
    # The roles call the filters, never a rule of their own.
    for role, name in (("nccl", "upstream_version"), ("cudnn", "version_first_three")):
        text = (ROOT / "roles" / role / "tasks" / "verify.yml").read_text(encoding="utf-8")
        assert f"gpucluster.provisioner.{name}" in text
        assert "regex_replace('-" not in text and "split('.')" not in text
