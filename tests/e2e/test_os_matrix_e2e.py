"""The stack on imitated Ubuntu 24.04 and Rocky 9 nodes (one GPU node and one login node each),
against the simulated mirror laid out per OS with an older and a newer release beside every pin:
`up` passes with the matrix's pins; a wrong Ubuntu revision, an unpinned install and a skipped
module stream each fail there. Each test starts its own cluster (`sim up --os`) and the module
leaves the default Debian cluster to the next `sim up`."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import (
    installed_from_mirror,
    newest_report,
    node_diagnostics,
    not_blacklisted,
    podman_exec,
    uu_blacklist,
)
from tests.e2e.test_monitoring_e2e import api, eventually, query

Cli = Callable[..., subprocess.CompletedProcess[str]]
ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent))

pytestmark = pytest.mark.e2e


def stack_playbook(inventory: Path, plan: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Plain `ansible-playbook stack.yml` on sim-gpu-1 with the inventory and a (edited) plan."""
    assert ANSIBLE_PLAYBOOK, "ansible-playbook is not in the virtualenv"
    return subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory / "hosts.yml"), "-i", str(plan),
         "--limit", "sim-gpu-1", *extra, "playbooks/stack.yml"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})


def sim_up(cli: Cli, os_name: str, inv: Path, *, fresh: bool = False) -> None:
    """The 2-node cluster of ``os_name``; ``fresh``: new nodes even when a cluster of that
    shape runs already (an earlier test's, with the stack installed)."""
    out = cli("sim", "up", "--os", os_name, "--nodes", "2", "--inventory-dir", str(inv),
              *(["--recreate"] if fresh else []))
    assert out.returncode == 0, out.stderr + out.stdout


def failed_checks(report: dict[str, object]) -> list[dict[str, object]]:
    checks = report["checks"]
    assert isinstance(checks, list)
    return [c for c in checks if c["status"] == "fail"]


def driver_pin(plan: Path, host: str, family: str) -> list[dict[str, str]]:
    data = yaml.safe_load(plan.read_text())
    pins: list[dict[str, str]] = data["all"]["hosts"][host]["nvidia_repo_stack_packages"][
        family]["driver"]
    return pins


@pytest.fixture(scope="module")
def ubuntu(cli: Cli, tmp_path_factory: pytest.TempPathFactory, runs_dir: Path) -> Path:
    inv = tmp_path_factory.mktemp("inv-ubuntu2404")
    sim_up(cli, "ubuntu2404", inv, fresh=True)  # the first test runs check mode on fresh nodes
    return inv


def check_mode_changes_nothing(cli: Cli, inv: Path, runs_dir: Path, probe: str) -> None:
    """`up --check` on fresh nodes: no phase fails because a package is not installed yet,
    validate says why it skips them, and the nodes are exactly as before."""
    before = {node: podman_exec(node, probe).stdout for node in ("sim-gpu-1", "sim-login-1")}
    out = cli("up", "--inventory", str(inv), "--yes", "--check")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr + node_diagnostics()
    report = newest_report(runs_dir)
    phases = {p["name"]: p for p in report["phases"]}
    assert {"preflight", "stack", "fabric", "monitoring"} <= set(phases), list(phases)
    assert phases["stack"]["changed"] > 0  # it would install the stack...
    assert "validate" not in phases  # ...so validate has nothing to measure yet, and says so
    assert any(n.startswith("check mode: validate skips sim-gpu-1, sim-login-1")
               for n in report["notes"]), report["notes"]
    assert not report["lost_hosts"]
    after = {node: podman_exec(node, probe).stdout for node in ("sim-gpu-1", "sim-login-1")}
    assert after == before


# Repositories, pins, the stack's and the day-two packages, what a run would add.
APT_PROBE = ("ls /etc/apt/sources.list.d /etc/apt/preferences.d /etc/apt/apt.conf.d; "
             "dpkg-query -W -f='${Package} ${Status}\\n' | grep ' installed$' | sort | md5sum")
DNF_PROBE = "ls /etc/yum.repos.d /etc/dnf/plugins; rpm -qa | sort | md5sum; dnf -q module list --enabled"


def test_check_mode_on_fresh_ubuntu_nodes_fails_nothing_and_changes_nothing(
        cli: Cli, ubuntu: Path, runs_dir: Path) -> None:
    check_mode_changes_nothing(cli, ubuntu, runs_dir, APT_PROBE)


def test_up_passes_on_ubuntu_2404_with_ubuntu_revisions(cli: Cli, ubuntu: Path, runs_dir: Path,
                                                        tmp_path: Path) -> None:
    out = cli("up", "--inventory", str(ubuntu), "--yes", "--skip-smoke")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr + node_diagnostics()
    report = newest_report(runs_dir)
    assert not failed_checks(report)
    facts = podman_exec("sim-gpu-1", ". /etc/os-release; echo $ID $VERSION_ID")
    assert facts.stdout.split() == ["ubuntu", "24.04"]
    # unattended-upgrades (Ubuntu's default) would skip every package the stack installed.
    entries, stack = uu_blacklist("sim-gpu-1"), installed_from_mirror("sim-gpu-1")
    assert stack and not_blacklisted(entries, stack) == []
    plan = tmp_path / "plan.yml"
    assert cli("plan", "--inventory", str(ubuntu), "-o", str(plan)).returncode == 0
    pins = driver_pin(plan, "sim-gpu-1", "apt_ubuntu")
    assert any(p["name"].startswith("cuda-drivers-") for p in pins)
    for pin in pins:
        assert re.search(r"-(0ubuntu1|1ubuntu1|1)$", pin["version"])
        got = podman_exec("sim-gpu-1", f"dpkg-query -W -f='${{Version}}' {pin['name']}")
        assert got.stdout == pin["version"], (pin, got.stdout, got.stderr)


def test_an_unpinned_install_gets_the_newest_release_and_fails_validate(
        cli: Cli, ubuntu: Path, runs_dir: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.yml"
    assert cli("plan", "--inventory", str(ubuntu), "-o", str(plan)).returncode == 0
    [meta] = [p for p in driver_pin(plan, "sim-gpu-1", "apt_ubuntu")
              if p["name"].startswith("cuda-drivers-")]
    name, pinned = meta["name"], meta["version"]
    # What an install without the role's pin and hold does: apt takes the newest release.
    out = podman_exec("sim-gpu-1", (
        f"apt-mark unhold {name} >/dev/null && "
        "mv /etc/apt/preferences.d/gpu-cluster-provisioner.pref /root/pref.e2e && "
        f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {name} >/dev/null && "
        f"dpkg-query -W -f='${{Version}}' {name}"))
    try:
        assert out.returncode == 0, out.stderr
        installed = out.stdout
        newer = subprocess.run(["dpkg", "--compare-versions", installed, "gt", pinned],
                               check=False).returncode == 0
        assert newer, f"unpinned {name} installed {installed}, not newer than {pinned}"
        smi = podman_exec("sim-gpu-1", "nvidia-smi --query-gpu=driver_version "
                          "--format=csv,noheader | head -1").stdout.strip()
        assert smi == installed.rsplit("-", 1)[0]
        validate = cli("validate", "--inventory", str(ubuntu))
        assert validate.returncode != 0, validate.stdout[-2000:]
        fails = {c["name"] for c in failed_checks(newest_report(runs_dir))}
        assert "driver_version" in fails, fails
    finally:
        podman_exec("sim-gpu-1", "mv -f /root/pref.e2e "
                    "/etc/apt/preferences.d/gpu-cluster-provisioner.pref")
    # The role puts the pinned release back (and holds it).
    healed = stack_playbook(ubuntu, plan)
    assert healed.returncode == 0, healed.stdout[-3000:] + node_diagnostics()
    again = podman_exec("sim-gpu-1", f"dpkg-query -W -f='${{Version}}' {name}").stdout
    assert again == pinned


def test_a_wrong_ubuntu_revision_fails_the_stack(cli: Cli, ubuntu: Path,
                                                 tmp_path: Path) -> None:
    """The plan as the matrix had it before (Debian's -1 on Ubuntu): no such package."""
    plan = tmp_path / "plan.yml"
    assert cli("plan", "--inventory", str(ubuntu), "-o", str(plan)).returncode == 0
    [meta] = [p for p in driver_pin(plan, "sim-gpu-1", "apt_ubuntu")
              if p["name"].startswith("cuda-drivers-")]
    upstream = meta["version"].rsplit("-", 1)[0]
    wrong = f"{upstream}-1"
    assert wrong != meta["version"]
    plan.write_text(plan.read_text().replace(meta["version"], wrong))
    out = stack_playbook(ubuntu, plan)
    assert out.returncode != 0, out.stdout[-3000:]
    assert f"{meta['name']} {wrong}" in out.stdout, out.stdout[-3000:]
    # The wrong pin installed nothing: the node still runs the matrix's revision.
    got = podman_exec("sim-gpu-1", f"dpkg-query -W -f='${{Version}}' {meta['name']}").stdout
    assert got == meta["version"]


def monitoring_from_release_tarballs(cli: Cli, inv: Path, tmp_path: Path) -> None:
    """EL 9 has no Prometheus, Alertmanager or node_exporter package: `up` installed the release
    tarballs the simulated mirror serves (checked by the sums beside them), the running servers
    report the planned versions, every node's node_exporter is scraped and gpuc-health's
    metrics arrive. A pinned sum that does not match the tarball fails the monitoring phase in
    one line and leaves the running install as it was."""
    data = yaml.safe_load((inv / "hosts.yml").read_text())["all"]
    planned = data["vars"]
    [monitor] = data["children"]["monitoring"]["hosts"]
    nodes = {**data["children"]["cpu_nodes"]["hosts"], **data["children"]["gpu_nodes"]["hosts"]}
    base = f"http://{nodes[monitor]['ansible_host']}:9090/"
    build = api(base, "api/v1/status/buildinfo")
    assert build["version"].split("+")[0] == planned["monitoring_prometheus_version"], build
    prometheus_dir = f"/opt/prometheus-{planned['monitoring_prometheus_version']}.linux-amd64"
    links = podman_exec(monitor, "readlink -f /usr/local/bin/prometheus /usr/local/bin/amtool; "
                        "systemctl is-active prometheus alertmanager")
    assert links.stdout.split() == [
        f"{prometheus_dir}/prometheus",
        f"/opt/alertmanager-{planned['monitoring_alertmanager_version']}.linux-amd64/amtool",
        "active", "active"], links.stdout + links.stderr
    for node in nodes:
        exporter = podman_exec(node, "readlink -f /usr/local/bin/node_exporter; "
                               "systemctl is-active node_exporter")
        assert exporter.stdout.split() == [
            f"/opt/node_exporter-{planned['node_health_node_exporter_version']}.linux-amd64"
            "/node_exporter", "active"], (node, exporter.stdout + exporter.stderr)
    scraped = eventually("every node_exporter scraped", lambda: {
        r["metric"]["instance"] for r in query(base, 'up{job="node"} == 1')} == set(nodes))
    assert scraped
    assert eventually("gpuc-health's status on the GPU node", lambda: [
        r for r in query(base, "gpucluster_health_status") if r["metric"]["instance"] == "sim-gpu-1"])

    # A site's pinned sum that the served tarball does not have: refused before unpacking.
    plan = tmp_path / "plan-monitoring.yml"
    assert cli("plan", "--inventory", str(inv), "-o", str(plan)).returncode == 0
    before = podman_exec(monitor, f"find {prometheus_dir} -printf '%p %s %T@\\n' | sort").stdout
    wrong = "0" * 64
    # A fact cache of its own: the checkout's (.ansible/facts) may hold facts of another
    # simulated cluster's sim-login-1 (a Debian one, from an earlier test), which this play
    # (gather_facts: false, the roles gather only what is missing) would trust.
    failed = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inv / "hosts.yml"), "-i", str(plan), "--limit", monitor,
         "-e", f"monitoring_prometheus_sha256={wrong}", "playbooks/monitoring.yml"],
        cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")})
    assert failed.returncode != 0, failed.stdout[-3000:]
    assert "checksum mismatch" in failed.stdout and wrong in failed.stdout, failed.stdout[-3000:]
    after = podman_exec(monitor, f"find {prometheus_dir} -printf '%p %s %T@\\n' | sort").stdout
    assert after == before
    assert api(base, "api/v1/status/buildinfo")["version"] == build["version"]


def test_up_passes_on_rocky_9_and_fails_without_the_module_stream(
        cli: Cli, tmp_path: Path, runs_dir: Path) -> None:
    inv = tmp_path / "inv-rocky9"
    sim_up(cli, "rocky9", inv)
    facts = podman_exec("sim-gpu-1", "cat /etc/redhat-release")
    assert facts.stdout.startswith("Rocky Linux release 9")
    # As if dnf-automatic were installed (the imitated node has no Rocky archive to get it).
    made = podman_exec("sim-gpu-1", "printf '[commands]\\napply_updates = yes\\n' "
                       "> /etc/dnf/automatic.conf")
    assert made.returncode == 0, made.stderr
    out = cli("up", "--inventory", str(inv), "--yes", "--skip-smoke")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr + node_diagnostics()
    monitoring_from_release_tarballs(cli, inv, tmp_path)
    # dnf-automatic's [base] excludes every package the stack installed (rpm -qa, by glob).
    conf = podman_exec("sim-gpu-1", "python3 -c 'import configparser as c; p = c.ConfigParser(); "
                       "p.read(\"/etc/dnf/automatic.conf\"); print(p[\"base\"][\"excludepkgs\"]); "
                       "print(p[\"commands\"][\"apply_updates\"])'")
    assert conf.returncode == 0, conf.stderr
    globs, kept = conf.stdout.splitlines()
    assert kept == "yes"
    rpms = podman_exec("sim-gpu-1", "rpm -qa --qf '%{NAME}|%{SUMMARY}\\n'").stdout
    # The simulated mirror's packages (their summaries start "SIMULATED:"), not the OS's.
    stack = [line.split("|")[0] for line in rpms.splitlines() if "|SIMULATED:" in line]
    assert stack and [p for p in stack
                      if not any(fnmatch.fnmatchcase(p, g) for g in globs.split())] == []
    enabled = podman_exec("sim-gpu-1", "dnf -q module list --enabled nvidia-driver")
    assert re.search(r"^nvidia-driver\s+\d+-(open|dkms)\s", enabled.stdout, re.M), enabled.stdout
    # A plan without the stream: dnf's modular filtering hides every driver release.
    reset = podman_exec("sim-gpu-1", "dnf -y -q module reset nvidia-driver && "
                        "dnf -y -q versionlock clear && dnf -y -q remove nvidia-driver-cuda")
    assert reset.returncode == 0, reset.stderr
    plan = tmp_path / "plan.yml"
    assert cli("plan", "--inventory", str(inv), "-o", str(plan)).returncode == 0
    text = re.sub(r"nvidia_driver_dnf_module_stream: \S+", "nvidia_driver_dnf_module_stream: ''",
                  plan.read_text())
    plan.write_text(text)
    failed = stack_playbook(inv, plan)
    assert failed.returncode != 0
    assert "filtered out by modular filtering" in failed.stdout, failed.stdout[-3000:]
    # The plan's stream again: enabled, and the pinned driver back and locked.
    assert cli("plan", "--inventory", str(inv), "-o", str(plan)).returncode == 0
    healed = stack_playbook(inv, plan)
    assert healed.returncode == 0, healed.stdout[-3000:] + node_diagnostics()
    again = podman_exec("sim-gpu-1", "dnf -q module list --enabled nvidia-driver")
    assert re.search(r"^nvidia-driver\s+\d+-(open|dkms)\s", again.stdout, re.M), again.stdout


def test_check_mode_on_fresh_rocky_9_nodes_fails_nothing_and_changes_nothing(
        cli: Cli, tmp_path: Path, runs_dir: Path) -> None:
    """The dnf path of check mode (repositories and keys not added, module streams, versionlock)
    on fresh imitated Rocky 9 nodes: a cluster of its own, in the extended tier."""
    inv = tmp_path / "inv-rocky9-check"
    sim_up(cli, "rocky9", inv, fresh=True)
    check_mode_changes_nothing(cli, inv, runs_dir, DNF_PROBE)
    # Then the stack for real, with nvidia_driver_hold_kernel: dnf version-locks the kernel's
    # packages; without it the role releases its own locks and leaves the stack's.
    plan = tmp_path / "plan.yml"
    assert cli("plan", "--inventory", str(inv), "-o", str(plan)).returncode == 0
    kernel = {"kernel", "kernel-core", "kernel-modules", "kernel-modules-core"}

    def locked() -> set[str]:
        out = podman_exec("sim-gpu-1", "dnf -q versionlock list").stdout
        return {m[1] for m in re.finditer(r"^(\S+?)-\d+:", out, re.M)}

    held = stack_playbook(inv, plan, "-e", "nvidia_driver_hold_kernel=true")
    assert held.returncode == 0, held.stdout[-3000:] + node_diagnostics()
    assert kernel <= locked() and "nvidia-driver-cuda" in locked()
    released = stack_playbook(inv, plan)
    assert released.returncode == 0, released.stdout[-3000:] + node_diagnostics()
    assert not kernel & locked() and "nvidia-driver-cuda" in locked()
