"""RoCE on the simulated cluster (pcie-l40s-4gpu: two RoCE ConnectX ports a node, whose GID
tables hold link-local and IPv4-mapped entries, v1 and v2 each): `up` writes the
NCCL_IB_GID_INDEX it reads from the node's GID tables (3, the RoCE v2 IPv4 entry) into
/etc/nccl.conf and the report, and validate judges it on every port and reports each port's
PFC and ECN (a port with neither is a warning); a port whose interface
has lost its IPv4 address (mlx5_N-no-ipv4-gid) fails the rdma role's preflight naming the port,
and validate names it too. The module starts its own cluster."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import newest_report, own_cluster, podman_exec, sim_up_profile

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e


def sim_up(cli: Cli, inv: Path, *faults: str) -> None:
    sim_up_profile(cli, inv, "pcie-l40s-4gpu", *faults)


@pytest.fixture(scope="module")
def roce(cli: Cli, tmp_path_factory: pytest.TempPathFactory, runs_dir: Path) -> Path:
    inv = tmp_path_factory.mktemp("inv-roce")
    return own_cluster(cli, inv, "pcie-l40s-4gpu")


def test_the_gid_index_comes_from_the_nodes_tables(roce: Path, runs_dir: Path) -> None:
    report = newest_report(runs_dir)
    for node in ("sim-gpu-1", "sim-gpu-2"):
        conf = podman_exec(node, "cat /etc/nccl.conf").stdout.splitlines()
        assert "NCCL_IB_GID_INDEX=3" in conf, conf
        gid = report["hosts"][node]["facts"]["rdma"]["gid_index"]
        assert gid == {"index": 3, "from": "node", "ports": {"mlx5_0/1": [3], "mlx5_1/1": [3]}}
        ports = {c["name"]: c for c in report["checks"]
                 if c["host"] == node and c["name"].startswith("ib_mlx5_")
                 and not c["name"].endswith("_errors")}
        assert sorted(ports) == ["ib_mlx5_0_port1", "ib_mlx5_1_port1"], ports
        for check in ports.values():
            assert check["status"] == "pass" and "RoCE v2 IPv4 GID 3" in check["measured"], check
        # PFC (dcb) and ECN (the mlx5 ecn files) as the node shows them, per port.
        qos = {c["name"]: (c["status"], c["measured"]) for c in report["checks"]
               if c["host"] == node and c["name"].startswith("roce_qos_")}
        assert qos == {f"roce_qos_mlx5_{i}_port1": ("pass", "PFC 3; ECN 3") for i in (0, 1)}, qos


def test_a_port_with_neither_pfc_nor_ecn_is_reported(cli: Cli, roce: Path,
                                                     runs_dir: Path) -> None:
    sim_up(cli, roce, "sim-gpu-2:mlx5_1-ecn-off", "sim-gpu-2:mlx5_1-pfc-off")
    try:
        cli("validate", "--inventory", str(roce), "--limit", "sim-gpu-2")
        checks = {c["name"]: c for c in newest_report(runs_dir)["checks"]
                  if c["name"].startswith("roce_qos_")}
        port = checks["roce_qos_mlx5_1_port1"]
        assert (port["status"], port["measured"]) == ("warn", "PFC off; ECN off"), port
        assert "switches' PFC and ECN are not read" in port["detail"], port
        assert checks["roce_qos_mlx5_0_port1"]["status"] == "pass", checks
    finally:
        sim_up(cli, roce)


def test_a_port_without_an_ipv4_gid_stops_the_rdma_role_naming_it(
        cli: Cli, roce: Path, runs_dir: Path) -> None:
    sim_up(cli, roce, "sim-gpu-2:mlx5_1-no-ipv4-gid")
    try:
        out = cli("up", "--inventory", str(roce), "--yes", "--skip-smoke")
        assert out.returncode != 0
        said = " ".join((out.stdout + out.stderr).split())  # the console wraps long lines
        assert ("host sim-gpu-2: NCCL_IB_GID_INDEX: no RoCE v2 IPv4-mapped GID on mlx5_1/1 "
                "(its network interface has no IPv4 address)") in said, said[-3000:]
        assert "must map environment variable names" not in said
        lost = newest_report(runs_dir)["lost_hosts"]
        assert list(lost) == ["sim-gpu-2"], lost
        # The configured index is still judged by validate against the port's table.
        check = cli("validate", "--inventory", str(roce), "--limit", "sim-gpu-2")
        assert check.returncode != 0
        port = next(c for c in newest_report(runs_dir)["checks"]
                    if c["name"] == "ib_mlx5_1_port1")
        assert port["status"] == "fail", port
    finally:
        sim_up(cli, roce)
