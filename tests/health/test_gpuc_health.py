"""gpuc-health against the simulator's stand-ins: each fault turns exactly its check, the exit
status follows Slurm/NPD conventions, Xid events are reported since the last run, and the
textfile parses with prometheus_client's parser."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.health.conftest import PROGRAM, Node

MakeNode = Callable[..., Node]


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in result["checks"]}


def not_passing(result: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in result["checks"]
            if c["status"] in ("fail", "warn")}


def test_healthy_node_exits_0_in_under_5_seconds(sim_node: MakeNode) -> None:
    node = sim_node()
    started = time.monotonic()
    rc, result = node.json()
    assert time.monotonic() - started < 5
    assert (rc, result["status"], result["status_name"]) == (0, 0, "healthy"), not_passing(result)
    names = set(by_name(result))
    assert {"gpu_count", "gpu_model", "driver_version", "cuda_version", "cuda_driver_support",
            "gpu0_memory", "gpu7_nvlink", "ib_mlx5_7_port1", "ib_ports", "xid",
            "fabricmanager", "persistence_mode", "gpu3_clocks", "dcgm_health"} <= names
    assert result["measured"] == {"driver": "580.95.05", "driver_cuda": "13.0",
                                  "cuda_toolkit": "13.0.2", "nccl": "2.27.7"}


@pytest.mark.parametrize(("fault", "check"), [
    ("gpu3-nvlink-link2-down", "gpu3_nvlink"),
    ("gpu5-missing", "gpu_count"),
    ("mlx5_0-down", "ib_mlx5_0_port1"),
    ("mlx5_2-half-rate", "ib_mlx5_2_port1"),
    ("gpu2-xid-79", "xid"),
    ("driver-other-version", "driver_version"),
])
def test_a_fault_makes_the_node_unhealthy_on_its_check(sim_node: MakeNode, fault: str,
                                                       check: str) -> None:
    rc, result = node_result = sim_node(fault).json()
    del node_result
    assert rc == 2 and result["status_name"] == "unhealthy"
    assert by_name(result)[check]["status"] == "fail"


def test_ecc_fault_fails_memory_and_the_dcgm_health_watch(sim_node: MakeNode) -> None:
    rc, result = sim_node("gpu2-ecc-uncorrectable").json()
    assert rc == 2
    assert {k for k, v in not_passing(result).items() if v == "fail"} == {"gpu2_memory",
                                                                          "dcgm_health"}
    assert "GPU ID: 2 Failure" in by_name(result)["dcgm_health"]["detail"]


def test_persistence_off_is_degraded_not_unhealthy(sim_node: MakeNode) -> None:
    node = sim_node()
    node.write()
    done = node.run("--json")
    assert done.returncode == 0
    (node.root / "var/lib/gpu-sim/persistence").unlink()
    node.write = lambda: None  # type: ignore[method-assign]  # keep persistence off
    rc_result = node.run("--json")
    assert rc_result.returncode == 1, rc_result.stdout


def test_fabric_manager_stopped_fails_on_nvswitch_nodes(sim_node: MakeNode) -> None:
    rc, result = sim_node(fabricmanager="inactive").json()
    assert rc == 2
    assert not_passing(result) == {"fabricmanager": "fail"}
    rc, result = sim_node(fabricmanager="inactive", expected={"nvswitch": False}).json()
    assert rc == 0 and by_name(result)["fabricmanager"]["status"] == "skip"


def test_wrong_cuda_toolkit_fails_cuda_version(sim_node: MakeNode) -> None:
    node = sim_node(stack={"name": "x", "driver_version": "580.95.05", "cuda_version": "12.9"})
    rc, result = node.json()
    assert rc == 2 and not_passing(result) == {"cuda_version": "fail"}
    assert by_name(result)["cuda_version"]["measured"] == "13.0.2"


def test_xid_is_reported_since_the_last_run_and_fatal_ones_stay(sim_node: MakeNode) -> None:
    node = sim_node("gpu1-xid-13")
    rc, result = node.json()
    assert rc == 1 and by_name(result)["xid"]["status"] == "warn"
    rc, result = node.json()  # the same non-fatal event is not reported twice
    assert rc == 0 and by_name(result)["xid"]["status"] == "pass"
    node.faults.append("gpu4-xid-79")
    rc, result = node.json()
    assert rc == 2 and "Xid 79" in by_name(result)["xid"]["detail"]
    rc, result = node.json()  # fatal: stays until reboot or --clear-xid
    assert rc == 2
    rc, result = node.json("--clear-xid")
    assert rc == 0, not_passing(result)


def test_missing_expectations_cannot_check(sim_node: MakeNode, tmp_path: Path) -> None:
    node = sim_node()
    done = node.run("--expectations", str(tmp_path / "absent.json"))
    assert done.returncode == 3
    assert "could not check" in done.stdout and "absent.json" in done.stdout


def test_no_nvidia_smi_cannot_check(sim_node: MakeNode) -> None:
    node = sim_node()
    node.write()
    (node.bin / "nvidia-smi").unlink()
    node.write = lambda: None  # type: ignore[method-assign]
    done = node.run("--json")
    assert done.returncode == 3 and "nvidia-smi not found" in done.stdout


def test_bad_usage_is_exit_3_in_one_line(sim_node: MakeNode, tmp_path: Path) -> None:
    done = sim_node().run("--textfile", str(tmp_path / "nope"))
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "not a directory" in done.stderr


def test_textfile_parses_with_prometheus_client(sim_node: MakeNode, tmp_path: Path) -> None:
    out = tmp_path / "textfile"
    out.mkdir()
    node = sim_node("gpu3-nvlink-down")
    before = time.time()
    done = node.run("--textfile", str(out))
    assert done.returncode == 2
    assert [p.name for p in out.iterdir()] == ["gpucluster_health.prom"]  # no temp file left
    families = {f.name: f for f in text_string_to_metric_families(
        (out / "gpucluster_health.prom").read_text())}
    assert set(families) == {"gpucluster_health_ok", "gpucluster_health_status",
                             "gpucluster_health_last_run_timestamp_seconds",
                             "gpucluster_health_duration_seconds", "gpucluster_stack_info"}
    assert all(f.type == "gauge" for f in families.values())
    ok = {s.labels["check"]: s.value for s in families["gpucluster_health_ok"].samples}
    assert ok["gpu3_nvlink"] == 0 and ok["gpu2_nvlink"] == 1 and ok["gpu_count"] == 1
    assert families["gpucluster_health_status"].samples[0].value == 2
    stamp = families["gpucluster_health_last_run_timestamp_seconds"].samples[0].value
    assert before <= stamp <= time.time()
    info = families["gpucluster_stack_info"].samples[0]
    assert info.labels == {"stack": "cuda-13.0", "driver": "580.95.05", "cuda": "13.0.2",
                           "nccl": "2.27.7"} and info.value == 1


def test_program_is_stdlib_only() -> None:
    import ast
    import sys

    tree = ast.parse(PROGRAM.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported - set(sys.stdlib_module_names) == {"gpucluster"}


def test_the_toolkit_read_is_the_planned_one_unless_told_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """/usr/local/cuda is whichever toolkit the alternatives link points at (and RPM systems
    may have none): gpuc-health reads the planned /usr/local/cuda-X.Y by default."""
    import importlib.util

    from tests.health.conftest import LIB, PROGRAM

    monkeypatch.setenv("GPUC_HEALTH_LIB", str(LIB))
    spec = importlib.util.spec_from_file_location("gpuc_health_program", PROGRAM)
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    assert program.planned_cuda_root({"cuda_version": "12.9"}) == "/usr/local/cuda-12.9"
    assert program.planned_cuda_root({}) == "/usr/local/cuda"
    assert program.planned_cuda_root({"cuda_version": "12.9; rm -rf /"}) == "/usr/local/cuda"
