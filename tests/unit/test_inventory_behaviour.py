"""What a user sees from an inventory load beyond test_inventory.py: the connection variables,
the inventories only Ansible reads (INI, TOML, directories, host_vars), their one-line errors,
``--limit`` patterns, and a load that leaves Ansible's settings as it found them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import inventory
from provisioner.errors import InputError

GPU_INI = "[gpu_nodes]\ngpu-01 gpu_profile=hgx-h100-8gpu\n[cpu_nodes]\nlogin-01\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def yaml_inventory(hosts: dict[str, dict[str, object]],
                   cpu: dict[str, dict[str, object]] | None = None) -> str:
    children: dict[str, object] = {"gpu_nodes": {"hosts": hosts}}
    if cpu is not None:
        children["cpu_nodes"] = {"hosts": cpu}
    return yaml.safe_dump({"all": {"children": children}})


def load_error(path: Path) -> str:
    with pytest.raises(InputError) as err:
        inventory.load(path)
    message = str(err.value)
    assert "\n" not in message, message
    return message


# connection variables -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["hosts.yml", "hosts.ini"], ids=["plain-yaml", "ansible-ini"])
def test_connection_variables_are_kept_apart_from_the_contract_variables(
        tmp_path: Path, name: str) -> None:
    """Both readers (the plain YAML one and Ansible's, for INI) put ansible_* in ``connection``
    and leave Ansible's magic variables (inventory_hostname, group_names, hostvars...) out."""
    if name == "hosts.yml":
        text = yaml_inventory({"gpu-01": {"gpu_profile": "hgx-h100-8gpu",
                                          "ansible_host": "10.0.0.1", "ansible_user": "ubuntu"}},
                              cpu={"login-01": {}})
    else:
        text = ("[gpu_nodes]\ngpu-01 gpu_profile=hgx-h100-8gpu ansible_host=10.0.0.1 "
                "ansible_user=ubuntu\n[cpu_nodes]\nlogin-01\n")
    inv = inventory.load(write(tmp_path / name, text))
    gpu = inv.hosts["gpu-01"]
    assert dict(gpu.vars) == {"gpu_profile": "hgx-h100-8gpu"}
    assert dict(gpu.connection) == {"ansible_host": "10.0.0.1", "ansible_user": "ubuntu"}
    assert gpu.groups == ("gpu_nodes",)
    assert dict(inv.hosts["login-01"].vars) == {}
    assert dict(inv.hosts["login-01"].connection) == {}


# inventories only Ansible reads ---------------------------------------------------------------


def test_an_inventory_is_read_afresh_on_every_load(tmp_path: Path) -> None:
    """No cache between loads: an edited inventory is seen by the next load."""
    for name, before, after in [
            ("hosts.ini", GPU_INI, GPU_INI.replace("hgx-h100-8gpu", "hgx-a100-8gpu")),
            ("hosts.yml", yaml_inventory({"gpu-01": {"gpu_profile": "hgx-h100-8gpu"}}),
             yaml_inventory({"gpu-01": {"gpu_profile": "hgx-a100-8gpu"}}))]:
        path = write(tmp_path / name, before)
        assert inventory.load(path).hosts["gpu-01"].vars["gpu_profile"] == "hgx-h100-8gpu"
        write(path, after)
        assert inventory.load(path).hosts["gpu-01"].vars["gpu_profile"] == "hgx-a100-8gpu"


def test_an_inventory_without_any_host_says_so(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.ini", "# nothing here yet\n")
    assert load_error(path) == (f"inventory {path}: Ansible parsed no hosts from it (is it a "
                                "valid YAML/INI inventory?)")


def test_an_empty_gpu_nodes_group_is_the_missing_gpu_nodes_error(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.ini", "[gpu_nodes]\n[cpu_nodes]\n")
    assert load_error(path) == (f"inventory {path}: group gpu_nodes is missing or empty; put at "
                                "least one GPU host in it")


def test_a_directory_with_nothing_ansible_reads_is_one_line(tmp_path: Path) -> None:
    source = tmp_path / "inventory"
    source.mkdir()
    assert load_error(source) == (f"inventory {source}: Completely failed to parse inventory "
                                  f"source {source}")


def test_one_bad_file_in_an_inventory_directory_is_not_skipped(tmp_path: Path) -> None:
    """A directory is read file by file: a file the yaml plugin refuses fails the load, though
    the other file has the hosts (Ansible alone would warn and go on without it)."""
    source = tmp_path / "inventory"
    write(source / "hosts.yml", yaml_inventory({"gpu-01": {"gpu_profile": "hgx-h100-8gpu"}}))
    write(source / "extra.yml", "- a list\n- not a group\n")
    message = load_error(source)
    assert message.startswith(f"inventory {source}: the yaml plugin refused it: YAML inventory "
                              "has invalid structure, it should be a dictionary"), message


def test_files_beside_a_directory_inventory_that_are_not_yaml_are_not_checked(
        tmp_path: Path) -> None:
    """Only the YAML files of a directory are syntax-checked: a Latin-1 README (which Ansible
    ignores) is no reason to refuse the inventory."""
    source = tmp_path / "inventory"
    write(source / "hosts.yml", yaml_inventory({"gpu-01": {"gpu_profile": "hgx-h100-8gpu"}}))
    (source / "README.md").write_bytes(b"Caf\xe9 cluster\n")
    assert inventory.load(source).gpu_hosts == ["gpu-01"]


def test_a_bad_toml_inventory_gives_the_toml_plugins_reason(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.toml", "[gpu_nodes\n")
    message = load_error(path)
    assert message.startswith(f"inventory {path}: the toml plugin refused it: TOML file "
                              f"'{path}' is invalid: "), message


def test_a_bad_host_vars_file_names_the_host_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.yml",
                 yaml_inventory({"gpu-01": {"gpu_profile": "hgx-h100-8gpu"}}))
    host_vars = write(tmp_path / "host_vars" / "gpu-01.yml", "- a list, not variables\n")
    message = load_error(path)
    assert message.startswith(f"inventory {path}: host gpu-01: Could not process "
                              f"'{host_vars}'"), message


def test_a_syntax_error_in_host_vars_beside_an_inventory_file_names_its_line(
        tmp_path: Path) -> None:
    """Found by this file's mutation run: beside a single inventory file, a broken host_vars
    or group_vars file gave Ansible's "YAML parsing failed" without the file or the line."""
    path = write(tmp_path / "hosts.yml",
                 yaml_inventory({"gpu-01": {"gpu_profile": "hgx-h100-8gpu"}}))
    bad = write(tmp_path / "host_vars" / "gpu-01.yml", "nccl_env: [NCCL_DEBUG=INFO\nx: 1\n")
    assert load_error(path) == (f"{bad}:2:2: expected ',' or ']', but got ':' "
                                "(while parsing a flow sequence)")
    bad.unlink()
    group = write(tmp_path / "group_vars" / "all" / "site.yaml", "a: 1\n  b: 2\n")
    assert load_error(path) == f"{group}:2:4: mapping values are not allowed here"
    group.write_text("a: 1\n")
    (tmp_path / "group_vars" / "README.txt").write_bytes(b"\xe9t\xe9")  # not UTF-8, not YAML: not read
    assert inventory.load(path).hosts["gpu-01"].vars["gpu_profile"] == "hgx-h100-8gpu"


# one-line messages ----------------------------------------------------------------------------


def test_a_yaml_error_without_context_has_no_parenthesis(tmp_path: Path) -> None:
    """The commonest slip, a value indented under a scalar: PyYAML gives no context."""
    path = write(tmp_path / "hosts.yml", "all:\n  vars: {}\n  children: x\n    gpu_nodes: {}\n")
    assert load_error(path) == f"{path}:4:14: mapping values are not allowed here"


def test_a_host_in_both_node_groups_is_told_to_keep_one(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.ini", "[gpu_nodes]\na\n[cpu_nodes]\na\n")
    assert load_error(path) == (f"inventory {path}: host a is in both gpu_nodes and cpu_nodes; "
                                "keep it in one")


def test_a_mixed_simulated_inventory_is_one_exact_line(tmp_path: Path) -> None:
    """Three simulated hosts are all named, with no "and 0 more"."""
    hosts: dict[str, dict[str, object]] = {
        f"gpu-{i}": {"gpu_profile": "hgx-h100-8gpu", "provisioner_simulated": i < 3}
        for i in range(4)}
    path = write(tmp_path / "hosts.yml", yaml_inventory(hosts))
    assert load_error(path) == (
        f"inventory {path}: provisioner_simulated is set on 3 of 4 hosts (gpu-0, gpu-1, gpu-2) "
        "but not on gpu-3; a run is simulated as a whole: set it on every host or on none")


def test_an_unknown_variable_with_nothing_close_has_no_hint(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.yml",
                 yaml_inventory({"gpu-01": {"gpu_profile": "hgx-h100-8gpu", "gpu_qx": 1}}))
    assert load_error(path) == f"inventory {path}: host gpu-01: unknown variable gpu_qx"


def test_site_variables_before_a_bad_one_do_not_hide_it(tmp_path: Path) -> None:
    """Variables outside our namespaces are the site's own and are skipped, but the check goes
    on to the host's next variables (here after ``app_tier`` in sorted order)."""
    path = write(tmp_path / "hosts.yml",
                 yaml_inventory({"gpu-01": {"app_tier": "batch", "gpu_profil": "x"}}))
    assert load_error(path) == (f"inventory {path}: host gpu-01: unknown variable gpu_profil "
                                "(did you mean gpu_profile?)")


# --limit ----------------------------------------------------------------------------------------


LIMIT_INVENTORY = yaml.safe_dump({"all": {"children": {
    "gpu_nodes": {"hosts": {"gpu-01": {}, "gpu-02": {}, "gpu-03": {}}},
    "rack1": {"hosts": {"gpu-03": {}, "gpu-01": {}}},
    "cpu_nodes": {"hosts": {"login-01": {}}},
}}}, sort_keys=False)


@pytest.mark.parametrize(("pattern", "hosts"), [
    ("gpu_nodes", ["gpu-01", "gpu-02", "gpu-03"]),
    ("rack1", ["gpu-01", "gpu-03"]),
    ("all:!gpu-02", ["gpu-01", "gpu-03", "login-01"]),
    ("gpu_nodes:&rack1", ["gpu-01", "gpu-03"]),
    ("~gpu-0[13]", ["gpu-01", "gpu-03"]),
    ("login-01,gpu-0*", ["gpu-01", "gpu-02", "gpu-03", "login-01"]),
    ("no-such-host", []),
])
def test_limit_selects_hosts_in_inventory_order(tmp_path: Path,
                                                capfd: pytest.CaptureFixture[str],
                                                pattern: str, hosts: list[str]) -> None:
    path = write(tmp_path / "hosts.yml", LIMIT_INVENTORY)
    assert inventory.hosts_matching(path, pattern) == hosts
    # Ansible's "Could not match supplied host pattern" and the like stay off the terminal.
    assert capfd.readouterr().err == ""


def test_limit_from_a_file(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.yml", LIMIT_INVENTORY)
    limit = write(tmp_path / "retry.txt", "login-01\ngpu-02\n")
    assert inventory.hosts_matching(path, f"@{limit}") == ["gpu-02", "login-01"]


def test_a_limit_ansible_refuses_is_one_line_naming_the_pattern(tmp_path: Path) -> None:
    path = write(tmp_path / "hosts.yml", LIMIT_INVENTORY)
    missing = tmp_path / "missing.txt"
    with pytest.raises(InputError) as err:
        inventory.hosts_matching(path, f"@{missing}")
    message = str(err.value)
    assert message.startswith(f"--limit @{missing}: Unable to find limit file"), message
    assert "\n" not in message


# Ansible's settings -----------------------------------------------------------------------------


def test_loading_leaves_ansibles_settings_as_configured(tmp_path: Path) -> None:
    """The loader turns on strict parsing and the in-memory fact cache only while it reads:
    whatever runs Ansible next in this process sees the settings ansible.cfg and the
    environment give (compared with those, not with a snapshot an earlier load may have
    spoiled)."""
    from ansible import constants as C

    names = ("CACHE_PLUGIN", "INVENTORY_ENABLED", "INVENTORY_UNPARSED_IS_FAILED",
             "INVENTORY_ANY_UNPARSED_IS_FAILED")
    configured = {name: C.config.get_config_value(name) for name in names}
    good = write(tmp_path / "hosts.ini", GPU_INI)
    bad = write(tmp_path / "bad.ini", "[gpu_nodes\nbad line = = \n")
    inventory.load(good)
    with pytest.raises(InputError):
        inventory.load(bad)
    assert inventory.hosts_matching(good, "gpu_nodes") == ["gpu-01"]
    assert {name: getattr(C, name) for name in names} == configured


# the parse loader ------------------------------------------------------------------------------


def _load_edit_reload(loader_cls: type[Any], path: Path, kwargs: dict[str, Any]) -> object:
    """What a caller of ``load_from_file`` sees: the first result, whether a change to it
    reaches the next load, and whether an edit of the file does."""
    from ansible.errors import AnsibleError
    from ansible.template import is_trusted_as_template

    write(path, "hosts: [a]\ntemplate: '{{ x }}'\n")
    loader = loader_cls()
    try:
        first = loader.load_from_file(str(path), **kwargs)
    except AnsibleError as exc:
        return type(exc).__name__
    seen = (list(first["hosts"]), is_trusted_as_template(first["template"]))
    first["hosts"].append("changed-by-the-caller")
    write(path, "hosts: [edited-on-disk]\ntemplate: x\n")
    second = loader.load_from_file(str(path), **kwargs)
    return seen, list(second["hosts"])


@pytest.mark.parametrize("kwargs", [
    {}, {"cache": "all"}, {"cache": "vaulted"}, {"cache": "none"}, {"unsafe": True},
    {"cache": "none", "unsafe": True}, {"json_only": True}, {"trusted_as_template": True},
], ids=str)
def test_the_parse_loader_answers_as_ansibles_own(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    from ansible.parsing.dataloader import DataLoader

    fresh = inventory._fresh_parse_loader(DataLoader)
    assert (_load_edit_reload(fresh, tmp_path / "vars.yml", kwargs)
            == _load_edit_reload(DataLoader, tmp_path / "vars.yml", kwargs))


def test_the_parse_loader_hands_back_an_uncached_parse_without_copying_it(
        tmp_path: Path) -> None:
    """The point of the subclass: a 2,000-host inventory is parsed once and not deep-copied."""
    from ansible.parsing.dataloader import DataLoader

    parsed: list[object] = []

    class Recording(inventory._fresh_parse_loader(DataLoader)):  # type: ignore[misc]
        def load(self, *args: Any, **kwargs: Any) -> Any:
            parsed.append(super().load(*args, **kwargs))
            return parsed[-1]

    path = write(tmp_path / "hosts.yml", "all: {hosts: {a: {}}}\n")
    loader = Recording()
    assert loader.load_from_file(str(path), cache="none") is parsed[-1]
    # A cached parse is still copied: the caller may change it.
    cached = loader.load_from_file(str(path), cache="all")
    assert cached == parsed[-1] and cached is not parsed[-1]
