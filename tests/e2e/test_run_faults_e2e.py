"""Interrupts, the run lock and secrets on the simulated cluster (podman); the same behaviour
is covered on localhost by tests/integration/test_run_faults.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import BIN
from tests.integration.test_run_faults import processes_mentioning

Cli = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.e2e

SECRET = "e2e-Sup3rSecret"


@pytest.fixture
def inventory(healthy_cluster: Path) -> Path:
    return healthy_cluster


def test_sigint_during_up_saves_the_report_and_leaves_no_ansible(
        cli: Cli, inventory: Path, runs_dir: Path) -> None:
    before = set(runs_dir.glob("*/report.json"))
    proc = subprocess.Popen([BIN, "up", "-i", str(inventory / "hosts.yml"), "--skip-smoke"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"}, start_new_session=True)
    time.sleep(20)  # inside preflight or stack
    second = cli("validate", "-i", str(inventory / "hosts.yml"))
    assert second.returncode == 2 and f"PID {proc.pid}" in second.stderr
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    [new] = set(runs_dir.glob("*/report.json")) - before
    report = json.loads(new.read_text())
    assert report["outcome"] == "interrupted" and report["exit_code"] == 130
    time.sleep(2)
    assert processes_mentioning(str(inventory)) == []


# Where a mirror's login may live on a node (the nvidia_repo role's apt auth file, 0600).
AUTH_FILE = "/etc/apt/auth.conf.d/gpu-cluster-provisioner.conf"
# What the secret must not appear in on a node: everything but kernel and device trees.
NODE_TREES = ("/etc", "/var", "/root", "/home", "/tmp", "/opt", "/usr/local", "/run")


def on_node(node: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", node, *argv], capture_output=True, text=True,
                          timeout=300, check=False)


def test_credentialed_mirror_url_is_in_no_run_file(cli: Cli, inventory: Path, runs_dir: Path,
                                                   tmp_path: Path) -> None:
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    url = hosts["all"]["vars"]["gpu_package_source"]
    hosts["all"]["vars"]["gpu_package_source"] = url.replace("http://", f"http://u:{SECRET}@")
    # Outside the shared inventory directory: later tests load every file in it.
    secret_inv = tmp_path / "secret.yml"
    secret_inv.write_text(yaml.safe_dump(hosts))
    gpu_nodes = sorted(hosts["all"]["children"]["gpu_nodes"]["hosts"])
    nodes = sorted({h for g in hosts["all"]["children"].values() for h in g.get("hosts") or {}})
    try:
        out = cli("up", "-i", str(secret_inv), "--yes", "--skip-smoke")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
        assert SECRET not in out.stdout + out.stderr
        for path in runs_dir.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
        for node in nodes:
            found = on_node(node, "grep", "-rlF", "--no-messages", SECRET, *NODE_TREES)
            assert set(found.stdout.split()) <= {AUTH_FILE}, (node, found.stdout)
        for node in gpu_nodes:
            mode = on_node(node, "stat", "-c", "%a %U", AUTH_FILE).stdout.split()
            assert mode == ["600", "root"], (node, mode)
            sources = on_node(node, "cat", "/etc/apt/sources.list.d/nvidia-cuda.sources").stdout
            assert "URIs: http://gpuc-sim-mirror:8080/cuda/" in sources, sources
    finally:
        # The shared cluster goes back to the mirror without a login: the auth file goes too.
        restored = cli("up", "-i", str(inventory), "--yes", "--skip-smoke")
    assert restored.returncode == 0, restored.stdout[-3000:] + restored.stderr
    for node in nodes:
        assert on_node(node, "test", "-e", AUTH_FILE).returncode == 1, node
