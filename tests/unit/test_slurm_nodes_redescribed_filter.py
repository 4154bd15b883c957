"""Which compute nodes a new slurm.conf describes otherwise than the current one
(plugins/filter/slurm_nodes_redescribed.py): slurm_controller stops their slurmd before
slurmctld restarts with the new file."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from tests.unit.collection_module import load_plugin

mod = load_plugin("filter", "slurm_nodes_redescribed")

MIG = "gpu:h100:6,gpu:3g.40gb:1,gpu:2g.20gb:1,gpu:1g.10gb:2,gpu:7g.80gb:1"
CURRENT = f"""\
ClusterName=gpucluster
NodeName=sim-gpu-1 NodeAddr=10.89.0.12 CPUs=2 RealMemory=24105 Gres=gpu:h100:8 State=UNKNOWN
NodeName=sim-gpu-2 NodeAddr=10.89.0.13 CPUs=2 RealMemory=24105 Gres={MIG} State=UNKNOWN
PartitionName=gpu Nodes=sim-gpu-1,sim-gpu-2 Default=YES
"""


def record(name: str, **over: object) -> dict[str, object]:
    base: dict[str, object] = {"name": name, "addr": "10.89.0.9", "cpus": 2,
                               "real_memory_mb": 24105, "gpu_type": "h100", "gpu_count": 8,
                               "partition": "p"}
    return {**base, **over}


def test_a_node_whose_mig_layout_is_taken_off_is_redescribed() -> None:
    nodes = [record("sim-gpu-1"), record("sim-gpu-2")]
    assert mod.slurm_nodes_redescribed(nodes, CURRENT) == ["sim-gpu-2"]


def test_the_same_description_is_not_and_the_address_does_not_count() -> None:
    nodes = [record("sim-gpu-1", addr="10.89.0.99"), record("sim-gpu-2", gres=MIG)]
    assert mod.slurm_nodes_redescribed(nodes, CURRENT) == []


@pytest.mark.parametrize("over", [{"cpus": 4}, {"real_memory_mb": 24000}, {"gpu_count": 7},
                                  {"gpu_type": "h200"}])
def test_cpus_memory_and_gres_each_count(over: dict[str, object]) -> None:
    assert mod.slurm_nodes_redescribed([record("sim-gpu-1", **over)], CURRENT) == ["sim-gpu-1"]


def test_a_node_new_to_slurm_conf_and_a_first_run_are_not() -> None:
    assert mod.slurm_nodes_redescribed([record("sim-gpu-3", cpus=64)], CURRENT) == []
    assert mod.slurm_nodes_redescribed([record("sim-gpu-1", cpus=64)], "") == []


def test_bad_input_is_one_clear_error() -> None:
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        mod.slurm_nodes_redescribed("sim-gpu-1", CURRENT)
    with pytest.raises(AnsibleFilterError, match="lacks"):
        mod.slurm_nodes_redescribed([{"name": "sim-gpu-1"}], CURRENT)
