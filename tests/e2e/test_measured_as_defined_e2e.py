"""What the smoke job says it measured and installed, on the simulated cluster.

On the shared cluster, the first `up`'s report states every skip with its reason (nccl-tests:
the simulator's nvcc stand-in cannot compile; ib_write_bw: no RDMA device) and the wheelhouse
pins every wheel by its sha256. On a cluster of its own, Debian 13 ("trixie", Python 3.13 where
this controller runs 3.11), `provisioner smoke --framework tensorflow` installs TensorFlow's CPU build
from hashed wheels built for the node's Python, found by the smoke phase's fresh facts. No `up` there: preflight refuses Debian
13 by design (the stack matrix has no debian13 repository), and the smoke job on the simulated
cluster needs no NVIDIA stack (gloo on CPU processes).

The module builds its own cluster, so it runs after the shared cluster's modules (conftest's
OWN_CLUSTER_MODULES); its first test reads only the first `up`'s report and the mirror
directory, not the running nodes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import FirstUp, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.e2e

# roles/rdma/tasks/bandwidth.yml, where a host has nothing to measure.
NO_RDMA = "no RDMA device with an ACTIVE port and a verbs device on this host (ibv_devices lists "
# roles/smoke_job's default for the PyTorch job.
SMOKE_VENV = "/opt/gpu-cluster-provisioner/smoke-venv"
SMOKE_VENV_TF = SMOKE_VENV + "-tensorflow"
# Building the node image (debootstrap) and downloading PyTorch for a new platform take long.
SLOW_S = 3600


def podman_exec(node: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shutil.which("podman") or "podman", "exec", node, "sh", "-c", script],
                          capture_output=True, text=True, timeout=300, check=False)


def wheelhouse_dir(inventory: Path) -> Path:
    """Where `provisioner` put the wheelhouse: the mirror directory the inventory names."""
    data = yaml.safe_load((inventory / "hosts.yml").read_text())
    return Path(data["all"]["vars"]["gpu_package_source_dir"]) / "wheels"


def platform_key(report: dict[str, Any], host: str) -> str:
    """cpXY-machine from what the smoke phase's facts.yml published for ``host``."""
    published = report["hosts"][host]["facts"]["node_platform"]
    version = published["python"]["version"]
    return f"cp{version['major']}{version['minor']}-{published['architecture']}"


def requirement_lines(path: Path) -> dict[str, str]:
    """requirements.txt's requirement lines by project name."""
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return {ln.split("==", 1)[0]: ln for ln in lines}


def test_first_up_states_every_skip_and_hashes_every_wheel(first_up: FirstUp,
                                                           sim_inventory: Path) -> None:
    assert first_up.returncode == 0, first_up.stdout[-3000:] + first_up.stderr
    report = first_up.report
    gpu = sorted(h for h, v in report["hosts"].items() if v["kind"] == "gpu")
    assert gpu == ["sim-gpu-1", "sim-gpu-2"]

    nccl = {r["host"]: r for r in report["smoke"]["runs"] if r["label"].startswith("nccl-tests")}
    assert sorted(nccl) == gpu
    for host, run in nccl.items():
        summary = run["verdict"]["summary"]
        assert summary.startswith("SKIPPED: ") and "nvcc" in summary, (host, summary)
    busbw = {c["host"]: c for c in report["checks"] if c["name"] == "nccl_tests_busbw"}
    assert sorted(busbw) == gpu
    assert all(c["status"] == "skip" and c["phase"] == "smoke" for c in busbw.values()), busbw

    for host in gpu:
        bandwidth = report["hosts"][host]["facts"]["rdma"]["bandwidth"]
        assert str(bandwidth["skipped"]).startswith(NO_RDMA), (host, bandwidth)

    for key in sorted({platform_key(report, host) for host in gpu}):
        requirements = requirement_lines(wheelhouse_dir(sim_inventory) / key / "requirements.txt")
        assert "torch" in requirements and "numpy" in requirements, requirements
        unhashed = [ln for ln in requirements.values() if "--hash=sha256:" not in ln]
        assert unhashed == [], unhashed


@pytest.fixture(scope="module")
def trixie(cli: Cli, tmp_path_factory: pytest.TempPathFactory, runs_dir: Path) -> Path:
    """A fresh Debian 13 cluster: one login node, one GPU node (sim-gpu-1), nothing installed.
    Left running at the end: the next `sim up` of another shape replaces it."""
    inv = tmp_path_factory.mktemp("inv-debian13")
    out = cli("sim", "up", "--os", "debian13", "--nodes", "2", "--recreate",
              "--inventory-dir", str(inv), timeout=SLOW_S)
    assert out.returncode == 0, out.stderr + out.stdout
    return inv


# The smoke job's TensorFlow framework: tensorflow-cpu 2.21.0 publishes cp313 manylinux wheels
# on PyPI. PyTorch's CPU build for cp313 comes from no source this machine reaches (its cp311
# CPU wheel is a local file), and PyPI's torch 2.13.0 for cp313 is the CUDA build with gigabytes
# of NVIDIA wheels: right for a real GPU node, not for a simulated one.
def test_smoke_on_debian13_installs_wheels_built_for_its_python(cli: Cli, trixie: Path,
                                                                 runs_dir: Path) -> None:
    if sys.version_info[:2] == (3, 13):
        pytest.skip("the controller runs Python 3.13 too: no other platform to build for")
    release = podman_exec("sim-gpu-1", ". /etc/os-release; echo $VERSION_CODENAME; "
                          "python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'")
    assert release.stdout.split() == ["trixie", "3.13"], release.stdout + release.stderr

    out = cli("smoke", "--inventory", str(trixie), "--launcher", "direct",
              "--framework", "tensorflow", timeout=SLOW_S)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr

    report = newest_report(runs_dir)
    assert report["command"] == "smoke"
    assert [p["name"] for p in report["phases"]] == ["facts", "smoke"]
    assert report["smoke"]["framework"] == "tensorflow"
    runs = [run for run in report["smoke"]["runs"] if run["host"] == "sim-gpu-1"]
    assert runs and all(run["verdict"]["passed"] for run in runs), runs
    assert platform_key(report, "sim-gpu-1") == "cp313-x86_64"
    assert not [n for n in report["notes"] if n.startswith("wheelhouse:")], report["notes"]
    pinned = wheelhouse_dir(trixie) / "tensorflow" / "cp313-x86_64" / "requirements.txt"
    requirements = requirement_lines(pinned)
    assert [ln for ln in requirements.values() if "--hash=sha256:" not in ln] == []
    assert "torch" not in requirements

    # The node's venv holds the TensorFlow that requirements.txt pins, from a cp313 wheel.
    installed = podman_exec("sim-gpu-1", (
        f"{SMOKE_VENV_TF}/bin/python -c 'import importlib.metadata as m; "
        "d = m.distribution(\"tensorflow-cpu\"); print(d.version); print(d.read_text(\"WHEEL\"))'"))
    assert installed.returncode == 0, installed.stderr
    version, *wheel = installed.stdout.splitlines()
    assert requirements["tensorflow-cpu"].startswith(f"tensorflow-cpu=={version} "), (
        requirements["tensorflow-cpu"], version)
    tags = [ln.split(":", 1)[1].strip() for ln in wheel if ln.startswith("Tag:")]
    assert tags and all(tag.startswith("cp313-cp313-") for tag in tags), wheel
