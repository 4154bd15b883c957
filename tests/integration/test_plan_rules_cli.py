"""Every stack rule refused through the real CLI: `provisioner plan` exits 2 with one line that
names the host and the variable, and `up` on the same inventory starts no run."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_cli import BIN

CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("driver too old for CUDA", "hgx-h100-8gpu",
     {"gpu_stack": "cuda-12.4", "nvidia_driver_version": "535.54.03-1"},
     "nvidia_driver_version 535.54.03 is too old for cuda_version 12.4"),
    ("Blackwell needs R570", "hgx-b200-8gpu", {"gpu_stack": "cuda-12.4"}, "gpu_stack"),
    ("Blackwell needs open modules", "hgx-b200-8gpu",
     {"gpu_stack": "cuda-12.8", "nvidia_driver_module_flavor": "proprietary"},
     "nvidia_driver_module_flavor"),
    ("cuDNN for another CUDA major", "hgx-h100-8gpu",
     {"gpu_stack": "cuda-13.0", "cudnn_version": "9.1.0.70"}, "cudnn_version"),
    ("NCCL newer than the driver's CUDA", "hgx-h100-8gpu",
     {"gpu_stack": "cuda-12.4", "nccl_version": "2.23.4-1+cuda12.6"}, "nccl_version"),
    ("fabric manager != driver", "hgx-h100-8gpu",
     {"gpu_stack": "cuda-12.4", "nvidia_fabricmanager_version": "550.54.14"},
     "nvidia_fabricmanager_version"),
    ("CUDA override too new for the driver", "hgx-h100-8gpu",
     {"gpu_stack": "cuda-12.4", "cuda_version": "12.6"}, "cuda_version"),
    ("unknown stack", "hgx-h100-8gpu", {"gpu_stack": "cuda-11.7"}, "gpu_stack"),
    # Per-GPU minimum drivers (profiles.yml min_driver).
    ("H200 on cuda-12.2", "hgx-h200-8gpu", {"gpu_stack": "cuda-12.2"},
     "NVIDIA H200 (10de:2335) needs (gpu_profile hgx-h200-8gpu: min_driver 550.90.07)"),
    ("H200 on cuda-12.4", "hgx-h200-8gpu", {"gpu_stack": "cuda-12.4"},
     "nvidia_driver_version 550.54.15 (from gpu_stack cuda-12.4) is older than NVIDIA H200"),
    ("B200 on cuda-12.8", "hgx-b200-8gpu", {"gpu_stack": "cuda-12.8"},
     "nvidia_driver_version 570.124.06 (from gpu_stack cuda-12.8) is older than NVIDIA B200 "
     "(10de:2901) needs (gpu_profile hgx-b200-8gpu: min_driver 570.133.20)"),
    ("L40S with 535.54.03", "pcie-l40s-4gpu",
     {"gpu_stack": "cuda-12.2", "nvidia_driver_version": "535.54.03-1"},
     "nvidia_driver_version 535.54.03 (as overridden) is older than NVIDIA L40S (10de:26b9) "
     "needs (gpu_profile pcie-l40s-4gpu: min_driver 535.104.05)"),
    # Volta: CUDA 13 dropped it; the open kernel modules never supported it.
    ("CUDA 13 on V100", "sxm2-v100-8gpu", {"gpu_stack": "cuda-13.0"},
     "cuda_version 13.0 cannot target volta GPUs"),
    ("CUDA 13 on V100 by default", "sxm2-v100-8gpu", {},
     "cuda_version 13.0 cannot target volta GPUs"),
    ("open modules on V100", "sxm2-v100-8gpu",
     {"gpu_stack": "cuda-11.8", "nvidia_driver_module_flavor": "open"},
     "nvidia_driver_module_flavor open is not supported on volta GPUs"),
]


@pytest.mark.parametrize(("why", "profile", "overrides", "variable"), CASES,
                         ids=[c[0] for c in CASES])
def test_plan_refuses_rule_violation(tmp_path: Path, why: str, profile: str,
                                     overrides: dict[str, Any], variable: str) -> None:
    inv = tmp_path / "hosts.yml"
    host = {"ansible_host": "gpu-07.invalid", "gpu_profile": profile, **overrides}
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-07": host}}}}}))
    env = {**os.environ, "PROVISIONER_RUNS_DIR": str(tmp_path / "runs")}
    for cmd in (["plan", "-i", str(inv)], ["up", "-i", str(inv), "--yes"]):
        out = subprocess.run([BIN, *cmd], capture_output=True, text=True, env=env, timeout=120,
                             check=False)
        assert out.returncode == 2, (why, out.stdout, out.stderr)
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, out.stderr
        assert "host gpu-07" in lines[0] and variable in lines[0], lines[0]
        assert "Traceback" not in out.stderr
    assert not (tmp_path / "runs").exists()


def plan(tmp_path: Path, hosts: dict[str, dict[str, Any]],
         group_vars: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    inv = tmp_path / "hosts.yml"
    group: dict[str, Any] = {"hosts": hosts}
    if group_vars:
        group["vars"] = group_vars
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": group}}}))
    env = {**os.environ, "PROVISIONER_RUNS_DIR": str(tmp_path / "runs")}
    return subprocess.run([BIN, "plan", "-i", str(inv), "--json"], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout == ""
    return lines[0]


# A mixed fleet: four V100 servers and four A100 servers in one inventory.
V100_HOSTS = {f"v100-0{i}": {"gpu_profile": "sxm2-v100-8gpu"} for i in range(1, 5)}
A100_HOSTS = {f"a100-0{i}": {"gpu_profile": "hgx-a100-8gpu"} for i in range(1, 5)}


@pytest.mark.parametrize("group_vars", [None, {"gpu_stack": "cuda-13.0"}],
                         ids=["default-stack", "group-cuda-13.0"])
def test_mixed_fleet_on_cuda_13_is_refused_naming_the_v100_host(
        tmp_path: Path, group_vars: dict[str, Any] | None) -> None:
    line = one_line(plan(tmp_path, {**A100_HOSTS, **V100_HOSTS}, group_vars))
    assert "host v100-0" in line and "cuda_version 13.0 cannot target volta GPUs" in line
    assert not (tmp_path / "runs").exists()


def test_mixed_fleet_split_across_cuda_majors_is_refused_naming_the_v100_host(
        tmp_path: Path) -> None:
    hosts = {**{h: {**v, "gpu_stack": "cuda-12.9"} for h, v in V100_HOSTS.items()},
             **{h: {**v, "gpu_stack": "cuda-13.0"} for h, v in A100_HOSTS.items()}}
    line = one_line(plan(tmp_path, hosts))
    assert line.endswith("host v100-01: volta GPUs (gpu_profile sxm2-v100-8gpu) cannot run "
                         "CUDA 13.0 like host a100-01 (gpu_stack cuda-13.0), and NCCL must "
                         "match on every node of a job; put the whole gpu_nodes group on CUDA "
                         "<= 12.9 (gpu_stack cuda-12.9 or older)")


@pytest.mark.parametrize(("hosts", "group_vars", "expected"), [
    (V100_HOSTS, {"gpu_stack": "cuda-11.8"},
     {"gpu_stack": "cuda-11.8", "nvidia_driver_version": "535.154.05",
      "nvidia_driver_module_flavor": "proprietary", "nccl_version": "2.15.5-1+cuda11.8",
      "nvidia_driver_dnf_module_stream": "nvidia-driver:535-dkms"}),
    ({**V100_HOSTS, **A100_HOSTS}, {"gpu_stack": "cuda-12.4"},
     {"gpu_stack": "cuda-12.4", "nvidia_driver_version": "550.54.15",
      "nccl_version": "2.21.5-1+cuda12.4"}),
    ({"h200-01": {"gpu_profile": "hgx-h200-8gpu"}},
     # 550.90.07 is no release of stacks.yml: given in full, as the Ubuntu repository lists it.
     {"gpu_stack": "cuda-12.4", "nvidia_driver_version": "550.90.07-1"},
     {"gpu_stack": "cuda-12.4", "nvidia_driver_version": "550.90.07",
      "nvidia_fabricmanager_version": "550.90.07", "cuda_version": "12.4"}),
    ({"b200-01": {"gpu_profile": "hgx-b200-8gpu"}}, None,
     {"gpu_stack": "cuda-13.0", "nvidia_fabricmanager_nvlsm_enabled": True,
      "nvidia_fabricmanager_kernel_modules": ["ib_umad"],
      "nvidia_driver_dnf_module_stream": "nvidia-driver:580-open"}),
], ids=["v100-cuda-11.8", "v100-a100-cuda-12.4", "h200-cuda-12.4-550.90.07", "b200-nvlsm"])
def test_plan_accepts(tmp_path: Path, hosts: dict[str, dict[str, Any]],
                      group_vars: dict[str, Any] | None, expected: dict[str, Any]) -> None:
    out = plan(tmp_path, hosts, group_vars)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert sorted(h["host"] for h in doc["hosts"]) == sorted(hosts)
    for host in doc["hosts"]:
        variables = host["variables"]
        assert {k: variables[k] for k in expected} == expected, host["host"]


def test_stacks_show_cuda_12_8_ubuntu_and_debian_revisions() -> None:
    out = subprocess.run([BIN, "stacks", "show", "cuda-12.8", "--json"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    ubuntu, debian = doc["packages"]["apt_ubuntu"]["driver"], doc["packages"]["apt"]["driver"]
    assert "cuda-drivers-570 570.124.06-0ubuntu1" in ubuntu["open"] + ubuntu["proprietary"]
    assert "cuda-drivers-570 570.124.06-1" in debian["open"] + debian["proprietary"]
    assert doc["dnf_module_streams"] == {"open": "nvidia-driver:570-open",
                                         "proprietary": "nvidia-driver:570-dkms"}
    b200 = doc["gpu_profiles"]["hgx-b200-8gpu"]
    assert b200["min_driver"] == "570.133.20" and "570.124.06" in b200["verdict"]


def test_profiles_lists_minimum_drivers() -> None:
    out = subprocess.run([BIN, "profiles", "--json"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    rows = {r["profile"]: r for r in json.loads(out.stdout)}
    assert rows["hgx-h200-8gpu"]["min_driver"] == "550.90.07"
    assert rows["sxm2-v100-8gpu"]["min_driver"] == "R384 (architecture)"
    assert rows["hgx-b200-8gpu"]["nvswitch"] == "gen 4"
    table = subprocess.run([BIN, "profiles"], capture_output=True, text=True, timeout=120,
                           check=False, env={**os.environ, "COLUMNS": "200"})
    assert table.returncode == 0 and "570.133.20" in table.stdout


def test_nccl_must_be_identical_across_nodes(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    hosts = {"gpu-01": {"gpu_profile": "hgx-h100-8gpu", "gpu_stack": "cuda-12.8"},
             "gpu-02": {"gpu_profile": "hgx-h100-8gpu", "gpu_stack": "cuda-12.9"}}
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    out = subprocess.run([BIN, "plan", "-i", str(inv)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 2
    assert "gpu-01" in out.stderr and "gpu-02" in out.stderr and "NCCL" in out.stderr.upper()
