from __future__ import annotations

import re
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
    """A YAML syntax error is one line FILE:LINE:COL: message."""
    path = write(tmp_path, "all: [unclosed\n  - {\n")
    with pytest.raises(InputError) as err:
        inventory.load(path)
    message = str(err.value)
    assert re.fullmatch(re.escape(str(path)) + r":\d+:\d+: [^\n]+", message), message


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        inventory.load(tmp_path / "nope.yml")


def test_values_ansible_converts_are_accepted_as_on_the_run(tmp_path: Path) -> None:
    """Ansible's validator converts "yes" to a bool and "20" to a float; so does the check."""
    data = cluster(preflight_min_free_gb="20", rdma_packages="rdma-core,perftest")
    data["all"]["vars"] = {"provisioner_simulated": "yes"}  # type: ignore[index]
    inv = inventory.load(write(tmp_path, data))
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


# simulation is a property of the whole run ----------------------------------------------------


@pytest.mark.parametrize(("gpu", "login", "simulated"), [
    (True, True, True), ("yes", "true", True), (False, False, False), ("no", "no", False),
    (None, None, False)])
def test_simulated_only_when_every_host_says_so(tmp_path: Path, gpu: object, login: object,
                                                simulated: bool) -> None:
    data = cluster(**({} if gpu is None else {"provisioner_simulated": gpu}))
    if login is not None:
        data["all"]["children"]["cpu_nodes"]["hosts"]["login-01"] = {  # type: ignore[index]
            "provisioner_simulated": login}
    assert inventory.load(write(tmp_path, data)).simulated is simulated


@pytest.mark.parametrize("value", [True, "yes"])
def test_one_simulated_host_among_real_ones_is_refused(tmp_path: Path, value: object) -> None:
    path = write(tmp_path, cluster(provisioner_simulated=value))
    with pytest.raises(InputError) as err:
        inventory.load(path)
    message = str(err.value)
    assert "provisioner_simulated is set on 1 of 2 hosts (gpu-01) but not on login-01" in message
    assert "\n" not in message


# bad files: one line each ---------------------------------------------------------------------


@pytest.mark.parametrize(("text", "line", "col"), [
    ("all:\n  children:\n    gpu_nodes:\n      hosts: {gpu-01: {gpu_profile: x}\n", 5, 1),
    ("all:\n  hosts:\n    a: 1\n   b: 2\n", 4, 4),
    ("all:\n\tchildren: {}\n", 2, 1),
])
def test_yaml_syntax_error_is_file_line_col(tmp_path: Path, text: str, line: int,
                                           col: int) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        inventory.load(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}:{col}: "), message
    assert "\n" not in message and len(message) < 300


def test_a_tab_is_named_in_the_message(tmp_path: Path) -> None:
    """libyaml finds the error fast; PyYAML's own parser words it (libyaml does not name the
    character)."""
    path = write(tmp_path, "all:\n\tchildren: {}\n")
    with pytest.raises(InputError, match=re.escape("found character '\\t' that cannot start")):
        inventory.load(path)


def test_yaml_error_in_group_vars_names_that_file(tmp_path: Path) -> None:
    write(tmp_path, cluster())
    (tmp_path / "group_vars").mkdir()
    bad = tmp_path / "group_vars" / "all.yml"
    bad.write_text("gpu_stack: [oops\n")
    with pytest.raises(InputError, match=re.escape(f"{bad}:2:1: ")):
        inventory.load(tmp_path)


def test_vault_tags_are_not_syntax_errors(tmp_path: Path) -> None:
    data = yaml.safe_dump(cluster()) + "x: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n"
    path = write(tmp_path, data)
    inventory._check_yaml_syntax(path)  # no error: only the syntax is checked


@pytest.mark.parametrize(("error", "why"), [
    (PermissionError(13, "Permission denied"), "permission denied"),
    (OSError(5, "Input/output error"), "Input/output error"),
], ids=["permission", "disk"])
def test_unreadable_inventory_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          error: OSError, why: str) -> None:
    path = write(tmp_path, cluster())

    def unreadable(self: Path) -> bytes:
        raise error

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    with pytest.raises(InputError) as err:
        inventory.load(path)
    assert str(err.value) == f"inventory {path}: cannot read it ({why})"


def test_binary_inventory_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_bytes(b"all:\n  \xff\xfe\x00\n")
    with pytest.raises(InputError, match="not UTF-8 text"):
        inventory.load(path)


def test_simulated_needs_every_host_even_when_built_directly() -> None:
    """``any`` would make one stray host simulate the whole run (no prompt, no floors)."""
    sim = inventory.HostEntry("a", ("gpu_nodes",), {"provisioner_simulated": True})
    real = inventory.HostEntry("b", ("gpu_nodes",), {})
    assert inventory.Inventory(Path("x"), {"a": sim, "b": real}).simulated is False
    assert inventory.Inventory(Path("x"), {"a": sim}).simulated is True
    assert inventory.Inventory(Path("x"), {}).simulated is False


def test_a_long_list_of_mixed_hosts_names_three_of_each_and_counts_the_rest(
        tmp_path: Path) -> None:
    hosts = {f"gpu-{i}": {"gpu_profile": "hgx-h100-8gpu", "provisioner_simulated": i < 5}
             for i in range(9)}
    path = write(tmp_path, {"all": {"children": {"gpu_nodes": {"hosts": hosts}}}})
    with pytest.raises(InputError) as err:
        inventory.load(path)
    assert ("provisioner_simulated is set on 5 of 9 hosts (gpu-0, gpu-1, gpu-2 and 2 more) "
            "but not on gpu-5, gpu-6, gpu-7 and 1 more;") in str(err.value)


@pytest.mark.parametrize(("text", "first"), [
    ("\n  \n  Completely failed to parse\nthe details\n", "Completely failed to parse"),
    ("one line", "one line"),
    ("", "unknown error"),
    ("  \n\t\n", "unknown error"),
])
def test_ansibles_errors_are_cut_to_their_first_line(text: str, first: str) -> None:
    assert inventory._first_line(text) == first


def test_an_inventory_ansible_refuses_is_one_line_naming_it(tmp_path: Path) -> None:
    """INI goes to Ansible's loader: its error, cut to one line, names the file."""
    path = write(tmp_path, "[gpu_nodes]\ngpu-01 gpu_profile=hgx-h100-8gpu\n[gpu_nodes:children]\n"
                           "gpu_nodes\n", name="hosts.ini")
    with pytest.raises(InputError) as err:
        inventory.load(path)
    assert str(err.value) == (f"inventory {path}: the ini plugin refused it: can't add group "
                              "to itself")


def test_a_refused_ini_inventory_prints_nothing_but_the_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Ansible's own multi-line "[WARNING]: Failed to parse inventory with 'ini' plugin"
    block (error_as_warning) no longer reaches stderr before our line."""
    from provisioner import cli

    path = write(tmp_path, "[gpu_nodes\nbad line = = \n", name="hosts.ini")
    assert cli.main(["plan", "--inventory", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"error: inventory {path}: the ini plugin refused it: not enough values to unpack "
        "(expected 3, got 2)"]


@pytest.mark.parametrize(("value", "simulated"), [
    (True, True), (1, True), ("y", True), ("Yes", True), (" TRUE ", True), ("t", True),
    ("1", True), ("on", True),
    (False, False), (0, False), (2, False), (None, False), ("no", False), ("false", False),
    ("0", False), ("off", False), ("", False), ("simulated", False),
])
def test_provisioner_simulated_is_read_as_ansible_reads_a_bool(value: object,
                                                               simulated: bool) -> None:
    entry = inventory.HostEntry("a", ("gpu_nodes",), {"provisioner_simulated": value})
    assert inventory._simulated(entry) is simulated


@pytest.mark.parametrize(("text", "message"), [
    ("all:\n  hosts:\n    a: 1\n   b: 2\n",
     "{path}:4:4: expected <block end>, but found '<block mapping start>' (while parsing a "
     "block mapping)"),
    # A reader error has no problem/context marks: the whole first line of its message.
    ('all:\n  vars: {x: "\x07"}\n',
     "{path}: invalid YAML (unacceptable character #x0007: special characters are not "
     "allowed)"),
    ("all:\n  children:\n    cpu_nodes:\n      hosts: {a: {}}\n",
     "inventory {path}: group gpu_nodes is missing or empty; put at least one GPU host in it"),
], ids=["parser", "reader", "no-gpu-nodes"])
def test_bad_inventories_are_one_exact_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        inventory.load(path)
    assert str(err.value) == message.format(path=path)

