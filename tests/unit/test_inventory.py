from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from provisioner import inventory
from provisioner.errors import InputError


def write(tmp_path: Path, data: object, name: str = "hosts.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def cluster(**gpu_vars: object) -> dict[str, object]:
    return {"all": {"children": {
        "gpu_nodes": {"hosts": {"gpu-01": {"gpu_profile": "hgx-h100-8gpu", **gpu_vars}}},
        "cpu_nodes": {"hosts": {"login-01": {}}},
    }}}


def test_valid_inventory_loads_with_groups_and_vars(tmp_path: Path) -> None:
    inv = inventory.load(write(tmp_path, cluster(nvidia_driver_module_flavor="open")))
    assert inv.gpu_hosts == ["gpu-01"]
    assert inv.hosts["login-01"].kind == "cpu"
    assert inv.hosts["gpu-01"].vars["nvidia_driver_module_flavor"] == "open"
    assert not inv.simulated


def test_group_vars_directory_is_read(tmp_path: Path) -> None:
    write(tmp_path, cluster())
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text("gpu_stack: cuda-12.4\n")
    inv = inventory.load(tmp_path / "hosts.yml")
    assert inv.hosts["gpu-01"].vars["gpu_stack"] == "cuda-12.4"


def test_ini_inventory_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, "[gpu_nodes]\ngpu-01 gpu_profile=hgx-h100-8gpu\n", "hosts.ini")
    assert inventory.load(path).gpu_hosts == ["gpu-01"]


@pytest.mark.parametrize(("data", "fragment"), [
    ({"all": {"children": {"cpu_nodes": {"hosts": {"a": {}}}}}}, "gpu_nodes is missing or empty"),
    (cluster(gpu_profil="x"), "host gpu-01: unknown variable gpu_profil (did you mean gpu_profile?)"),
    (cluster(nvidia_driver_module_flavor="closed"),
     "host gpu-01: variable nvidia_driver_module_flavor (the inventory contract): value of "
     "nvidia_driver_module_flavor must be one of: open, proprietary, got: closed"),
    (cluster(rdma_fabric="fibre"),
     "host gpu-01: variable rdma_fabric (role rdma): value of rdma_fabric must be one of: "
     "infiniband, roce, ethernet, got: fibre"),
    (cluster(preflight_min_free_gb="lots"),
     "host gpu-01: variable preflight_min_free_gb (role preflight): argument "
     "'preflight_min_free_gb' is of type str and we were unable to convert to float"),
    (cluster(provisioner_simulated="maybe"),
     "variable provisioner_simulated (the inventory contract): argument 'provisioner_simulated' "
     "is of type str and we were unable to convert to bool"),
    (cluster(rdma_ipoib_interfaces=[{"address": "10.0.0.1/24"}]),
     "variable rdma_ipoib_interfaces (role rdma): missing required arguments: name found in "
     "rdma_ipoib_interfaces"),
    (cluster(rdma_ipoib_interfaces=[{"name": "ib0", "address": "10.0.0.1/24", "mtu": "big"}]),
     "variable rdma_ipoib_interfaces (role rdma): argument 'mtu' is of type str found in "
     "'rdma_ipoib_interfaces'. and we were unable to convert to int"),
    ({"all": {"children": {"gpu_nodes": {"hosts": {"a": {}}}, "other": {"hosts": {"b": {}}}}}},
     "host b is in neither gpu_nodes nor cpu_nodes"),
    ({"all": {"children": {"gpu_nodes": {"hosts": {"a": {}}}, "cpu_nodes": {"hosts": {"a": {}}}}}},
     "host a is in both gpu_nodes and cpu_nodes"),
])
def test_bad_inventories_are_one_line_input_errors(tmp_path: Path, data: object,
                                                   fragment: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(InputError) as err:
        inventory.load(path)
    message = str(err.value)
    assert fragment in message
    assert str(path) in message
    assert "\n" not in message


def test_unparseable_file_is_an_input_error(tmp_path: Path) -> None:
    path = write(tmp_path, "all: [unclosed\n  - {\n")
    with pytest.raises(InputError, match="inventory"):
        inventory.load(path)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        inventory.load(tmp_path / "nope.yml")


def test_values_ansible_converts_are_accepted_as_on_the_run(tmp_path: Path) -> None:
    """Ansible's validator converts "yes" to a bool and "20" to a float; so does the check."""
    inv = inventory.load(write(tmp_path, cluster(provisioner_simulated="yes",
                                                 preflight_min_free_gb="20",
                                                 rdma_packages="rdma-core,perftest")))
    # The inventory keeps the values as written: the run converts them the same way again.
    assert inv.hosts["gpu-01"].vars["preflight_min_free_gb"] == "20"
    assert inv.simulated


def test_a_required_role_option_may_be_left_to_the_run(tmp_path: Path) -> None:
    """smoke_job_wheelhouse_url is required by its role but given by the provisioner."""
    assert inventory.known_variables()["smoke_job_wheelhouse_url"].get("required") is True
    inventory.load(write(tmp_path, cluster(smoke_job_nproc_per_node=2)))


def test_role_argument_specs_need_no_cross_option_checks() -> None:
    """Each variable is validated on its own; that equals the role's validation only while no
    entry point declares checks across options (mutually_exclusive, required_if...)."""
    for spec_file in (Path(inventory.project_root()) / "roles").glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec_file.read_text())["argument_specs"].values():
            assert set(entry) <= {"short_description", "description", "author", "options",
                                  "version_added"}, spec_file


def test_templates_are_not_type_checked(tmp_path: Path) -> None:
    inv = inventory.load(write(tmp_path, cluster(preflight_min_free_gb="{{ 10 * 2 }}")))
    assert inv.hosts["gpu-01"].vars["preflight_min_free_gb"] == "{{ 10 * 2 }}"


def test_known_variables_include_role_argument_specs() -> None:
    known = inventory.known_variables()
    assert known["preflight_min_free_gb"]["type"] == "float"
    assert "gpu_profile" in known


def test_hundred_host_inventory_loads_quickly(tmp_path: Path) -> None:
    hosts = {f"gpu-{i:03d}": {"gpu_profile": "hgx-h100-8gpu", "ansible_host": f"gpu-{i:03d}.invalid"}
             for i in range(100)}
    path = write(tmp_path, {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}})
    started = time.monotonic()
    inv = inventory.load(path)
    assert len(inv.gpu_hosts) == 100
    # Not a benchmark (bench/ has those); a guard against accidental per-host host contact.
    assert time.monotonic() - started < 10
