"""roles/rdma/tasks/bandwidth.yml through real ansible-playbook on localhost: hosts paired,
ib_write_bw per HCA (a stand-in on PATH printing perftest's real format), judged per HCA."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "ansible-playbook"
BIN = Path(sys.executable).parent / "ansible-playbook"
FIXTURE = (ROOT / "tests/fixtures/perftest/ndr-ib-gdr-8m-client.txt").read_text()

FAKE_PERFTEST = """#!/bin/sh
# Stand-in for perftest's ib_write_bw: a server (no host argument) waits a moment; a client
# prints the table of a real run with this device's BW average (FAKE_BW_<device>).
for last; do :; done
dev=""; prev=""
for a; do [ "$prev" = "-d" ] && dev="$a"; prev="$a"; done
echo "$*" >> "$FAKE_LOG"
case "$last" in
  127.0.0.1|localhost) ;;
  *) sleep 1; exit 0 ;;
esac
bw=$(eval echo "\\${FAKE_BW_$dev:-391.87}")
sed -e "s/mlx5_3/$dev/" -e "s/391.87/$bw/" "$FAKE_TABLE"
"""

PLAY = """
- name: Test | Bandwidth per HCA
  hosts: all
  gather_facts: false
  tasks:
    - name: Test | What verify.yml publishes before the bandwidth phase
      ansible.builtin.set_fact:
        rdma_report: {verbs_devices: "{{ test_verbs_devices }}"}
    - name: Test | Measure
      ansible.builtin.include_role:
        name: gpucluster.provisioner.rdma
        tasks_from: bandwidth.yml
    - name: Test | Save the report
      ansible.builtin.copy:
        content: "{{ rdma_report.bandwidth | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
"""


def _sysfs(root: Path, states: dict[str, str]) -> None:
    for dev, state in states.items():
        port = root / dev / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(f"{state}\n")
        (port / "link_layer").write_text("InfiniBand\n")


def run(tmp_path: Path, hosts: list[str], devices: list[str], states: dict[str, str],
        floor: float, env: dict[str, str] | None = None,
        more: dict[str, Any] | None = None) -> tuple[int, dict[str, Any], str]:
    sysfs = tmp_path / "sysfs"
    _sysfs(sysfs, states)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ib_write_bw").write_text(FAKE_PERFTEST)
    (bindir / "ib_write_bw").chmod(0o755)
    (tmp_path / "table.txt").write_text(FIXTURE)
    out = tmp_path / "out"
    out.mkdir()
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {
        h: {"ansible_connection": "local", "ansible_host": "127.0.0.1",
            "ansible_python_interpreter": sys.executable} for h in hosts}}}))
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    extra = {"test_verbs_devices": devices, "__rdma_peermem_state": "not-gpu",
             "__rdma_bw_sysfs": str(sysfs), "rdma_bandwidth_floor_gbps": floor,
             "rdma_bandwidth_server_wait_s": 0, "rdma_bandwidth_timeout_s": 20,
             "out_dir": str(out), **(more or {})}
    proc = subprocess.run(
        [str(BIN), "-i", str(inventory), str(play), "-e", json.dumps(extra)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}",
             "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "FAKE_LOG": str(tmp_path / "log"),
             "FAKE_TABLE": str(tmp_path / "table.txt"), **(env or {})})
    reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    return proc.returncode, reports, proc.stdout + proc.stderr


@pytest.fixture(autouse=True)
def _tools() -> None:
    if not BIN.exists() or shutil.which("timeout") is None:
        pytest.skip("ansible-playbook or coreutils timeout not available")


def test_pair_measures_each_active_hca(tmp_path: Path) -> None:
    rc, reports, out = run(tmp_path, ["node-a", "node-b"], ["mlx5_0", "mlx5_1", "mlx5_2"],
                           {"mlx5_0": "4: ACTIVE", "mlx5_1": "4: ACTIVE", "mlx5_2": "1: DOWN"},
                           375.0)
    assert rc == 0, out
    server, client = reports["node-a"], reports["node-b"]
    assert (server["role"], server["peer"]) == ("server", "node-b")
    assert (client["role"], client["peer"]) == ("client", "node-a")
    assert [(h["hca"], h["peer_hca"], h["bw_avg_gbps"], h["passed"]) for h in client["hcas"]] == [
        ("mlx5_0", "mlx5_0", 391.87, True), ("mlx5_1", "mlx5_1", 391.87, True)]
    log = (tmp_path / "log").read_text()
    assert "-d mlx5_0 -p 18510 -s 8388608 -F --report_gbits --perform_warm_up" in log
    assert "mlx5_2" not in log  # its port is DOWN


def test_an_hca_below_the_floor_fails_its_host(tmp_path: Path) -> None:
    rc, reports, out = run(tmp_path, ["node-a", "node-b"], ["mlx5_0", "mlx5_1"],
                           {"mlx5_0": "4: ACTIVE", "mlx5_1": "4: ACTIVE"}, 375.0,
                           env={"FAKE_BW_mlx5_1": "190.20"})
    assert rc != 0
    assert "mlx5_1->mlx5_1" in out and "190.2 Gb/s (floor" in out
    assert "node-b" not in reports  # the failed host stopped before saving


def test_single_host_runs_a_loopback(tmp_path: Path) -> None:
    rc, reports, out = run(tmp_path, ["node-a"], ["mlx5_0"], {"mlx5_0": "4: ACTIVE"}, 0)
    assert rc == 0, out
    assert reports["node-a"]["role"] == "loopback"
    assert reports["node-a"]["hcas"][0]["bw_avg_gbps"] == 391.87


def test_no_rdma_device_is_skipped_with_the_reason(tmp_path: Path) -> None:
    rc, reports, out = run(tmp_path, ["node-a", "node-b"], [], {}, 375.0)
    assert rc == 0, out
    assert reports["node-a"]["role"] == "none" and reports["node-a"]["hcas"] == []
    assert reports["node-a"]["skipped"].startswith(
        "no RDMA device with an ACTIVE port and a verbs device")


@pytest.mark.parametrize(("peermem", "flags"), [
    ("loaded", "--perform_warm_up --use_cuda=0 127.0.0.1"),
    ("dma_buf", "--perform_warm_up --use_cuda=0 --use_cuda_dmabuf 127.0.0.1"),
    ("skipped-container", "--perform_warm_up 127.0.0.1"),
])
def test_gpu_memory_is_registered_the_way_the_node_has_gpudirect(
        tmp_path: Path, peermem: str, flags: str) -> None:
    # Two GPUs found under /dev (the find task's result, given), GPUDirect wanted.
    rc, reports, out = run(tmp_path, ["node-a"], ["mlx5_0"], {"mlx5_0": "4: ACTIVE"}, 0,
                           more={"__rdma_peermem_state": peermem, "rdma_bandwidth_gpudirect": True,
                                 "__rdma_bw_gpus": {"matched": 2}})
    assert rc == 0, out
    client = [line for line in (tmp_path / "log").read_text().splitlines()
              if line.endswith("127.0.0.1")]
    assert client and client[0].endswith(flags), client
    assert reports["node-a"]["gpudirect"] is (peermem != "skipped-container")
