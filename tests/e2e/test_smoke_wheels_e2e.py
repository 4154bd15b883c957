"""What the smoke job runs and writes as root on a node is its own. Its wheels are checked on the
node against the reviewed lock's hashes, which the controller hands over the Ansible connection: a wheel swapped between the mirror and the node
(`mirror-tampered-wheels`: every .whl served with its size but other bytes, as an attacker on
the network path would) is refused by pip on the node, and the job does not run there. Healed,
the same node installs the wheel and runs the job. A work directory another user made, or one
with a link planted inside, is refused rather than taken over."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = [pytest.mark.e2e]
NODE = "sim-gpu-1"
VENV = "/opt/gpu-cluster-provisioner/smoke-venv"


def node_sh(script: str) -> str:
    podman = shutil.which("podman") or "podman"
    out = subprocess.run([podman, "exec", NODE, "sh", "-c", script], capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, f"{script!r}: {out.stderr}"
    return out.stdout


def mirror_log() -> str:
    podman = shutil.which("podman") or "podman"
    out = subprocess.run([podman, "logs", "gpuc-sim-mirror"], capture_output=True, text=True,
                         timeout=60, check=False)
    return out.stdout + out.stderr


def test_a_wheel_swapped_on_the_way_is_refused_on_the_node(cli: Cli, healthy_cluster: Path,
                                                           runs_dir: Path) -> None:
    # One small package of the node's venv gone: the next install downloads just that wheel.
    node_sh(f"{VENV}/bin/python -m pip uninstall -y -q filelock")
    sim = ("sim", "up", "--nodes", "3", "--inventory-dir", str(healthy_cluster))
    try:
        assert cli(*sim, "--fault", "mirror-tampered-wheels").returncode == 0
        seen = len(mirror_log())
        out = cli("smoke", "--inventory", str(healthy_cluster), "--limit", NODE, timeout=1800)
        assert out.returncode == 1, out.stdout[-3000:] + out.stderr
        report = newest_report(runs_dir)
        text = json.dumps(report)
        assert re.search(r"do not match the hashes", text, re.I), text[-3000:]
        assert "filelock" in text
        # The job did not run on the node: no pass of it, no result.
        assert not node_sh(f"ls {VENV}/lib/python3*/site-packages | grep -i '^filelock' "
                           "|| true").strip()
        smoke = report.get("smoke") or {}
        assert not [run for run in smoke.get("runs", []) if NODE in json.dumps(run)], smoke
        # The swap happened on the way: the mirror logged it, its file is intact.
        assert re.search(r"filelock-\S+\.whl .*tampered", mirror_log()[seen:]), \
            mirror_log()[seen:][-2000:]
    finally:
        assert cli(*sim).returncode == 0  # heals the mirror
    out = cli("smoke", "--inventory", str(healthy_cluster), "--limit", NODE, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    assert node_sh(f"ls {VENV}/lib/python3*/site-packages | grep -ic '^filelock'").strip() != "0"


WORK = "/var/tmp/gpuc-smoke"


@pytest.mark.parametrize("planted", ["owner", "link"])
def test_a_work_directory_not_roots_own_is_refused(cli: Cli, healthy_cluster: Path,
                                                   runs_dir: Path, planted: str) -> None:
    node_sh(f"rm -rf {WORK}.keep && mv {WORK} {WORK}.keep && mkdir {WORK}")
    try:
        if planted == "owner":
            node_sh(f"chown nobody {WORK}")
        else:
            node_sh(f"ln -s /etc/shadow {WORK}/planted.json")
        out = cli("smoke", "--inventory", str(healthy_cluster), "--limit", NODE, timeout=1800)
        assert out.returncode == 1, out.stdout[-3000:] + out.stderr
        text = json.dumps(newest_report(runs_dir))
        why = "owned by nobody" if planted == "owner" else f"holding links ({WORK}/planted.json)"
        assert f"smoke_job_work_dir {WORK} is {why}" in text, text[-3000:]
        # Not taken over: still as it was planted.
        assert node_sh(f"stat -c %U {WORK}").strip() == ("nobody" if planted == "owner"
                                                          else "root")
    finally:
        node_sh(f"rm -rf {WORK} && mv {WORK}.keep {WORK}")


USER = "gpuc-smoke"
STRAY_PORT = 29555


def test_the_job_runs_as_its_own_user_and_leaves_no_listener(cli: Cli, healthy_cluster: Path,
                                                              runs_dir: Path) -> None:
    # A crashed earlier job of the same user left a listener behind: the pass ends it first.
    node_sh(f"id -u {USER} >/dev/null 2>&1 || useradd --system --no-create-home {USER}")
    node_sh(f"runuser -u {USER} -- setsid python3 -c 'import socket, time; "
            f"s = socket.socket(); s.bind((\"0.0.0.0\", {STRAY_PORT})); s.listen(); "
            f"time.sleep(3600)' >/dev/null 2>&1 < /dev/null &")
    assert f":{STRAY_PORT}" in node_sh(f"sleep 1; ss -Hltn 'sport = :{STRAY_PORT}'")
    out = cli("smoke", "--inventory", str(healthy_cluster), "--limit", NODE, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    runs = newest_report(runs_dir)["smoke"]["runs"]
    job = [run for run in runs if run.get("host") == NODE and "run_as" in run]
    # Every rank said it ran as the job's user, not root.
    assert job and all(run["run_as"] == [USER] for run in job), runs
    # Its results are its own, in its own work directory; nothing of it runs any more, and
    # the stray listener is gone.
    owners = node_sh(f"stat -c '%U %a' {WORK}; stat -c %U {WORK}/*-intra.json | sort -u")
    assert owners.split() == [USER, "750", USER], owners
    assert node_sh(f"pgrep -u {USER} || true").strip() == ""
    assert node_sh(f"ss -Hltn 'sport = :{STRAY_PORT}'").strip() == ""
    # The venv and the job's script are root's: the job's user cannot change its own code.
    assert node_sh(f"stat -c %U {VENV}/bin/python3 /opt/gpu-cluster-provisioner/smoke/gpuc_smoke.py"
                   " | sort -u").split() == ["root"]
