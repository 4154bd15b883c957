"""slurm.conf keeps the planned compute nodes a run did not reach (plugins/filter/slurm_nodes.py)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from tests.unit.collection_module import load_plugin

mod = load_plugin("filter", "slurm_nodes")

CURRENT = """\
ClusterName=gpuc
NodeName=sim-gpu-1 NodeAddr=10.89.0.12 CPUs=2 RealMemory=24105 Gres=gpu:h100:8 State=UNKNOWN
NodeName=sim-gpu-2 NodeAddr=10.89.0.13 CPUs=4 RealMemory=48000 Gres=gpu:h100:8 State=UNKNOWN
NodeName=old-node NodeAddr=10.89.0.99 CPUs=2 RealMemory=1000 Gres=gpu:a100:4 State=UNKNOWN

PartitionName=gpu Nodes=sim-gpu-1,sim-gpu-2,old-node Default=YES MaxTime=INFINITE State=UP
PartitionName=sim-h100-8gpu Nodes=sim-gpu-1,sim-gpu-2 MaxTime=INFINITE State=UP
PartitionName=a100 Nodes=old-node MaxTime=INFINITE State=UP
"""


def record(name: str, cpus: int = 2) -> dict[str, object]:
    return {"name": name, "addr": "10.0.0.1", "cpus": cpus, "real_memory_mb": 24105,
            "gpu_type": "h100", "gpu_count": 8, "partition": "sim-h100-8gpu"}


def test_a_planned_node_this_run_missed_keeps_its_line() -> None:
    got = mod.slurm_nodes([record("sim-gpu-1", cpus=8)], ["sim-gpu-1", "sim-gpu-2"], CURRENT,
                          {"sim-gpu-1": "sim-h100-8gpu", "sim-gpu-2": "sim-h100-8gpu"})
    assert [r["name"] for r in got] == ["sim-gpu-1", "sim-gpu-2"]
    assert got[0]["cpus"] == 8  # this run's facts win for the nodes it reached
    assert got[1] == {"name": "sim-gpu-2", "addr": "10.89.0.13", "cpus": 4,
                      "real_memory_mb": 48000, "gpu_type": "h100", "gpu_count": 8,
                      "partition": "sim-h100-8gpu"}


def test_a_node_no_longer_planned_is_dropped_and_an_unknown_one_left_out() -> None:
    got = mod.slurm_nodes([record("sim-gpu-1")], ["sim-gpu-1", "sim-gpu-3"], CURRENT, {})
    assert [r["name"] for r in got] == ["sim-gpu-1"]


def test_the_partition_comes_from_the_plan_else_from_the_current_file() -> None:
    got = mod.slurm_nodes([], ["old-node", "sim-gpu-2"], CURRENT, {"sim-gpu-2": "new-profile"})
    assert {r["name"]: r["partition"] for r in got} == {"old-node": "a100",
                                                         "sim-gpu-2": "new-profile"}


def test_no_current_file_keeps_only_this_runs_nodes() -> None:
    assert mod.slurm_nodes([record("a")], ["a", "b"], "", {"b": "p"}) == [record("a")]


@pytest.mark.parametrize("line", [
    "NodeName=n[1-4] CPUs=2 RealMemory=1 Gres=gpu:h100:8",   # ranges are not ours
    "NodeName=n1 CPUs=x RealMemory=1 Gres=gpu:h100:8",
    "NodeName=n1 CPUs=2 RealMemory=1",                        # no GRES
    "NodeName=DEFAULT CPUs=2 RealMemory=1 Gres=gpu:h100:8",
    "# NodeName=n1 CPUs=2 RealMemory=1 Gres=gpu:h100:8",
    "NodeName=n1 CPUs=2 RealMemory=1 Gres=gpu:h100:8 Feature='unterminated",
])
def test_lines_it_cannot_read_keep_nothing(line: str) -> None:
    assert mod.parse_node_lines(line + "\nPartitionName=p Nodes=n1\n") == {}


def test_bad_arguments_fail_in_one_line() -> None:
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        mod.slurm_nodes("x", [], "")
    with pytest.raises(AnsibleFilterError, match="planned must be a list"):
        mod.slurm_nodes([], "sim-gpu-1", "")
