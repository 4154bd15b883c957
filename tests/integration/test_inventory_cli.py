"""Inventory variables checked by Ansible's own argument spec validator, through the real
entry point: each mistake is one line on stderr and exit 2, before any host is contacted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BIN = shutil.which("provisioner", path=str(Path(sys.executable).parent)) or "provisioner"


@pytest.mark.parametrize(("gpu_vars", "expected"), [
    ({"preflight_min_free_gb": "lots"},
     "host gpu-01: variable preflight_min_free_gb (role preflight): argument "
     "'preflight_min_free_gb' is of type str and we were unable to convert to float"),
    ({"nvidia_driver_module_flavor": "closed"},
     "host gpu-01: variable nvidia_driver_module_flavor (the inventory contract): value of "
     "nvidia_driver_module_flavor must be one of: open, proprietary, got: closed"),
    ({"preflight_min_free_gbs": 20},
     "host gpu-01: unknown variable preflight_min_free_gbs (did you mean "
     "preflight_min_free_gb?)"),
], ids=["wrong-type", "bad-choice", "typo"])
def test_bad_variable_is_one_line_and_exit_2(tmp_path: Path, gpu_vars: dict[str, object],
                                             expected: str) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-01": {"gpu_profile": "hgx-h100-8gpu", "ansible_host": "gpu-01.invalid",
                   **gpu_vars}}}}}}))
    out = subprocess.run([BIN, "plan", "--inventory", str(inventory)], capture_output=True,
                         text=True, timeout=120, check=False,
                         env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert f"inventory {inventory}: {expected}" in lines[0]
    assert "Traceback" not in out.stderr
