"""The slurm_node role's Prolog through ansible-playbook on localhost: the gpuc-slurm-prolog
wrapper as the role renders it (it refuses the job only on the program's exit 1), and the
preflight refusing a slurm.conf whose Prolog the node would not have."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.localplay import ROOT, run_play


def rendered_wrapper(tmp_path: Path, target: Path) -> Path:
    """The role's gpuc-slurm-prolog (vars/main.yml) rendered by Ansible for a program at
    ``target``."""
    wrapper = tmp_path / "gpuc-slurm-prolog"
    run_play(tmp_path, [{"hosts": "localhost", "gather_facts": False,
                         "vars_files": [str(ROOT / "roles/slurm_node/defaults/main.yml"),
                                        str(ROOT / "roles/slurm_node/vars/main.yml")],
                         "tasks": [{"name": "render", "ansible.builtin.copy": {
                             "content": "{{ __slurm_node_prolog_text }}", "dest": str(wrapper),
                             "mode": "0755"}}]}],
             "-e", f"slurm_node_health_check_path={target}")
    return wrapper


def test_the_wrapper_refuses_the_job_only_on_the_programs_exit_1(tmp_path: Path) -> None:
    target = tmp_path / "gpuc-slurm-health"
    wrapper = rendered_wrapper(tmp_path, target)
    assert wrapper.read_text().startswith("#!/bin/sh\n")
    outcomes = {}
    for status in (0, 1, 2, 126):
        target.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\nexit {status}\n")
        target.chmod(0o755)
        outcomes[status] = subprocess.run([str(wrapper)], check=False, timeout=30).returncode
    assert outcomes == {0: 0, 1: 1, 2: 0, 126: 0}
    assert (tmp_path / "args").read_text().split() == ["--prolog"]
    target.unlink()  # the program not installed: the job may start
    assert subprocess.run([str(wrapper)], check=False, capture_output=True,
                          timeout=30).returncode == 0


def run_preflight(tmp_path: Path, prolog: bool, conf: str) -> dict[str, Any] | None:
    """roles/slurm_node/tasks/preflight.yml on localhost; the failure, or None when it passes."""
    tmp_path.mkdir(exist_ok=True)
    failed = tmp_path / "failed.json"
    run_play(tmp_path, [{"hosts": "localhost", "gather_facts": False,
                         "vars_files": [str(ROOT / "roles/slurm_node/defaults/main.yml"),
                                        str(ROOT / "roles/slurm_node/vars/main.yml")],
                         "tasks": [{"block": [{"name": "preflight",
                                               "ansible.builtin.include_tasks":
                                               str(ROOT / "roles/slurm_node/tasks/preflight.yml")}],
                                    "rescue": [{"name": "keep the failure",
                                                "ansible.builtin.copy": {
                                                    "content": "{{ ansible_failed_result | to_json }}",
                                                    "dest": str(failed)}}]}]}],
             "-e", json.dumps({"slurm_node_prolog": prolog, "slurm_node_slurm_conf": conf,
                               "slurm_node_gpu_type": "h100", "slurm_node_gpu_count": 8}))
    return json.loads(failed.read_text()) if failed.exists() else None


CONF = "ClusterName=gpucluster\nHealthCheckProgram=/usr/local/sbin/gpuc-slurm-health\n"


def test_preflight_refuses_a_prolog_in_slurm_conf_that_the_node_would_not_have(
        tmp_path: Path) -> None:
    with_prolog = CONF + "Prolog=/usr/local/sbin/gpuc-slurm-prolog\nPrologFlags=Alloc\n"
    failure = run_preflight(tmp_path, False, with_prolog)
    assert failure is not None
    assert "slurm.conf runs Prolog=/usr/local/sbin/gpuc-slurm-prolog but slurm_node_prolog is " \
           "false" in " ".join(failure["msg"].split())
    assert run_preflight(tmp_path / "on", True, with_prolog) is None
    assert run_preflight(tmp_path / "none", False, CONF) is None
    assert run_preflight(tmp_path / "unused", True, CONF) is None  # installed, not run: harmless
    # A Prolog of the site's own, with this role's off, or beside this role's.
    site = CONF + "Prolog=/etc/slurm/prolog.sh\n"
    assert run_preflight(tmp_path / "site", False, site) is None
    assert run_preflight(tmp_path / "both", True, site + with_prolog.removeprefix(CONF)) is None


def test_preflight_refuses_a_slurm_conf_prolog_elsewhere_than_the_role_installs_it(
        tmp_path: Path) -> None:
    failure = run_preflight(tmp_path, True, CONF + "Prolog=/opt/site/gpuc-slurm-prolog\n")
    assert failure is not None
    msg = " ".join(failure["msg"].split())
    assert "slurm.conf runs Prolog=/opt/site/gpuc-slurm-prolog, and this role installs it at " \
           "slurm_node_prolog_path=/usr/local/sbin/gpuc-slurm-prolog" in msg
