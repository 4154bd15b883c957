"""`provisioner inspect --profile` judges saved outputs against a hardware profile."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.integration.test_cli import BIN

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def inspect(*args: str) -> tuple[int, Any, str]:
    out = subprocess.run([BIN, "inspect", "--json", *args], capture_output=True, text=True, timeout=120,
                         check=False)
    return out.returncode, json.loads(out.stdout) if out.stdout.strip() else None, out.stderr


def test_degraded_nvlink_fixture_fails_against_h100_profile() -> None:
    rc, data, _ = inspect("--profile", "hgx-h100-8gpu",
                          str(FIXTURES / "nvidia-smi-nvlink" / "h100-sxm-8gpu-link-down.txt"))
    assert rc == 1
    failed = [c for c in data["checks"] if c["status"] == "fail"]
    assert failed and all(c["name"].endswith("_nvlink") for c in failed)


def test_two_node_nccl_log_is_judged_against_the_inter_node_floor() -> None:
    rc, data, _ = inspect("--profile", "hgx-h100-8gpu",
                          str(FIXTURES / "nccl-tests" / "h100-2node-16rank-allreduce-ncclinfo.txt"))
    [check] = data["checks"]
    # The log's busbw at its largest size (8 GiB, mean of out-of-place and in-place) is
    # 195.145 GB/s, below the 320 GB/s inter-node floor.
    assert check == {"name": "nccl_busbw", "status": "fail", "measured": 195.145,
                     "expected": 320.0,
                     "detail": "busbw 195.145 GB/s at 8 GiB (the largest size) vs the multi-node floor "
                               "320 GB/s: below the profile's floor"}
    assert rc == 1


def test_unknown_profile_is_exit_2() -> None:
    rc, _, err = inspect("--profile", "dgx-h9000",
                         str(FIXTURES / "ibstat" / "cx5-2port-spaces-sdr-ddr.txt"))
    assert rc == 2 and "unknown --profile" in err


def test_real_ibstat_capture_with_ports_down(captures: Path) -> None:
    rc, data, _ = inspect("--profile", "hgx-h100-8gpu",
                          str(captures / "ibstat" / "h100-12ca-ib-some-down.txt"))
    by = {c["name"]: c for c in data["checks"]}
    # 8 NDR InfiniBand ports are all active; the down ports are the Ethernet ones.
    assert by["ib_ports"]["measured"] == 8 and rc == 0


def test_real_all_inactive_nvlink_capture_fails(captures: Path) -> None:
    rc, data, _ = inspect("--profile", "hgx-a100-8gpu",
                          str(captures / "nvidia-smi-nvlink" / "a100-sxm4-80gb-all-inactive.txt"))
    assert rc == 1
    assert any(c["name"] == "gpu6_nvlink" and c["status"] == "fail" for c in data["checks"])
