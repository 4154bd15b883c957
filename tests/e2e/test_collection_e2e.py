"""The collection as a Galaxy user gets it, on the simulated cluster: the tarball from
`ansible-galaxy collection build`, installed with `ansible-galaxy collection install`, runs
`ansible-playbook gpucluster.provisioner.site` with the cluster's inventory plus the plan
inventory (what `provisioner plan` writes), from a directory that is not the checkout and with
Ansible's defaults (no ansible.cfg of ours)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from provisioner.plan import build
from tests.packaging.conftest import BIN, NAME, NAMESPACE, outside_env, run
from tests.packaging.test_collection import build_tarball, install_tarball

Cli = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.e2e

RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
                   r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)", re.MULTILINE)


def test_installed_collection_brings_up_the_simulated_cluster(healthy_cluster: Path,
                                                              tmp_path: Path) -> None:
    colls = install_tarball(build_tarball(tmp_path), tmp_path)
    plan_file = build(healthy_cluster).write_inventory(tmp_path / "plan.yml")
    hosts = set(yaml.safe_load(plan_file.read_text())["all"]["hosts"])
    assert hosts == {"sim-login-1", "sim-gpu-1", "sim-gpu-2"}

    play = run([BIN / "ansible-playbook", "-i", healthy_cluster, "-i", plan_file,
                f"{NAMESPACE}.{NAME}.site"], cwd=tmp_path, timeout=3600,
               env=outside_env(ANSIBLE_COLLECTIONS_PATH=str(colls), ANSIBLE_NOCOLOR="1"))
    assert play.returncode == 0, play.stdout[-5000:] + play.stderr[-2000:]
    recap = {m["host"]: m for m in RECAP.finditer(play.stdout)}
    assert set(recap) == hosts, play.stdout[-3000:]
    for host, row in recap.items():
        assert (row["failed"], row["unreachable"]) == ("0", "0"), host
        assert int(row["ok"]) > 0, host
        # The cluster was brought up by `provisioner up` from the checkout: the installed
        # collection's plain path must find nothing to change.
        assert row["changed"] == "0", (host, play.stdout[-3000:])
