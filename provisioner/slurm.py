"""Slurm in the plan: whether the inventory asks for it, which host runs slurmctld, and which
launcher the smoke job uses. Pure: nothing here contacts a host.

Slurm is opt-in (playbooks/slurm.yml reads the same two signals): a ``[slurm_controller]``
group (its first host runs slurmctld) or ``slurm_enabled: true`` (the first CPU node runs it).
"""

from __future__ import annotations

from typing import Any

from provisioner.errors import InputError
from provisioner.plan import ClusterPlan

CONTROLLER_GROUP = "slurm_controller"
LAUNCHERS = ("direct", "slurm")
# (phase name, playbook) of `up` when the inventory asks for Slurm; after validate, before smoke.
SCHEDULER_PHASE = ("scheduler", "slurm.yml")
# The longest drain reason the controller side writes (upgrade, certify, remediate): it keeps
# `sinfo -R` readable; the full story is in the run's report. The nodes' gpuc-slurm-health
# cuts at the same length (roles/slurm_node/files/gpuc_slurm_health.py, standalone there).
REASON_MAX = 200


def reason(text: str) -> str:
    """A drain reason: one line of at most REASON_MAX characters."""
    line = " ".join(text.split())
    return line if len(line) <= REASON_MAX else line[:REASON_MAX - 3] + "..."


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("y", "yes", "true", "t", "1", "on")
    return value is True or value == 1


def controller(plan: ClusterPlan) -> str | None:
    """The host that runs slurmctld, or None when the inventory does not ask for Slurm."""
    hosts = plan.inventory.hosts
    grouped = [name for name, entry in hosts.items() if CONTROLLER_GROUP in entry.groups]
    if grouped:
        return grouped[0]
    if any(_truthy(entry.vars.get("slurm_enabled")) for entry in hosts.values()):
        cpu = [name for name, entry in hosts.items() if entry.kind == "cpu"]
        if not cpu:
            raise InputError(f"inventory {plan.inventory.source}: slurm_enabled is true but "
                             "there is no [slurm_controller] group and no CPU node to run "
                             "slurmctld; add a [slurm_controller] group with the controller")
        return cpu[0]
    return None


def configured(plan: ClusterPlan) -> bool:
    return controller(plan) is not None


def choose_launcher(plan: ClusterPlan, requested: str | None) -> str:
    """``slurm`` by default when the inventory asks for Slurm, else ``direct`` (torchrun on
    every node over Ansible); ``--launcher slurm`` without Slurm is refused."""
    if requested is not None and requested not in LAUNCHERS:
        raise InputError(f"--launcher {requested}: choose one of {', '.join(LAUNCHERS)}")
    on = configured(plan)
    if requested == "slurm" and not on:
        raise InputError(f"--launcher slurm: inventory {plan.inventory.source} has no Slurm "
                         "(add a [slurm_controller] group, or set slurm_enabled: true, then "
                         "run `provisioner up`)")
    return requested or ("slurm" if on else "direct")
