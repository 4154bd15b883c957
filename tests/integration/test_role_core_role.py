"""roles/role_core through real ansible-playbook on localhost.

Imported tasks see role_core's role_path, not the caller's: set_vars must still load the calling
role's vars/<os_family>.yml (found beside role_core in roles/), both when a play imports it and
when a role outside the collection does. The check-mode note and the resolved-packages check
say what the roles' own copies said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "ansible-playbook"

# cudnn keeps the header's path per OS family: vars/Debian.yml and vars/RedHat.yml both set it.
PLAY = """
- name: Test | role_core imported by a play
  hosts: all
  gather_facts: false
  tasks:
    - name: Test | Load cudnn's OS variables through the core
      ansible.builtin.import_role:
        name: gpucluster.provisioner.role_core
        tasks_from: set_vars
      vars:
        role_core_role: cudnn
        role_core_required_facts: [os_family, distribution, distribution_major_version, architecture]
    - name: Test | Save what was loaded
      ansible.builtin.copy:
        content: "{{ {'header': __cudnn_os_version_header, 'family': ansible_facts['os_family']} | to_json }}"
        dest: "{{ out_dir }}/play.json"
        mode: "0644"

- name: Test | role_core imported by a role
  hosts: all
  gather_facts: false
  roles:
    - role: caller
"""

CALLER = """
- name: Caller | Load nccl's OS variables through the core
  ansible.builtin.import_role:
    name: gpucluster.provisioner.role_core
    tasks_from: set_vars
  vars:
    role_core_role: nccl
    role_core_required_facts: [os_family, distribution, distribution_major_version, architecture]
- name: Caller | Say why nothing is verified
  ansible.builtin.import_role:
    name: gpucluster.provisioner.role_core
    tasks_from: check_mode_note
  vars:
    role_core_role: caller
    role_core_change: install or change the demo packages
    role_core_unverified: not verified
  when: say_why | bool
- name: Caller | Save what was loaded
  ansible.builtin.copy:
    content: "{{ {'library_dir': __nccl_library_dir} | to_json }}"
    dest: "{{ out_dir }}/role.json"
    mode: "0644"
- name: Caller | Check the packages are resolved
  ansible.builtin.import_role:
    name: gpucluster.provisioner.role_core
    tasks_from: packages_resolved
  vars:
    role_core_role: caller
    role_core_packages: "{{ demo_packages }}"
    role_core_packages_name: demo
"""


def run(tmp_path: Path, **variables: object) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (tmp_path / "play.yml").write_text(PLAY)
    tasks = tmp_path / "roles" / "caller" / "tasks"
    tasks.mkdir(parents=True, exist_ok=True)
    (tasks / "main.yml").write_text(CALLER)
    return subprocess.run(
        [str(BIN), "-i", str(inventory), str(tmp_path / "play.yml"),
         "-e", json.dumps({"out_dir": str(tmp_path), **variables})],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(tmp_path / "roles"), "ANSIBLE_CACHE_PLUGIN": "memory",
             "ANSIBLE_NOCOLOR": "1"})


@pytest.fixture(autouse=True)
def _tools() -> None:
    if not BIN.exists():
        pytest.skip("ansible-playbook not available")


def test_set_vars_loads_the_calling_roles_files_and_the_notes_read_as_before(
        tmp_path: Path) -> None:
    proc = run(tmp_path, say_why=True, demo_packages=[{"name": "demo", "version": "1"}])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    play = json.loads((tmp_path / "play.json").read_text())
    if play["family"] not in ("Debian", "RedHat"):
        pytest.skip(f"cudnn and nccl have no vars file for OS family {play['family']}")
    assert play["header"].endswith("cudnn_version_v9.h") and "{{" not in play["header"]
    role = json.loads((tmp_path / "role.json").read_text())
    assert role["library_dir"].startswith("/usr/lib")
    assert ("node-a: check mode, and this run would install or change the demo packages first: "
            "not verified") in " ".join(out.split())
    assert "Role core | Load the variables of this OS, for nccl" in out


def test_unresolved_packages_fail_the_host_with_the_line_the_roles_gave(tmp_path: Path) -> None:
    proc = run(tmp_path, say_why=False, demo_packages=[])
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert ("host node-a: no demo packages resolved; run the nvidia_repo role first") in out
    assert "check mode, and this run would" not in out
