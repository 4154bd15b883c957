"""Load an inventory with Ansible's own loader and validate it against the public contract.

Nothing here contacts a host. Every problem becomes one ``InputError`` line naming the
inventory, the host and the variable.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import InputError
from provisioner.paths import project_root

# libyaml's safe loader where PyYAML has it (the same results, several times faster).
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Variables that belong to us: a host variable with one of these prefixes must be known.
NAMESPACES = ("gpu_", "nvidia_", "cuda_", "cudnn_", "nccl_", "dcgm_", "rdma_", "smoke_",
              "preflight_", "provisioner_", "fabric", "ib_", "ipoib_", "monitoring_",
              "node_health_", "slurm_", "munge_")

# The contract variables that are not a single role's argument (DESIGN.md "inventory contract").
CONTRACT: dict[str, dict[str, Any]] = {
    "gpu_stack": {"type": "str", "description": "stack name in provisioner/data/stacks.yml"},
    "gpu_profile": {"type": "str", "description": "profile name in provisioner/data/profiles.yml"},
    "gpu_package_source": {"type": "str", "description": "'nvidia' or a mirror URL"},
    "gpu_package_source_dir": {"type": "path",
                               "description": "the controller directory the mirror at "
                                              "gpu_package_source serves, when it runs on "
                                              "the controller (the smoke job's wheelhouse "
                                              "goes under its wheels/)"},
    "gpu_package_index": {"type": "str",
                          "description": "a directory or http(s) URL of an Ubuntu CUDA "
                                         "repository's index (Packages): where a driver "
                                         "override outside the matrix gets its package "
                                         "revisions (`provisioner stacks verify --index`)"},
    "smoke_job_wheel_lock": {"type": "path",
                             "description": "a site's reviewed lock of the smoke job's wheels "
                                            "(python -m provisioner.wheellock), a file on the "
                                            "controller, over the project's "
                                            "(provisioner/data/wheels.lock.json)"},
    "allow_eol_driver": {"type": "bool",
                         "description": "allow a stack whose driver branch is past its end of "
                                        "life (stacks.yml driver_branches): one warning, "
                                        "recorded in the report"},
    "provisioner_simulated": {"type": "bool",
                              "description": "set by `provisioner sim up` on every host of "
                                             "the simulated cluster (all hosts or none)"},
    "fabric": {"type": "str", "choices": ["infiniband", "roce", "ethernet"],
               "description": "the cluster network used by NCCL"},
    # Read by playbooks/slurm.yml, not by one role.
    "slurm_enabled": {"type": "bool",
                      "description": "Slurm without a slurm_controller group: the first "
                                     "cpu_nodes host runs slurmctld"},
    "slurm_gpu_type": {"type": "str",
                       "description": "the GRES type of the GPUs in slurm.conf, where the "
                                      "short name of the profile's GPU model is not the one "
                                      "NVML reports"},
    "slurm_switch": {"type": "str",
                     "description": "the leaf switch the compute node is cabled to: Slurm's "
                                    "topology.conf groups the nodes by it (every compute node "
                                    "names one, or none does)"},
    "slurm_ibnetdiscover": {"type": "str",
                            "description": "a saved ibnetdiscover output (on the controller, "
                                           "relative to the inventory): the plan reads each "
                                           "compute node's leaf switch from it instead of "
                                           "slurm_switch"},
    # Read by the plan: the NVLink domain of a multi-node NVLink host (plan._add_nvlink_domains).
    "nvlink_domain": {"type": "str",
                      "description": "the NVLink domain (e.g. the GB200 NVL72 rack) of a host "
                                     "whose profile has multi-node NVLink"},
    # Overrides of the stack's versions; each is checked by the stack rules (matrix/resolve.py).
    "nvidia_driver_version": {"type": "str", "description": "driver version override"},
    "nvidia_driver_module_flavor": {"type": "str", "choices": ["open", "proprietary"],
                                    "description": "kernel module flavour override"},
    "nvidia_driver_module_source": {"type": "str", "choices": ["dkms", "precompiled"],
                                    "description": "where the kernel modules come from: dkms "
                                                   "(built on the node) or precompiled "
                                                   "(NVIDIA's signed per-kernel packages, "
                                                   "RHEL 8/9, proprietary flavour)"},
    "cuda_version": {"type": "str", "description": "CUDA toolkit X.Y override"},
    "cudnn_version": {"type": "str", "description": "cuDNN version override"},
    "nccl_version": {"type": "str", "description": "NCCL version override (2.x.y-1+cudaX.Y)"},
    "nvidia_container_toolkit_version": {"type": "str",
                                         "description": "Container Toolkit override"},
    "nvidia_fabricmanager_version": {"type": "str",
                                     "description": "fabric manager override (must equal the "
                                                    "driver)"},
}

# A host name goes into slurm.conf, systemd units and command lines as it is: a newline or a
# space would add lines or arguments. What RFC 1123 allows, plus the underscore inside a part,
# which Ansible and Slurm take (and inventories use) and which starts no option or new line.
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?\Z")
_HOST_NAME_RULE = ("letters, digits, hyphens, underscores and dots; each dot-separated part "
                   "1-63 characters, starting and ending with a letter or digit; 253 "
                   "characters at most")


def _host_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid host name, or None when it is."""
    if len(name) > 253 or not all(
            _HOST_LABEL.match(label) for label in name.split(".")):
        return f"not a valid host name ({_HOST_NAME_RULE})"
    return None


@dataclass(frozen=True)
class HostEntry:
    name: str
    groups: tuple[str, ...]
    vars: Mapping[str, Any]
    # The ansible_* connection variables (ansible_host, ansible_ssh_common_args ...): not part
    # of the contract, read only to tell whether SSH host key checking is off.
    connection: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "gpu" if "gpu_nodes" in self.groups else "cpu"


@dataclass
class Inventory:
    source: Path
    hosts: dict[str, HostEntry] = field(default_factory=dict)

    @property
    def gpu_hosts(self) -> list[str]:
        return [h for h, e in self.hosts.items() if e.kind == "gpu"]

    @property
    def simulated(self) -> bool:
        """Simulation is a property of the whole run: every host carries
        ``provisioner_simulated: true`` (``load`` refuses an inventory that mixes)."""
        return bool(self.hosts) and all(_simulated(e) for e in self.hosts.values())


def _simulated(entry: HostEntry) -> bool:
    """As Ansible reads a bool: "yes"/"true"/"1"/"on" are true, "no"/"false"... are not."""
    value = entry.vars.get("provisioner_simulated")
    if isinstance(value, str):
        return value.strip().lower() in ("y", "yes", "true", "t", "1", "on")
    return value is True or value == 1


@lru_cache(maxsize=1)
def _options() -> dict[str, tuple[str, dict[str, Any]]]:
    """Every known variable: (where it is declared, its argument spec)."""
    known: dict[str, tuple[str, dict[str, Any]]] = {
        name: ("the inventory contract", spec) for name, spec in CONTRACT.items()}
    roles = project_root() / "roles"
    for spec_file in sorted(roles.glob("*/meta/argument_specs.yml")):
        data = yaml.load(spec_file.read_text(), Loader=SAFE_LOADER) or {}
        for entry in (data.get("argument_specs") or {}).values():
            for name, opt in (entry.get("options") or {}).items():
                known.setdefault(name, (f"role {spec_file.parts[-3]}", opt or {}))
    return known


def known_variables() -> dict[str, dict[str, Any]]:
    """Contract variables plus every role's public options from meta/argument_specs.yml."""
    return {name: spec for name, (_source, spec) in _options().items()}


@cache
def _validator(name: str) -> Any:
    """Ansible's own validator for one variable, as the role's argument spec validation runs
    it. ``required`` is left out: a role option the inventory does not set comes from the
    role's defaults or the provisioner's extra variables."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    spec = {key: value for key, value in _options()[name][1].items() if key != "required"}
    return ArgumentSpecValidator({name: spec})


def load(path: str | os.PathLike[str]) -> Inventory:
    """Parse the inventory (any format Ansible reads) and validate the contract."""
    source = Path(path)
    if not source.exists():
        raise InputError(f"inventory {source}: no such file or directory")
    hosts = _load_plain(source)
    if hosts is None:
        _check_yaml_syntax(source)
        hosts = _load_with_ansible(source)
    inv = Inventory(source=source, hosts=hosts)
    _validate(inv)
    return inv


YAML_SUFFIXES = (".yml", ".yaml", ".json")


def _parse_events(text: str, file: Path) -> None:
    """Parse ``text`` (no objects built): libyaml's parser where PyYAML has it (a 2,000-host
    inventory in 0.1 s instead of 1 s), PyYAML's own on an error, whose messages name the
    offending character. Aliases that expand past the bound are refused here, before Ansible
    would expand them."""
    from provisioner.inventory_yaml import check_aliases

    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            check_aliases(yaml.parse(text, Loader=fast), file, len(text))
            return
        except yaml.YAMLError:
            pass
    check_aliases(yaml.parse(text, Loader=yaml.SafeLoader), file, len(text))


def _check_yaml_syntax(source: Path) -> None:
    """Unreadable files and YAML syntax errors as one line ``FILE:LINE:COL: message`` (Ansible
    would print a page of warnings from each inventory plugin it tried), in the inventory and
    in the group_vars/ and host_vars/ Ansible reads with it. Only the syntax is
    checked (``yaml.parse`` builds no objects, so Ansible's tags such as ``!vault`` pass)."""
    # A single inventory file: Ansible also reads the group_vars/ and host_vars/ beside it.
    single = source.is_file()
    roots = [source.parent / "group_vars", source.parent / "host_vars"] if single else [source]
    files = ([source] if single else []) + sorted(
        p for root in roots if root.is_dir()
        for p in root.rglob("*") if p.is_file() and p.suffix in YAML_SUFFIXES)
    for file in files:
        try:
            text = file.read_bytes().decode("utf-8")
        except PermissionError:
            raise InputError(f"inventory {file}: cannot read it (permission denied)") from None
        except OSError as exc:
            raise InputError(f"inventory {file}: cannot read it ({exc.strerror or exc})") from None
        except UnicodeDecodeError as exc:
            raise InputError(f"inventory {file}: not UTF-8 text (invalid byte at offset "
                             f"{exc.start})") from None
        if file.suffix not in YAML_SUFFIXES:
            continue
        try:
            _parse_events(text, file)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else str(file)
            problem = exc.problem or exc.context or "invalid YAML"
            context = f" ({exc.context})" if exc.context and exc.problem else ""
            raise InputError(f"{where}: {problem}{context}") from None
        except yaml.YAMLError as exc:
            raise InputError(f"{file}: invalid YAML ({_first_line(str(exc))})") from None


def _load_with_ansible(source: Path) -> dict[str, HostEntry]:
    # Imported here: ansible is heavy, and `provisioner --help` should stay instant.
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.utils.display import Display
    from ansible.vars.manager import VariableManager

    display = Display()
    display.verbosity = 0
    loader = _fresh_parse_loader(DataLoader)()
    # Ansible warns about each plugin that could not parse the source; we report one line.
    refused: list[tuple[str, str]] = []
    try:
        with _no_warnings(display, refused):
            manager = _quiet_inventory(InventoryManager, loader, str(source))
    except AnsibleError as exc:
        # Why the plugin meant for the file refused it (the ini plugin for an INI file)
        # says more than Ansible's "Completely failed to parse".
        why = next((f"the {plugin} plugin refused it: {reason.removeprefix(_PARSE_PREFIX)}"
                    for plugin, reason in refused if plugin in ("ini", "yaml", "toml")), "")
        raise InputError(f"inventory {source}: {why or _first_line(str(exc))}") from exc
    if not manager.list_hosts("all") and not manager.groups.get("gpu_nodes"):
        raise InputError(f"inventory {source}: Ansible parsed no hosts from it "
                         "(is it a valid YAML/INI inventory?)")
    variables = _without_fact_cache(VariableManager, loader, manager)
    out: dict[str, HostEntry] = {}
    for host in manager.get_hosts("all"):
        try:
            hv = variables.get_vars(host=host, include_hostvars=False)
        except AnsibleError as exc:
            raise InputError(f"inventory {source}: host {host.name}: "
                             f"{_first_line(str(exc))}") from exc
        groups = tuple(sorted(str(g.name) for g in host.get_groups() if g.name != "all"))
        name = str(host.name)
        out[name] = _entry(name, groups, {str(k): _plain(v) for k, v in hv.items()})
    return out


def hosts_matching(source: Path, pattern: str) -> list[str]:
    """The hosts of ``source`` an Ansible host pattern (``--limit``) selects, in inventory
    order, as Ansible selects them (groups, ``!``, ``&``, wildcards, ranges, ``@file``)."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.utils.display import Display

    try:
        with _no_warnings(Display()):
            manager = _quiet_inventory(InventoryManager, _fresh_parse_loader(DataLoader)(),
                                       str(source))
            manager.subset(pattern)
            return [str(h.name) for h in manager.get_hosts("all")]
    except AnsibleError as exc:
        raise InputError(f"--limit {pattern}: {_first_line(str(exc))}") from exc


_PARSE_PREFIX = "Failed to parse inventory: "
_PLUGIN_FAILED = re.compile(r"^Failed to parse inventory with '([\w.]+)' plugin")


@contextlib.contextmanager
def _no_warnings(display: Any, refused: list[tuple[str, str]] | None = None) -> Iterator[None]:
    """Ansible's warnings off while it reads an inventory: a plugin that cannot parse the
    source warns (``error_as_warning`` for each plugin that tried, a multi-line block on
    stderr), and we say what went wrong in one line instead. Each plugin's refusal goes to
    ``refused`` as (plugin, first line of its reason)."""
    saved = display.warning, display.error_as_warning

    def plugin_failed(msg: str = "", exception: BaseException | None = None, **_k: Any) -> None:
        match = _PLUGIN_FAILED.match(str(msg))
        if refused is not None and match and exception is not None:
            refused.append((match.group(1).rsplit(".", 1)[-1], _first_line(str(exception))))

    display.warning = lambda *_a, **_k: None
    display.error_as_warning = plugin_failed
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        display.warning, display.error_as_warning = saved


def _load_plain(source: Path) -> dict[str, HostEntry] | None:
    """The common case without Ansible (inventory_yaml.py says which case and why); None
    when Ansible must read the file."""
    from provisioner import inventory_yaml

    read = inventory_yaml.load(source)
    if not read:
        return None
    return {name: _entry(name, groups, hv) for name, (groups, hv) in read.items()}


def _entry(name: str, groups: tuple[str, ...], hv: Mapping[str, Any]) -> HostEntry:
    plain = {k: v for k, v in hv.items() if not k.startswith("ansible_") and k not in _MAGIC}
    connection = {k: v for k, v in hv.items() if k.startswith("ansible_") and k not in _MAGIC}
    return HostEntry(name=name, groups=groups, vars=plain, connection=connection)


# What Ansible adds to every host's variables (magic variables, the fact namespaces), which an
# inventory cannot set: not the inventory's data.
_MAGIC = frozenset({"inventory_hostname", "inventory_hostname_short", "group_names", "groups",
                    "inventory_dir", "inventory_file", "playbook_dir", "omit", "environment",
                    "role_names", "ansible_play_hosts", "ansible_facts", "ansible_local",
                    "ansible_playbook_python", "ansible_config_file", "ansible_version"})


def _quiet_inventory(manager_cls: Any, loader: Any, source: str) -> Any:
    """InventoryManager only warns when every plugin fails to parse a source; we turn the
    failure into an error by asking for strict parsing."""
    from ansible import constants as C

    old = (C.INVENTORY_UNPARSED_IS_FAILED, C.INVENTORY_ANY_UNPARSED_IS_FAILED,
           C.INVENTORY_ENABLED)
    C.INVENTORY_UNPARSED_IS_FAILED = True
    C.INVENTORY_ANY_UNPARSED_IS_FAILED = True
    C.INVENTORY_ENABLED = _yaml_before_auto(list(C.INVENTORY_ENABLED))
    try:
        return manager_cls(loader=loader, sources=[source])
    finally:
        (C.INVENTORY_UNPARSED_IS_FAILED, C.INVENTORY_ANY_UNPARSED_IS_FAILED,
         C.INVENTORY_ENABLED) = old


def _yaml_before_auto(enabled: list[str]) -> list[str]:
    """The plugin order with ``yaml`` tried before ``auto``. A YAML inventory is otherwise
    parsed twice: ``auto`` reads the whole file only to find no ``plugin:`` key and hand over
    to ``yaml`` (half the load time of a 2,000-host file). The result is the same either way:
    ``yaml`` refuses a file with a ``plugin:`` key, and ``auto`` then takes it as before."""
    names = [name.rsplit(".", 1)[-1] for name in enabled]
    if "auto" in names and "yaml" in names and names.index("yaml") > names.index("auto"):
        yaml_entry = enabled.pop(names.index("yaml"))
        enabled.insert(names.index("auto"), yaml_entry)
    return enabled


def _fresh_parse_loader(base: type[Any]) -> type[Any]:
    """Ansible's DataLoader, minus the deep copy of a file it has just parsed uncached.

    ``load_from_file(cache='none')`` parses the file and then deep-copies the result "for
    safety", though nothing else holds the parsed data; for a 2,000-host inventory the copy of
    the tagged values costs more than the parse. A cached load is still copied as before."""

    class FreshParseLoader(base):  # type: ignore[misc]
        def load_from_file(self, file_name: str, cache: str = "all", unsafe: bool = False,
                           json_only: bool = False, trusted_as_template: bool = False) -> Any:
            return super().load_from_file(file_name, cache=cache,
                                          unsafe=unsafe or cache == "none",
                                          json_only=json_only,
                                          trusted_as_template=trusted_as_template)

    return FreshParseLoader


def _without_fact_cache(manager_cls: Any, loader: Any, inventory: Any) -> Any:
    """A VariableManager whose fact cache is the in-memory one. Facts only ever reach the
    variables as ``ansible_facts``/``ansible_local``, which the contract ignores, and the
    configured cache (jsonfile in ansible.cfg) would read one file per host for nothing."""
    from ansible import constants as C

    old = C.CACHE_PLUGIN
    C.CACHE_PLUGIN = "memory"
    try:
        return manager_cls(loader=loader, inventory=inventory)
    finally:
        C.CACHE_PLUGIN = old


def _plain(value: Any) -> Any:
    """Ansible 2.19 wraps values in tagged types; give back plain Python values."""
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return "unknown error"


def _validate(inv: Inventory) -> None:
    where = f"inventory {inv.source}"
    for name in inv.hosts:
        problem = _host_name_problem(name)
        if problem is not None:
            raise InputError(f"{where}: host {name!r}: {problem}; rename it")
    if not inv.gpu_hosts:
        raise InputError(f"{where}: group gpu_nodes is missing or empty; put at least one "
                         "GPU host in it")
    simulated = sorted(h for h, e in inv.hosts.items() if _simulated(e))
    if simulated and len(simulated) != len(inv.hosts):
        real = sorted(set(inv.hosts) - set(simulated))
        raise InputError(f"{where}: provisioner_simulated is set on {len(simulated)} of "
                         f"{len(inv.hosts)} hosts ({_some(simulated)}) but not on "
                         f"{_some(real)}; a run is simulated as a whole: set it on every host "
                         "or on none")
    known = known_variables()
    # Thousands of hosts share a handful of values: each distinct (variable, value) is
    # validated once; the error still names the first host (in inventory order) that has it.
    problems: dict[tuple[str, str, str], str | None] = {}
    for entry in inv.hosts.values():
        if "gpu_nodes" in entry.groups and "cpu_nodes" in entry.groups:
            raise InputError(f"{where}: host {entry.name} is in both gpu_nodes and cpu_nodes; "
                             "keep it in one")
        if "gpu_nodes" not in entry.groups and "cpu_nodes" not in entry.groups:
            raise InputError(f"{where}: host {entry.name} is in neither gpu_nodes nor "
                             "cpu_nodes; add it to one of them")
        for name, value in sorted(entry.vars.items()):
            if not name.startswith(NAMESPACES):
                continue
            if name not in known:
                near = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise InputError(f"{where}: host {entry.name}: unknown variable {name}{hint}")
            key = (name, type(value).__name__, repr(value))
            if key not in problems:
                problems[key] = _value_problem(name, value)
            problem = problems[key]
            if problem is not None:
                source = _options()[name][0]
                raise InputError(f"{where}: host {entry.name}: variable {name} ({source}): "
                                 f"{problem}")


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _value_problem(name: str, value: Any) -> str | None:
    """What the role's argument spec validation would say about the value on the run (its
    first error, on one line), or None when it passes."""
    if isinstance(value, str) and "{{" in value:
        return None  # a template: Ansible resolves it at run time, then validates the result
    errors = _validator(name).validate({name: value}).error_messages
    return " ".join(str(errors[0]).split()) if errors else None
