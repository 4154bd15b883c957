"""roles/certify's burn-in entry point (playbooks/certify_burnin.yml's tasks_from: burnin)
through real ansible-playbook on localhost, against the simulated node's stand-in tools: its
arguments validate, its script runs through the script module, and what it publishes is judged
like a node's (gpu3's downgraded link named)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from provisioner import burnin
from tests.unit.test_certify_burnin import REASONS, SIM, sim_node  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "ansible-playbook"

PLAY = """
- name: Test | The burn-in of one node
  hosts: all
  gather_facts: false
  tasks:
    - name: Test | Burn in
      ansible.builtin.include_role:
        name: gpucluster.provisioner.certify
        tasks_from: burnin
    - name: Test | Save what the role published
      ansible.builtin.copy:
        content: "{{ certify_report | to_json }}"
        dest: "{{ out_file }}"
        mode: "0600"
"""


def test_the_role_publishes_the_burn_in_and_its_judge_names_the_gpu(sim_node: Path) -> None:  # noqa: F811
    (sim_node / "root/etc/gpu-sim/faults").write_text("gpu3-pcie-downgrade\n")
    inventory = sim_node / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"gpu-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (sim_node / "play.yml").write_text(PLAY)
    variables = {"certify_burnin_seconds": 1, "certify_burnin_sample_interval_s": 1,
                 "certify_kernel_log": str(sim_node / "root/var/lib/gpu-sim/dmesg"),
                 "certify_torch_python": "/nonexistent/python",
                 "certify_all_reduce_perf": ["/nonexistent/*/all_reduce_perf"],
                 "out_file": str(sim_node / "out.json")}
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "GPU_SIM_ROOT": str(sim_node / "root"),
           "PATH": f"{sim_node / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin"}
    proc = subprocess.run([str(BIN), "-i", str(inventory), str(sim_node / "play.yml"), "-e",
                           json.dumps(variables)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    published = json.loads((sim_node / "out.json").read_text())["burnin"]
    assert published["rc"] == 0 and published["error"] == "", published
    checks, facts = burnin.judge_node("gpu-a", published, SIM, REASONS)
    assert [(c.name, c.gpus) for c in checks if c.status == "fail"] == [
        ("burnin_gpu3_h2d", (3,)), ("burnin_gpu3_d2h", (3,))]
    assert facts["copy_tool"] == "nvbandwidth" and facts["load"] == "dcgm"


def test_the_entry_point_refuses_a_bad_argument(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"gpu-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (tmp_path / "play.yml").write_text(PLAY)
    proc = subprocess.run([str(BIN), "-i", str(inventory), str(tmp_path / "play.yml"), "-e",
                           json.dumps({"certify_burnin_dcgm_level": 7,
                                       "out_file": str(tmp_path / "out.json")})],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    assert proc.returncode != 0
    assert "certify_burnin_dcgm_level" in proc.stdout + proc.stderr
