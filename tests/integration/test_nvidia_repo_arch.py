"""The nvidia_repo role on an Arm server: NVIDIA's CUDA repository directory is sbsa for
aarch64 and x86_64 for x86_64 (stacks.yml's repository notes); any other machine architecture is
refused in one line before a repository is written, not given the x86_64 one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.localplay import run_play

FACTS = {"distribution": "Ubuntu", "distribution_version": "24.04",
         "distribution_major_version": "24", "os_family": "Debian", "lsb": {}}


def play(tmp_path: Path, architecture: str) -> list[dict[str, object]]:
    return [{"hosts": "localhost", "gather_facts": False,
             "vars": {"ansible_facts": {**FACTS, "architecture": architecture},
                      "nvidia_repo_repositories": {"cuda": {"ubuntu2404": {
                          "package_family": "apt_ubuntu"}}},
                      "nvidia_repo_stack_packages": {"apt_ubuntu": {}}},
             "tasks": [
                 {"name": "resolve", "ansible.builtin.include_role": {
                     "name": "gpucluster.provisioner.nvidia_repo", "tasks_from": "resolve.yml",
                     "public": True}},
                 {"name": "show", "ansible.builtin.copy": {
                     "content": "{{ {'arch_dir': __nvidia_repo_arch_dir} | to_json }}",
                     "dest": str(tmp_path / "out.json")}}]}]


@pytest.mark.parametrize(("architecture", "directory"), [("aarch64", "sbsa"),
                                                         ("x86_64", "x86_64")])
def test_the_repository_directory_follows_the_machine(tmp_path: Path, architecture: str,
                                                      directory: str) -> None:
    run_play(tmp_path, play(tmp_path, architecture))
    assert json.loads((tmp_path / "out.json").read_text()) == {"arch_dir": directory}


def test_another_architecture_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(AssertionError) as failed:
        run_play(tmp_path, play(tmp_path, "ppc64le"))
    assert "host localhost: machine architecture ppc64le has no NVIDIA CUDA repository " \
           "directory here (x86_64: x86_64, aarch64: sbsa)" in str(failed.value)
    assert not (tmp_path / "out.json").exists()
