"""The shipped example inventories stay valid: `provisioner plan` accepts each of them and
resolves the stack the example asks for."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_cli import BIN

EXAMPLES = Path(__file__).resolve().parents[2] / "inventories" / "examples"


@pytest.mark.parametrize(("example", "hosts", "stack"), [
    ("hgx-h100-ib/hosts.yml", 3, "cuda-13.0"),
    ("mixed-cloud-roce/hosts.ini", 3, "cuda-13.0"),
    ("airgapped-a100", 4, "cuda-13.0"),
])
def test_example_plans(example: str, hosts: int, stack: str) -> None:
    # The day the tests plan on (tests/conftest.py), so the driver lifecycle does not judge the
    # examples by the calendar (tests/unit/test_driver_lifecycle.py does that).
    env = {"COLUMNS": "250", "PATH": "/usr/bin:/bin",
           "PROVISIONER_TODAY": os.environ["PROVISIONER_TODAY"]}
    out = subprocess.run([BIN, "plan", "-i", str(EXAMPLES / example)], capture_output=True,
                         text=True, timeout=120, check=False, env=env)
    assert out.returncode == 0, out.stderr
    assert f"inventory OK: {hosts} host(s)" in out.stdout
    assert stack in out.stdout
