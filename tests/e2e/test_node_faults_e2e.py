"""Faults a node meets, on the simulated cluster.

- A node dies (its container stopped) before or during `up`: with the default loss policy of a
  small cluster, preflight stops the whole run before anything is installed; with
  `--max-fail 1` the other nodes finish every phase and the report names the lost node.
- Another process (unattended-upgrades right after boot, on a real fleet) holds dpkg's frontend
  lock while `up` has a package to install: the install waits for the lock (DPkg::Lock::Timeout
  in pinned_packages, the apt module's lock_timeout) instead of failing at once.
- The package mirror answers 503 (`mirror-503xN`): twice per file, the download is retried and
  succeeds; for good, the run fails with apt's line naming the package and the 503.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import BIN, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.e2e

NODE = "sim-gpu-1"
HOLD_S = 40
# What unattended-upgrades does: an fcntl write lock on dpkg's frontend lock (apt and dpkg use
# fcntl locks, so python's lockf is the same lock), held for HOLD_S seconds.
HOLDER = (
    "import fcntl, time\n"
    "f = open('/var/lib/dpkg/lock-frontend', 'w')\n"
    "fcntl.lockf(f, fcntl.LOCK_EX)\n"
    "open('/run/gpuc-e2e-lock-held', 'w').write(repr(time.time()))\n"
    f"time.sleep({HOLD_S})\n"
    "open('/run/gpuc-e2e-lock-released', 'w').write(repr(time.time()))\n"
)


def node_sh(script: str, *, detach: bool = False) -> str:
    podman = shutil.which("podman") or "podman"
    cmd = [podman, "exec", *(["-d"] if detach else []), NODE, "sh", "-c", script]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, f"{script!r}: {out.stderr}"
    return out.stdout


def mirror_log() -> list[tuple[str, int]]:
    """(path, status) of every request the simulated package mirror has answered."""
    out = podman("logs", "gpuc-sim-mirror")
    return [(m[1], int(m[2])) for m in
            re.finditer(r'"GET (\S+) HTTP/[\d.]+" (\d{3})', out.stdout + out.stderr)]


def test_a_held_dpkg_lock_and_a_flaky_mirror_are_waited_for(cli: Cli, healthy_cluster: Path,
                                                            runs_dir: Path) -> None:
    # A package of the stack is missing, so `up` has something to download and install here.
    # Not in apt's archive cache either (the first `up` left it there), so it is downloaded.
    node_sh("apt-mark unhold libnccl-dev >/dev/null && DEBIAN_FRONTEND=noninteractive "
            "apt-get remove -y -q libnccl-dev >/dev/null && rm -f /run/gpuc-e2e-lock-* "
            "/var/cache/apt/archives/libnccl-dev_*.deb")
    sim = ("sim", "up", "--nodes", "3", "--inventory-dir", str(healthy_cluster))
    try:
        # A mirror that stays down: the install is tried 4 times (backoff) and fails with apt's
        # meaningful line (the 503 of the package), not its last one.
        assert cli(*sim, "--fault", "mirror-503x99").returncode == 0
        out = cli("up", "--inventory", str(healthy_cluster), "--yes", "--skip-smoke",
                  "--limit", NODE)
        assert out.returncode == 1, out.stdout[-3000:] + out.stderr
        lost = newest_report(runs_dir)["lost_hosts"][NODE]
        assert (lost["phase"], lost["reason"]) == ("stack", "failed"), lost
        assert re.search(r"failed \(after 4 tries\): E: Failed to fetch \S+/libnccl-dev_\S+\.deb"
                         r"\s+503\s+Service Unavailable", lost["message"]), lost["message"]

        # An overloaded mirror (two 503s for each package file) and dpkg's lock held by
        # another process: the install waits for the lock, retries the download and succeeds.
        assert cli(*sim, "--fault", "mirror-503x2").returncode == 0
        node_sh(f"exec python3 -c \"{HOLDER}\"", detach=True)
        deadline = time.monotonic() + 30
        while "held" not in node_sh("test -e /run/gpuc-e2e-lock-held && echo held || true"):
            assert time.monotonic() < deadline, "the lock holder did not start"
            time.sleep(0.5)
        seen = len(mirror_log())
        out = cli("up", "--inventory", str(healthy_cluster), "--yes", "--skip-smoke",
                  "--limit", NODE)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    finally:
        assert cli(*sim).returncode == 0  # heals the mirror
    released = float(node_sh("cat /run/gpuc-e2e-lock-released"))
    installed = float(node_sh("stat -c %Y /var/lib/dpkg/info/libnccl-dev.list"))
    assert installed >= int(released), (installed, released)
    statuses = [status for path, status in mirror_log()[seen:] if "/libnccl-dev_" in path]
    assert statuses == [503, 503, 200], statuses
    report = newest_report(runs_dir)
    stack = next(p for p in report["phases"] if p["name"] == "stack")
    assert stack["ok"] and stack["changed"] >= 1
    checks = {(c["host"], c["name"]): c for c in report["checks"] if c["phase"] == "stack"}
    assert checks[(NODE, "nccl")]["status"] == "pass"


LOST = "sim-gpu-2"


def podman(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shutil.which("podman") or "podman", *argv], capture_output=True,
                          text=True, timeout=300, check=False)


def junit_cases(report_json: Path) -> dict[tuple[str, str], ET.Element]:
    root = ET.parse(report_json.parent / "junit.xml").getroot()
    return {(case.get("classname", ""), case.get("name", "")): case
            for case in root.iter("testcase")}


def newest_report_path(runs: Path) -> Path:
    return sorted(runs.glob("*/report.json"), key=lambda p: p.stat().st_mtime)[-1]


def test_a_dead_node_stops_a_small_cluster_in_preflight(cli: Cli, healthy_cluster: Path,
                                                        runs_dir: Path) -> None:
    assert podman("stop", "--time", "0", LOST).returncode == 0
    out = cli("up", "--inventory", str(healthy_cluster), "--yes", "--skip-smoke")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr
    path = newest_report_path(runs_dir)
    report = json.loads(path.read_text())
    assert [p["name"] for p in report["phases"]] == ["preflight"]
    assert report["lost_hosts"][LOST]["reason"] == "unreachable"
    assert report["lost_hosts"][LOST]["phase"] == "preflight"
    assert list(report["lost_hosts"]) == [LOST]  # the node that judged the policy is not lost
    assert f"lost {LOST}: unreachable in preflight" in " ".join(out.stdout.split())
    # How long ssh tried, from ansible.cfg, in the report and on the console.
    assert report["connection"]["unreachable_cost_s"] == 10
    assert ("ssh gave up after 2 attempt(s) with a 5 s connect timeout"
            in " ".join(out.stdout.split()))
    # What a CI dashboard reads: the lost node is an <error>, the verdict a <failure>.
    cases = junit_cases(path)
    assert cases[("preflight", LOST)].find("error") is not None
    assert cases[("run", "up verdict")].find("failure") is not None
    # A node that comes back keeps its address, as a real node does after a reboot: otherwise
    # slurm.conf and Prometheus' targets change on the next run (CI saw exactly that).
    before = yaml.safe_load((healthy_cluster / "hosts.yml").read_text())
    out = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(healthy_cluster))
    assert out.returncode == 0, out.stderr + out.stdout
    assert f"started stopped node {LOST} again" in out.stdout + out.stderr
    after = yaml.safe_load((healthy_cluster / "hosts.yml").read_text())
    assert after == before


def test_with_max_fail_the_others_finish_when_a_node_dies_mid_run(
        cli: Cli, healthy_cluster: Path, runs_dir: Path) -> None:
    before = set(runs_dir.iterdir())
    proc = subprocess.Popen([BIN, "up", "-i", str(healthy_cluster / "hosts.yml"), "--yes",
                             "--skip-smoke", "--max-fail", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    # Stop the node once the stack phase has started on it.
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if any((run / "ansible" / "artifacts" / "01-stack").exists()
               for run in set(runs_dir.iterdir()) - before):
            break
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the stack phase never started")
    assert podman("stop", "--time", "0", LOST).returncode == 0
    stdout, stderr = proc.communicate(timeout=1200)
    assert proc.returncode == 1, stdout[-3000:] + stderr
    path = newest_report_path(runs_dir)
    report = json.loads(path.read_text())
    names = [p["name"] for p in report["phases"]]
    assert names == ["preflight", "stack", "fabric", "validate", "monitoring", "scheduler"]
    lost = report["lost_hosts"]
    assert list(lost) == [LOST] and lost[LOST]["reason"] == "unreachable"
    lost_in = names.index(lost[LOST]["phase"])
    for phase in report["phases"][lost_in + 1:]:
        assert LOST not in phase["hosts"], phase["name"]
        assert phase["ok"], (phase["name"], phase["failures"])
        assert "sim-gpu-1" in phase["hosts"], phase["name"]
    assert report["outcome"] == "failed" and report["exit_code"] == 1
    assert any(f"going on without {LOST}" in n for n in report["notes"])

    # Resume: the node is back (sim up starts it again); --retry-failed reruns only it from the
    # phase it was lost in, then validates and runs the smoke job on the whole cluster.
    out = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(healthy_cluster))
    assert out.returncode == 0, out.stderr + out.stdout
    out = cli("up", "--inventory", str(healthy_cluster), "--yes",
              "--retry-failed", report["run_id"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    retried = json.loads(newest_report_path(runs_dir).read_text())
    assert retried["resumes"] == report["run_id"] and retried["retried_hosts"] == [LOST]
    phases = {p["name"]: p for p in retried["phases"]}
    assert retried["phases"][0]["name"] == lost[LOST]["phase"]
    assert set(retried["phases"][0]["hosts"]) == {LOST}
    assert set(phases["validate"]["hosts"]) == {"sim-gpu-1", LOST}
    assert retried["smoke"] and phases["smoke"]["ok"]
    assert retried["lost_hosts"] == {} and retried["outcome"] == "passed"
