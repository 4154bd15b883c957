"""The plan is the only channel from the provisioner to the nodes.

- no role or playbook reads the stack matrix or the profiles (or anything under provisioner/data);
- every variable a role requires (argument_specs ``required: true``) is one the plan writes;
- the plan's variables carry what the roles need, decided once: exact pins per package family
  (the planned flavour, the fabric manager only on NVSwitch), repositories and OSes from the
  matrix's repository table, the profile's expectations, the fabric;
- the plan file is an inventory Ansible merges with the user's without losing a group.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import plan as plan_mod
from provisioner.matrix import load_matrix, packages_for

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = re.compile(r"stacks\.yml|profiles\.yml|provisioner/data")
SIMULATION = re.compile(r"gpu-sim|SIMULATED|simulated")
MATRIX = load_matrix()


def content_files(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def test_no_role_or_playbook_reads_the_matrix_or_the_profiles() -> None:
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for p in content_files("roles", "playbooks")
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if FORBIDDEN.search(line)]
    assert hits == [], "roles/playbooks must take these from the plan:\n" + "\n".join(hits)


def test_nothing_under_roles_plugins_playbooks_names_the_simulation() -> None:
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for p in content_files("roles", "plugins", "playbooks")
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if SIMULATION.search(line)]
    assert hits == [], "the simulation lives in provisioner/sim only:\n" + "\n".join(hits)


def write_inventory(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> plan_mod.ClusterPlan:
    inv = write_inventory(tmp_path, {"all": {"children": {
        "gpu_nodes": {"hosts": {
            "hgx-1": {"gpu_profile": "hgx-h100-8gpu"},
            "l40s-1": {"gpu_profile": "pcie-l40s-4gpu"},
            "prop-1": {"gpu_profile": "hgx-h100-8gpu",
                        "nvidia_driver_module_flavor": "proprietary"},
        }},
        "cpu_nodes": {"hosts": {"login-1": {"fabric": "ethernet"}}},
        "storage": {"hosts": {"login-1": {}}},
    }}})
    return plan_mod.build(inv)


# role_core is internal: the roles that import its task files pass its parameters.
INTERNAL_ROLES = {"role_core"}


def required_role_variables() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for spec in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        if spec.parts[-3] in INTERNAL_ROLES:
            continue
        options = yaml.safe_load(spec.read_text())["argument_specs"]["main"].get("options") or {}
        out[spec.parts[-3]] = {name for name, opt in options.items() if opt.get("required")}
    return out


# Required inputs a playbook passes from the plan under another name (role var: plan var), and
# those the provisioner passes itself (the smoke job's wheelhouse, served per run).
PASSED_BY_PLAYBOOKS = {"preflight_supported_os": "gpu_supported_os",
                       "gpu_validate_expected": "gpu_expected", "rdma_fabric": "fabric"}
PASSED_BY_PROVISIONER = {"smoke_job_wheelhouse_url"}


def test_every_required_role_variable_comes_from_the_plan(
        cluster: plan_mod.ClusterPlan) -> None:
    gpu_vars = cluster.hosts["hgx-1"].variables()
    for role, names in required_role_variables().items():
        for name in names - PASSED_BY_PROVISIONER:
            assert PASSED_BY_PLAYBOOKS.get(name, name) in gpu_vars, (role, name)
    for role_var, plan_var in PASSED_BY_PLAYBOOKS.items():
        playbooks = "\n".join(p.read_text() for p in content_files("playbooks"))
        assert f'{role_var}: "{{{{ {plan_var} }}}}"' in playbooks, role_var


def test_gpu_host_gets_versions_pins_repositories_and_expectations(
        cluster: plan_mod.ClusterPlan) -> None:
    host = cluster.hosts["hgx-1"]
    assert host.stack is not None
    out = host.variables()
    assert out["provisioner_plan_applied"] is True
    for key, value in host.stack.as_vars().items():
        assert out[key] == value
    # Exact pins per family: what packages_for says, grouped by component, planned flavour only.
    for family in ("apt", "apt_ubuntu", "dnf"):
        pins = out["nvidia_repo_stack_packages"][family]
        flat = [(c, p["name"], p["version"]) for c in pins if not c.endswith("_replaced")
                for p in pins[c]]
        assert sorted(flat) == sorted((p.component, p.name, p.version)
                                      for p in packages_for(host.stack, family))
    apt = out["nvidia_repo_stack_packages"]["apt"]
    assert host.stack.module_flavor == "open"
    assert apt["driver"][0]["name"] == "nvidia-kernel-open-dkms"
    # Other branches and the other flavour: removed before the install, never a planned name.
    replaced = {p["name"] for p in apt["driver_replaced"]}
    planned_names = {p["name"] for c in ("driver", "fabricmanager") for p in apt[c]}
    assert {"nvidia-kernel-dkms", "cuda-drivers-575", "cuda-drivers-570"} <= replaced
    assert not replaced & planned_names
    assert f"cuda-drivers-{host.stack.driver_branch}" in planned_names
    fm_replaced = {p["name"] for p in apt["fabricmanager_replaced"]}
    assert {"nvidia-fabricmanager-575", "libnvidia-nscq-575"} <= fm_replaced
    assert not fm_replaced & planned_names
    ubuntu = {p["name"] for p in out["nvidia_repo_stack_packages"]["apt_ubuntu"]["driver_replaced"]}
    assert {"nvidia-driver-580", "nvidia-driver-575-open", "cuda-drivers-575"} <= ubuntu
    # dnf names the driver the same on every branch: only the other flavour is replaced.
    dnf = out["nvidia_repo_stack_packages"]["dnf"]
    assert [p["name"] for p in dnf["driver_replaced"]] == ["kmod-nvidia-latest-dkms"]
    # cuDNN and DCGM of other CUDA majors (and DCGM 3): one variant per node.
    assert {p["name"] for p in apt["cudnn_replaced"]} == (
        {"libcudnn9-cuda-11", "libcudnn9-cuda-12", "libcudnn9-cuda-13", "libcudnn9-dev-cuda-11",
         "libcudnn9-dev-cuda-12", "libcudnn9-dev-cuda-13"} - {p["name"] for p in apt["cudnn"]})
    assert "datacenter-gpu-manager" in {p["name"] for p in apt["dcgm_replaced"]}
    assert not {p["name"] for p in apt["dcgm_replaced"]} & {p["name"] for p in apt["dcgm"]}
    assert "fabricmanager" in apt  # NVSwitch board
    assert apt["nccl"][0]["version"] == out["nccl_version"]
    # The OS registry is the matrix's repository table, limited to the stack's OSes.
    stack = MATRIX.stacks[host.stack.stack]
    supported = sorted(set(stack.os_support) & set(MATRIX.repositories.cuda))
    assert out["gpu_supported_os"] == supported
    assert sorted(out["nvidia_repo_repositories"]["cuda"]) == supported
    debian = out["nvidia_repo_repositories"]["cuda"]["debian12"]
    assert debian == MATRIX.repositories.cuda["debian12"].model_dump(mode="json")
    assert set(out["nvidia_repo_repositories"]["container_toolkit"]) == {"apt", "dnf"}
    # Expectations: the profile's hardware, the planned driver, the fabric; no floors.
    expected = out["gpu_expected"]
    assert expected["gpu_count"] == 8 and expected["nvswitch"] is True
    assert expected["driver_version"] == host.stack.driver_version
    assert expected["fabric"] == out["fabric"] == "infiniband"
    assert not any(k.startswith("busbw") for k in expected)


def test_fabric_is_decided_once_from_inventory_else_profile(
        cluster: plan_mod.ClusterPlan) -> None:
    l40s = cluster.hosts["l40s-1"].variables()
    # pcie-l40s-4gpu is a RoCE profile: the rdma role and validate both get roce.
    assert l40s["fabric"] == "roce" and l40s["gpu_expected"]["fabric"] == "roce"
    assert "fabricmanager" not in l40s["nvidia_repo_stack_packages"]["apt"]
    assert "fabricmanager_replaced" not in l40s["nvidia_repo_stack_packages"]["apt"]
    assert l40s["nvidia_fabricmanager_enabled"] is False
    assert cluster.hosts["login-1"].variables()["fabric"] == "ethernet"


def test_cpu_node_takes_the_gpu_nodes_fabric_or_must_say(tmp_path: Path) -> None:
    same = write_inventory(tmp_path, {"all": {"children": {
        "gpu_nodes": {"hosts": {"g1": {"gpu_profile": "pcie-l40s-4gpu"}}},
        "cpu_nodes": {"hosts": {"c1": {}}}}}})
    cpu = plan_mod.build(same).hosts["c1"].variables()
    assert cpu["fabric"] == "roce"
    assert cpu["gpu_supported_os"] == sorted(MATRIX.repositories.cuda)
    assert "nvidia_driver_version" not in cpu and "gpu_expected" not in cpu
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    inv = write_inventory(mixed, {"all": {"children": {
        "gpu_nodes": {"hosts": {"g1": {"gpu_profile": "pcie-l40s-4gpu"},
                                "g2": {"gpu_profile": "hgx-h100-8gpu"}}},
        "cpu_nodes": {"hosts": {"c1": {}}}}}})
    # GPU nodes on two fabrics: a CPU node naming none gets no RDMA configuration, and the
    # plan says so in one line; one that names its fabric keeps it.
    mixed_plan = plan_mod.build(inv)
    assert mixed_plan.hosts["c1"].fabric == "ethernet"
    assert mixed_plan.hosts["c1"].variables()["fabric"] == "ethernet"
    assert mixed_plan.notes == [
        "1 CPU node(s) (c1) get no RDMA configuration: the GPU nodes use different fabrics "
        "(infiniband, roce) and they name none; set fabric on a CPU node that needs RDMA"]
    named = tmp_path / "named"
    named.mkdir()
    inv = write_inventory(named, {"all": {"children": {
        "gpu_nodes": {"hosts": {"g1": {"gpu_profile": "pcie-l40s-4gpu"},
                                "g2": {"gpu_profile": "hgx-h100-8gpu"}}},
        "cpu_nodes": {"hosts": {"c1": {"fabric": "infiniband"}}}}}})
    assert plan_mod.build(inv).hosts["c1"].fabric == "infiniband"
    assert plan_mod.build(inv).notes == []


def test_proprietary_override_pins_the_proprietary_driver(cluster: plan_mod.ClusterPlan) -> None:
    out = cluster.hosts["prop-1"].variables()
    assert out["nvidia_driver_module_flavor"] == "proprietary"
    apt = out["nvidia_repo_stack_packages"]["apt"]
    assert apt["driver"][0]["name"] == "nvidia-kernel-dkms"
    assert "nvidia-kernel-open-dkms" in {p["name"] for p in apt["driver_replaced"]}
    assert "nvidia-kernel-dkms" not in {p["name"] for p in apt["driver_replaced"]}


def test_plan_file_is_an_inventory_that_keeps_the_users_groups(
        cluster: plan_mod.ClusterPlan, tmp_path: Path) -> None:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    plan_file = cluster.write_inventory(tmp_path / "out" / "plan.yml")
    assert plan_file.read_text().startswith("# Written by `provisioner plan`")
    loader = DataLoader()
    manager = InventoryManager(loader=loader,
                               sources=[str(cluster.inventory.source), str(plan_file)])
    assert {g for g in manager.groups if g not in ("all", "ungrouped")} == {
        "gpu_nodes", "cpu_nodes", "storage"}
    assert [h.name for h in manager.groups["storage"].get_hosts()] == ["login-1"]
    hostvars = VariableManager(loader=loader, inventory=manager).get_vars(
        host=manager.get_host("l40s-1"), include_hostvars=False)
    assert hostvars["gpu_profile"] == "pcie-l40s-4gpu"  # the user's, kept
    assert hostvars["fabric"] == "roce"  # the plan's
    assert hostvars["nccl_version"] == cluster.hosts["l40s-1"].variables()["nccl_version"]


# Galaxy's platform names for the matrix's repository directories.
GALAXY_PLATFORM = {"debian12": ("Debian", "bookworm"), "ubuntu2204": ("Ubuntu", "jammy"),
                   "ubuntu2404": ("Ubuntu", "noble"), "rhel9": ("EL", "9")}


@pytest.mark.parametrize("role", ["nvidia_repo", "preflight"])
def test_role_platforms_are_the_matrix_repository_table(role: str) -> None:
    meta = yaml.safe_load((ROOT / "roles" / role / "meta" / "main.yml").read_text())
    declared = {(p["name"], str(v)) for p in meta["galaxy_info"]["platforms"]
                for v in p["versions"]}
    assert declared == {GALAXY_PLATFORM[os_dir] for os_dir in MATRIX.repositories.cuda}


def test_nvidia_repo_names_every_matrix_os_like_preflight_does() -> None:
    from gpucluster.preflight import os_dir

    from tests.unit.collection_module import load_plugin

    # The directory the nvidia_repo role names from Ansible's facts (its nvidia_repo_os_dir
    # filter) is preflight's os_dir() of the same OS, and together they cover the matrix.
    flt = load_plugin("filter", "nvidia_repo_os_dir")
    nodes = {  # (distribution, distribution_version) -> (os-release ID, VERSION_ID)
        ("Debian", "12"): ("debian", "12"),
        ("Ubuntu", "22.04"): ("ubuntu", "22.04"),
        ("Ubuntu", "24.04"): ("ubuntu", "24.04"),
        ("RedHat", "9.4"): ("rhel", "9.4"),
        ("Rocky", "9.5"): ("rocky", "9.5"),
        ("AlmaLinux", "9.5"): ("almalinux", "9.5"),
    }
    named = {}
    for (distribution, version), ids in nodes.items():
        named[distribution, version] = flt.nvidia_repo_os_dir(
            {"distribution": distribution, "distribution_version": version})
        assert named[distribution, version] == os_dir(*ids), (distribution, version)
    assert set(named.values()) == set(MATRIX.repositories.cuda)
