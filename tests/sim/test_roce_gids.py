"""RoCE ports' GID tables: the simulated mlx5 table (link-local then IPv4-mapped, v1 and v2 each,
so the RoCE v2 IPv4 entry is index 3), read back by the sysfs reader the nodes run, and judged
by validate against the NCCL_IB_GID_INDEX of the node's /etc/nccl.conf. The mlx5_N-no-ipv4-gid
fault leaves only the link-local pair, as an interface without an IPv4 address does."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpucluster.ib_sysfs import parse_ib_sysfs_flat, read_ib_sysfs
from gpucluster.validate import evaluate

from provisioner.errors import InputError
from provisioner.profiles import load_profiles
from provisioner.sim.faults import validate as validate_faults
from provisioner.sim.sysfs import write_ib_sysfs

L40S = dict(load_profiles()["pcie-l40s-4gpu"].sim_json(), hostname="sim-gpu-1")
H100 = load_profiles()["sim-h100-8gpu"].sim_json()


def ports(tmp_path: Path, profile: dict[str, object], faults: list[str]) -> dict[str, object]:
    write_ib_sysfs(tmp_path, profile, faults)
    return {d["name"]: d["ports"][0] for d in read_ib_sysfs(str(tmp_path))["devices"]}


def test_the_roce_v2_ipv4_entry_is_read_from_the_table(tmp_path: Path) -> None:
    read = ports(tmp_path, L40S, ["mlx5_1-no-ipv4-gid"])
    assert read["mlx5_0"]["roce_v2_ipv4_gids"] == [3]
    assert read["mlx5_1"]["roce_v2_ipv4_gids"] == []
    gid = (tmp_path / "mlx5_0/ports/1/gids/3").read_text()
    assert gid.startswith("0000:0000:0000:0000:0000:ffff:0ac8:00")
    assert (tmp_path / "mlx5_0/ports/1/gid_attrs/types/3").read_text() == "RoCE v2\n"
    # InfiniBand ports have no RoCE GIDs to judge.
    ib = ports(tmp_path / "ib", dict(H100, hostname="n"), [])
    assert ib["mlx5_0"]["roce_v2_ipv4_gids"] is None


def test_a_flattened_dump_carries_the_table_too() -> None:
    dump = "\n".join([
        "mlx5_2/ports/1/link_layer: Ethernet", "mlx5_2/ports/1/state: 4: ACTIVE",
        "mlx5_2/ports/1/gids/0: fe80:0000:0000:0000:a288:c2ff:fe3b:506a",
        "mlx5_2/ports/1/gid_attrs/types/0: IB/RoCE v1",
        "mlx5_2/ports/1/gids/5: 0000:0000:0000:0000:0000:ffff:0ac8:010a",
        "mlx5_2/ports/1/gid_attrs/types/5: RoCE v2",
        "mlx5_2/ports/1/gids/4: 0000:0000:0000:0000:0000:ffff:0ac8:010a",
        "mlx5_2/ports/1/gid_attrs/types/4: IB/RoCE v1"])
    [device] = parse_ib_sysfs_flat(dump)["devices"]
    assert device["ports"][0]["roce_v2_ipv4_gids"] == [5]
    # Without a GID table the port cannot be judged (None), and validate says so.
    [bare] = parse_ib_sysfs_flat("mlx5_3/ports/1/link_layer: Ethernet\n"
                                 "mlx5_3/ports/1/state: 4: ACTIVE")["devices"]
    assert bare["ports"][0]["roce_v2_ipv4_gids"] is None
    checks = {c["name"]: c for c in evaluate({"ib": {"devices": [bare]}}, {
        "ib_hcas": 1, "ib_rate_gbps": 0, "fabric": "roce"})}
    assert checks["ib_mlx5_3_port1"]["status"] == "fail"
    assert "its GID table could not be read" in checks["ib_mlx5_3_port1"]["detail"]


def test_a_table_of_zeros_has_no_entry(tmp_path: Path) -> None:
    port = tmp_path / "mlx5_0" / "ports" / "1"
    (port / "gids").mkdir(parents=True)
    (port / "link_layer").write_text("Ethernet\n")
    for index in range(4):
        (port / "gids" / str(index)).write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    [device] = read_ib_sysfs(str(tmp_path))["devices"]
    assert device["ports"][0]["roce_v2_ipv4_gids"] == []


def roce_checks(tmp_path: Path, faults: list[str], nccl: str | None) -> dict[str, dict[str, object]]:
    write_ib_sysfs(tmp_path, L40S, faults)
    ib = read_ib_sysfs(str(tmp_path))
    ib["nccl_ib_gid_index"] = nccl
    expected = {"ib_hcas": 2, "ib_rate_gbps": 200, "fabric": "roce"}
    return {c["name"]: c for c in evaluate({"ib": ib}, expected)}


@pytest.mark.parametrize(("faults", "nccl", "failing", "says"), [
    ([], "3", [], ""),
    ([], None, [], ""),  # unset: NCCL picks the entry itself
    ([], "-1", [], ""),
    ([], "1", ["ib_mlx5_0_port1", "ib_mlx5_1_port1"],
     "NCCL_IB_GID_INDEX 1 is not its RoCE v2 IPv4 GID (index 3)"),
    (["mlx5_1-no-ipv4-gid"], "3", ["ib_mlx5_1_port1"], "no RoCE v2 IPv4 GID"),
    ([], "three", ["ib_mlx5_0_port1", "ib_mlx5_1_port1"], "NCCL_IB_GID_INDEX 'three' is not"),
])
def test_validate_judges_each_roce_port_against_the_nccl_setting(
        tmp_path: Path, faults: list[str], nccl: str | None, failing: list[str],
        says: str) -> None:
    checks = roce_checks(tmp_path, faults, nccl)
    failed = sorted(name for name, c in checks.items() if c["status"] == "fail"
                    and name != "ib_ports")
    assert failed == failing, checks
    for name in failing:
        assert says in str(checks[name]["detail"])
    assert checks["ib_mlx5_0_port1"]["measured"].endswith(
        "RoCE v2 IPv4 GID " + ("none" if "mlx5_0-no-ipv4-gid" in faults else "3"))
    assert (checks["ib_ports"]["status"] == "pass") is (not failing)


def test_the_fault_is_a_roce_ports() -> None:
    with pytest.raises(InputError, match="fabric is infiniband: a GID table's IPv4 entry is a "
                                         "RoCE port's"):
        validate_faults(["sim-gpu-1:mlx5_0-no-ipv4-gid"], H100, ["sim-gpu-1"])
    assert validate_faults(["sim-gpu-1:mlx5_0-no-ipv4-gid"], L40S, ["sim-gpu-1"])


def test_the_nodes_gid_index_is_the_ipv4_entry_every_roce_port_has(tmp_path: Path) -> None:
    """rdma_gid_index's policy (the rdma role's NCCL_IB_GID_INDEX auto) on the simulated table."""
    from gpucluster.ib_sysfs import roce_gid_index

    write_ib_sysfs(tmp_path / "ok", L40S, [])
    assert roce_gid_index(read_ib_sysfs(str(tmp_path / "ok"))) == {
        "index": 3, "ports": {"mlx5_0/1": [3], "mlx5_1/1": [3]}, "problem": None}
    write_ib_sysfs(tmp_path / "bare", L40S, ["mlx5_1-no-ipv4-gid"])
    bare = roce_gid_index(read_ib_sysfs(str(tmp_path / "bare")))
    assert bare["index"] is None
    assert bare["problem"] == ("no RoCE v2 IPv4-mapped GID on mlx5_1/1 (its network interface "
                               "has no IPv4 address)")
    write_ib_sysfs(tmp_path / "ib", dict(H100, hostname="n"), [])
    assert roce_gid_index(read_ib_sysfs(str(tmp_path / "ib")))["problem"].startswith(
        "no RoCE (Ethernet link layer) port under ")


def test_ports_without_a_common_index_have_none() -> None:
    from gpucluster.ib_sysfs import roce_gid_index

    ib = {"devices": [{"name": "mlx5_0", "ports": [
        {"number": 1, "link_layer": "Ethernet", "roce_v2_ipv4_gids": [3, 5]}]},
        {"name": "mlx5_1", "ports": [
            {"number": 1, "link_layer": "Ethernet", "roce_v2_ipv4_gids": [2]}]}]}
    got = roce_gid_index(ib)
    assert got["index"] is None
    assert got["problem"] == ("the RoCE ports' RoCE v2 IPv4 GIDs share no index: mlx5_0/1 3,5; "
                              "mlx5_1/1 2")
    ib["devices"][1]["ports"][0]["roce_v2_ipv4_gids"] = [5, 3]
    assert roce_gid_index(ib)["index"] == 3
