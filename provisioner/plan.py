"""The static plan: inventory validated, hardware profile and matched stack resolved per host.

Pure: no host is contacted. ``up`` writes the plan as an extra inventory source so the roles
receive exactly the versions decided here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner import inventory as inv_mod
from provisioner.errors import InputError
from provisioner.matrix import (
    ResolvedStack,
    StackMatrix,
    check_cluster,
    load_matrix,
    packages_map,
    resolve_stack,
)
from provisioner.profiles import Profile, load_profiles


@dataclass(frozen=True)
class HostPlan:
    name: str
    kind: str  # gpu | cpu
    profile: Profile | None
    stack: ResolvedStack | None

    def variables(self) -> dict[str, Any]:
        """Host variables handed to the roles (written into the plan inventory)."""
        out: dict[str, Any] = {"provisioner_plan_applied": True}
        if self.stack is not None:
            out.update(self.stack.as_vars())
            out["nvidia_stack_packages"] = packages_map(self.stack)
        return out


@dataclass
class ClusterPlan:
    inventory: inv_mod.Inventory
    hosts: dict[str, HostPlan] = field(default_factory=dict)

    @property
    def simulated(self) -> bool:
        return self.inventory.simulated or any(
            h.profile is not None and h.profile.simulated for h in self.hosts.values())

    def write_inventory(self, path: Path) -> Path:
        data = {"all": {"hosts": {h.name: h.variables() for h in self.hosts.values()}}}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# Resolved by the provisioner (plan); overrides nothing the user set "
                        "except the stack versions it validated.\n"
                        + yaml.safe_dump(data, sort_keys=True))
        return path


def build(inventory_path: str | Path, matrix: StackMatrix | None = None,
          profiles: dict[str, Profile] | None = None) -> ClusterPlan:
    inventory = inv_mod.load(inventory_path)
    matrix = matrix or load_matrix()
    profiles = profiles if profiles is not None else load_profiles()
    plan = ClusterPlan(inventory=inventory)
    where = f"inventory {inventory.source}"
    for name, entry in inventory.hosts.items():
        if entry.kind == "cpu":
            plan.hosts[name] = HostPlan(name, "cpu", None, None)
            continue
        profile_name = entry.vars.get("gpu_profile")
        if not profile_name:
            raise InputError(f"{where}: host {name}: gpu_profile is not set; choose one of "
                             f"{', '.join(sorted(profiles))}")
        profile = profiles.get(str(profile_name))
        if profile is None:
            raise InputError(f"{where}: host {name}: gpu_profile {profile_name!r} is unknown; "
                             f"choose one of {', '.join(sorted(profiles))}")
        try:
            stack = resolve_stack(name, entry.vars, profile, matrix)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from exc
        plan.hosts[name] = HostPlan(name, "gpu", profile, stack)
    resolved = {h.name: h.stack for h in plan.hosts.values() if h.stack is not None}
    try:
        check_cluster(resolved)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from exc
    return plan
