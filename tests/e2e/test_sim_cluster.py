"""The whole flow on a 3-node simulated cluster: up (preflight, stack, fabric, validate,
monitoring, smoke), a rerun that changes nothing, the plain Ansible path agreeing with up,
injected faults that validation must catch, and a node killed in the middle of the smoke job.
Order matters: the tests share one cluster and go from healthy to broken."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from provisioner import plan as plan_mod
from provisioner.smoke_launch import SIM_TIMEOUT_S
from tests.e2e.conftest import (
    SIM_NODES,
    FirstUp,
    installed_from_mirror,
    newest_report,
    not_blacklisted,
    podman_exec,
    uu_blacklist,
)

ROOT = Path(__file__).resolve().parents[2]

Cli = Callable[..., subprocess.CompletedProcess[str]]

pytestmark = pytest.mark.e2e


@pytest.fixture
def inventory(healthy_cluster: Path) -> Path:
    return healthy_cluster


def test_up_brings_the_simulated_cluster_up(first_up: FirstUp) -> None:
    assert first_up.returncode == 0, first_up.stdout[-3000:] + first_up.stderr
    assert "SIMULATED CLUSTER" in first_up.stdout
    report = first_up.report
    assert report["simulated"] is True and "SIMULATED" in report
    assert [p["name"] for p in report["phases"]] == ["preflight", "stack", "fabric", "validate",
                                                      "monitoring", "scheduler", "facts", "smoke"]
    assert all(p["ok"] for p in report["phases"])
    assert set(report["phases"][0]["hosts"]) == set(SIM_NODES)
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    assert failed == []
    names = {(c["host"], c["phase"], c["name"]) for c in report["checks"]}
    assert ("sim-gpu-2", "gpu_validate", "gpu3_nvlink") in names
    assert ("sim-gpu-1", "stack", "nccl_consistent") in names
    # dkms status measured on the node: the running kernel (the only one) has the module.
    kernels = {c["host"]: c for c in report["checks"] if c["name"] == "driver_kernels"}
    assert set(kernels) == {"sim-gpu-1", "sim-gpu-2"}
    assert kernels["sim-gpu-1"]["status"] == "pass"
    assert kernels["sim-gpu-1"]["measured"] == f"{os.uname().release}: installed"
    # The GPUDirect RDMA path of each GPU node: the open module on this kernel (no CUDA driver
    # library on a simulated node, so NVIDIA's rule decides).
    gdr = {c["host"]: c for c in report["checks"] if c["name"] == "gpudirect"}
    assert set(gdr) == {"sim-gpu-1", "sim-gpu-2"}
    assert (gdr["sim-gpu-1"]["status"], gdr["sim-gpu-1"]["measured"]) == ("pass", "dma_buf")
    assert f"open kernel module on kernel {os.uname().release}" in gdr["sim-gpu-1"]["detail"]
    # So the rdma role loads no nvidia-peermem there (rdma_peermem auto), and NCCL still gets
    # its GPUDirect level.
    for node in ("sim-gpu-1", "sim-gpu-2"):
        assert report["hosts"][node]["facts"]["rdma"]["peermem"] == "dma_buf"
        files = podman_exec(node, "test ! -e /etc/modules-load.d/nvidia-peermem.conf && "
                                  "grep ^NCCL_NET_GDR_LEVEL= /etc/nccl.conf")
        assert files.returncode == 0 and files.stdout.strip() == "NCCL_NET_GDR_LEVEL=PHB", files
    runs = report["smoke"]["runs"]
    inter = [r for r in runs if r["label"] == "inter-node"]
    assert len(inter) == 1 and inter[0]["world_size"] == 4 and inter[0]["nnodes"] == 2
    assert all(row["correct"] for row in inter[0]["allreduce"])
    assert inter[0]["ddp"]["decreased"] and inter[0]["ddp"]["params_identical"]
    assert "simulated" in inter[0]["verdict"]["floor_skipped"]


def test_automatic_upgrades_skip_every_installed_stack_package(first_up: FirstUp) -> None:
    """What apt merges from apt.conf.d (unattended-upgrades reads the same) blacklists every
    package the stack installed from the (simulated) NVIDIA mirror, and nothing of the OS."""
    assert first_up.returncode == 0, first_up.stdout[-3000:] + first_up.stderr
    for node in ("sim-gpu-1", "sim-gpu-2"):
        entries = uu_blacklist(node)
        stack = installed_from_mirror(node)
        assert len(stack) >= 10, stack
        assert not_blacklisted(entries, stack) == []
        assert not_blacklisted(entries, ["openssh-server", "linux-image-amd64"]) == [
            "openssh-server", "linux-image-amd64"]


def test_rerun_changes_nothing(cli: Cli, inventory: Path, runs_dir: Path) -> None:
    out = cli("up", "--inventory", str(inventory), "--yes", "--skip-smoke")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    report = newest_report(runs_dir)
    changed = {p["name"]: p["changed"] for p in report["phases"]}
    assert changed == {"preflight": 0, "stack": 0, "fabric": 0, "validate": 0,
                       "monitoring": 0, "scheduler": 0}


def test_check_mode_on_a_converged_cluster_reports_no_change(cli: Cli, inventory: Path,
                                                             runs_dir: Path) -> None:
    out = cli("up", "--inventory", str(inventory), "--yes", "--check")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    report = newest_report(runs_dir)
    # Every phase: this is the core tier's stand-in for a converged rerun (extended tier).
    changed = {p["name"]: p["changed"] for p in report["phases"]}
    assert changed == {"preflight": 0, "stack": 0, "fabric": 0, "validate": 0,
                       "monitoring": 0, "scheduler": 0}, changed


def sim_executors(cli: Cli, count: int) -> tuple[dict[str, str], str]:
    """``sim executors --count N``: their addresses by name and the ssh_config to reach them."""
    out = cli("sim", "executors", "--count", str(count))
    assert out.returncode == 0, out.stdout + out.stderr
    addresses = dict(re.findall(r"^\s+(sim-exec-\d+)\s+(\S+)$", out.stdout, re.M))
    config = re.search(r"--executor-ssh-config (\S+)", out.stdout)
    return addresses, config.group(1) if config else ""


def ssh_clients(node: str, since: int) -> set[str]:
    """The addresses sshd on ``node`` accepted a login from since ``since`` (epoch s)."""
    out = podman_exec(node, f"journalctl -u ssh --since @{since} --no-pager -o cat")
    assert out.returncode == 0, out.stderr
    return set(re.findall(r"^Accepted publickey for \S+ from (\S+)", out.stdout, re.M))


def test_a_rerun_through_two_executors_changes_nothing_and_names_each_hosts_executor(
        cli: Cli, inventory: Path, runs_dir: Path) -> None:
    """`up --executors`: the per-node phases run from two executor containers through
    ansible-runner's worker protocol (a shard each); the scheduler phase from the controller.
    On the converged cluster this is also the core tier's rerun: nothing may change."""
    addresses, config = sim_executors(cli, 2)
    assert sorted(addresses) == ["sim-exec-1", "sim-exec-2"] and config
    try:
        since = int(time.time()) - 1
        out = cli("up", "--inventory", str(inventory), "--yes", "--skip-smoke",
                  "--executors", "sim-exec-1,sim-exec-2", "--executor-ssh-config", config)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
        report = newest_report(runs_dir)
        changed = {p["name"]: p["changed"] for p in report["phases"]}
        assert changed == {"preflight": 0, "stack": 0, "fabric": 0, "validate": 0,
                           "monitoring": 0, "scheduler": 0}, changed
        shards = report["executors"]
        assert sorted(shards) == ["sim-exec-1", "sim-exec-2"]
        assert sorted(h for hosts in shards.values() for h in hosts) == sorted(SIM_NODES)
        assert sorted(len(hosts) for hosts in shards.values()) == [1, 2]
        assert "executors: sim-exec-1 (2 hosts), sim-exec-2 (1 host)" in out.stdout
        for executor, hosts in shards.items():
            for host in hosts:
                assert report["hosts"][host]["executor"] == executor
                # The node was reached from its executor, and not from the other one.
                clients = ssh_clients(host, since)
                assert addresses[executor] in clients, (host, clients)
                assert not {a for e, a in addresses.items() if e != executor} & clients
        # What the executors installed is the collection's own (the check policy the nodes'
        # gpuc-health imports, byte for byte).
        policy = ROOT / "plugins" / "module_utils" / "gpucluster"
        for source in sorted(policy.glob("*.py")):
            text = podman_exec("sim-gpu-1",
                               f"cat /usr/local/lib/gpuc-health/gpucluster/{source.name}")
            assert text.stdout == source.read_text(), source.name

        # An executor that does not answer: one line before anything runs, no report.
        assert subprocess.run(["podman", "stop", "--time", "0", "sim-exec-2"],
                              capture_output=True, check=False).returncode == 0
        reports = set(runs_dir.glob("*/report.json"))
        out = cli("up", "--inventory", str(inventory), "--yes", "--skip-smoke",
                  "--executors", "sim-exec-1,sim-exec-2", "--executor-ssh-config", config)
        assert out.returncode == 2, out.stdout[-3000:] + out.stderr
        line = out.stderr.strip().splitlines()[-1]
        assert "Traceback" not in out.stderr
        assert line.startswith("error: executor sim-exec-2: ")
        assert line.endswith("; nothing was changed")
        assert set(runs_dir.glob("*/report.json")) == reports
    finally:
        sim_executors(cli, 0)


def ansible_playbook(*args: str) -> subprocess.CompletedProcess[str]:
    """Plain ansible-playbook from the checkout (its ansible.cfg), as a user runs it."""
    binary = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run([str(binary), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=1800, check=False,
                          env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                               "ANSIBLE_FORCE_COLOR": "0"})


def recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host."""
    out: dict[str, dict[str, int]] = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", stdout, re.M):
        out[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counters)}
    return out


def changed_tasks(stdout: str) -> list[str]:
    """``host: task`` for every task that reported a change (what a failed idempotence
    assertion must show: the recap's counts alone say nothing in CI's log)."""
    out: list[str] = []
    task = ""
    for line in stdout.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line.split("[", 1)[1].rsplit("]", 1)[0]
        elif line.startswith("changed: ["):
            out.append(f"{line.split('[', 1)[1].split(']', 1)[0]}: {task}")
    return out


def test_plain_ansible_without_a_plan_stops_in_one_line(inventory: Path) -> None:
    out = ansible_playbook("-i", str(inventory / "hosts.yml"), "playbooks/preflight.yml")
    assert out.returncode != 0
    assert "no plan variables; run `provisioner plan --inventory INVENTORY -o plan.yml`" in (
        out.stdout), out.stdout[-2000:]


def test_plain_ansible_path_and_up_agree(inventory: Path, tmp_path: Path) -> None:
    # The documented plain path after `provisioner up`: plan -o plan.yml, then site.yml with
    # the plan as a second inventory. Nothing may change: both paths converge on one state.
    # (`up` rerun on the converged cluster: test_rerun_changes_nothing, extended tier; in the
    # core tier check mode predicts it, test_check_mode_on_a_converged_cluster_reports_no_change.)
    plan_file = plan_mod.build(inventory).write_inventory(tmp_path / "plan.yml")
    out = ansible_playbook("-i", str(inventory / "hosts.yml"), "-i", str(plan_file),
                           "playbooks/site.yml")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    counters = recap(out.stdout)
    assert set(counters) == set(SIM_NODES), out.stdout[-1500:]
    assert {h: c["changed"] for h, c in counters.items()} == dict.fromkeys(counters, 0), (
        changed_tasks(out.stdout))
    assert all(c["failed"] == 0 and c["unreachable"] == 0 for c in counters.values())


def test_injected_faults_are_caught_by_validation(cli: Cli, inventory: Path,
                                                  runs_dir: Path) -> None:
    out = cli("sim", "up", "--nodes", "3", "--inventory-dir", str(inventory),
              "--fault", "sim-gpu-2:gpu3-nvlink-down", "--fault", "sim-gpu-2:mlx5_1-half-rate",
              "--fault", "sim-gpu-2:gpu5-ecc-uncorrectable")
    assert out.returncode == 0, out.stderr
    # `validate` runs the validate phase `up` runs (bringup.VALIDATE_PHASES), without the
    # converged phases before it that cost minutes here and find nothing to change.
    out = cli("validate", "--inventory", str(inventory))
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr
    report = newest_report(runs_dir)
    assert [p["name"] for p in report["phases"]] == ["validate"]
    failed = {(c["host"], c["name"]): c for c in report["checks"] if c["status"] == "fail"}
    assert set(failed) == {("sim-gpu-2", "gpu3_nvlink"), ("sim-gpu-2", "ib_mlx5_1_port1"),
                           ("sim-gpu-2", "ib_ports"), ("sim-gpu-2", "gpu5_memory"),
                           ("sim-gpu-2", "dcgm_diag")}
    assert failed[("sim-gpu-2", "gpu3_nvlink")]["expected"] == 18
    assert failed[("sim-gpu-2", "ib_mlx5_1_port1")]["measured"] == "ACTIVE 200 Gb/s"
    assert "gpu3_nvlink" in out.stdout and "sim-gpu-2" in out.stdout


def test_a_node_without_a_gpudirect_path_fails_validation(cli: Cli, inventory: Path,
                                                          runs_dir: Path) -> None:
    # The state after a reboot into the proprietary flavour, the plan still saying open (so the
    # rdma role loaded no nvidia-peermem): the loaded module's banner says proprietary.
    banner = "/run/gpu-sim/proc/driver/nvidia/version"
    edit = podman_exec("sim-gpu-1", f"cp {banner} {banner}.open && sed -i "
                       f"'s/Open Kernel Module for \\([a-z0-9_]*\\)/\\1 Kernel Module/' {banner} "
                       f"&& cat {banner}")
    assert edit.returncode == 0 and "NVIDIA UNIX x86_64 Kernel Module" in edit.stdout, edit
    try:
        out = cli("validate", "--inventory", str(inventory), "--limit", "sim-gpu-1")
        assert out.returncode == 1, out.stdout[-3000:] + out.stderr
        report = newest_report(runs_dir)
        failed = {(c["host"], c["name"]): c for c in report["checks"] if c["status"] == "fail"}
        assert set(failed) == {("sim-gpu-1", "gpudirect")}, failed
        check = failed[("sim-gpu-1", "gpudirect")]
        assert check["measured"] == "none"
        assert "the proprietary kernel module has no dma_buf export; nvidia_peermem not " \
               "loaded" in check["detail"]
    finally:
        podman_exec("sim-gpu-1", f"mv {banner}.open {banner}")


def test_killing_a_node_ends_the_smoke_job_with_a_failure_naming_it(
        cli: Cli, inventory: Path, runs_dir: Path) -> None:
    killer = threading.Thread(target=_kill_during_inter_pass, args=("sim-gpu-2",), daemon=True)
    killer.start()
    started = time.monotonic()
    out = cli("smoke", "--inventory", str(inventory), timeout=900)
    elapsed = time.monotonic() - started
    killer.join(timeout=5)
    assert out.returncode == 1
    # The job's collective timeout is 90 s here; a dead peer must end it well before a hang.
    assert elapsed < 400
    report = newest_report(runs_dir)
    smoke = report["phases"][-1]
    assert smoke["hosts"]["sim-gpu-2"]["unreachable"] == 1
    assert "sim-gpu-2" in out.stdout
    if (inventory / "hosts.yml").read_text().count("slurm_controller"):
        # Under Slurm, srun waits for the dead node's step until slurmctld declares the node
        # DOWN (SlurmdTimeout, 300 s): the watch cancels the job once srun's own wait after the
        # failed task is over, so the whole command (both passes) ends before the node-side
        # bound of the multi-node pass alone (timeout 2 x 90 s + 60 s) would have.
        assert elapsed < 2 * SIM_TIMEOUT_S + 60, elapsed
        log = (runs_dir / report["run_id"] / "smoke" / "sim-gpu-1-inter.log").read_text()
        assert "gpuc_srun_watch: a task of gpuc-smoke-" in log, log[-2000:]
        # The failed job was cancelled: nothing of it runs or waits on the other nodes.
        queue = subprocess.run(["podman", "exec", "sim-login-1", "squeue", "-h", "-o", "%j %T"],
                               capture_output=True, text=True, timeout=60, check=False)
        left = [ln for ln in queue.stdout.splitlines()
                if ln.startswith("gpuc-smoke-") and not ln.endswith("COMPLETING")]
        assert queue.returncode == 0 and left == [], queue.stdout + queue.stderr


def _kill_during_inter_pass(node: str) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        probe = subprocess.run(["podman", "exec", node, "pgrep", "-f", "label inter-node"],
                               capture_output=True, check=False)
        if probe.returncode == 0:
            time.sleep(2)
            subprocess.run(["podman", "kill", node], capture_output=True, check=False)
            return
        time.sleep(1)
