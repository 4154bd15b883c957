"""Slurm's switch tree from the compute nodes' leaf switches (plugins/filter/slurm_topology.py),
and the topology.conf the slurm_controller role renders from it."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from ansible.errors import AnsibleFilterError

from tests.unit.collection_module import load_plugin

mod = load_plugin("filter", "slurm_topology")
ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "roles/slurm_controller/templates/etc/slurm/topology.conf.j2"


def test_nodes_are_grouped_by_their_leaf() -> None:
    got = mod.slurm_topology({"gpu-3": "leaf2", "gpu-1": "leaf1", "gpu-2": "leaf1"})
    assert got == {"leaf1": ["gpu-1", "gpu-2"], "leaf2": ["gpu-3"]}


def test_no_switch_anywhere_is_no_topology() -> None:
    assert mod.slurm_topology({"gpu-1": "", "gpu-2": None}) == {}
    assert mod.slurm_topology({}) == {}


@pytest.mark.parametrize(("switches", "message"), [
    ({"gpu-1": "leaf1", "gpu-2": ""}, "slurm_switch is set on some compute nodes but not on gpu-2"),
    ({"gpu-1": "leaf 1"}, "slurm_switch 'leaf 1': a switch name is letters"),
    (["gpu-1"], "expects node name -> leaf switch"),
])
def test_a_half_or_wrong_topology_is_refused(switches: object, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        mod.slurm_topology(switches)


def test_topology_conf_lists_each_leaf_then_the_root() -> None:
    text = TEMPLATE.read_text().replace("{{ ansible_managed | comment }}", "# managed")
    conf = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True).from_string(
        text).render(slurm_controller_topology={"leaf2": ["gpu-3"], "leaf1": ["gpu-2", "gpu-1"]},
                     slurm_controller_topology_root="spine")
    lines = [line for line in conf.splitlines() if line and not line.startswith("#")]
    assert lines == ["SwitchName=leaf1 Nodes=gpu-1,gpu-2", "SwitchName=leaf2 Nodes=gpu-3",
                     "SwitchName=spine Switches=leaf1,leaf2"]


def plan_of(tmp_path: Path, switches: dict[str, object]) -> None:
    import yaml

    from provisioner import plan as plan_mod

    hosts = {name: {"gpu_profile": "hgx-h100-8gpu", **({"slurm_switch": s} if s is not None
                                                      else {})}
             for name, s in switches.items()}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    plan_mod.build(path)


def test_the_plan_refuses_a_half_described_tree_before_any_host_changes(tmp_path: Path) -> None:
    from provisioner.errors import InputError

    plan_of(tmp_path, {"g1": "leaf1", "g2": "leaf2"})
    plan_of(tmp_path, {"g1": None, "g2": None})
    with pytest.raises(InputError, match="slurm_switch is set on some GPU nodes but not on g2"):
        plan_of(tmp_path, {"g1": "leaf1", "g2": None})
    with pytest.raises(InputError, match="host g1: slurm_switch must be a switch name"):
        plan_of(tmp_path, {"g1": "leaf 1", "g2": "leaf2"})
