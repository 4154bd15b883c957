"""Issue 11 on the simulated cluster (NOT RUN by the helper that wrote it: no podman there).

A 2-node cluster goes up; then the report must show: the smoke wheels installed from the
per-platform wheelhouse with --require-hashes (the hashed requirements.txt sits in the mirror
under wheels/<cpXY-machine>/), nccl-tests skipped with the nvcc reason, ib_write_bw skipped for
want of RDMA devices, and the wheelhouse served only where nodes reach it. With a node OS whose
Python differs from the controller's (Debian 13: 3.13), `sim up --os debian13` must exist;
the test skips that part until it does.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]

# Pending (issue 11): on the simulated cluster the report lists no nccl-tests run with its
# skip reason yet (the build step's skip does not reach the smoke report), and `sim up` has no
# --os for a node whose Python differs; `make e2e-pending` runs these.
pytestmark = [pytest.mark.e2e, pytest.mark.pending]


@pytest.fixture(scope="module")
def inventory(cli: Cli, tmp_path_factory: pytest.TempPathFactory, runs_dir: Path) -> Path:
    inv = tmp_path_factory.mktemp("inv11")
    help_text = cli("sim", "up", "--help").stdout
    extra = ["--os", "debian13"] if "--os" in help_text else []
    out = cli("sim", "up", "--nodes", "2", "--recreate", "--inventory-dir", str(inv), *extra)
    assert out.returncode == 0, out.stderr + out.stdout
    return inv


def test_up_installs_hashed_wheels_and_states_the_skips(cli: Cli, inventory: Path,
                                                         runs_dir: Path) -> None:
    out = cli("up", "--inventory", str(inventory / "hosts.yml"), "--yes")
    assert out.returncode == 0, out.stdout + out.stderr
    report = newest_report(runs_dir)
    runs = report["smoke"]["runs"]
    nccl = [r for r in runs if r["label"].startswith("nccl-tests")]
    assert nccl and all("nvcc" in r["verdict"]["summary"] and
                        r["verdict"]["summary"].startswith("SKIPPED: ") for r in nccl)
    text = str(report)
    assert "no RDMA device with an ACTIVE port and a verbs device" in text
    mirror_wheels = list(Path(inventory).parent.rglob("wheels/cp3*-*/requirements.txt"))
    if mirror_wheels:
        assert all("--hash=sha256:" in p.read_text() for p in mirror_wheels)


def test_debian13_node_gets_python_313_wheels(cli: Cli, inventory: Path) -> None:
    if "--os" not in cli("sim", "up", "--help").stdout:
        pytest.skip("sim up has no --os option yet (a Debian 13 node with Python 3.13)")
    found = list(Path(inventory).parent.rglob("wheels/cp313-x86_64/requirements.txt"))
    assert found, "no cp313 wheelhouse was built for the Debian 13 node"
