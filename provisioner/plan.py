"""The static plan: inventory validated, hardware profile and matched stack resolved per host.

Pure: no host is contacted. The plan is the only channel from the provisioner to the nodes:
``HostPlan.variables()`` is everything a role needs (versions, exact pins per package family,
repositories, the OS list, the profile's expectations, the fabric), and ``write_inventory``
writes it as an extra inventory source. ``provisioner up`` passes that file next to the user's
inventory; plain Ansible does the same by hand::

    provisioner plan --inventory INVENTORY -o plan.yml
    ansible-playbook -i INVENTORY -i plan.yml playbooks/site.yml
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import date
from pathlib import Path
from typing import Any

import yaml

from provisioner import ibnet, mig
from provisioner import inventory as inv_mod
from provisioner.errors import InputError
from provisioner.matrix import (
    ResolvedStack,
    StackMatrix,
    check_cluster,
    lifecycle,
    load_matrix,
    packages_for,
    resolve_stack,
)
from provisioner.matrix.index import PackageIndex, load_index
from provisioner.matrix.packages import replaced_packages
from provisioner.profiles import HARDWARE_FIELDS, Profile, load_profiles

# Set on every host of a plan; the playbooks refuse to run without it (one line naming the fix).
PLAN_MARKER = "provisioner_plan_applied"

# The profile fields gpu_validate and preflight compare a node with. The bus-bandwidth floors
# stay on the controller (the smoke job is judged there), like the profile's sources.
EXPECTED_FIELDS: tuple[str, ...] = (*HARDWARE_FIELDS, "ib_write_bw_floor_gbps",
                                    "multi_node_nvlink")


@dataclass(frozen=True)
class HostPlan:
    name: str
    kind: str  # gpu | cpu
    profile: Profile | None
    stack: ResolvedStack | None
    # The fabric this host is configured for (decided once, see _fabric_for).
    fabric: str = "ethernet"
    # OS directories (debian12, ubuntu2404, rhel9, ...) this host may run: the stack's OSes that
    # have a repository (GPU nodes), every OS of the registry (CPU nodes).
    supported_os: tuple[str, ...] = ()
    # The repository table the node needs (repositories.cuda limited to supported_os, and the
    # container toolkit's), in the matrix's own shape.
    repositories: Mapping[str, Any] = field(default_factory=dict)
    # Package families of those repositories (apt, apt_ubuntu, dnf).
    families: tuple[str, ...] = ()
    # {family: {component: names}}: other branches' and the other flavour's driver and fabric
    # manager packages, removed before the planned ones are installed.
    replaced: Mapping[str, Mapping[str, list[str]]] = field(default_factory=dict)
    # Multi-node NVLink profiles: the NVLink domain (the inventory's nvlink_domain) and every
    # host of it, this one included, in inventory order: the IMEX service's peers.
    nvlink_domain: str | None = None
    nvlink_domain_hosts: tuple[str, ...] = ()
    # The leaf switch the plan read for this compute node from the inventory's
    # slurm_ibnetdiscover (None: the inventory's own slurm_switch, if any, stands).
    slurm_switch: str | None = None
    # The MIG layout of each GPU (provisioner/mig.py): None is not managed; per GPU, None is MIG
    # off, else the instance profiles in creation order.
    mig_layout: tuple[mig.GpuLayout, ...] | None = None

    def variables(self) -> dict[str, Any]:
        """Host variables handed to the roles (written into the plan inventory)."""
        out: dict[str, Any] = {
            PLAN_MARKER: True,
            "fabric": self.fabric,
            "gpu_supported_os": list(self.supported_os),
        }
        if self.stack is None:
            return out
        out.update(self.stack.as_vars())
        out["nvidia_repo_repositories"] = dict(self.repositories)
        out["nvidia_repo_stack_packages"] = {
            family: _pins_by_component(self.stack, family, self.replaced.get(family, {}))
            for family in self.families}
        out["gpu_expected"] = self.expected()
        if self.slurm_switch is not None:
            out["slurm_switch"] = self.slurm_switch
        if self.mig_layout is not None:
            out["gpu_mig_layout_planned"] = mig.as_vars(self.mig_layout)
        return out

    def expected(self) -> dict[str, Any]:
        """What validate and preflight compare the node with: the profile's hardware, the
        planned driver and the fabric."""
        if self.profile is None or self.stack is None:
            return {}
        out: dict[str, Any] = {"profile": self.profile.name}
        for key in EXPECTED_FIELDS:
            value = getattr(self.profile, key)
            out[key] = list(value) if isinstance(value, tuple) else value
        out["driver_version"] = self.stack.driver_version
        out["fabric"] = self.fabric
        if self.nvlink_domain is not None:
            out["nvlink_domain"] = self.nvlink_domain
            out["nvlink_domain_hosts"] = list(self.nvlink_domain_hosts)
        if self.mig_layout is not None:
            out["mig_layout"] = mig.as_vars(self.mig_layout)
        return out


def _pins_by_component(stack: ResolvedStack, family: str,
                       replaced: Mapping[str, list[str]]) -> dict[str, list[dict[str, str]]]:
    """Exact pins of ``family`` grouped by component, in install order, plus
    ``<component>_replaced``: the packages other branches and the other module flavour name
    differently (removed before the pins are installed; no version)."""
    out: dict[str, list[dict[str, str]]] = {}
    for pin in packages_for(stack, family):
        out.setdefault(pin.component, []).append({"name": pin.name, "version": pin.version})
    for component, names in sorted(replaced.items()):
        out[f"{component}_replaced"] = [{"name": name} for name in names]
    return out


@dataclass
class ClusterPlan:
    inventory: inv_mod.Inventory
    hosts: dict[str, HostPlan] = field(default_factory=dict)
    # Driver branches ending within 90 days, or past their end where the inventory allows it:
    # one warning line each, recorded in the report.
    lifecycle: list[lifecycle.LifecycleNote] = field(default_factory=list)
    # What the plan decided for the user where the inventory left a choice open: one line each,
    # shown by every command that plans.
    notes: list[str] = field(default_factory=list)

    @property
    def simulated(self) -> bool:
        return self.inventory.simulated or any(
            h.profile is not None and h.profile.simulated for h in self.hosts.values())

    def inventory_data(self) -> dict[str, Any]:
        """The plan as an inventory: host variables only, under ``all``. Ansible merges it with
        the user's inventory (pass both with -i), so every group of theirs stays as it is."""
        return {"all": {"hosts": {h.name: h.variables() for h in self.hosts.values()}}}

    def write_inventory(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"# Written by `provisioner plan` from {self.inventory.source}: the resolved stack,\n"
            "# pins, repositories and expectations of every host. Use it next to that inventory:\n"
            f"#   ansible-playbook -i {self.inventory.source} -i {path.name} playbooks/site.yml\n"
            "# Regenerate it (do not edit it) after changing the inventory.\n"
            + yaml.dump(self.inventory_data(), Dumper=_Dumper, sort_keys=True))
        return path


class _Dumper(yaml.SafeDumper):
    """safe_dump's output without anchors and aliases: hosts share the plan's repository and
    package tables (``_gpu_host``), and each host's variables stay readable on their own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def build(inventory_path: str | Path, matrix: StackMatrix | None = None,
          profiles: dict[str, Profile] | None = None, *, stack: str | None = None,
          today: date | None = None) -> ClusterPlan:
    """The plan of an inventory. ``stack`` (``provisioner upgrade --stack``) is the gpu_stack
    of every GPU host, over the inventory's own; the rest of the resolution and every rule stay
    the same, so an override that cannot work is refused like a bad inventory. ``today``
    (default: the clock, see lifecycle.today) judges the driver branches' end of life."""
    inventory = inv_mod.load(inventory_path)
    matrix = matrix or load_matrix()
    profiles = profiles if profiles is not None else load_profiles()
    if stack is not None and stack not in matrix.stacks:
        raise InputError(f"stack {stack!r} is not a known stack; choose one of "
                         f"{matrix.stack_names()}")
    plan = ClusterPlan(inventory=inventory)
    where = f"inventory {inventory.source}"
    gpu_fabrics: set[str] = set()
    memo: dict[Any, Any] = {}
    indexes: dict[str, PackageIndex] = {}
    eol: list[tuple[str, int, str, bool]] = []
    for name, entry in inventory.hosts.items():
        if entry.kind == "cpu":
            continue
        profile = _host_profile(where, name, entry.vars, profiles)
        hostvars = entry.vars if stack is None else {**entry.vars, "gpu_stack": stack}
        try:
            host_stack = resolve_stack(name, hostvars, profile, matrix,
                                       _package_index(name, entry.vars, indexes))
            eol.append((name, host_stack.driver_branch, host_stack.stack,
                        _flag(name, entry.vars, "allow_eol_driver")))
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from exc
        fabric = str(entry.vars.get("fabric") or profile.fabric)
        gpu_fabrics.add(fabric)
        layout = mig.resolve_host(where, name, entry.vars.get("gpu_mig_layout"), profile)
        plan.hosts[name] = _gpu_host(name, profile, host_stack, fabric, matrix, memo)
        if layout is not None:
            plan.hosts[name] = replace(plan.hosts[name], mig_layout=layout)
    _add_cpu_hosts(plan, matrix, gpu_fabrics)
    _add_nvlink_domains(plan)
    _add_fabric_leaves(plan)
    _check_switches(plan)
    plan.hosts = {name: plan.hosts[name] for name in inventory.hosts}
    resolved = {h.name: h.stack for h in plan.hosts.values() if h.stack is not None}
    try:
        check_cluster(resolved)
        plan.lifecycle = lifecycle.judge(matrix, today or lifecycle.today(), eol)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from exc
    return plan


def _host_profile(where: str, name: str, hostvars: Mapping[str, Any],
                  profiles: dict[str, Profile]) -> Profile:
    """Return the hardware profile GPU host ``name`` names in gpu_profile; raise InputError
    when it names none or one that is unknown."""
    profile_name = hostvars.get("gpu_profile")
    if not profile_name:
        raise InputError(f"{where}: host {name}: gpu_profile is not set; choose one of "
                         f"{', '.join(sorted(profiles))}")
    profile = profiles.get(str(profile_name))
    if profile is None:
        raise InputError(f"{where}: host {name}: gpu_profile {profile_name!r} is unknown; "
                         f"choose one of {', '.join(sorted(profiles))}")
    return profile


def _add_cpu_hosts(plan: ClusterPlan, matrix: StackMatrix, gpu_fabrics: set[str]) -> None:
    """Add every CPU host of the plan's inventory to ``plan`` with its fabric, and a note
    naming those left without RDMA configuration. Returns None."""
    no_rdma: list[str] = []
    for name, entry in plan.inventory.hosts.items():
        if entry.kind == "cpu":
            cpu_fabric = _cpu_fabric(entry.vars, gpu_fabrics)
            if cpu_fabric is None:
                no_rdma.append(name)
            plan.hosts[name] = HostPlan(name, "cpu", None, None, fabric=cpu_fabric or "ethernet",
                                        supported_os=tuple(sorted(matrix.repositories.cuda)))
    if no_rdma:
        plan.notes.append(
            f"{len(no_rdma)} CPU node(s) ({', '.join(no_rdma[:5])}"
            f"{', ...' if len(no_rdma) > 5 else ''}) get no RDMA configuration: the GPU nodes use "
            f"different fabrics ({', '.join(sorted(gpu_fabrics))}) and they name none; set "
            "fabric on a CPU node that needs RDMA")


def _add_nvlink_domains(plan: ClusterPlan) -> None:
    """Group the hosts of multi-node NVLink profiles by their nvlink_domain (a GB200 NVL72
    rack's compute trays share one); hosts that name none form the domain "default", said in a
    note. nvlink_domain on any other host is refused: it would configure nothing."""
    domains: dict[str, list[str]] = {}
    unnamed: list[str] = []
    for name, host in plan.hosts.items():
        raw = plan.inventory.hosts[name].vars.get("nvlink_domain")
        if host.profile is None or not host.profile.multi_node_nvlink:
            if raw is not None:
                what = host.profile.name if host.profile else "a CPU node"
                raise InputError(f"inventory {plan.inventory.source}: host {name}: "
                                 f"nvlink_domain is set, but {what} has no multi-node NVLink")
            continue
        if raw is not None and (not isinstance(raw, str) or not raw.strip()):
            raise InputError(f"inventory {plan.inventory.source}: host {name}: nvlink_domain "
                             f"must be a name (the NVLink domain, e.g. its rack), got {raw!r}")
        if raw is None:
            unnamed.append(name)
        domains.setdefault(str(raw or "default").strip(), []).append(name)
    for domain, members in domains.items():
        for name in members:
            plan.hosts[name] = replace(plan.hosts[name], nvlink_domain=domain,
                                       nvlink_domain_hosts=tuple(members))
    if domains:
        count = sum(len(members) for members in domains.values())
        plan.notes.append(
            f"{count} multi-node NVLink host(s) in {len(domains)} NVLink domain(s): validate "
            "judges each GPU's NVLink fabric registration and the domain's IMEX service; IMEX "
            "itself is not installed by this tool (install nvidia-imex matching the driver, "
            "list the domain's addresses in /etc/nvidia-imex/nodes_config.cfg, create IMEX "
            "channel 0 at every boot)")
    if unnamed:
        plan.notes.append(
            f"{len(unnamed)} multi-node NVLink host(s) ({', '.join(unnamed[:5])}"
            f"{', ...' if len(unnamed) > 5 else ''}) name no nvlink_domain: they are judged as "
            "one NVLink domain, \"default\" (set nvlink_domain, e.g. the rack, where there are "
            "several)")


_SWITCH_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _add_fabric_leaves(plan: ClusterPlan) -> None:
    """Each compute node's leaf switch from the saved ``ibnetdiscover`` output the inventory's
    ``slurm_ibnetdiscover`` names (relative to the inventory's directory): one file for the
    cluster, never beside a hand-written slurm_switch; a note says what it gave."""
    where = f"inventory {plan.inventory.source}"
    gpu = [name for name, host in plan.hosts.items() if host.kind == "gpu"]
    files = {str(plan.inventory.hosts[name].vars.get("slurm_ibnetdiscover") or "")
             for name in gpu} - {""}
    if not files:
        return
    if len(files) > 1:
        raise InputError(f"{where}: slurm_ibnetdiscover names {len(files)} files "
                         f"({', '.join(sorted(files))}); give one for the cluster")
    by_hand = [name for name in gpu if plan.inventory.hosts[name].vars.get("slurm_switch")]
    if by_hand:
        raise InputError(f"{where}: slurm_switch is set on {', '.join(by_hand[:5])} and "
                         "slurm_ibnetdiscover is given: use one of the two")
    path = Path(files.pop())
    base = Path(plan.inventory.source)
    if not path.is_absolute():
        path = (base if base.is_dir() else base.parent) / path
    try:
        leaves = ibnet.leaves_from_file(path, gpu)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from exc
    for name, leaf in leaves.items():
        plan.hosts[name] = replace(plan.hosts[name], slurm_switch=leaf)
    sizes = Counter(leaves.values())
    plan.notes.append(f"slurm_switch of {len(leaves)} GPU node(s) read from {path}: "
                      f"{len(sizes)} leaf switch(es) ("
                      + ", ".join(f"{leaf}: {n}" for leaf, n in sorted(sizes.items())[:5])
                      + (", ..." if len(sizes) > 5 else "") + ")")


def _check_switches(plan: ClusterPlan) -> None:
    """slurm_switch (a compute node's leaf switch: Slurm's topology.conf) on every GPU node or
    on none, each a plain name: checked here so that a half-described tree stops the run
    before any host changes (the scheduler phase builds the tree from the same values)."""
    where = f"inventory {plan.inventory.source}"
    named = {name: plan.inventory.hosts[name].vars.get("slurm_switch")
             for name, host in plan.hosts.items() if host.kind == "gpu"}
    for name, switch in named.items():
        if switch is not None and (not isinstance(switch, str)
                                   or not _SWITCH_NAME.match(switch)):
            raise InputError(f"{where}: host {name}: slurm_switch must be a switch name "
                             f"(letters, digits, _, . or -), got {switch!r}")
    missing = [name for name, switch in named.items() if switch is None]
    if missing and len(missing) < len(named):
        raise InputError(f"{where}: slurm_switch is set on some GPU nodes but not on "
                         f"{', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}: "
                         "give every compute node its leaf switch, or none")


def _flag(host: str, hostvars: Mapping[str, Any], name: str) -> bool:
    value = hostvars.get(name, False)
    if not isinstance(value, bool):
        raise InputError(f"host {host}: {name} must be true or false, got {value!r}")
    return value


def _package_index(host: str, hostvars: Mapping[str, Any],
                   indexes: dict[str, PackageIndex]) -> PackageIndex | None:
    """The repository index ``gpu_package_index`` names (read once per plan), or None."""
    source = hostvars.get("gpu_package_index")
    if source in (None, ""):
        return None
    if not isinstance(source, str):
        raise InputError(f"host {host}: gpu_package_index must be a directory or URL, got "
                         f"{source!r}")
    if source not in indexes:
        indexes[source] = load_index(source)
    return indexes[source]


def _gpu_host(name: str, profile: Profile, stack: ResolvedStack, fabric: str,
              matrix: StackMatrix, memo: dict[Any, Any]) -> HostPlan:
    """``memo`` holds what was worked out for another host of the same stack (a fleet has a
    handful of distinct stacks): the repositories by stack name, which is all they depend on,
    and the replaced packages by the stack without its host name, which is all
    replaced_packages reads. Hosts share these objects; nothing changes them after the plan
    is built, and the plan inventory is written without YAML aliases (``_Dumper``)."""
    if stack.stack not in memo:
        base = matrix.stacks[stack.stack]
        cuda_repos = {os_dir: repo for os_dir, repo in matrix.repositories.cuda.items()
                      if os_dir in base.os_support}
        repositories = {
            "cuda": {os_dir: repo.model_dump(mode="json") for os_dir, repo in cuda_repos.items()},
            "container_toolkit": matrix.repositories.container_toolkit.model_dump(mode="json"),
        }
        families = tuple(sorted({repo.package_family for repo in cuda_repos.values()}))
        memo[stack.stack] = (tuple(sorted(cuda_repos)), repositories, families)
    supported_os, repositories, families = memo[stack.stack]
    return HostPlan(
        name, "gpu", profile, stack, fabric=fabric, supported_os=supported_os,
        repositories=repositories, families=families,
        replaced=_replaced(memo, matrix, stack, families))


# The fields that make two hosts' stacks equal (those a comparison reads), but the host name.
_STACK_KEY = tuple(f.name for f in fields(ResolvedStack) if f.compare and f.name != "host")


def _replaced(memo: dict[Any, Any], matrix: StackMatrix, stack: ResolvedStack,
              families: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    key = (families, *(getattr(stack, name) for name in _STACK_KEY))
    found: dict[str, dict[str, list[str]]] | None = memo.get(key)
    if found is None:
        found = memo[key] = {family: replaced_packages(matrix, stack, family)
                             for family in families}
    return found


def _cpu_fabric(hostvars: Mapping[str, Any], gpu_fabrics: set[str]) -> str | None:
    """A CPU node (login, storage, controller) takes its own ``fabric``, else the GPU nodes'
    one: it sits on their network. GPU nodes on different fabrics leave it open (None): such
    a node, usually a login node, gets no RDMA configuration, and the plan says so."""
    own = hostvars.get("fabric")
    if own:
        return str(own)
    if len(gpu_fabrics) == 1:
        return next(iter(gpu_fabrics))
    return None
