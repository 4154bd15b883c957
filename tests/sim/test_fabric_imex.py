"""Multi-node NVLink: the simulated nvidia-smi's <fabric> block on a GB200 tray (one clique ID
and cluster UUID per NVLink domain, a GPU held back by gpuN-fabric-in-progress), parsed by the
nodes' XML parser and judged by validate; and validate's IMEX checks over the domain report
`nvidia-imex-ctl -N -j` prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gpucluster.fabric import fabric_checks, imex_checks, parse_imex_domain, parse_nodes_config
from gpucluster.nvsmi_xml import parse_nvidia_smi_xml
from gpucluster.validate import evaluate

from provisioner.errors import InputError
from provisioner.profiles import load_profiles
from provisioner.sim.faults import validate as validate_faults
from tests.sim.conftest import Bundled, run_tool
from tests.sim.test_nvidia_smi_sim import make_node

GB200 = load_profiles()["sim-gb200-4gpu"]


def xml_facts(bundled: Bundled, root: Path, host: str, faults: tuple[str, ...] = (),
              domain: str = "rack-a") -> dict[str, Any]:
    make_node(root, dict(GB200.sim_json(), hostname=host, nvlink_domain=domain),
              driver="580.159.04", cuda="13.0", faults=faults)
    result = run_tool(bundled("nvidia_smi"), root, "-q", "-x")
    assert result.returncode == 0, result.stderr
    return parse_nvidia_smi_xml(result.stdout)


def by_name(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in checks}


def test_every_gpu_of_a_domain_registers_in_one_partition(bundled: Bundled,
                                                          tmp_path: Path) -> None:
    one = xml_facts(bundled, tmp_path / "a", "sim-gpu-1")
    two = xml_facts(bundled, tmp_path / "b", "sim-gpu-2")
    other = xml_facts(bundled, tmp_path / "c", "sim-gpu-3", domain="rack-b")
    fabric = one["gpus"][0]["fabric"]
    assert fabric["state"] == "Completed" and fabric["status"] == "Success"
    assert fabric["health"] == {
        "summary": "Healthy", "bandwidth": "Full", "route_recovery_in_progress": "False",
        "route_unhealthy": "False", "access_timeout_recovery": "False",
        "incorrect_configuration": None, "partition_assigned": None}
    # The same clique and cluster on every node of rack-a, another on rack-b.
    assert {(g["fabric"]["clique_id"], g["fabric"]["cluster_uuid"])
            for g in one["gpus"] + two["gpus"]} == {(fabric["clique_id"], fabric["cluster_uuid"])}
    assert other["gpus"][0]["fabric"]["cluster_uuid"] != fabric["cluster_uuid"]
    checks = by_name(fabric_checks(one))
    assert [checks[f"gpu{i}_fabric"]["status"] for i in range(4)] == ["pass"] * 4
    assert checks["fabric_partition"]["status"] == "pass"


def test_a_gpu_still_in_progress_fails_naming_it(bundled: Bundled, tmp_path: Path) -> None:
    facts = xml_facts(bundled, tmp_path, "sim-gpu-1", faults=("gpu2-fabric-in-progress",))
    checks = by_name(evaluate({"gpu": facts}, {"multi_node_nvlink": True}))
    assert checks["gpu2_fabric"]["status"] == "fail"
    assert checks["gpu2_fabric"]["measured"] == "In Progress / N/A"
    assert "GPU2: NVLink fabric registration In Progress" in checks["gpu2_fabric"]["detail"]
    assert [checks[f"gpu{i}_fabric"]["status"] for i in (0, 1, 3)] == ["pass"] * 3
    # Not judged where the profile has no multi-node NVLink.
    assert not [c for c in evaluate({"gpu": facts}, {}) if "fabric" in c["name"]]


def test_two_partitions_on_one_node_fail() -> None:
    gpus = [{"index": i, "fabric": {"state": "Completed", "status": "Success",
                                    "clique_id": str(i % 2), "cluster_uuid": "u", "health": {}}}
            for i in range(4)]
    checks = by_name(fabric_checks({"gpus": gpus}))
    assert checks["fabric_partition"]["status"] == "fail"
    assert "2 NVLink partitions" in checks["fabric_partition"]["detail"]


def test_unhealthy_fabric_fields_and_an_old_driver_fail() -> None:
    def gpu(index: int, **health: str) -> dict[str, Any]:
        return {"index": index, "fabric": {"state": "Completed", "status": "Success",
                                           "clique_id": "2", "cluster_uuid": "u",
                                           "health": {"summary": "Healthy", **health}}}

    gpus = [gpu(0, bandwidth="Degraded"), {"index": 1, "fabric": None},
            gpu(2, summary="Limited Capacity", route_unhealthy="True"),
            gpu(3, bandwidth="Full", incorrect_configuration=None)]
    checks = by_name(fabric_checks({"gpus": gpus}))
    assert checks["gpu0_fabric"]["status"] == "fail"
    assert "bandwidth Degraded" in checks["gpu0_fabric"]["detail"]
    assert checks["gpu1_fabric"]["status"] == "fail"
    assert "no <fabric> block" in checks["gpu1_fabric"]["detail"]
    assert checks["gpu2_fabric"]["detail"].endswith(
        "fabric health: route_unhealthy True, summary Limited Capacity")
    assert checks["gpu3_fabric"]["status"] == "pass"


def test_the_fault_needs_a_multi_node_nvlink_profile() -> None:
    assert validate_faults(["gpu3-fabric-in-progress"], GB200.sim_json(), ["sim-gpu-1"])
    h100 = load_profiles()["sim-h100-8gpu"].sim_json()
    with pytest.raises(InputError, match="has no multi-node NVLink"):
        validate_faults(["gpu3-fabric-in-progress"], h100, ["sim-gpu-1"])


# The shape of `nvidia-imex-ctl -N -j` on a healthy GB200 domain, as quoted in
# aws/aws-parallelcluster's GB200 integration test (addresses and version here are ours).
def domain(status: str = "UP", second: str = "READY", link: str = "CONNECTED") -> str:
    return json.dumps({"nodes": {
        "0": {"status": "READY", "host": "10.0.0.1", "version": "580.159.04",
              "connections": {"1": {"host": "10.0.0.2", "status": link}}},
        "1": {"status": second, "host": "10.0.0.2", "version": "580.159.04",
              "connections": {"0": {"host": "10.0.0.1", "status": link}}}},
        "timestamp": "11/28/2026 03:40:00.000", "status": status})


EXPECTED = {"multi_node_nvlink": True, "nvlink_domain": "rack-a",
            "nvlink_domain_hosts": ["sim-gpu-1", "sim-gpu-2"]}


def imex(**over: Any) -> dict[str, Any]:
    base = {"service": "active", "nodes_config": ["10.0.0.1", "10.0.0.2"],
            "domain": parse_imex_domain(domain()), "channels": ["channel0"]}
    return {**base, **over}


def test_a_healthy_imex_domain_passes() -> None:
    checks = by_name(imex_checks(imex(), EXPECTED))
    assert {k: c["status"] for k, c in checks.items()} == {
        "imex_service": "pass", "imex_nodes_config": "pass", "imex_domain": "pass",
        "imex_channel": "pass"}
    assert checks["imex_domain"]["detail"] == "2 node(s) READY, all connected"


@pytest.mark.parametrize(("over", "name", "words"), [
    ({"service": "inactive"}, "imex_service", "nvidia-imex is inactive"),
    ({"nodes_config": ["10.0.0.1"]}, "imex_nodes_config", "lists 1 node(s); the NVLink domain "
                                                           "rack-a has 2 (sim-gpu-1, sim-gpu-2)"),
    ({"nodes_config": None, "nodes_config_error": "No such file or directory"},
     "imex_nodes_config", "nodes_config.cfg: No such file or directory"),
    ({"domain": parse_imex_domain(domain("DOWN", "UNAVAILABLE", "INVALID"))}, "imex_domain",
     "domain DOWN; 10.0.0.1 to 10.0.0.2 INVALID; node 10.0.0.2 UNAVAILABLE"),
    ({"domain": {"error": "nvidia-imex-ctl not found"}}, "imex_domain",
     "nvidia-imex-ctl -N -j: nvidia-imex-ctl not found"),
    ({"channels": []}, "imex_channel", "no IMEX channel"),
])
def test_each_imex_fault_fails_its_check(over: dict[str, Any], name: str, words: str) -> None:
    checks = by_name(imex_checks(imex(**over), EXPECTED))
    assert checks[name]["status"] == "fail"
    assert words in checks[name]["detail"]
    assert [c for c in checks.values() if c["status"] == "fail"] == [checks[name]]


def test_imex_is_judged_on_multi_node_nvlink_profiles_only() -> None:
    assert imex_checks(imex(service="inactive"), {"nvlink_domain_hosts": ["a"]}) == []


def test_the_nodes_config_skips_comments_and_blanks() -> None:
    assert parse_nodes_config("# the domain\n10.0.0.1\n\n 10.0.0.2  # tray 2\n") == [
        "10.0.0.1", "10.0.0.2"]
    with pytest.raises(ValueError):
        parse_imex_domain('{"status": "UP"}')


def test_the_simulated_imex_domain_reports_real_connections(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two daemons on two loopback addresses of a free port: both up, the domain is UP; one
    address without a daemon makes it DOWN, that node UNAVAILABLE and the links to it INVALID,
    as validate then reads them."""
    import socket
    import threading

    from provisioner.sim.tools import imex

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setattr(imex, "PORT", port)
    monkeypatch.setattr(imex, "TIMEOUT", 0.5)
    monkeypatch.setenv("GPU_SIM_ROOT", str(tmp_path))
    config = tmp_path / imex.NODES_CONFIG.lstrip("/")
    config.parent.mkdir(parents=True)
    servers = []
    for address in ("127.0.0.1", "127.0.0.2"):
        server = imex._Server((address, port), imex._Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    try:
        config.write_text("127.0.0.1\n127.0.0.2\n")
        up = parse_imex_domain(json.dumps(imex.domain_status()))
        assert up["status"] == "UP"
        assert [(n["host"], n["status"], n["connections"]) for n in up["nodes"]] == [
            ("127.0.0.1", "READY", {"1": "CONNECTED"}), ("127.0.0.2", "READY", {"0": "CONNECTED"})]
        stopped = servers.pop()
        stopped.shutdown()
        stopped.server_close()  # its port refuses connections, as a stopped daemon's does
        down = parse_imex_domain(json.dumps(imex.domain_status()))
        checks = by_name(imex_checks(imex_facts(down), EXPECTED))
        assert checks["imex_domain"]["status"] == "fail"
        assert checks["imex_domain"]["detail"] == (
            "domain DOWN; 127.0.0.1 to 127.0.0.2 INVALID; node 127.0.0.2 UNAVAILABLE; "
            "127.0.0.2 to 127.0.0.1 INVALID")
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def imex_facts(parsed: dict[str, Any]) -> dict[str, Any]:
    return imex(domain=parsed)
