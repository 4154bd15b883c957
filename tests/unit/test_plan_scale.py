"""``plan`` at fleet size: distinct values validated once and distinct stacks resolved once,
with every error still naming the first offending host, as a host-by-host check would."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import inventory
from provisioner import plan as plan_mod
from provisioner.errors import InputError
from provisioner.matrix import load_matrix, resolve, resolve_stack
from provisioner.profiles import load_profiles

MATRIX = load_matrix()
H100 = load_profiles()["hgx-h100-8gpu"]
L40S = load_profiles()["pcie-l40s-4gpu"]


def fleet(tmp_path: Path, hosts: int, special: dict[int, dict[str, Any]]) -> Path:
    """``hosts`` H100 nodes; ``special`` adds variables to some of them."""
    entries = {f"gpu-{i:03d}": {"gpu_profile": "hgx-h100-8gpu", **special.get(i, {})}
               for i in range(hosts)}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": entries}}}},
                                   sort_keys=False))
    return path


def test_a_resolution_reused_for_another_host_names_that_host() -> None:
    first = resolve_stack("gpu-a", {"gpu_stack": "cuda-12.8"}, H100, MATRIX)
    second = resolve_stack("gpu-b", {"gpu_stack": "cuda-12.8", "unrelated": 1}, H100, MATRIX)
    assert (first.host, second.host) == ("gpu-a", "gpu-b")
    assert second == resolve._resolve("gpu-b", {"gpu_stack": "cuda-12.8"}, H100, MATRIX)


@pytest.mark.parametrize(("var", "value", "field"), [
    ("gpu_stack", "cuda-12.4", "stack"),
    ("nvidia_driver_version", "580.95.05", "driver_version"),
    ("nvidia_driver_module_flavor", "proprietary", "module_flavor"),
    ("cuda_version", "12.6", "cuda_version"),
    ("cudnn_version", "9.5.1.17", "cudnn_version"),
    ("nccl_version", "2.23.4-1+cuda12.6", "nccl_version"),
    ("nvidia_container_toolkit_version", "1.18.0", "container_toolkit_version"),
    ("nvidia_fabricmanager_version", "570.86.15", "fabricmanager_version"),
])
def test_each_variable_resolution_reads_tells_cached_groups_apart(var: str, value: str,
                                                                  field: str) -> None:
    """Hosts of one stack that differ in one variable resolve apart, cache or not (an L40S:
    no NVSwitch, so the fabric manager version may be set on its own)."""
    plain = resolve_stack("gpu-a", {"gpu_stack": "cuda-12.8"}, L40S, MATRIX)
    changed = resolve_stack("gpu-b", {"gpu_stack": "cuda-12.8", var: value}, L40S, MATRIX)
    assert getattr(plain, field) != value
    assert getattr(changed, field) == value
    assert changed == resolve._resolve("gpu-b", {"gpu_stack": "cuda-12.8", var: value}, L40S,
                                       MATRIX)


def test_the_cache_key_covers_every_variable_resolution_reads() -> None:
    source = Path(resolve.__file__).read_text()
    read = set(re.findall(r'_override\(hostvars, "(\w+)"', source))
    assert read == set(resolve.RESOLVE_VARIABLES)


def test_the_same_value_as_int_and_str_is_not_one_group() -> None:
    as_str = resolve_stack("gpu-a", {"gpu_stack": "cuda-12.8", "cuda_version": "12.8"}, H100,
                           MATRIX)
    with pytest.raises(InputError, match="host gpu-b: cuda_version must be a version string"):
        resolve_stack("gpu-b", {"gpu_stack": "cuda-12.8", "cuda_version": ["12.8"]}, H100, MATRIX)
    assert as_str.cuda_version == "12.8"


def test_a_stack_error_names_the_first_offending_host(tmp_path: Path) -> None:
    bad = {"nvidia_driver_version": "535.154.05", "cuda_version": "12.8"}
    path = fleet(tmp_path, 300, {i: bad for i in (171, 42, 250)})
    with pytest.raises(InputError) as err:
        plan_mod.build(path)
    assert ("host gpu-042: nvidia_driver_version 535.154.05 is too old for cuda_version 12.8"
            in str(err.value))


def test_a_value_error_names_the_first_host_that_has_it(tmp_path: Path) -> None:
    good = {"nvidia_driver_module_flavor": "open"}
    bad = {"nvidia_driver_module_flavor": "closed"}
    path = fleet(tmp_path, 300, {**{i: good for i in range(0, 300, 2)},
                                 **{i: bad for i in (299, 77, 133)}})
    with pytest.raises(InputError) as err:
        inventory.load(path)
    assert ("host gpu-077: variable nvidia_driver_module_flavor (the inventory contract): "
            "value of nvidia_driver_module_flavor must be one of: open, proprietary, got: "
            "closed") in str(err.value)


def test_a_value_valid_as_one_type_is_checked_again_as_another(tmp_path: Path) -> None:
    path = fleet(tmp_path, 50, {3: {"preflight_min_free_gb": 20},
                                9: {"preflight_min_free_gb": "20"},
                                12: {"preflight_min_free_gb": "20 GB"}})
    with pytest.raises(InputError, match="host gpu-012: variable preflight_min_free_gb"):
        inventory.load(path)


def test_a_large_fleet_plans_every_host_with_its_own_name(tmp_path: Path) -> None:
    path = fleet(tmp_path, 500, {i: {"nvidia_driver_module_flavor": "proprietary"}
                                 for i in range(0, 500, 5)})
    cp = plan_mod.build(path)
    assert len(cp.hosts) == 500
    stacks = {name: h.stack for name, h in cp.hosts.items() if h.stack is not None}
    assert {s.host for s in stacks.values()} == set(cp.hosts)
    assert {s.module_flavor for n, s in stacks.items() if int(n[4:]) % 5 == 0} == {"proprietary"}
    assert {s.module_flavor for n, s in stacks.items() if int(n[4:]) % 5} == {"open"}


@pytest.mark.parametrize(("enabled", "expected"), [
    (["host_list", "script", "auto", "yaml", "ini", "toml"],
     ["host_list", "script", "yaml", "auto", "ini", "toml"]),
    (["ansible.builtin.auto", "ansible.builtin.yaml"],
     ["ansible.builtin.yaml", "ansible.builtin.auto"]),
    (["yaml", "auto"], ["yaml", "auto"]),
    (["ini", "auto"], ["ini", "auto"]),
])
def test_yaml_is_tried_before_auto(enabled: list[str], expected: list[str]) -> None:
    assert inventory._yaml_before_auto(list(enabled)) == expected


def test_a_plugin_configuration_file_still_reaches_its_plugin(tmp_path: Path) -> None:
    """``yaml`` now sees a plugin configuration first: it refuses it and ``auto`` takes it."""
    from ansible import constants as C

    enabled = list(C.INVENTORY_ENABLED)
    path = tmp_path / "generated.yml"
    path.write_text(yaml.safe_dump({
        "plugin": "generator",
        "hosts": {"name": "gpu-{{ n }}", "parents": [{"name": "gpu_nodes"}]},
        "layers": {"n": ["01", "02"]}}))
    assert inventory.load(path).gpu_hosts == ["gpu-01", "gpu-02"]
    assert list(C.INVENTORY_ENABLED) == enabled


@pytest.mark.parametrize(("var", "value"), [
    ("nvidia_driver_version", "580.95.05"),
    ("nvidia_driver_module_flavor", "proprietary"),
    ("cudnn_version", "9.5.1.17"),
    ("nccl_version", "2.23.4-1+cuda12.6"),
    ("nvidia_container_toolkit_version", "1.18.0"),
])
def test_shared_pins_are_told_apart_by_every_input(var: str, value: str) -> None:
    """packages_for shares one computation among hosts of the same stack: an override of any
    input gives that host its own pins, and a second host of the plain stack the plain ones."""
    from provisioner.matrix.packages import _pins_cache, component_pins, packages_for
    from provisioner.matrix.versions import COMPONENTS

    plain = resolve_stack("gpu-a", {"gpu_stack": "cuda-12.8"}, L40S, MATRIX)
    changed = resolve_stack("gpu-b", {"gpu_stack": "cuda-12.8", var: value}, L40S, MATRIX)
    again = resolve_stack("gpu-c", {"gpu_stack": "cuda-12.8"}, L40S, MATRIX)
    for family in ("apt", "apt_ubuntu", "dnf"):
        _pins_cache.clear()
        first = packages_for(plain, family)
        other = packages_for(changed, family)
        assert packages_for(again, family) == first
        assert other != first
        # What the cache answers is what an uncached computation gives.
        for host, pins in ((plain, first), (changed, other)):
            fresh = [(c, n, v) for c in COMPONENTS
                     if c != "fabricmanager" or host.fabricmanager_enabled
                     for n, v in component_pins(host, c, family, host.module_flavor)]
            assert [(p.component, p.name, p.version) for p in pins] == fresh


def test_a_new_matrix_object_gets_its_own_package_names() -> None:
    """every_name is cached per matrix object and keeps the object alive beside its answer, so
    a later matrix never gets an earlier one's names, even at a reused id."""
    from provisioner.matrix import packages

    first = load_matrix()
    names = packages.every_name(first, "driver", "apt")
    assert "cuda-drivers-580" in names
    second = first.model_copy(deep=True)
    for name in [n for n, s in second.stacks.items() if s.driver.version.startswith("580")]:
        del second.stacks[name]
    # As if ``second`` had been born at the id of a matrix the cache still answers for.
    packages._every_name_cache[id(second)] = packages._every_name_cache[id(first)]
    assert "cuda-drivers-580" not in packages.every_name(second, "driver", "apt")
    assert packages.every_name(first, "driver", "apt") == names
