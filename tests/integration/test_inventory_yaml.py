"""The fast inventory reader (provisioner/inventory_yaml.py) against Ansible's own loader.

For every inventory it takes, the hosts, their groups and every variable must be what Ansible's
yaml plugin and VariableManager give: the example inventories, the bench's 2,000-host ones and
several hundred generated ones that stress the rules (a group under several parents, depths,
names sorting against depths, a variable set at every level, a host in many groups, a group or
host written twice). For what it does not take, it must say so (None) and Ansible decides.
"""

from __future__ import annotations

import contextlib
import json
import random
import string
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.controller import mixed_inventory, uniform_inventory
from provisioner import inventory, inventory_yaml
from provisioner.errors import InputError
from provisioner.paths import project_root
from tests.unit.test_monitoring_phase import sim_inventory

EXAMPLES = project_root() / "inventories"


def both(path: Path) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    fast = inventory._load_plain(path)
    slow = inventory._load_with_ansible(path)
    return fast, slow


def assert_same(path: Path) -> None:
    fast, slow = both(path)
    assert fast is not None, f"{path} was not read by the fast reader"
    assert list(fast) == list(slow)  # the order too: the first GPU or controller host
    for name in slow:
        assert fast[name] == slow[name], (name, fast[name], slow[name])


def test_the_shipped_example_reads_alike() -> None:
    assert_same(EXAMPLES / "examples" / "hgx-h100-ib" / "hosts.yml")


def test_the_simulated_clusters_inventory_reads_alike(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What `sim up` writes (inventories/sim/hosts.yml exists only after a `sim up`)."""
    assert_same(sim_inventory(tmp_path, monkeypatch, gpu=3, cpu=1) / "hosts.yml")


@pytest.mark.parametrize("make", [uniform_inventory, mixed_inventory], ids=["uniform", "mixed"])
def test_the_bench_inventories_read_alike(tmp_path: Path, make: Any) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(make(300), sort_keys=False))
    assert_same(path)


def test_json_reads_alike(tmp_path: Path) -> None:
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps(mixed_inventory(40)))
    assert_same(path)


# --- generated inventories -------------------------------------------------------------

VAR_NAMES = ["gpu_stack", "fabric", "site", "rack", "ansible_user", "ansible_port", "nested",
             "flags", "note"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return rng.randrange(-5, 70000)
    if kind == 1:
        return rng.choice([True, False, None, 1.5, 0.0])
    if kind == 2:
        # Strings YAML 1.1 would read as something else unless quoted: safe_dump quotes them.
        return rng.choice(["yes", "no", "on", "0x1F", "1:30", "1e3", "null", "~", "010",
                           "{{ inventory_hostname }}", "a: b", "", "2024-01-02T03"])
    if kind in (3, 4, 5):
        return "".join(rng.choice(string.ascii_lowercase + "-_. ") for _ in range(rng.randrange(1, 12)))
    if kind in (6, 7):
        return {rng.choice(VAR_NAMES): _value(rng, depth + 1) for _ in range(rng.randrange(0, 4))}
    return [_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]


def _vars(rng: random.Random) -> dict[str, Any]:
    return {rng.choice(VAR_NAMES): _value(rng) for _ in range(rng.randrange(0, 5))}


def generated(seed: int) -> dict[str, Any]:
    """A random tree of groups with shared children (a DAG), hosts in several groups, and
    groups and hosts that appear in more than one place of the file."""
    rng = random.Random(seed)
    names = [f"g{i}" for i in range(rng.randrange(2, 9))] + ["gpu_nodes", "cpu_nodes"]
    rng.shuffle(names)
    hosts = [f"node-{i:02d}" for i in range(rng.randrange(1, 12))]
    order = list(names)  # a parent comes before its children: no cycles

    def body(group: str, budget: int) -> dict[str, Any] | None:
        if rng.random() < 0.1:
            return None
        out: dict[str, Any] = {}
        sections = ["vars", "children", "hosts"]
        rng.shuffle(sections)
        for section in sections:
            if section == "vars" and rng.random() < 0.7:
                out["vars"] = _vars(rng)
            elif section == "hosts" and rng.random() < 0.6:
                out["hosts"] = {h: (_vars(rng) if rng.random() < 0.5 else None)
                                for h in rng.sample(hosts, rng.randrange(0, len(hosts) + 1))}
            elif section == "children" and budget > 0:
                later = order[order.index(group) + 1:]
                if later:
                    out["children"] = {c: body(c, budget - 1)
                                       for c in rng.sample(later, rng.randrange(0, min(3, len(later)) + 1))}
        if rng.random() < 0.05:
            out["hosts"] = None
        return out

    top: dict[str, Any] = {}
    if rng.random() < 0.8:
        top["all"] = {"vars": _vars(rng), "children": {}}
        if rng.random() < 0.3:
            top["all"]["hosts"] = {h: _vars(rng) for h in rng.sample(hosts, 1)}
    for group in rng.sample(order, rng.randrange(1, len(order) + 1)):
        if "all" in top and rng.random() < 0.6:
            top["all"]["children"][group] = body(group, 3)
        else:
            top[group] = body(group, 3)
    if "all" in top and not top["all"]["children"]:
        del top["all"]["children"]
    return top


@pytest.mark.parametrize("seed", range(300))
def test_generated_inventories_read_alike(tmp_path: Path, seed: int) -> None:
    data = generated(seed)
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    fast = inventory._load_plain(path)
    try:
        slow = inventory._load_with_ansible(path)
    except InputError as exc:  # the generator may leave every group without a host
        assert "parsed no hosts" in str(exc) and fast is None
        return
    if not slow:
        assert fast is None
        return
    assert fast is not None
    assert sorted(fast) == sorted(slow)
    for name in slow:
        assert fast[name] == slow[name], (name, fast[name], slow[name])


def test_the_generator_covers_what_matters(tmp_path: Path) -> None:
    """The generated cases exercise the rules: a group under two parents, a group three levels
    down, a host in three groups or more. (That the order of merging matters in them is shown
    by breaking it: reversing host and group variables fails 230 of the 300 cases.)"""
    seen = {"two_parents": 0, "deep": 0, "many_groups": 0}

    def walk(name: str, body: Any, depth: int, parents: dict[str, set[str]]) -> None:
        if depth >= 3:
            seen["deep"] += 1
        for child, child_body in ((body or {}).get("children") or {}).items():
            parents.setdefault(child, set()).add(name)
            walk(child, child_body, depth + 1, parents)

    path = tmp_path / "hosts.yml"
    for seed in range(300):
        data = generated(seed)
        parents: dict[str, set[str]] = {}
        for name, body in data.items():
            walk(name, body, 1, parents)
        seen["two_parents"] += any(len(p) > 1 for p in parents.values())
        if seed < 60:
            path.write_text(yaml.safe_dump(data, sort_keys=False))
            with contextlib.suppress(InputError):
                hosts = inventory._load_with_ansible(path)
                seen["many_groups"] += any(len(e.groups) >= 3 for e in hosts.values())
    assert all(count >= 20 for count in seen.values()), seen


# --- what the fast reader leaves to Ansible ----------------------------------------------------

BASE = {"all": {"children": {"gpu_nodes": {"hosts": {"n1": {"gpu_profile": "x"}}}}}}


@pytest.mark.parametrize("text", [
    "all:\n  children:\n    gpu_nodes:\n      hosts:\n        n[1:3]:\n",
    "all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:2222:\n",
    "all:\n  vars:\n    secret: !vault |\n      $ANSIBLE_VAULT;1.1;AES256\n      3132\n"
    "  children:\n    gpu_nodes:\n      hosts:\n        n1:\n",
    "all:\n  vars:\n    s: !unsafe '{{ x }}'\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n",
    "all:\n  children:\n    gpu_nodes:\n      vars:\n        ansible_group_priority: 10\n"
    "      hosts:\n        n1:\n",
    "all:\n  children:\n    gpu_nodes:\n      hosts:\n        n1:\n          when: 2024-01-02\n",
    "all:\n  children:\n    ungrouped:\n      hosts:\n        n1:\n",
    "all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu_nodes:\n",
    "all:\n  children:\n    gpu-nodes:\n      hosts:\n        n1:\n",
    "all:\n  children:\n    gpu_nodes:\n      hosts: n1\n",
    "all:\n  children:\n    gpu_nodes:\n      extra: {}\n      hosts:\n        n1:\n",
    "plugin: constructed\n",
    "a:\n  children:\n    b:\n      children:\n        a:\n",
    "",
], ids=["range", "port", "vault", "unsafe", "priority", "date", "ungrouped", "host-is-group",
         "dash-group", "hosts-as-string", "unexpected-key", "plugin", "cycle", "empty"])
def test_what_it_does_not_replay_goes_to_ansible(tmp_path: Path, text: str) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(text)
    assert inventory_yaml.load(path, environ={}, cwd=tmp_path) is None


def test_group_vars_beside_the_file_go_to_ansible(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(BASE))
    assert inventory_yaml.load(path, environ={}, cwd=tmp_path) is not None
    (tmp_path / "group_vars").mkdir()
    assert inventory_yaml.load(path, environ={}, cwd=tmp_path) is None


@pytest.mark.parametrize("env", [{"ANSIBLE_HASH_BEHAVIOUR": "merge"},
                                 {"ANSIBLE_PRECEDENCE": "groups_inventory,all_inventory"}])
def test_settings_that_change_the_rules_go_to_ansible(tmp_path: Path,
                                                      env: dict[str, str]) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(BASE))
    assert inventory_yaml.load(path, environ=env, cwd=tmp_path) is None


def test_an_ansible_cfg_that_changes_the_rules_goes_to_ansible(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(BASE))
    (tmp_path / "ansible.cfg").write_text("[defaults]\n# precedence is mentioned here only\n")
    assert inventory_yaml.load(path, environ={}, cwd=tmp_path) is not None
    (tmp_path / "ansible.cfg").write_text("[defaults]\nhash_behaviour = merge\n")
    assert inventory_yaml.load(path, environ={}, cwd=tmp_path) is None
    # ANSIBLE_CONFIG names the file Ansible reads, before the one in the working directory.
    other = tmp_path / "other.cfg"
    other.write_text("[defaults]\nforks = 10\n")
    assert inventory_yaml.load(path, environ={"ANSIBLE_CONFIG": str(other)},
                               cwd=tmp_path) is not None


def test_the_group_vars_example_still_loads_through_ansible() -> None:
    """airgapped-a100 keeps its variables in group_vars/: Ansible reads it, as before."""
    path = EXAMPLES / "examples" / "airgapped-a100" / "hosts.yml"
    assert inventory._load_plain(path) is None
    loaded = inventory.load(path)
    assert loaded.gpu_hosts
