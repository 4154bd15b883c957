"""A plain YAML (or JSON) inventory read the way Ansible reads it, without Ansible.

Ansible's inventory loader costs most of `provisioner plan` on a large inventory (importing
ansible-core, its tagged YAML parse, one ``VariableManager.get_vars`` per host: 1.9 s of a
2.3 s plan for 2,000 hosts). For the inventories sites actually write, a single YAML/JSON file
of groups with ``hosts``, ``vars`` and ``children``, the result is fixed by a few rules, which
this module replays:

- the ``yaml`` inventory plugin (ansible-core 2.19 ``plugins/inventory/yaml.py``): each
  group's sections in the order the file gives them, a variable set twice keeps the last value;
- ``InventoryData.reconcile_inventory``: a group without a parent is a child of ``all``, a host
  in no group but ``all`` is in ``ungrouped``;
- ``VariableManager.get_vars`` with the default ``precedence``: the ``all`` group's variables,
  then the host's other groups sorted by (depth, priority, name) (``inventory/helpers.py``
  ``sort_groups``; depth is the longest path from ``all``), then the host's own; each step
  replaces whole top-level keys (``hash_behaviour = replace``).

Anything outside that case returns ``None`` and the caller asks Ansible: a directory, INI or
a script, ``group_vars``/``host_vars`` beside the file, a YAML tag (``!vault``, ``!unsafe``),
a value that is not plain data (a date), a host pattern (``gpu[01:08]``, ``host:port``), a
name Ansible might transform or refuse, ``ansible_group_priority``, the ``ungrouped`` group
named in the file, a host named like a group, a cycle, anything the plugin would warn about or
refuse, and any Ansible setting that changes these rules (``tests/integration/
test_inventory_yaml.py`` compares both readers on many generated inventories).
"""

from __future__ import annotations

import configparser
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import InputError

LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Aliases let a few hundred bytes stand for a billion values (the "billion laughs" document),
# and whoever reads the data (this module, Ansible) walks every copy: minutes of CPU. What the
# aliases of a file may add is bounded by its size, so the work stays linear in the file.
ALIAS_VALUES_MIN = 100_000
ALIAS_VALUES_PER_BYTE = 10

SUFFIXES = (".yml", ".yaml", ".json")

# Names Ansible takes as they are: a host name parse_address() reads as one plain hostname (no
# range, no port, no IPv6), a group name that needs no transforming (inventory/group.py
# to_safe_group_name: letters, digits and underscores, not starting with a digit).
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9_-]*"
                   r"[A-Za-z0-9])?)*\Z")
_GROUP = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SECTIONS = ("vars", "children", "hosts")

# Settings that change how an inventory is read or its variables are merged: set in the
# environment or named in the ansible.cfg Ansible would use, they send the load to Ansible.
_SETTINGS_ENV = ("ANSIBLE_HASH_BEHAVIOUR", "ANSIBLE_PRECEDENCE", "ANSIBLE_VARS_ENABLED",
                 "ANSIBLE_VARS_PLUGINS", "ANSIBLE_INVENTORY_ENABLED",
                 "ANSIBLE_YAML_FILENAME_EXT", "ANSIBLE_TRANSFORM_INVALID_GROUP_CHARS",
                 "ANSIBLE_RUN_VARS_PLUGINS", "ANSIBLE_INVENTORY_PLUGINS")
_SETTINGS_CFG = ("hash_behaviour", "precedence", "vars_plugins_enabled", "vars_plugins",
                 "run_vars_plugins", "force_valid_group_names", "enable_plugins",
                 "yaml_valid_extensions", "inventory_plugins")


class _NotPlain(Exception):
    """The file is outside what this module replays: Ansible reads it."""


def load(source: Path, environ: Mapping[str, str] | None = None,
         cwd: Path | None = None) -> dict[str, tuple[tuple[str, ...], dict[str, Any]]] | None:
    """Host -> (its groups but ``all``, sorted; its variables as ``get_vars`` merges them,
    the magic ones left out), or None when Ansible must read the file. InputError when the
    file's aliases expand past the bound (``check_aliases``): no reader should expand it."""
    env = os.environ if environ is None else environ
    if not source.is_file() or source.suffix not in SUFFIXES or _settings_differ(env, cwd):
        return None
    if any((source.parent / name).exists() for name in ("group_vars", "host_vars")):
        return None
    try:
        text = source.read_bytes().decode("utf-8")
        # An alias needs a "*": most inventories skip the second parse.
        if source.suffix != ".json" and "*" in text:
            check_aliases(yaml.parse(text, Loader=LOADER), source, len(text))
        data = _parse(text, json_file=source.suffix == ".json")
        return _Reader().read(data)
    except (_NotPlain, yaml.YAMLError, ValueError, OSError, RecursionError):
        return None


def check_aliases(events: Iterable[Any], source: Path, size: int) -> None:
    """Walk the parser's ``events`` of ``source`` (``size`` characters); InputError when its
    aliases stand for more values than the bound allows, or for a value that holds itself.
    Each anchored value's size (aliases within it expanded) is known when it ends, so the
    count costs one pass, without building the data."""
    limit = max(ALIAS_VALUES_MIN, ALIAS_VALUES_PER_BYTE * size)
    sizes: dict[str, int] = {}
    open_anchors: set[str] = set()
    stack: list[list[Any]] = [[0, None]]  # [values so far, anchor] of each open collection
    added = 0
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            alias = event.anchor or ""
            if alias in open_anchors:
                raise InputError(f"inventory {source}: the alias *{alias} is inside the value "
                                 "it names (a value that holds itself); remove it")
            count = sizes.get(alias, 1)  # an undefined alias: the parse refuses it
            added += count
            if added > limit:
                raise InputError(f"inventory {source}: its YAML aliases expand to more than "
                                 f"{limit:,} values (a 'billion laughs' document?); write the "
                                 "values out or use fewer aliases")
            stack[-1][0] += count
        elif isinstance(event, yaml.CollectionStartEvent):
            stack.append([1, event.anchor])
            if event.anchor is not None:
                open_anchors.add(event.anchor)
        elif isinstance(event, yaml.CollectionEndEvent):
            count, anchor = stack.pop()
            if anchor is not None:
                sizes[anchor] = count
                open_anchors.discard(anchor)
            stack[-1][0] += count
        elif isinstance(event, yaml.ScalarEvent):
            if event.anchor is not None:
                sizes[event.anchor] = 1
            stack[-1][0] += 1
        elif isinstance(event, yaml.DocumentEndEvent):
            sizes.clear()  # anchors do not cross documents


def _settings_differ(env: Mapping[str, str], cwd: Path | None) -> bool:
    if any(name in env for name in _SETTINGS_ENV):
        return True
    config = _config_file(env, cwd or Path.cwd())
    if config is None:
        return False
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read(config, encoding="utf-8")
    except (OSError, UnicodeError, configparser.Error):
        return True
    return any(key in _SETTINGS_CFG for section in parser.sections() for key in parser[section])


def _config_file(env: Mapping[str, str], cwd: Path) -> Path | None:
    """The ansible.cfg Ansible would read (config/manager.py find_ini_config_file)."""
    candidates = []
    if env.get("ANSIBLE_CONFIG"):
        path = Path(os.path.expanduser(env["ANSIBLE_CONFIG"]))
        candidates.append(path / "ansible.cfg" if path.is_dir() else path)
    candidates += [cwd / "ansible.cfg", Path.home() / ".ansible.cfg",
                   Path("/etc/ansible/ansible.cfg")]
    return next((path for path in candidates if path.is_file()), None)


def _parse(text: str, json_file: bool) -> Any:
    if json_file:
        data = json.loads(text)
        if "__ansible_" in text:  # Ansible's JSON decoder turns these into vault/unsafe values
            raise _NotPlain
        return data
    return yaml.load(text, Loader=LOADER)  # a tag other than YAML's own raises YAMLError


def _plain(value: Any) -> None:
    """Raise _NotPlain unless ``value`` is data both readers give back alike."""
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list):
        for item in value:
            _plain(item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotPlain
            _plain(item)
        return
    raise _NotPlain  # dates, bytes, sets


class _Group:
    __slots__ = ("children", "hosts", "name", "parents", "vars")

    def __init__(self, name: str) -> None:
        self.name = name
        self.vars: dict[str, Any] = {}
        self.children: list[str] = []
        self.parents: list[str] = []
        self.hosts: list[str] = []


class _Reader:
    def __init__(self) -> None:
        self.groups: dict[str, _Group] = {"all": _Group("all"), "ungrouped": _Group("ungrouped")}
        self._child("all", "ungrouped")
        self.host_vars: dict[str, dict[str, Any]] = {}
        self.host_groups: dict[str, list[str]] = {}

    def read(self, data: Any) -> dict[str, tuple[tuple[str, ...], dict[str, Any]]]:
        if not isinstance(data, dict) or not data or "plugin" in data:
            raise _NotPlain
        for name, body in data.items():
            self._group(name, body)
        return self._resolve()

    def _group(self, name: Any, body: Any) -> str:
        if not isinstance(name, str) or not _GROUP.match(name) or name == "ungrouped":
            raise _NotPlain
        if body is not None and not isinstance(body, dict):
            raise _NotPlain
        self.groups.setdefault(name, _Group(name))
        for key, section in (body or {}).items():
            if key not in _SECTIONS or not (section is None or isinstance(section, dict)):
                raise _NotPlain
            if section is None:
                continue
            if key == "vars":
                for var, value in section.items():
                    self._set(self.groups[name].vars, var, value)
            elif key == "children":
                for child, child_body in section.items():
                    self._child(name, self._group(child, child_body))
            else:
                for host, host_vars in section.items():
                    self._host(name, host, host_vars)
        return name

    def _host(self, group: str, host: Any, host_vars: Any) -> None:
        if not isinstance(host, str) or not _HOST.match(host):
            raise _NotPlain
        if host_vars is not None and not isinstance(host_vars, dict):
            raise _NotPlain
        own = self.host_vars.setdefault(host, {})
        groups = self.host_groups.setdefault(host, [])
        if group not in groups:
            groups.append(group)
            self.groups[group].hosts.append(host)
        for var, value in (host_vars or {}).items():
            self._set(own, var, value)

    @staticmethod
    def _set(target: dict[str, Any], var: Any, value: Any) -> None:
        if not isinstance(var, str) or var == "ansible_group_priority":
            raise _NotPlain
        _plain(value)
        target[var] = value

    def _child(self, parent: str, child: str) -> None:
        if child in ("all", parent):
            raise _NotPlain
        if child not in self.groups[parent].children:
            self.groups[parent].children.append(child)
        if parent not in self.groups[child].parents:
            self.groups[child].parents.append(parent)

    def _resolve(self) -> dict[str, tuple[tuple[str, ...], dict[str, Any]]]:
        if set(self.host_vars) & set(self.groups):
            raise _NotPlain  # Ansible sets such a host's variables on the group
        for name, entry in self.groups.items():
            if name != "all" and not entry.parents:
                self._child("all", name)
        depth = self._depths()
        ancestors: dict[str, frozenset[str]] = {}
        merged_by_set: dict[frozenset[str], dict[str, Any]] = {}
        out: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {}
        for host in self._host_order():
            direct = self.host_groups[host]
            names: set[str] = set()
            for direct_group in direct:
                names |= self._ancestors(direct_group, ancestors)
            names.discard("all")
            if not names:
                names = {"ungrouped"}
            key = frozenset(names)
            if key not in merged_by_set:
                merged = dict(self.groups["all"].vars)
                # sort_groups: (depth, priority, name); every priority is 1 here.
                for group in sorted(names, key=lambda g: (depth[g], 1, g)):
                    merged.update(self.groups[group].vars)
                merged_by_set[key] = merged
            out[host] = (tuple(sorted(names)), {**merged_by_set[key], **self.host_vars[host]})
        return out

    def _host_order(self) -> list[str]:
        """The hosts in the order Ansible lists ``all``'s (inventory/group.py ``_get_hosts``):
        group by group, breadth first from ``all``, each group's hosts in the order the file
        gives them. Within one level Ansible walks a set of groups, an order it does not
        define; here it is the file's."""
        order: list[str] = []
        seen_hosts: set[str] = set()
        level, seen_groups = ["all"], {"all"}
        while level:
            for group in level:
                for host in self.groups[group].hosts:
                    if host not in seen_hosts:
                        seen_hosts.add(host)
                        order.append(host)
            following = []
            for group in level:
                for child in self.groups[group].children:
                    if child not in seen_groups:
                        seen_groups.add(child)
                        following.append(child)
            level = following
        return order

    def _ancestors(self, group: str, memo: dict[str, frozenset[str]]) -> frozenset[str]:
        if group not in memo:
            result = {group}
            for parent in self.groups[group].parents:
                result |= self._ancestors(parent, memo)
            memo[group] = frozenset(result)
        return memo[group]

    def _depths(self) -> dict[str, int]:
        """Longest path from ``all``; a cycle sends the file to Ansible (which refuses it)."""
        depth: dict[str, int] = {}
        visiting: set[str] = set()

        def walk(name: str) -> int:
            if name in depth:
                return depth[name]
            if name in visiting:
                raise _NotPlain
            visiting.add(name)
            parents = self.groups[name].parents
            depth[name] = 0 if name == "all" else 1 + max(walk(p) for p in parents)
            visiting.discard(name)
            return depth[name]

        for name in self.groups:
            walk(name)
        return depth
