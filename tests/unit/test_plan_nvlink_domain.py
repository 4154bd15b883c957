"""Multi-node NVLink hosts are grouped into NVLink domains by the inventory's nvlink_domain (the
IMEX service's peers, judged by validate); hosts that name none form one domain, said in a note;
nvlink_domain where it configures nothing is refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import plan as plan_mod
from provisioner.errors import InputError


def build(tmp_path: Path, hosts: dict[str, dict[str, Any]]) -> plan_mod.ClusterPlan:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {
        "gpu_nodes": {"hosts": {n: v for n, v in hosts.items() if "gpu_profile" in v}},
        "cpu_nodes": {"hosts": {n: v for n, v in hosts.items() if "gpu_profile" not in v}},
    }}}))
    return plan_mod.build(path)


def test_trays_are_grouped_by_their_domain(tmp_path: Path) -> None:
    tray = {"gpu_profile": "gb200-nvl72-tray"}
    plan = build(tmp_path, {"t1": {**tray, "nvlink_domain": "rack-a"},
                            "t2": {**tray, "nvlink_domain": "rack-b"},
                            "t3": {**tray, "nvlink_domain": "rack-a"},
                            "h1": {"gpu_profile": "hgx-h100-8gpu"}})
    one = plan.hosts["t1"].expected()
    assert one["multi_node_nvlink"] is True
    assert (one["nvlink_domain"], one["nvlink_domain_hosts"]) == ("rack-a", ["t1", "t3"])
    assert plan.hosts["t2"].expected()["nvlink_domain_hosts"] == ["t2"]
    h100 = plan.hosts["h1"].expected()
    assert h100["multi_node_nvlink"] is False and "nvlink_domain" not in h100
    assert plan.notes == [
        "3 multi-node NVLink host(s) in 2 NVLink domain(s): validate judges each GPU's NVLink "
        "fabric registration and the domain's IMEX service; IMEX itself is not installed by "
        "this tool (install nvidia-imex matching the driver, list the domain's addresses in "
        "/etc/nvidia-imex/nodes_config.cfg, create IMEX channel 0 at every boot)"]


def test_trays_naming_no_domain_form_one_and_the_plan_says_so(tmp_path: Path) -> None:
    plan = build(tmp_path, {f"t{i}": {"gpu_profile": "gb200-nvl72-tray"} for i in (1, 2)})
    assert plan.hosts["t2"].expected()["nvlink_domain_hosts"] == ["t1", "t2"]
    assert plan.hosts["t2"].expected()["nvlink_domain"] == "default"
    assert any('one NVLink domain, "default"' in note for note in plan.notes)


@pytest.mark.parametrize(("host", "message"), [
    ({"gpu_profile": "hgx-h100-8gpu", "nvlink_domain": "rack-a"},
     "host x: nvlink_domain is set, but hgx-h100-8gpu has no multi-node NVLink"),
    ({"gpu_profile": "gb200-nvl72-tray", "nvlink_domain": "  "},
     "host x: nvlink_domain must be a name"),
    ({"fabric": "ethernet", "nvlink_domain": "rack-a"},
     "host x: nvlink_domain is set, but a CPU node has no multi-node NVLink"),
])
def test_a_domain_that_configures_nothing_is_refused(tmp_path: Path, host: dict[str, Any],
                                                     message: str) -> None:
    with pytest.raises(InputError, match=message):
        build(tmp_path, {"x": host, "g": {"gpu_profile": "pcie-l4-1gpu"}})
