"""MIG on the shared simulated cluster: sim-gpu-2 gets a layout (GPU 0 split as the real H100
capture is, 3g.40gb + 2g.20gb + 2x 1g.10gb; GPU 1 one 7g.80gb; the other six whole) through the
inventory's gpu_mig_layout, and `up` applies it:

- validate judges every GPU's MIG layout (gpu<i>_mig) and skips dcgmi diag on the node, saying
  why; the simulated nvidia-smi lists the planned instances;
- Slurm declares the MIG devices as typed GPUs (`sinfo -o %G`), gres.conf hands each one with
  its capability files, and a job asking for gpu:1g.10gb runs there;
- a rerun of `up` changes nothing;
- after a reboot (the instances are gone, and on an H100 MIG mode too) gpuc-mig.service puts the layout
  back before slurmd starts, and the node returns to Slurm with the same GRES.

The layout is taken off at the end (MIG off, the unit and its files removed) so the tests after
this one find the cluster as the others left it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import FirstUp, eventually, eventually_equal, heal, newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = [pytest.mark.e2e]

NODE = "sim-gpu-2"
CONTROLLER = "sim-login-1"
GPU0 = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
GRES = "gpu:h100:6,gpu:3g.40gb:1,gpu:2g.20gb:1,gpu:1g.10gb:2,gpu:7g.80gb:1"


def on(node: str, *command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", node, *command], capture_output=True, text=True,
                          timeout=timeout, check=False)


def instances(node: str) -> dict[int, list[str]]:
    """{gpu: sorted profile names} as the node's nvidia-smi mig -lgi lists them."""
    out = on(node, "nvidia-smi", "mig", "-lgi").stdout
    found: dict[int, list[str]] = {}
    for line in out.splitlines():
        parts = line.strip("| ").split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1] == "MIG":
            found.setdefault(int(parts[0]), []).append(parts[2])
    return {gpu: sorted(names) for gpu, names in found.items()}


def slurm_view(node: str) -> tuple[str, ...]:
    """(state, GRES) as slurmctld shows the node (sinfo -N prints it once per partition), and
    the reason where it has one; more than one distinct row is returned as they are."""
    rows = {tuple(line.split(None, 3)[1:]) for line in on(
        CONTROLLER, "sinfo", "-N", "-h", "-n", node, "-o", "%N %T %G %E").stdout.splitlines()
        if line.strip()}
    if len(rows) != 1:
        return tuple(sorted(" ".join(row) for row in rows))
    state, gres, *reason = next(iter(rows))
    return (state, gres) if reason in ([], ["none"]) else (state, gres, *reason)


@pytest.fixture(scope="module")
def mig_cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp,
                runs_dir: Path) -> Iterator[tuple[Path, dict]]:
    inv = heal(cli, sim_inventory, first_up)
    override = inv / "host_vars" / f"{NODE}.yml"
    override.parent.mkdir(exist_ok=True)
    assert not override.exists()
    override.write_text(yaml.safe_dump({"gpu_mig_layout": {0: GPU0, 1: ["7g.80gb"]}}))
    try:
        out = cli("up", "--inventory", str(inv), "--yes", "--skip-smoke")
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr
        yield inv, newest_report(runs_dir)
    finally:
        override.unlink()
        # MIG off and the boot unit gone, as a site taking the layout away would leave it.
        on(NODE, "sh", "-c", "systemctl disable --now gpuc-mig.service; "
                             "rm -f /etc/systemd/system/gpuc-mig.service "
                             "/etc/gpucluster/mig-layout.json; systemctl daemon-reload; "
                             "nvidia-smi mig -dci; nvidia-smi mig -dgi; nvidia-smi -mig 0")
        out = cli("up", "--inventory", str(inv), "--yes", "--skip-smoke", "--limit",
                  f"{NODE},{CONTROLLER}")
        # The tests after this module share the node: an error here, not a cascade there.
        assert out.returncode == 0, out.stdout[-4000:] + out.stderr
        # slurmd was stopped before slurmctld restarted: no registration of the old GRES, so no
        # drain to lift, and slurmctld holds slurm.conf's GRES.
        seen = newest_report(runs_dir)["hosts"][NODE]["facts"]["slurm_node"]
        assert (seen["gres"], seen["gres_as_planned"], seen["undrained"]) == (
            "gpu:h100:8", True, False), seen
        eventually_equal(f"{NODE} idle with its whole GPUs again", lambda: slurm_view(NODE),
                         ("idle", "gpu:h100:8"), timeout=60)


def test_slurmctld_took_the_layout_from_the_new_files_only(mig_cluster: tuple[Path, dict]) -> None:
    """The run stopped the node's slurmd before slurmctld restarted with its MIG line, so no
    registration of the whole GPUs came in between: nothing drained, slurm.conf's GRES held."""
    _inv, report = mig_cluster
    seen = report["hosts"][NODE]["facts"]["slurm_node"]
    assert (seen["gres"], seen["planned_gres"], seen["gres_as_planned"], seen["undrained"]) == (
        GRES, GRES, True, False), seen


def test_up_applies_the_layout_and_validate_judges_it(mig_cluster: tuple[Path, dict]) -> None:
    _inv, report = mig_cluster
    assert instances(NODE) == {0: sorted(GPU0), 1: ["7g.80gb"]}
    checks = {(c["host"], c["name"]): c for c in report["checks"]}
    mig = {name: c["status"] for (host, name), c in checks.items()
           if host == NODE and name.endswith("_mig")}
    assert mig == {f"gpu{i}_mig": "pass" for i in range(8)}, mig
    # Another node's plan has no layout: nothing judged there.
    assert not [k for k in checks if k[0] == "sim-gpu-1" and k[1].endswith("_mig")]
    # The role's own account in the report: the layout and each MIG device with its files.
    published = report["hosts"][NODE]["facts"]["gpu_mig"]
    assert published["layout"][:2] == [GPU0, ["7g.80gb"]] and published["applied"] is True
    assert sorted(d["name"] for d in published["devices"]) == sorted([*GPU0, "7g.80gb"])
    dcgm = checks.get((NODE, "dcgm_diag"))
    assert dcgm is not None and dcgm["status"] == "skip", dcgm
    assert "MIG is on (GPU 0, 1)" in dcgm["detail"], dcgm


def test_slurm_hands_out_mig_devices_as_typed_gpus(mig_cluster: tuple[Path, dict]) -> None:
    eventually_equal(f"{NODE} idle with its MIG devices", lambda: slurm_view(NODE),
                     ("idle", GRES), timeout=60)
    conf = on(NODE, "cat", "/etc/slurm/gres.conf").stdout
    mig_lines = [line for line in conf.splitlines() if "MultipleFiles=" in line]
    assert len(mig_lines) == 5, conf
    for line in mig_lines:
        files = line.split("MultipleFiles=")[1].split(",")
        assert files[0] in ("/dev/nvidia0", "/dev/nvidia1") and len(files) == 3, line
        # Each capability file is a character device with the driver's nvidia-caps major.
        kinds = on(NODE, "stat", "-c", "%F", *files[1:]).stdout.split("\n")
        assert all(kind == "character special file" for kind in kinds if kind), (line, kinds)
    job = on(CONTROLLER, "srun", "-w", NODE, "--gres=gpu:1g.10gb:1", "--time=1",
             "sh", "-c", "echo ok", timeout=90)
    assert job.returncode == 0 and job.stdout.strip() == "ok", job.stdout + job.stderr


def test_a_rerun_changes_nothing(cli: Cli, mig_cluster: tuple[Path, dict],
                                 runs_dir: Path) -> None:
    inv, _report = mig_cluster
    out = cli("up", "--inventory", str(inv), "--yes", "--skip-smoke")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr
    changed = {p["name"]: p["changed"] for p in newest_report(runs_dir)["phases"]}
    assert set(changed.values()) == {0}, changed


def test_the_layout_comes_back_after_a_reboot(mig_cluster: tuple[Path, dict]) -> None:
    restart = subprocess.run(["podman", "restart", "--time", "20", NODE], capture_output=True,
                             text=True, timeout=180, check=False)
    assert restart.returncode == 0, restart.stderr

    def applied() -> str | None:
        state = on(NODE, "systemctl", "is-active", "gpuc-mig.service").stdout.strip()
        return state if state in ("active", "failed") else None

    assert eventually("gpuc-mig.service done", applied, timeout=120) == "active", \
        on(NODE, "journalctl", "-u", "gpuc-mig.service", "--no-pager").stdout[-2000:]
    assert instances(NODE) == {0: sorted(GPU0), 1: ["7g.80gb"]}
    order = on(NODE, "systemctl", "show", "-p", "Before", "--value", "gpuc-mig.service").stdout
    assert "slurmd.service" in order.split(), order
    eventually_equal(f"{NODE} back in Slurm with its MIG devices", lambda: slurm_view(NODE),
                     ("idle", GRES), timeout=120)
