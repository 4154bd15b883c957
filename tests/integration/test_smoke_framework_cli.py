"""`provisioner smoke --framework` (and `up --framework`) through the real entry point: a bad
value is a one-line usage error (exit 2, nothing run), and the framework chosen reaches the
report, here on a node that cannot be reached (nothing is installed anywhere; what the role
gets is tests/unit/test_smoke_framework.py's)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.test_cli import BIN

UNREACHABLE = {"all": {"vars": {
    # A site index: no wheelhouse is built or downloaded for this run.
    "smoke_job_pip_index_url": "http://127.0.0.1:9/simple"},
    "children": {"gpu_nodes": {"hosts": {"gpu-01": {"gpu_profile": "hgx-h100-8gpu",
                                                    "ansible_host": "gpu-01.invalid"}}}}}}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200", **(env or {})},
                          stdin=subprocess.DEVNULL, check=False)


@pytest.mark.parametrize("command", [["smoke", "-i", "x"], ["up", "-i", "x", "--yes"]])
def test_an_unknown_framework_is_one_line_exit_2(command: list[str]) -> None:
    out = run(*command, "--framework", "caffe")
    assert out.returncode == 2 and out.stdout == ""
    assert "Traceback" not in out.stderr
    [line] = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert "argument --framework: invalid choice: 'caffe'" in line
    assert "pytorch" in line and "tensorflow" in line


def test_tensorflow_under_slurm_still_needs_slurm_in_the_inventory(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(UNREACHABLE))
    out = run("smoke", "-i", str(inv), "--framework", "tensorflow", "--launcher", "slurm")
    assert out.returncode == 2
    assert "--launcher slurm: inventory" in out.stderr and "has no Slurm" in out.stderr


def test_the_framework_reaches_the_report(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(UNREACHABLE))
    runs = tmp_path / "runs"
    out = run("smoke", "-i", str(inv), "--framework", "tensorflow", "--json",
              env={"PROVISIONER_RUNS_DIR": str(runs)})
    assert out.returncode == 1, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["smoke"]["framework"] == "tensorflow"
    assert report["smoke"]["launcher"] == "direct"
    assert report["smoke"]["runs"] == []
    assert any("unreachable: gpu-01" in note for note in report["notes"])
