"""roles/smoke_job with smoke_job_framework tensorflow through real ansible-playbook on
localhost: two inventory hosts (both this machine, their workers on two ports) run the
single-node pass each, then the multi-node pass with the TF_CONFIG the role builds (nodes in
play order, each node's index), and publish results the controller judges. With the Slurm
launcher a stand-in srun starts the tasks as srun would (one per node, srun's variables), and
the job builds TF_CONFIG from them and the addresses the role passes.

Needs an interpreter with TensorFlow (this one: the project's venv carries tensorflow-cpu, or
the one GPUC_SMOKE_TF_PYTHON names); skipped without. The role's venv path is pointed at that
interpreter's venv: nothing is installed. The job runs as this user (runuser, so as root), and
pkill and pgrep are stand-ins: the role ends every process of the job's user around each pass,
and that user is this test run's own here.
"""

from __future__ import annotations

import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.smoke_judge import SmokeResult, judge

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "ansible-playbook"
HOSTS = ("tf-a", "tf-b")

PLAY = """
- name: Test | The TensorFlow smoke job
  hosts: all
  gather_facts: false
  tasks:
    - name: Test | Preflight
      ansible.builtin.include_role:
        name: gpucluster.provisioner.smoke_job
        tasks_from: preflight.yml
    - name: Test | Install the job script and the srun watch as install.yml does (no pip, the venv has TensorFlow)
      ansible.builtin.copy:
        src: "{{ role_files }}/{{ item }}"
        dest: "{{ smoke_job_dir }}/{{ item }}"
        mode: "0644"
      loop: [gpuc_smoke_tf.py, gpuc_srun_watch.py]
    - name: Test | Run the passes
      ansible.builtin.include_role:
        name: gpucluster.provisioner.smoke_job
        tasks_from: run.yml
      loop: [intra, inter]
      loop_control:
        loop_var: __smoke_job_pass
    - name: Test | Verify
      ansible.builtin.include_role:
        name: gpucluster.provisioner.smoke_job
        tasks_from: verify.yml
    - name: Test | Save what the role published
      ansible.builtin.copy:
        content: "{{ smoke_job_report | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
"""


def _tf_python() -> str | None:
    python = os.environ.get("GPUC_SMOKE_TF_PYTHON") or sys.executable
    try:
        probe = subprocess.run([python, "-c", "import importlib.util, sys; sys.exit("
                                "importlib.util.find_spec('tensorflow') is None)"],
                               capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return python if probe.returncode == 0 else None


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


# Stands in for srun on this machine: one task per node of --nodelist, each with the variables
# srun gives a task (the step's node list, its node's name, its rank), the command after the
# options; exits with the worst task's status.
FAKE_SRUN = """#!{python}
import os, subprocess, sys
args, nodes = sys.argv[1:], []
while args and args[0].startswith("-"):
    option = args.pop(0)
    if option == "--nodelist":
        nodes = args.pop(0).split(",")
    elif "=" not in option and option not in ("--exclusive",):
        args.pop(0)
step = {{"SLURM_STEP_NODELIST": ",".join(nodes), "SLURM_STEP_NUM_TASKS": str(len(nodes))}}
with open({log!r}, "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
tasks = [subprocess.Popen(args, env={{**os.environ, **step, "SLURMD_NODENAME": node,
                                      "SLURM_PROCID": str(rank)}})
         for rank, node in enumerate(nodes)]
sys.exit(max(task.wait() for task in tasks))
"""

# Stand in for pkill (records its arguments, matches nothing: exit 1) and pgrep (nothing left).
FAKE_PKILL = """#!/bin/sh
echo "$@" >> {log}
exit 1
"""
FAKE_PGREP = "#!/bin/sh\nexit 1\n"


@pytest.mark.parametrize("launcher", ["direct", "slurm"])
def test_tensorflow_passes_run_and_publish_results(tmp_path: Path, launcher: str) -> None:
    python = _tf_python()
    if python is None or not BIN.exists() or shutil.which("timeout") is None \
            or shutil.which("runuser") is None or os.geteuid() != 0:
        pytest.skip("needs tensorflow (GPUC_SMOKE_TF_PYTHON), ansible-playbook, timeout, and "
                    "runuser as root (the role runs as root on the nodes)")
    # The role runs <smoke_job_venv>-tensorflow/bin/python: make that the TensorFlow venv.
    venv = Path(python).parent.parent
    (tmp_path / "venv-tensorflow").symlink_to(venv, target_is_directory=True)
    for name in ("job", "out", "bin", *(f"work-{host}" for host in HOSTS)):
        (tmp_path / name).mkdir()
    srun_log = tmp_path / "srun.log"
    srun = tmp_path / "bin" / "srun"
    srun.write_text(FAKE_SRUN.format(python=sys.executable, log=str(srun_log)))
    srun.chmod(0o755)
    pkill_log = tmp_path / "pkill.log"
    for name, body in (("pkill", FAKE_PKILL.format(log=pkill_log)), ("pgrep", FAKE_PGREP)):
        (tmp_path / "bin" / name).write_text(body)
        (tmp_path / "bin" / name).chmod(0o755)
    ports = free_ports(2)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {
        host: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
               "ansible_host": "127.0.0.1", "smoke_job_port": port,
               # One work directory per "node", as on separate machines.
               "smoke_job_work_dir": str(tmp_path / f"work-{host}")}
        for host, port in zip(HOSTS, ports, strict=True)}}}))
    (tmp_path / "play.yml").write_text(PLAY)
    variables: dict[str, Any] = {
        "smoke_job_framework": "tensorflow", "smoke_job_user": getpass.getuser(),
        "smoke_job_wheelhouse_url": "http://127.0.0.1:1/",
        "smoke_job_venv": str(tmp_path / "venv"), "smoke_job_dir": str(tmp_path / "job"),
        "smoke_job_backend": "gloo", "smoke_job_launcher": launcher,
        "smoke_job_sizes": "8K,64K", "smoke_job_warmup": 1, "smoke_job_iters": 2,
        "smoke_job_ddp_steps": 4, "smoke_job_timeout_s": 60, "smoke_job_run_id": "tftest",
        "role_files": str(ROOT / "roles" / "smoke_job" / "files"),
        "out_dir": str(tmp_path / "out")}
    proc = subprocess.run(
        [str(BIN), "-i", str(inventory), str(tmp_path / "play.yml"), "-e", json.dumps(variables)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"),
             "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    reports = {host: json.loads((tmp_path / "out" / f"{host}.json").read_text())
               for host in HOSTS}
    assert [reports[h]["node_rank"] for h in HOSTS] in (["0", "1"], [0, 1])
    for host in HOSTS:
        assert reports[host]["framework"] == "tensorflow"
        intra = reports[host]["passes"]["intra"]
        assert intra["rc"] == 0, intra["log"][-20:]
        assert intra["result"]["world_size"] == 1 and intra["result"]["workers"] == []
        assert intra["result"]["label"] == "intra-node"
    # The first host in play order (Slurm's order here) is worker 0: it writes the result.
    inter = reports["tf-a"]["passes"]["inter"]
    assert inter["rc"] == 0 and reports["tf-b"]["passes"]["inter"]["rc"] == 0
    assert reports["tf-b"]["passes"]["inter"]["result"] is None
    result = inter["result"]
    assert result["workers"] == [f"127.0.0.1:{port}" for port in ports]
    assert result["world_size"] == 2 and result["backend"] == "ring"
    assert result["label"] == "inter-node"
    verdict = judge(SmokeResult.model_validate(result), floor_gbps=None, simulated=True)
    assert verdict.passed, verdict.failures
    assert verdict.backend == "ring"
    # Every process of the job's user was ended before and after each pass, on each node.
    assert pkill_log.read_text().splitlines() == \
        [f"--signal KILL --uid {getpass.getuser()}"] * (2 * 2 * len(HOSTS))
    if launcher == "slurm":
        # srun ran once per node for the single-node pass, once over both for the other.
        calls = srun_log.read_text().splitlines()
        assert len(calls) == 3
        assert sum("--nodelist tf-a,tf-b" in call for call in calls) == 1
        assert any(f"--node-addresses tf-a=127.0.0.1:{ports[0]},tf-b=127.0.0.1:{ports[1]}"
                   in call for call in calls)
    else:
        assert not srun_log.exists()
