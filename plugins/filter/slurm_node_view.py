"""A compute node as slurmctld shows it (``scontrol --oneliner show node``): its state and
flags, its GRES, its drain reason and who set it, and whether that drain is one slurmctld set
at a registration the node has since replaced with a valid one."""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: slurm_node_view
short_description: A compute node as slurmctld shows it, and whether its drain is stale
description:
  - Reads one node's C(scontrol --oneliner show node NAME) output.
  - C(registered) is true once the controller holds a valid registration of the node, that is,
    its state is neither UNKNOWN nor DOWN and it has neither the INVALID_REG nor the
    NOT_RESPONDING flag.
  - A slurmd that registers with less than slurm.conf describes (fewer GPUs, less memory or
    fewer CPUs) is drained by slurmctld, and the drain stays after a later valid registration
    (measured with Slurm 22.05.8; an administrator resumes it).
  - Between the restart of slurmctld with a node's new Gres= and the restart of the node's
    slurmd with its new gres.conf, the old slurmd registers with the old GRES, so a run that
    changes a node's GRES leaves that drain behind. C(stale_registration_drain) says that the
    node is drained for such a mismatch, by slurmctld (the reason's C([user@time]) names
    I(slurm_user)), and is registered validly now.
  - C(gres_as_planned) says whether the GRES slurmctld holds for the node is the C(Gres=) of
    the node's line in I(slurm_conf) (socket suffixes such as C((S:0-1)) and the order aside);
    null without I(slurm_conf). slurmctld can hold another, the GRES of a registration made
    with old files, kept until slurmctld restarts.
positional: _input, slurm_user, slurm_conf
options:
  _input:
    description: The stdout of C(scontrol --oneliner show node NAME).
    type: str
    required: true
  slurm_user:
    description: slurm.conf's SlurmUser, the user slurmctld sets its own reasons as.
    type: str
    default: slurm
  slurm_conf:
    description: The slurm.conf the node runs with; empty, no comparison.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: What the controller shows of this node
  ansible.builtin.debug:
    msg: "{{ __show.stdout | gpucluster.provisioner.slurm_node_view('slurm') }}"
"""

RETURN = r"""
_value:
  description: >-
    A dict with state (the whole State= value, IDLE+DRAIN), base (IDLE), flags (DRAIN,
    INVALID_REG), gres, reason (without its suffix), reason_by (the user who set it),
    registered and stale_registration_drain (booleans), planned_gres (the slurm.conf line's
    Gres=, empty without one) and gres_as_planned (a boolean, null without slurm_conf).
  type: dict
"""

# The reasons slurmctld gives a node that registers with less than slurm.conf says. The GRES
# ones as Slurm 22.05.8 printed them (measured, not read from its source): a total short of
# slurm.conf's ("gres/gpu count reported lower than configured (8 < 11)") and, where the total
# is not short, one type short of its count ("gres/gpu:h100 count too low (6 < 8)": the old
# slurmd of a node whose MIG layout was taken away, 6 whole GPUs and 5 MIG devices, against
# slurm.conf's new gpu:h100:8).
# The others as validate_node_specs() in Slurm's src/slurmctld/node_mgr.c words them ("Low
# CPUs", "Low RealMemory", "Low TmpDisk", "Low socket*core*thread count, ...").
_REGISTRATION_REASON = re.compile(
    r"^(?:\S+ count (?:reported lower than configured|too low) \(\d+ < \d+\)"
    r"|Low (?:CPUs|RealMemory|TmpDisk|socket\*core\*thread count)\b)")
_REASON_SUFFIX = re.compile(r"\s*\[(?P<user>[^@\]\s]+)@[^\]]*\]\s*$")


def _field(text: str, name: str) -> str:
    match = re.search(rf"(?:^|\s){name}=(\S*)", text)
    return match.group(1) if match else ""


def _gres_entries(gres: str) -> list[str]:
    """``gpu:h100:8(S:0-1),gpu:1g.10gb:2`` as sorted entries without their socket suffix."""
    return sorted(re.sub(r"\(.*?\)", "", entry) for entry in gres.split(",") if entry)


def _planned_gres(slurm_conf: str, node: str) -> str:
    for raw in slurm_conf.splitlines():
        fields = dict(item.split("=", 1) for item in raw.split("#", 1)[0].split() if "=" in item)
        if fields.get("NodeName") == node:
            return fields.get("Gres", "")
    return ""


def slurm_node_view(stdout: Any, slurm_user: Any = "slurm",
                    slurm_conf: Any = "") -> dict[str, Any]:
    """What ``scontrol --oneliner show node`` says of one node, whether a drain on it is a
    stale registration mismatch, and whether its GRES is slurm.conf's (see DOCUMENTATION)."""
    if not isinstance(stdout, str) or not isinstance(slurm_conf, str):
        raise AnsibleFilterError("slurm_node_view: expects the text scontrol printed and "
                                 "slurm.conf's text")
    line = next((row for row in stdout.splitlines() if row.startswith("NodeName=")), "")
    state = _field(line, "State")
    base, *flags = state.split("+") if state else [""]
    # Slurm prints Reason= last; the reason itself may hold spaces and '='.
    raw_reason = line.split(" Reason=", 1)[1].strip() if " Reason=" in line else ""
    suffix = _REASON_SUFFIX.search(raw_reason)
    reason = raw_reason[:suffix.start()] if suffix else raw_reason
    reason_by = suffix.group("user") if suffix else ""
    registered = (bool(line) and base not in ("", "UNKNOWN", "DOWN")
                  and "INVALID_REG" not in flags and "NOT_RESPONDING" not in flags)
    gres = _field(line, "Gres")
    planned = _planned_gres(slurm_conf, _field(line, "NodeName")) if line else ""
    return {
        "state": state,
        "base": base,
        "flags": flags,
        "gres": gres,
        "reason": reason,
        "reason_by": reason_by,
        "registered": registered,
        "stale_registration_drain": (registered and "DRAIN" in flags
                                     and reason_by == str(slurm_user)
                                     and bool(_REGISTRATION_REASON.match(reason))),
        "planned_gres": planned,
        "gres_as_planned": (_gres_entries(gres) == _gres_entries(planned)
                            if slurm_conf else None),
    }


class FilterModule:
    """A compute node as slurmctld shows it."""

    def filters(self) -> dict[str, Any]:
        return {"slurm_node_view": slurm_node_view}
