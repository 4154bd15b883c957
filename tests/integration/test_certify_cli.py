"""`provisioner certify` refuses what it cannot run with in one line and exit 2, before any
progress display, run directory or host contact: a node count pairs cannot use, a margin, a
--level other than quick or burn-in, a burn-in time that is no number of seconds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.test_cli import BIN

TWO = {"all": {"children": {"gpu_nodes": {"hosts": {
    name: {"gpu_profile": "sim-h100-8gpu", "ansible_host": address, "provisioner_simulated": True}
    for name, address in (("sim-gpu-1", "192.0.2.10"), ("sim-gpu-2", "192.0.2.11"))}}}}}


@pytest.mark.parametrize(("hosts", "args", "line"), [
    (1, [], "error: certify: the inventory has one node; pairs need at least two"),
    (2, ["--margin", "150"], "error: certify: --margin must be between 0 and 100 percent, not 150"),
    (2, ["--margin", "0"], "error: certify: --margin must be between 0 and 100 percent, not 0"),
    (2, ["--level", "soak"], "error: provisioner certify: argument --level: invalid choice: "
                             "'soak' (choose from 'quick', 'burn-in')"),
    (2, ["--level", "burn-in", "--burn-seconds", "0"],
     "error: provisioner certify: argument --burn-seconds: '0' is not a number of seconds "
     "above 0"),
    (1, ["--level", "burn-in"], "error: certify: the inventory has one node; pairs need at "
                                "least two"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, hosts: int, args: list[str],
                                          line: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(TWO))
    if hosts == 1:
        data["all"]["children"]["gpu_nodes"]["hosts"].pop("sim-gpu-2")
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(data))
    runs = tmp_path / "runs"
    out = subprocess.run([BIN, "certify", "-i", str(tmp_path / "hosts.yml"), *args],
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "PROVISIONER_RUNS_DIR": str(runs)})
    assert out.returncode == 2, out.stdout + out.stderr
    assert (out.stdout + out.stderr).strip() == line
    assert not runs.exists() or not [p for p in runs.iterdir() if p.name != "locks"]
