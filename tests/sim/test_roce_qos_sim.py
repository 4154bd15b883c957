"""The simulated RoCE node's PFC and ECN: each HCA's GID table names its interface
(gid_attrs/ndevs), the interface's ECN enable files are on at priority 3 (off everywhere with
mlx5_N-ecn-off), and the stand-in dcb reports PFC on priority 3 (off with mlx5_N-pfc-off). Read
back by the reader the nodes run (module_utils roce_qos) and judged by validate."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from gpucluster.roce_qos import read_roce_qos
from gpucluster.validate import evaluate

from provisioner.errors import InputError
from provisioner.profiles import load_profiles
from provisioner.sim import cluster
from provisioner.sim.faults import ROCE_PRIORITY, parse_fault
from provisioner.sim.faults import validate as validate_faults
from provisioner.sim.sysfs import roce_netdev, write_ib_sysfs, write_net_sysfs
from tests.sim.conftest import Bundled, run_tool, write_faults

L40S = dict(load_profiles()["pcie-l40s-4gpu"].sim_json(), hostname="sim-gpu-1")
H100 = dict(load_profiles()["sim-h100-8gpu"].sim_json(), hostname="sim-gpu-1")


def node(tmp_path: Path, profile: dict[str, object], *faults: str) -> Path:
    """A simulated node's root: profile, fault file, and the sysfs trees at the sim's paths."""
    root = tmp_path / "node"
    (root / "etc/gpu-sim").mkdir(parents=True, exist_ok=True)
    (root / "etc/gpu-sim/profile.json").write_text(json.dumps(profile))
    write_faults(root, *faults)
    write_ib_sysfs(root / cluster.SIM_IB_SYSFS.lstrip("/"), profile, list(faults))
    write_net_sysfs(root / cluster.SIM_NET_SYSFS.lstrip("/"), profile, list(faults))
    return root


def dcb_runner(dcb: Path, root: Path) -> Callable[[list[str]], tuple[str | None, object]]:
    """gpu_node_facts' run_tool over the bundled stand-in: (output, None) or (None, [why])."""

    def run(args: list[str]) -> tuple[str | None, object]:
        if args[0] != "dcb":
            return None, f"{args[0]} not found"
        done: subprocess.CompletedProcess[str] = run_tool(dcb, root, *args[1:])
        if done.returncode:
            return None, done.stderr.strip().splitlines()[-1:]
        return done.stdout, None

    return run


def roce_checks(bundled: Bundled, tmp_path: Path, *faults: str) -> dict[str, dict[str, object]]:
    root = node(tmp_path, L40S, *faults)
    facts = read_roce_qos(str(root / cluster.SIM_IB_SYSFS.lstrip("/")),
                          str(root / cluster.SIM_NET_SYSFS.lstrip("/")),
                          dcb_runner(bundled("dcb"), root))
    return {c["name"]: c for c in evaluate({"roce_qos": facts}, {"fabric": "roce"})}


def test_each_roce_hca_names_its_interface_which_has_ecn_on_priority_3(tmp_path: Path) -> None:
    root = node(tmp_path, L40S)
    ib = root / cluster.SIM_IB_SYSFS.lstrip("/")
    net = root / cluster.SIM_NET_SYSFS.lstrip("/")
    assert roce_netdev(0) == "enp160s0f0np0"  # on hca_address's bus 0xa0
    for number in (0, 1):
        netdev = roce_netdev(number)
        ndevs = ib / f"mlx5_{number}/ports/1/gid_attrs/ndevs"
        # One entry per populated GID (link-local and IPv4-mapped, v1 and v2), none for unused.
        assert sorted(p.name for p in ndevs.iterdir()) == ["0", "1", "2", "3"]
        assert {(ndevs / i).read_text() for i in "0123"} == {f"{netdev}\n"}
        for point in ("roce_np", "roce_rp"):
            enable = net / netdev / "ecn" / point / "enable"
            assert [(enable / str(p)).read_text() for p in range(8)] == [
                "1\n" if p == ROCE_PRIORITY else "0\n" for p in range(8)]
    assert sorted(p.name for p in net.iterdir()) == ["enp160s0f0np0", "enp161s0f0np0"]


def test_ecn_off_is_that_ports_only_and_healing_restores_it(tmp_path: Path) -> None:
    root = node(tmp_path, L40S, "mlx5_1-ecn-off")
    net = root / cluster.SIM_NET_SYSFS.lstrip("/")
    off = net / "enp161s0f0np0/ecn/roce_rp/enable"
    assert {(off / str(p)).read_text() for p in range(8)} == {"0\n"}
    assert (net / "enp160s0f0np0/ecn/roce_rp/enable/3").read_text() == "1\n"
    write_net_sysfs(net, L40S, [])
    assert (off / "3").read_text() == "1\n"
    # An InfiniBand profile has no interfaces here; simulated ones left over are removed.
    write_net_sysfs(net, H100, [])
    assert list(net.iterdir()) == []


def test_the_stand_in_dcb_answers_pfc_show_for_the_simulated_interfaces(
        bundled: Bundled, tmp_path: Path) -> None:
    dcb = bundled("dcb")
    root = node(tmp_path, L40S, "mlx5_1-pfc-off")
    on = run_tool(dcb, root, "pfc", "show", "dev", "enp160s0f0np0")
    assert on.returncode == 0, on.stderr
    assert on.stdout == ("pfc-cap 8 macsec-bypass off delay 0 \n"
                         "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off \n")
    off = run_tool(dcb, root, "pfc", "show", "dev", "enp161s0f0np0")
    assert "3:off" in off.stdout and ":on" not in off.stdout
    other = run_tool(dcb, root, "pfc", "show", "dev", "eth0")
    assert other.returncode == 1
    assert other.stderr == "dcb (SIMULATED): eth0 is not the interface of a simulated RoCE HCA\n"
    assert run_tool(dcb, root, "ets", "show", "dev", "enp160s0f0np0").returncode == 1


@pytest.mark.parametrize(("faults", "statuses", "measured"), [
    ((), {"roce_qos_mlx5_0_port1": "pass", "roce_qos_mlx5_1_port1": "pass"}, "PFC 3; ECN 3"),
    # One mechanism off: the other still carries priority 3.
    (("mlx5_1-ecn-off",), {"roce_qos_mlx5_0_port1": "pass", "roce_qos_mlx5_1_port1": "pass"},
     "PFC 3; ECN off"),
    (("mlx5_1-ecn-off", "mlx5_1-pfc-off"),
     {"roce_qos_mlx5_0_port1": "pass", "roce_qos_mlx5_1_port1": "warn"}, "PFC off; ECN off"),
])
def test_validate_reports_the_simulated_ports(bundled: Bundled, tmp_path: Path,
                                              faults: tuple[str, ...], statuses: dict[str, str],
                                              measured: str) -> None:
    checks = roce_checks(bundled, tmp_path, *faults)
    assert {name: c["status"] for name, c in checks.items()} == statuses
    assert checks["roce_qos_mlx5_1_port1"]["measured"] == measured
    assert str(checks["roce_qos_mlx5_1_port1"]["detail"]).startswith("mlx5_1/1 (enp161s0f0np0): ")


def test_the_faults_are_a_roce_ports() -> None:
    for fault, what in (("mlx5_0-ecn-off", "ECN on an HCA port"),
                        ("mlx5_0-pfc-off", "PFC on an HCA port")):
        parsed = parse_fault(fault)
        assert parsed is not None and parsed.hca == 0
        with pytest.raises(InputError, match=f"fabric is infiniband: {what} is a RoCE port's"):
            validate_faults([f"sim-gpu-1:{fault}"], H100, ["sim-gpu-1"])
        assert validate_faults([f"sim-gpu-1:{fault}"], L40S, ["sim-gpu-1"])
    with pytest.raises(InputError, match="has 2 HCAs"):
        validate_faults(["mlx5_2-ecn-off"], L40S, ["sim-gpu-1"])


def test_a_roce_node_gets_the_stand_in_and_the_inventory_points_validate_at_its_files() -> None:
    roce = {path: mode for path, _data, mode in
            cluster.sim_files("gpu_nodes", L40S, [], "6.1.0-test")}
    assert roce["usr/local/bin/dcb"] == 0o755
    net = cluster.sim_inventory_vars()["gpu_validate_net_sysfs_root"]
    assert net == cluster.SIM_NET_SYSFS == f"{cluster.SIM_SYSFS}/class/net"
    assert f"{str(net).lstrip('/')}/enp160s0f0np0/ecn/roce_np/enable/3" in roce
    ib_node = {path for path, _data, _mode in
               cluster.sim_files("gpu_nodes", H100, [], "6.1.0-test")}
    assert "usr/local/bin/dcb" not in ib_node
    assert not any(p.startswith(str(net).lstrip("/")) for p in ib_node)
