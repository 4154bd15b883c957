"""Each compute node's leaf switch from a saved ibnetdiscover output (provisioner/ibnet.py) and
the plan's use of it (the inventory's slurm_ibnetdiscover). The fixture two-leaves.txt is
written by hand in ibnetdiscover's record format (its man page's example; switch and HCA records,
tab-separated, as public outputs show them): four hosts on two leaves under one spine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner import ibnet
from provisioner import plan as plan_mod
from provisioner.errors import InputError

TWO_LEAVES = Path(__file__).resolve().parents[1] / "fixtures" / "ibnetdiscover" / "two-leaves.txt"
HOSTS = ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]


def test_the_hosts_leaf_is_the_switch_their_hca_is_cabled_to() -> None:
    fabric = ibnet.parse_ibnetdiscover(TWO_LEAVES.read_text())
    assert sorted(fabric.switches.values()) == [
        "MF0;leaf-01:MQM8700/U1", "MF0;leaf-02:MQM8700/U1", "MF0;spine-01:MQM8700/U1"]
    assert len(fabric.adapters) == 4
    leaves, missing = ibnet.leaf_switches(fabric, [*HOSTS, "login-01"])
    assert leaves == {"gpu-001": "MF0_leaf-01_MQM8700_U1", "gpu-002": "MF0_leaf-01_MQM8700_U1",
                      "gpu-003": "MF0_leaf-02_MQM8700_U1", "gpu-004": "MF0_leaf-02_MQM8700_U1"}
    assert missing == ["login-01"]


def _fabric(adapters: dict[str, list[str]]) -> ibnet.Fabric:
    """HCAs "<host> mlx5_<n>" -> the switches (by description) each is cabled to."""
    fabric = ibnet.Fabric()
    for n, (desc, switches) in enumerate(adapters.items()):
        for switch in switches:
            fabric.switches[f"S-{switch}"] = switch
        fabric.adapters[f"H-{n:04x}"] = (desc, {f"S-{s}" for s in switches})
    return fabric


def test_a_rail_optimised_unit_is_one_leaf_and_a_host_is_matched_by_its_short_name() -> None:
    fabric = _fabric({"a.cluster mlx5_0": ["rail0-su1"], "a.cluster mlx5_1": ["rail1-su1"],
                      "b mlx5_0": ["rail0-su1"], "b mlx5_1": ["rail1-su1"],
                      "c mlx5_0": ["rail0-su2"], "c mlx5_1": ["rail1-su2"]})
    leaves, missing = ibnet.leaf_switches(fabric, ["a", "b", "c"])
    assert leaves == {"a": "rail0-su1", "b": "rail0-su1", "c": "rail0-su2"} and missing == []


def test_two_sets_of_switches_never_share_a_leaf_name() -> None:
    fabric = _fabric({"a mlx5_0": ["leaf1"], "b mlx5_0": ["leaf1"], "b mlx5_1": ["leaf2"]})
    with pytest.raises(InputError, match=r"different sets of switches would share leaf leaf1: "
                                         r"\[\['leaf1'\], \['leaf1', 'leaf2'\]\]"):
        ibnet.leaf_switches(fabric, ["a", "b"])


def test_a_description_with_no_name_left_keeps_the_switch_id() -> None:
    assert ibnet.switch_name(";;", "S-b8cef60300e1a001") == "S-b8cef60300e1a001"


@pytest.mark.parametrize(("text", "line"), [
    ("", "shows no switch and channel adapter records"),
    ("ibstat\nCA 'mlx5_0'\n", "shows no switch and channel adapter records"),
])
def test_what_is_not_an_ibnetdiscover_output_is_one_line(text: str, line: str) -> None:
    with pytest.raises(InputError, match=line):
        ibnet.parse_ibnetdiscover(text)


def write(tmp_path: Path, hosts: dict[str, dict[str, object]], all_vars: dict[str, object]) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": all_vars, "children": {"gpu_nodes": {
        "hosts": {name: {"gpu_profile": "hgx-h100-8gpu", **v} for name, v in hosts.items()}}}}}))
    return path


def test_the_plan_gives_each_compute_node_its_leaf(tmp_path: Path) -> None:
    (tmp_path / "fabric").mkdir()
    (tmp_path / "fabric" / "ibnet.txt").write_text(TWO_LEAVES.read_text())
    path = write(tmp_path, {h: {} for h in HOSTS}, {"slurm_ibnetdiscover": "fabric/ibnet.txt"})
    plan = plan_mod.build(path)
    assert {name: plan.hosts[name].variables()["slurm_switch"] for name in HOSTS} == {
        "gpu-001": "MF0_leaf-01_MQM8700_U1", "gpu-002": "MF0_leaf-01_MQM8700_U1",
        "gpu-003": "MF0_leaf-02_MQM8700_U1", "gpu-004": "MF0_leaf-02_MQM8700_U1"}
    assert any(note.startswith(f"slurm_switch of 4 GPU node(s) read from {tmp_path}/fabric/"
                               "ibnet.txt: 2 leaf switch(es) (MF0_leaf-01_MQM8700_U1: 2, ")
               for note in plan.notes), plan.notes
    # Without it, no host gets a switch from the plan.
    plain = plan_mod.build(write(tmp_path, {h: {} for h in HOSTS}, {}))
    assert all("slurm_switch" not in plain.hosts[h].variables() for h in HOSTS)


@pytest.mark.parametrize(("hosts", "all_vars", "line"), [
    ({"gpu-001": {"slurm_switch": "leaf1"}, "gpu-002": {}},
     {"slurm_ibnetdiscover": str(TWO_LEAVES)},
     "slurm_switch is set on gpu-001 and slurm_ibnetdiscover is given: use one of the two"),
    ({"gpu-001": {"slurm_ibnetdiscover": "a.txt"}, "gpu-002": {"slurm_ibnetdiscover": "b.txt"}},
     {}, "slurm_ibnetdiscover names 2 files (a.txt, b.txt); give one for the cluster"),
    ({"gpu-001": {}, "gpu-009": {}}, {"slurm_ibnetdiscover": str(TWO_LEAVES)},
     "no HCA of gpu-009 (matched by the first word"),
    ({"gpu-001": {}}, {"slurm_ibnetdiscover": "missing.txt"},
     "missing.txt: No such file or directory"),
])
def test_the_plan_refuses_in_one_line(tmp_path: Path, hosts: dict[str, dict[str, object]],
                                      all_vars: dict[str, object], line: str) -> None:
    with pytest.raises(InputError) as caught:
        plan_mod.build(write(tmp_path, hosts, all_vars))
    assert line in str(caught.value) and "\n" not in str(caught.value), caught.value
