"""Slurm on the 3-node simulated cluster (sim-login-1 is [slurm_controller], both GPU nodes are
compute nodes): after `up` (its scheduler phase), `sinfo` on the controller lists every GPU node
idle with gpu:h100:8, `srun -N2 hostname` runs on both, `up`'s smoke job went through srun
and passed, and an NVLink fault on a running node makes Slurm's health check drain
it with the failing check as the reason within one (10 s) interval. The node is healed and
resumed at the end.

Runs on the session's shared cluster (tests/e2e/conftest.py) with a short health check
interval; gpuc-health, which the health check runs, comes with up's monitoring phase.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from provisioner.sim.tools.node import FAULTS_FILE
from tests.e2e.conftest import FirstUp, eventually, heal, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = [pytest.mark.e2e]

INTERVAL = 10  # seconds between two health checks of slurmd
LEAVES = {"sim-gpu-1": "leaf1", "sim-gpu-2": "leaf2"}
FAULT = "gpu3-nvlink-down"

def groups(inventory: Path) -> dict[str, list[str]]:
    data = yaml.safe_load((inventory / "hosts.yml").read_text())["all"]["children"]
    return {name: sorted(group.get("hosts") or {}) for name, group in data.items()}


def on(node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", node, *command], capture_output=True, text=True,
                          timeout=timeout, check=False)


def node_fields(controller: str, node: str) -> dict[str, str]:
    """`scontrol show node` as key -> value (Reason keeps its spaces)."""
    out = on(controller, "scontrol", "--oneliner", "show", "node", node).stdout.strip()
    fields: dict[str, str] = {}
    reason = out.partition(" Reason=")[2]
    for item in out.partition(" Reason=")[0].split():
        key, _sep, value = item.partition("=")
        fields[key] = value
    if reason:
        fields["Reason"] = reason.split(" [", 1)[0]
    return fields


@pytest.fixture(scope="module")
def cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp,
            runs_dir: Path) -> Iterator[Path]:
    """The session's cluster, healed, with slurmd's health check every INTERVAL seconds (the
    override file is removed at the end; the next `up` puts the default back)."""
    inv = heal(cli, sim_inventory, first_up)
    assert groups(inv).get("slurm_controller"), "the simulated inventory has no [slurm_controller]"
    override = inv / "slurm-e2e.yml"
    # Each GPU node under its own leaf switch: topology.conf and topology/tree.
    override.write_text(yaml.safe_dump({"all": {
        "vars": {"slurm_controller_health_check_interval": INTERVAL},
        "hosts": {node: {"slurm_switch": LEAVES[node]} for node in LEAVES}}}))
    try:
        out = cli("up", "--inventory", str(inv), "--yes", "--skip-smoke")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
        phases = [p["name"] for p in newest_report(runs_dir)["phases"]]
        assert "scheduler" in phases, phases
        yield inv
    finally:
        override.unlink()


def test_sinfo_lists_every_gpu_node_idle_with_its_gres(cluster: Path) -> None:
    g = groups(cluster)
    controller = g["slurm_controller"][0]

    def rows() -> set[tuple[str, ...]] | None:
        out = on(controller, "sinfo", "-N", "-h", "-o", "%N %T %G").stdout
        found = {tuple(line.split()) for line in out.splitlines() if line.strip()}
        want = {(node, "idle", "gpu:h100:8") for node in g["gpu_nodes"]}
        return found if found == want else None

    eventually("every GPU node idle with gpu:h100:8", rows, timeout=60)
    partitions = on(controller, "sinfo", "-h", "-o", "%P").stdout.split()
    assert partitions == ["gpu*", "sim-h100-8gpu"], partitions


def test_the_switch_tree_is_written_and_slurm_reads_it(cluster: Path) -> None:
    g = groups(cluster)
    controller = g["slurm_controller"][0]
    conf = on(controller, "cat", "/etc/slurm/topology.conf").stdout
    assert [line for line in conf.splitlines() if line.startswith("SwitchName=")] == [
        "SwitchName=leaf1 Nodes=sim-gpu-1", "SwitchName=leaf2 Nodes=sim-gpu-2",
        "SwitchName=spine Switches=leaf1,leaf2"]
    for node in g["gpu_nodes"]:
        assert on(node, "cat", "/etc/slurm/topology.conf").stdout == conf
    shown = on(controller, "scontrol", "show", "topology")
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line for line in shown.stdout.splitlines() if line.strip()}
    assert "Nodes=sim-gpu-1" in rows["SwitchName=leaf1"], shown.stdout
    assert "Nodes=sim-gpu-2" in rows["SwitchName=leaf2"], shown.stdout
    assert "Switches=leaf[1-2]" in rows["SwitchName=spine"] or \
        "Switches=leaf1,leaf2" in rows["SwitchName=spine"], shown.stdout


def test_srun_runs_on_two_nodes(cluster: Path) -> None:
    g = groups(cluster)
    out = on(g["slurm_controller"][0], "srun", "-N2", "--time=1", "hostname", timeout=90)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == g["gpu_nodes"]
    gpus = on(g["slurm_controller"][0], "srun", "-N1", "--gpus-per-node=2", "--time=1", "sh",
              "-c", "echo $CUDA_VISIBLE_DEVICES", timeout=90)
    assert gpus.returncode == 0 and gpus.stdout.strip() == "0,1", gpus.stdout + gpus.stderr


def test_up_ran_the_smoke_job_through_srun(first_up: FirstUp) -> None:
    # The session's first `up` ran the smoke job; with Slurm configured it goes through srun.
    assert first_up.returncode == 0, first_up.stdout[-3000:] + first_up.stderr
    smoke = first_up.report["smoke"]
    assert smoke["launcher"] == "slurm"
    runs = {run["label"]: run for run in smoke["runs"]}
    assert runs["inter-node"]["nnodes"] == 2, runs
    assert all(run["verdict"]["passed"] for run in runs.values()), runs
    assert "launched by slurm" in first_up.stdout


def test_a_fault_drains_the_node_with_the_failing_check(cluster: Path) -> None:
    g = groups(cluster)
    controller, node = g["slurm_controller"][0], g["gpu_nodes"][-1]
    assert "DRAIN" not in node_fields(controller, node).get("State", "")
    start = time.monotonic()
    assert on(node, "sh", "-c", f"echo {FAULT} >> {FAULTS_FILE}").returncode == 0
    try:
        def drained() -> dict[str, str] | None:
            fields = node_fields(controller, node)
            return fields if "DRAIN" in fields.get("State", "") else None

        # One interval, plus slurmd's start offset and gpuc-health's own run time.
        fields = eventually(f"{node} drained", drained, timeout=INTERVAL * 3 + 20)
        took = time.monotonic() - start
        assert fields["Reason"].startswith("gpuc: gpu3_nvlink"), fields
        print(f"{node} drained after {took:.0f} s: {fields['Reason']}")
        other = node_fields(controller, g["gpu_nodes"][0])
        assert "DRAIN" not in other.get("State", ""), other
    finally:
        on(node, "sed", "-i", f"/^{FAULT}$/d", FAULTS_FILE)
        on(controller, "scontrol", "update", f"NodeName={node}", "State=RESUME")
    # Healed and resumed: the next health check leaves it alone.
    time.sleep(INTERVAL + 5)
    fields = node_fields(controller, node)
    assert fields.get("State") == "IDLE", fields


def sacct_rows(controller: str) -> list[dict[str, str]]:
    fields = ["JobID", "JobName", "State", "AllocTRES"]
    out = on(controller, "sacct", "--allusers", "--allocations", "--noheader", "--parsable2",
             "--starttime", "2020-01-01", "--format", ",".join(fields))
    assert out.returncode == 0, out.stderr
    return [dict(zip(fields, line.split("|"), strict=True)) for line in out.stdout.splitlines()
            if line.strip()]


def test_accounting_records_every_job_with_its_gpus_and_keeps_them_over_a_restart(
        cluster: Path, runs_dir: Path, first_up: FirstUp) -> None:
    """slurmdbd with MariaDB on the controller: the smoke job `up` ran through srun and a
    2-GPU step are in sacct with gres/gpu in their TRES; sreport reads the database; the
    database password is in slurmdbd.conf only (0600, slurm's) and in no run file; the records
    outlive a restart of the controller node."""
    g = groups(cluster)
    controller = g["slurm_controller"][0]
    two = on(controller, "srun", "-N1", "--gpus-per-node=2", "--time=1", "--job-name=gpuc-e2e-2gpu",
             "true", timeout=90)
    assert two.returncode == 0, two.stderr


    def recorded_two() -> list[dict[str, str]] | None:
        # slurmctld sends a finished job to slurmdbd on its own schedule (seconds).
        rows = sacct_rows(controller)
        return rows if any(r["JobName"] == "gpuc-e2e-2gpu" for r in rows) else None

    rows = eventually("the 2-GPU job in sacct", recorded_two, timeout=60)
    mine = [r for r in rows if r["JobName"] == "gpuc-e2e-2gpu"]
    assert "gres/gpu=2" in mine[-1]["AllocTRES"].split(","), rows
    # The smoke job of the session's first `up` (gpuc-smoke-<run>-<pass>; later tests' runs
    # kill nodes under theirs): every GPU of its nodes, 8 a node.
    run = first_up.report["run_id"]
    smoke = [r for r in rows if r["JobName"].startswith(f"gpuc-smoke-{run}-")]
    assert smoke and all(r["State"] == "COMPLETED" for r in smoke), rows
    gpus = [int(t.split("=")[1]) for r in smoke for t in r["AllocTRES"].split(",")
            if t.startswith("gres/gpu=")]
    assert len(gpus) == len(smoke) and all(n % 8 == 0 and n >= 8 for n in gpus), smoke
    # sreport reads slurmdbd's hourly roll-ups: on a cluster younger than an hour it prints the
    # report with no row yet; without slurmdbd it cannot connect at all.
    report = on(controller, "sreport", "cluster", "utilization")
    assert report.returncode == 0 and "Cluster Utilization" in report.stdout, report.stderr
    assert "Problem connecting to the database" not in report.stderr, report.stderr
    mode = on(controller, "stat", "-c", "%a %U", "/etc/slurm/slurmdbd.conf").stdout.split()
    assert mode == ["600", "slurm"], mode
    conf = on(controller, "cat", "/etc/slurm/slurmdbd.conf").stdout
    secret = next(line.split("=", 1)[1] for line in conf.splitlines()
                  if line.startswith("StoragePass="))
    assert len(secret) >= 32
    leaked = subprocess.run(["grep", "-rl", "--", secret, str(runs_dir), str(cluster)],
                            capture_output=True, text=True, check=False)
    assert leaked.stdout == "", leaked.stdout
    assert subprocess.run(["podman", "restart", "--time", "20", controller],
                          capture_output=True, check=False).returncode == 0

    def recorded() -> list[dict[str, str]] | None:
        probe = on(controller, "sacct", "--allusers", "--allocations", "--noheader",
                   "--parsable2", "--starttime", "2020-01-01", "--format", "JobName")
        return probe.stdout.split() if probe.returncode == 0 and "gpuc-e2e-2gpu" in \
            probe.stdout.split() else None

    eventually("sacct answering after the controller's restart", recorded, timeout=120)
