"""`gpuc-health --quick`, the check Slurm's Prolog runs before each job, against the simulator's
stand-ins: it judges the devices (GPUs, memory, driver, PCIe, NVLink, RDMA ports, fabric
manager) with the full check's functions and leaves out the kernel log, DCGM, the error
counters and the installed toolkit; it keeps no state. Its time on the simulated 8-GPU node is
printed, not asserted (bench/ measures speed)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.health.conftest import LIB, PROGRAM, Node

MakeNode = Callable[..., Node]
ROOT = Path(__file__).resolve().parents[2]
SLURM_PROGRAM = ROOT / "roles" / "slurm_node" / "files" / "gpuc_slurm_health.py"
# Slurm's MessageTimeout default (slurm.conf(5)): the time slurm.conf(5) asks a Prolog to end in.
SLURM_MESSAGE_TIMEOUT_DEFAULT = 10


def statuses(result: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in result["checks"]}


def failing(result: dict[str, Any]) -> set[str]:
    return {name for name, status in statuses(result).items() if status == "fail"}


def load(path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("GPUC_HEALTH_LIB", str(LIB))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_judges_the_devices_only_and_prints_its_time(sim_node: MakeNode) -> None:
    node = sim_node()
    node.write()
    timings: dict[str, float] = {}
    results: dict[str, dict[str, Any]] = {}
    for mode, args in (("full", ()), ("quick", ("--quick",))):
        started = time.monotonic()
        done = node.run("--json", *args)
        timings[mode] = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr
        results[mode] = json.loads(done.stdout)
    quick, full = results["quick"], results["full"]
    print(f"\ngpuc-health on the simulated 8-GPU node (process wall, s): "
          f"quick {timings['quick']:.2f} (its own {quick['duration_seconds']}), "
          f"full {timings['full']:.2f} (its own {full['duration_seconds']})")
    assert (quick["mode"], full["mode"]) == ("quick", "full")
    names = set(statuses(quick))
    assert {"gpu_count", "gpu_model", "driver_version", "persistence_mode", "fabricmanager",
            "ib_ports"} <= names
    for idx in range(8):
        assert {f"gpu{idx}_memory", f"gpu{idx}_pcie", f"gpu{idx}_nvlink", f"gpu{idx}_clocks",
                f"ib_mlx5_{idx}_port1"} <= names
    left_out = set(statuses(full)) - names
    assert {"xid", "dcgm_health", "cuda_version", "cuda_driver_support"} <= left_out
    assert all(n.endswith("_errors") for n in left_out - {"xid", "dcgm_health", "cuda_version",
                                                           "cuda_driver_support"}), left_out
    assert names <= set(statuses(full))  # the same checks, by the same functions
    assert quick["measured"] == {"driver": "580.95.05", "driver_cuda": "13.0"}


@pytest.mark.parametrize(("fault", "check"), [
    ("gpu0-missing", "gpu_count"),
    ("gpu3-nvlink-link2-down", "gpu3_nvlink"),
    ("mlx5_0-down", "ib_mlx5_0_port1"),
    ("driver-other-version", "driver_version"),
    ("gpu2-ecc-uncorrectable", "gpu2_memory"),
    ("gpu4-pcie-downgrade", "gpu4_pcie"),
])
def test_a_device_fault_makes_quick_unhealthy_on_its_check(sim_node: MakeNode, fault: str,
                                                           check: str) -> None:
    rc, result = sim_node(fault).json("--quick")
    assert (rc, result["status_name"]) == (2, "unhealthy")
    assert check in failing(result), statuses(result)
    assert "dcgm_health" not in statuses(result)  # the ECC fault fails DCGM too, in the full check


def test_fabric_manager_stopped_fails_quick_on_nvswitch_nodes(sim_node: MakeNode) -> None:
    rc, result = sim_node(fabricmanager="inactive").json("--quick")
    assert rc == 2 and failing(result) == {"fabricmanager"}


def test_an_xid_in_the_kernel_log_is_the_full_checks_not_quicks(sim_node: MakeNode) -> None:
    node = sim_node("gpu2-xid-79")
    rc_full, full = node.json("--state", "")
    rc_quick, quick = node.json("--quick")
    assert (rc_full, failing(full)) == (2, {"xid"})
    assert rc_quick == 0 and "xid" not in statuses(quick)


def test_quick_keeps_no_state_and_asks_no_dcgm(sim_node: MakeNode) -> None:
    node = sim_node()
    calls = node.root / "dcgmi-calls"
    node.write()
    dcgmi = node.bin / "dcgmi"
    dcgmi.unlink()
    dcgmi.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexit 1\n")
    dcgmi.chmod(0o755)
    assert node.run("--json", "--quick").returncode == 0
    assert not (node.root / "state/state.json").exists()
    assert not calls.exists()
    assert node.run("--json").returncode == 1  # the full check asks DCGM: a warning here
    assert calls.exists() and (node.root / "state/state.json").exists()


@pytest.mark.parametrize("other", [["--textfile", "."], ["--ping", "peer"]])
def test_quick_takes_no_textfile_and_no_ping(sim_node: MakeNode, other: list[str]) -> None:
    done = sim_node().run("--quick", *other)
    assert done.returncode == 3 and "--quick takes neither" in done.stderr


def test_a_tool_past_the_quick_bound_is_could_not_check(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        sim_node: MakeNode) -> None:
    node = sim_node()
    node.write()
    slow = node.bin / "nvidia-smi"
    slow.unlink()
    slow.write_text("#!/bin/sh\nexec sleep 5\n")
    slow.chmod(0o755)
    health = load(PROGRAM, "gpuc_health_quick", monkeypatch)
    monkeypatch.setattr(health, "QUICK_TOOL_TIMEOUT", 0.3)
    monkeypatch.setenv("GPU_SIM_ROOT", str(node.root))
    monkeypatch.setenv("PATH", f"{node.bin}{os.pathsep}{os.environ['PATH']}")
    started = time.monotonic()
    rc = health.main(["--quick", "--json", "--expectations", str(node.root / "expected.json"),
                      "--ib-sysfs-root", str(node.root / "ib")])
    assert time.monotonic() - started < 4
    result = json.loads(capsys.readouterr().out)
    assert (rc, result["status_name"], result["checks"]) == (3, "unknown", [])
    assert result["problems"] == [
        f"{command} did not answer within 0.3 s (--quick's bound; the full check judges a tool "
        "that hangs)" for command in ("nvidia-smi -q -x", "nvidia-smi nvlink -s")]


def test_the_bounds_nest() -> None:
    """Each defined once: a tool within the Prolog's bound on the whole check (so the check
    answers before it is cut off), the Prolog within Slurm's MessageTimeout default, the quick
    bound below the full check's."""
    mp = pytest.MonkeyPatch()
    try:
        health = load(PROGRAM, "gpuc_health_bounds", mp)
        slurm = load(SLURM_PROGRAM, "gpuc_slurm_health_bounds", mp)
    finally:
        mp.undo()
    assert health.QUICK_TOOL_TIMEOUT < slurm.PROLOG_TIMEOUT < SLURM_MESSAGE_TIMEOUT_DEFAULT
    assert health.QUICK_TOOL_TIMEOUT < health.TOOL_TIMEOUT


def test_a_mig_gpu_without_its_planned_instances_fails_quick(sim_node: MakeNode) -> None:
    """The plan's MIG layout is judged before each job: GPU 0 split as planned passes, and the
    same GPU with its instances gone (what a failed gpuc-mig.service at boot leaves) fails on
    gpu0_mig, naming what is missing; its NVLink, which nvidia-smi does not report in MIG mode,
    is skipped."""
    layout = [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]] + [None] * 7
    node = sim_node(expected={"mig_layout": layout})
    node.write()
    env = {**os.environ, "GPU_SIM_ROOT": str(node.root)}
    smi = node.bin / "nvidia-smi"
    for args in (["-i", "0", "-mig", "1"], ["mig", "-i", "0", "-cgi",
                                             "3g.40gb,2g.20gb,1g.10gb,1g.10gb", "-C"]):
        done = subprocess.run([str(smi), *args], env=env, capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    rc, result = node.json("--quick")
    assert rc == 0, failing(result)
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["gpu0_mig"]["status"] == "pass" and checks["gpu1_mig"]["status"] == "pass"
    assert checks["gpu0_nvlink"]["status"] == "skip"
    done = subprocess.run([str(smi), "mig", "-i", "0", "-dci"], env=env, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stdout
    subprocess.run([str(smi), "mig", "-i", "0", "-dgi"], env=env, check=True,
                   capture_output=True)
    rc, result = node.json("--quick")
    assert rc == 2 and failing(result) == {"gpu0_mig"}, statuses(result)
    detail = {c["name"]: c["detail"] for c in result["checks"]}["gpu0_mig"]
    assert detail == "MIG instances none, the plan has 3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb"
