"""Slurm: when the inventory asks for it, which launcher the smoke job gets, the files the roles
render (slurm.conf with its HealthCheckProgram and Prolog, gres.conf), the srun line of the smoke
job, the simulated inventory, and the HealthCheckProgram that drains a node (run for real against
a stand-in gpuc-health and scontrol; its Prolog mode: test_slurm_prolog.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jinja2
import pytest
import yaml

from provisioner import plan as plan_mod
from provisioner import slurm
from provisioner.errors import InputError
from provisioner.sim.cluster import SIM_SLURM_VARS, SimSpec, sim_slurm_groups

ROOT = Path(__file__).resolve().parents[2]
HEALTH = ROOT / "roles" / "slurm_node" / "files" / "gpuc_slurm_health.py"


def inventory(tmp_path: Path, extra_groups: dict[str, Any] | None = None,
              **all_vars: Any) -> Path:
    data = {"all": {"vars": all_vars, "children": {
        "gpu_nodes": {"hosts": {
            "gpu-01": {"gpu_profile": "hgx-h100-8gpu", "ansible_host": "gpu-01.invalid"},
            "gpu-02": {"gpu_profile": "hgx-h100-8gpu", "ansible_host": "gpu-02.invalid"}}},
        "cpu_nodes": {"hosts": {"login-01": {}, "login-02": {}}},
        **(extra_groups or {})}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_no_group_and_no_flag_means_no_slurm_and_the_direct_launcher(tmp_path: Path) -> None:
    cp = plan_mod.build(inventory(tmp_path))
    assert slurm.controller(cp) is None
    assert slurm.choose_launcher(cp, None) == "direct"
    with pytest.raises(InputError, match=r"--launcher slurm: inventory .* has no Slurm"):
        slurm.choose_launcher(cp, "slurm")


def test_the_group_names_the_controller_and_slurm_becomes_the_default(tmp_path: Path) -> None:
    cp = plan_mod.build(inventory(tmp_path, {"slurm_controller": {"hosts": {"login-02": {}}}}))
    assert slurm.controller(cp) == "login-02"
    assert slurm.choose_launcher(cp, None) == "slurm"
    assert slurm.choose_launcher(cp, "direct") == "direct"


def test_slurm_enabled_without_the_group_takes_the_first_cpu_node(tmp_path: Path) -> None:
    cp = plan_mod.build(inventory(tmp_path, slurm_enabled=True))
    assert slurm.controller(cp) == "login-01"


def test_an_unknown_launcher_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="choose one of direct, slurm"):
        slurm.choose_launcher(plan_mod.build(inventory(tmp_path)), "mpirun")


def test_the_simulated_inventory_turns_slurm_on_without_nvml() -> None:
    assert sim_slurm_groups(SimSpec(gpu_nodes=2, cpu_nodes=1)) == {
        "slurm_controller": {"hosts": {"sim-login-1": {}}}}
    assert sim_slurm_groups(SimSpec(gpu_nodes=2, cpu_nodes=0)) == {}
    # Its nodes run cgroup tracking and containment as real ones do; only NVML is missing.
    # Slurm's containers are on, with the crun the nodes install from Debian.
    assert SIM_SLURM_VARS == {"slurm_node_gres_autodetect": False,
                              "slurm_node_oci_runtime": "crun"}


# --- templates --------------------------------------------------------------------------------

def render(role: str, template: str, **variables: Any) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "roles" / role / "templates"),
                             undefined=jinja2.StrictUndefined, trim_blocks=True)
    env.filters["comment"] = lambda text: f"# {text}"
    env.filters["quote"] = str
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    return env.get_template(template).render(ansible_managed="Ansible managed",
                                             **{**defaults, **variables})


NODES = [
    {"name": "gpu-02", "addr": "10.0.0.2", "cpus": 224, "real_memory_mb": 2063000,
     "gpu_type": "h100", "gpu_count": 8, "partition": "hgx-h100-8gpu"},
    {"name": "gpu-01", "addr": "10.0.0.1", "cpus": 224, "real_memory_mb": 2063000,
     "gpu_type": "h100", "gpu_count": 8, "partition": "hgx-h100-8gpu"},
    {"name": "l40-01", "addr": "10.0.0.9", "cpus": 64, "real_memory_mb": 515000,
     "gpu_type": "l40s", "gpu_count": 4, "partition": "pcie-l40s-4gpu"},
]


def slurm_conf(**variables: Any) -> list[str]:
    text = render("slurm_controller", "etc/slurm/slurm.conf.j2", inventory_hostname="login-01",
                  ansible_host="10.0.0.100", slurm_controller_nodes=NODES,
                  __slurm_controller_partitions=sorted({n["partition"] for n in NODES}),
                  __slurm_controller_state_dir="/var/lib/slurm/slurmctld",
                  __slurm_controller_spool_dir="/var/lib/slurm/slurmd",
                  __slurm_controller_log_dir="/var/log/slurm", **variables)
    return text.splitlines()


def test_slurm_conf_has_every_node_with_its_gres_cpus_and_memory() -> None:
    lines = slurm_conf()
    nodes = [line for line in lines if line.startswith("NodeName=")]
    assert nodes == [
        "NodeName=gpu-01 NodeAddr=10.0.0.1 CPUs=224 RealMemory=2063000 Gres=gpu:h100:8 "
        "State=UNKNOWN",
        "NodeName=gpu-02 NodeAddr=10.0.0.2 CPUs=224 RealMemory=2063000 Gres=gpu:h100:8 "
        "State=UNKNOWN",
        "NodeName=l40-01 NodeAddr=10.0.0.9 CPUs=64 RealMemory=515000 Gres=gpu:l40s:4 "
        "State=UNKNOWN"]
    for setting in ("GresTypes=gpu", "SelectType=select/cons_tres", "AuthType=auth/munge",
                    "SlurmctldHost=login-01(10.0.0.100)", "ProctrackType=proctrack/cgroup",
                    "TaskPlugin=task/cgroup,task/affinity", "HealthCheckInterval=300",
                    "HealthCheckProgram=/usr/local/sbin/gpuc-slurm-health"):
        assert setting in lines


def test_one_partition_per_profile_plus_the_default() -> None:
    parts = [line for line in slurm_conf() if line.startswith("PartitionName=")]
    assert parts == [
        "PartitionName=gpu Nodes=gpu-01,gpu-02,l40-01 Default=YES MaxTime=INFINITE State=UP",
        "PartitionName=hgx-h100-8gpu Nodes=gpu-01,gpu-02 MaxTime=INFINITE State=UP",
        "PartitionName=pcie-l40s-4gpu Nodes=l40-01 MaxTime=INFINITE State=UP"]


def test_container_settings_and_no_health_check_are_variables() -> None:
    lines = slurm_conf(slurm_controller_proctrack_type="proctrack/linuxproc",
                       slurm_controller_task_plugin="task/none",
                       slurm_controller_health_check_program="")
    assert "ProctrackType=proctrack/linuxproc" in lines and "TaskPlugin=task/none" in lines
    assert not [line for line in lines if line.startswith("HealthCheck")]


def test_the_prolog_is_the_nodes_wrapper_run_at_allocation() -> None:
    prolog = [line for line in slurm_conf() if line.startswith("Prolog")]
    node = yaml.safe_load((ROOT / "roles" / "slurm_node" / "defaults" / "main.yml").read_text())
    # The controller names the file the node role installs (slurm_node_prolog_path).
    assert prolog == [f"Prolog={node['slurm_node_prolog_path']}", "PrologFlags=Alloc"]
    assert node["slurm_node_prolog"] is True


@pytest.mark.parametrize(("variables", "want"), [
    ({"slurm_controller_prolog": ""}, []),
    ({"slurm_controller_prolog_flags": []}, ["Prolog=/usr/local/sbin/gpuc-slurm-prolog"]),
    ({"slurm_controller_prolog": "/opt/site/prolog", "slurm_controller_prolog_flags":
      ["Alloc", "Contain"]}, ["Prolog=/opt/site/prolog", "PrologFlags=Alloc,Contain"]),
])
def test_the_prolog_and_its_flags_are_variables(variables: dict[str, Any],
                                                want: list[str]) -> None:
    assert [line for line in slurm_conf(**variables) if line.startswith("Prolog")] == want


@pytest.mark.parametrize(("autodetect", "count", "want"), [
    (True, 8, "AutoDetect=nvml"),
    (False, 8, "Name=gpu Type=h100 File=/dev/nvidia[0-7]"),
    (False, 1, "Name=gpu Type=h100 File=/dev/nvidia0"),
])
def test_gres_conf_autodetects_or_lists_the_device_files(autodetect: bool, count: int,
                                                         want: str) -> None:
    text = render("slurm_node", "etc/slurm/gres.conf.j2", slurm_node_gres_autodetect=autodetect,
                  slurm_node_gpu_type="h100", slurm_node_gpu_count=count)
    assert text.splitlines()[1:] == [want]


def test_cgroup_conf_constrains_devices() -> None:
    assert "ConstrainDevices=yes" in render("slurm_node", "etc/slurm/cgroup.conf.j2").splitlines()


# --- the HealthCheckProgram -------------------------------------------------------------------

def health_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuc_slurm_health", HEALTH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reason_names_the_failed_checks_first() -> None:
    reason = health_module().drain_reason({"checks": [
        {"name": "gpu3_nvlink", "status": "fail", "detail": "GPU 3: 0 of 18\n links up"},
        {"name": "temperature", "status": "warn", "detail": "GPU 1 at 86 C"},
        {"name": "driver", "status": "pass", "detail": "580.95.05"}], "problems": []}, 2)
    assert reason == "gpuc: gpu3_nvlink: GPU 3: 0 of 18 links up"


def test_the_reason_falls_back_to_warnings_problems_and_is_bounded() -> None:
    mod = health_module()
    assert mod.drain_reason({"checks": [{"name": "t", "status": "warn", "detail": "hot"}]},
                            1) == "gpuc: t: hot"
    assert mod.drain_reason({"problems": ["nvidia-smi not found"]}, 3) == (
        "gpuc: could not check: nvidia-smi not found")
    assert mod.drain_reason({}, 2) == "gpuc: unhealthy"
    long = mod.drain_reason({"checks": [{"name": "x", "status": "fail", "detail": "y" * 500}]}, 2)
    assert len(long) == mod.REASON_MAX and long.endswith("...")


def stand_ins(tmp_path: Path, status: int, result: dict[str, Any]) -> tuple[Path, Path, Path]:
    health = tmp_path / "gpuc-health"
    health.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/health-args\n"
                      f"cat <<'EOF'\n{json.dumps(result)}\nEOF\nexit {status}\n")
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > {tmp_path}/scontrol-calls\n")
    for tool in (health, scontrol):
        tool.chmod(0o755)
    config = tmp_path / "slurm.json"
    config.write_text(json.dumps({"node": "gpu-02", "health": str(health),
                                  "health_args": ["--state", "/s.json", "--kernel-log", "/k"],
                                  "drain_statuses": [2]}))
    return config, scontrol, tmp_path / "scontrol-calls"


def run_health(config: Path, scontrol: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HEALTH), "--config", str(config), "--scontrol",
                           str(scontrol)], capture_output=True, text=True, check=False)


def test_an_unhealthy_node_drains_itself_with_the_check_as_reason(tmp_path: Path) -> None:
    config, scontrol, calls = stand_ins(tmp_path, 2, {"status": 2, "problems": [], "checks": [
        {"name": "gpu3_nvlink", "status": "fail", "detail": "GPU 3: 0 of 18 links up"}]})
    done = run_health(config, scontrol)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().splitlines() == [
        "update", "NodeName=gpu-02", "State=DRAIN", "Reason=gpuc: gpu3_nvlink: GPU 3: 0 of 18 "
        "links up"]
    assert (tmp_path / "health-args").read_text().split() == [
        "--json", "--state", "/s.json", "--kernel-log", "/k"]


@pytest.mark.parametrize("status", [0, 1, 3])
def test_other_statuses_do_not_drain(tmp_path: Path, status: int) -> None:
    config, scontrol, calls = stand_ins(tmp_path, status, {"status": status, "checks": []})
    assert run_health(config, scontrol).returncode == 0
    assert not calls.exists()


def test_a_missing_health_command_is_reported_not_drained(tmp_path: Path) -> None:
    config, scontrol, calls = stand_ins(tmp_path, 2, {})
    data = json.loads(config.read_text())
    config.write_text(json.dumps({**data, "health": str(tmp_path / "absent")}))
    done = run_health(config, scontrol)
    assert done.returncode == 0 and "is not installed" in done.stderr
    assert not calls.exists()
