"""Interrupts, the run lock and secrets on the simulated cluster (podman). NOT RUN by the
helper that wrote it (no podman allowed there); the same behaviour is covered on localhost by
tests/integration/test_run_faults.py."""

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


@pytest.fixture(scope="module")
def inventory(cli: Cli, tmp_path_factory: pytest.TempPathFactory, runs_dir: Path) -> Path:
    inv = tmp_path_factory.mktemp("inv")
    out = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(inv))
    assert out.returncode == 0, out.stderr + out.stdout
    return inv


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


def test_credentialed_mirror_url_is_in_no_run_file(cli: Cli, inventory: Path,
                                                   runs_dir: Path) -> None:
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    url = hosts["all"]["vars"]["gpu_package_source"]
    hosts["all"]["vars"]["gpu_package_source"] = url.replace("http://", f"http://u:{SECRET}@")
    secret_inv = inventory / "secret.yml"
    secret_inv.write_text(yaml.safe_dump(hosts))
    cli("validate", "-i", str(secret_inv))
    for path in runs_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
