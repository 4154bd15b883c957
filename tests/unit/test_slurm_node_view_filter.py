"""A compute node as slurmctld shows it (plugins/filter/slurm_node_view.py). The lines are
Slurm 22.05.8's `scontrol --oneliner show node`, as it printed them for a simulated node whose
slurmd registered with 8 GPUs while slurm.conf said 11, then again after a valid one."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from tests.unit.collection_module import load_plugin

mod = load_plugin("filter", "slurm_node_view")

HEAD = ("NodeName=sim-gpu-2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
        "CPULoad=0.13 AvailableFeatures=(null) ActiveFeatures=(null) Gres={gres} "
        "NodeAddr=10.89.0.13 NodeHostName=sim-gpu-2 Version=22.05.8 OS=Linux 6.18.44 #1 SMP "
        "PREEMPT_DYNAMIC @0  RealMemory=24105 AllocMem=0 FreeMem=22643 Sockets=2 Boards=1 "
        "State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
        "Partitions=gpu,sim-h100-8gpu  BootTime=2026-12-02T05:11:08 "
        "SlurmdStartTime=2026-12-02T06:52:55 LastBusyTime=2026-12-02T06:53:11 "
        "CfgTRES=cpu=2,mem=24105M,billing=2,gres/gpu=8 AllocTRES= CapWatts=n/a CurrentWatts=0 "
        "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s")
MIG_GRES = "gpu:h100:6,gpu:3g.40gb:1,gpu:2g.20gb:1,gpu:1g.10gb:2,gpu:7g.80gb:1"
LOW_GRES = "gres/gpu count reported lower than configured (8 < 11)"


def show(state: str, reason: str = "", gres: str = MIG_GRES) -> str:
    line = HEAD.format(state=state, gres=gres)
    return line + (f" Reason={reason}" if reason else "") + "\n"


def test_the_drain_at_an_old_registration_is_stale_once_the_node_registers_validly() -> None:
    view = mod.slurm_node_view(show("IDLE+DRAIN", f"{LOW_GRES} [slurm@2026-12-02T06:52:09]"))
    assert view == {"state": "IDLE+DRAIN", "base": "IDLE", "flags": ["DRAIN"], "gres": MIG_GRES,
                    "reason": LOW_GRES, "reason_by": "slurm", "registered": True,
                    "stale_registration_drain": True, "planned_gres": "",
                    "gres_as_planned": None}


def test_a_registration_that_is_still_invalid_is_neither_registered_nor_lifted() -> None:
    view = mod.slurm_node_view(show("IDLE+DRAIN+INVALID_REG",
                                    f"{LOW_GRES} [slurm@2026-12-02T06:52:09]"))
    assert view["flags"] == ["DRAIN", "INVALID_REG"]
    assert not view["registered"] and not view["stale_registration_drain"]


@pytest.mark.parametrize("reason", [
    f"{LOW_GRES} [root@2026-12-02T06:52:09]",            # the same words, set by a person
    "gpuc-health: gpu3 ECC [root@2026-12-02T06:52:09]",  # the health check's drain
    "gpuc-health: Low RealMemory [slurm@2026-12-02T06:52:09]",  # slurm's user, not its words
    "maintenance",                                       # no [user@time] at all
    "gres/gpu count too low, see ticket [slurm@2026-12-02T06:52:09]",  # not slurmctld's form
])
def test_other_drains_stay(reason: str) -> None:
    view = mod.slurm_node_view(show("IDLE+DRAIN", reason))
    assert view["registered"] and not view["stale_registration_drain"], view


@pytest.mark.parametrize("reason", ["Low RealMemory", "Low CPUs", "Low TmpDisk",
                                    "Low socket*core*thread count, Low CPUs",
                                    # one type short while the total is not (22.05.8's words)
                                    "gres/gpu:h100 count too low (6 < 8)"])
def test_slurmctlds_other_registration_reasons_are_stale_too(reason: str) -> None:
    view = mod.slurm_node_view(show("IDLE+DRAIN", f"{reason} [slurm@2026-12-02T06:52:09]"))
    assert view["stale_registration_drain"], view


def test_a_reason_with_spaces_and_equals_signs_is_read_whole() -> None:
    view = mod.slurm_node_view(show("MIXED+DRAIN", "x=y test [root@2026-12-02T06:53:30]"))
    assert (view["reason"], view["reason_by"], view["base"]) == ("x=y test", "root", "MIXED")


@pytest.mark.parametrize("state", ["UNKNOWN", "UNKNOWN+DRAIN", "DOWN", "IDLE+NOT_RESPONDING",
                                   "DOWN+DRAIN+INVALID_REG"])
def test_a_node_still_registering_is_not_registered(state: str) -> None:
    view = mod.slurm_node_view(show(state, f"{LOW_GRES} [slurm@2026-12-02T06:52:09]"))
    assert not view["registered"] and not view["stale_registration_drain"]


def test_a_healthy_node() -> None:
    view = mod.slurm_node_view(show("IDLE", gres="gpu:h100:8"))
    assert (view["registered"], view["gres"], view["reason"], view["flags"]) == \
        (True, "gpu:h100:8", "", [])


def test_another_slurm_user_is_honoured() -> None:
    out = show("IDLE+DRAIN", f"{LOW_GRES} [slurmadm@2026-12-02T06:52:09]")
    assert not mod.slurm_node_view(out)["stale_registration_drain"]
    assert mod.slurm_node_view(out, "slurmadm")["stale_registration_drain"]


def test_no_node_in_the_output_is_not_registered() -> None:
    view = mod.slurm_node_view("Node sim-gpu-9 not found\n")
    assert not view["registered"] and view["state"] == ""
    with pytest.raises(AnsibleFilterError, match="expects the text"):
        mod.slurm_node_view(None)


CONF = ("ClusterName=gpucluster\n"
        "NodeName=sim-gpu-1 NodeAddr=10.89.0.12 CPUs=2 RealMemory=24105 Gres=gpu:h100:8\n"
        "NodeName=sim-gpu-2 NodeAddr=10.89.0.13 CPUs=2 RealMemory=24105 Gres={gres} "
        "State=UNKNOWN\n")


def test_the_gres_of_an_old_registration_is_not_as_planned() -> None:
    """What 22.05.8 showed after a MIG layout was taken off: slurm.conf says 8 whole GPUs,
    slurmctld still holds the MIG devices the old slurmd registered."""
    view = mod.slurm_node_view(show("IDLE"), "slurm", CONF.format(gres="gpu:h100:8"))
    assert (view["planned_gres"], view["gres_as_planned"]) == ("gpu:h100:8", False)


@pytest.mark.parametrize(("shown", "planned"), [
    (MIG_GRES, MIG_GRES),
    ("gpu:h100:8(S:0-1)", "gpu:h100:8"),  # sockets, as AutoDetect=nvml nodes show them
    ("gpu:1g.10gb:2,gpu:h100:6", "gpu:h100:6,gpu:1g.10gb:2"),
])
def test_the_planned_gres_in_any_order_and_with_sockets(shown: str, planned: str) -> None:
    view = mod.slurm_node_view(show("IDLE", gres=shown), "slurm", CONF.format(gres=planned))
    assert view["gres_as_planned"] is True


def test_a_node_slurm_conf_does_not_describe_is_not_as_planned() -> None:
    view = mod.slurm_node_view(show("IDLE"), "slurm", "ClusterName=gpucluster\n")
    assert (view["planned_gres"], view["gres_as_planned"]) == ("", False)
