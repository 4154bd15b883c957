"""Day two on a 3-node simulated cluster (1 login node in [monitoring], 2 GPU nodes): after
`up` and playbooks/monitoring.yml, Prometheus scrapes every exporter, gpuc-health's metrics
arrive, every dashboard expression returns data, and injected faults (an Xid in the kernel log,
an NVLink down, a GPU at 95%) turn gpuc-health non-zero and fire their alerts. Short periods:
the timer runs every 20 s, alerts' `for:` is 30 s, Prometheus scrapes every 5 s.

Not run by the helper who wrote it (no podman there): run with `make e2e`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.paths import collection_root, collections_path
from provisioner.sim.tools.node import FAULTS_FILE, GPU_LOAD_FILE, IB_SYSFS, KERNEL_LOG

Cli = Callable[..., subprocess.CompletedProcess[str]]
# Pending (issue 13): the monitoring and node_health roles are not yet wired into `up` or the
# simulated cluster's inventory ([monitoring] group, node_health path variables), so `make e2e`
# leaves these out; `make e2e-pending` runs them.
pytestmark = [pytest.mark.e2e, pytest.mark.pending]

PROMETHEUS_PORT = 9090
TIMER = "20s"
DASHBOARD = collection_root() / "roles/monitoring/files/dashboards/gpucluster.json"


def hosts(inventory: Path) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((inventory / "hosts.yml").read_text())["all"]["children"]
    return {group: dict(data[group]["hosts"] or {}) for group in ("gpu_nodes", "cpu_nodes")}


@pytest.fixture(scope="module")
def cluster(cli: Cli, tmp_path_factory: pytest.TempPathFactory, runs_dir: Path) -> Path:
    inv = tmp_path_factory.mktemp("inv")
    out = cli("sim", "up", "--nodes", "3", "--recreate", "--inventory-dir", str(inv))
    assert out.returncode == 0, out.stderr + out.stdout
    out = cli("up", "--inventory", str(inv), "--yes", "--skip-smoke")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    groups = hosts(inv)
    monitor = sorted(groups["cpu_nodes"])[0]
    # The [monitoring] group and the short test periods, as an extra inventory source; the
    # simulated nodes' kernel log and InfiniBand tree are where the simulator keeps them.
    (inv / "monitoring.yml").write_text(yaml.safe_dump({"all": {
        "vars": {"node_health_interval": TIMER, "node_health_kernel_log": KERNEL_LOG,
                 "node_health_ib_sysfs_root": IB_SYSFS, "monitoring_alert_for_override": "30s",
                 "monitoring_scrape_interval": "5s", "monitoring_evaluation_interval": "5s"},
        "children": {"monitoring": {"hosts": {monitor: {}}}}}}))
    plan = inv / "plan.yml"
    out = cli("plan", "--inventory", str(inv), "-o", str(plan))
    assert out.returncode == 0, out.stderr
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv / "hosts.yml"),
         "-i", str(plan), "-i", str(inv / "monitoring.yml"),
         str(collection_root() / "playbooks" / "monitoring.yml")],
        capture_output=True, text=True, timeout=1800, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(collection_root() / "ansible.cfg"),
             "ANSIBLE_COLLECTIONS_PATH": str(collections_path())})
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return inv


@pytest.fixture(scope="module")
def prometheus(cluster: Path) -> str:
    groups = hosts(cluster)
    monitor = sorted(groups["cpu_nodes"])[0]
    address = groups["cpu_nodes"][monitor].get("ansible_host", monitor)
    return f"http://{address}:{PROMETHEUS_PORT}"


def api(base: str, path: str, **params: str) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}" if params else f"{base}{path}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def query(base: str, expr: str) -> list[dict[str, Any]]:
    return list(api(base, "/api/v1/query", query=expr)["result"])


def eventually(what: str, probe: Callable[[], Any], timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (OSError, AssertionError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(3)
    pytest.fail(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def firing(base: str, alert: str) -> list[dict[str, Any]]:
    return [a for a in api(base, "/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == alert and a["state"] == "firing"]


def node_exec(node: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", node, *command], capture_output=True, text=True,
                          timeout=60, check=False)


def test_every_exporter_is_up_and_health_arrives(cluster: Path, prometheus: str) -> None:
    groups = hosts(cluster)
    every = set(groups["gpu_nodes"]) | set(groups["cpu_nodes"])

    def up(job: str, want: set[str]) -> bool:
        rows = query(prometheus, f'up{{job="{job}"}}')
        return {r["metric"]["instance"] for r in rows if r["value"][1] == "1"} == want

    eventually("node_exporter up on every node", lambda: up("node", every))
    eventually("dcgm-exporter up on every GPU node", lambda: up("dcgm", set(groups["gpu_nodes"])))
    def health_rows() -> list[dict[str, Any]] | None:
        rows = query(prometheus, "gpucluster_health_status")
        return rows if {r["metric"]["instance"] for r in rows} == set(groups["gpu_nodes"]) \
            else None

    rows = eventually("gpucluster_health_status of every GPU node", health_rows)
    assert all(r["value"][1] == "0" for r in rows), rows


def test_provisioner_health_reports_every_gpu_node_healthy(cli: Cli, cluster: Path) -> None:
    out = cli("health", "--inventory", str(cluster), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    nodes = {n["host"]: n["status_name"] for n in json.loads(out.stdout)["nodes"]}
    assert nodes == dict.fromkeys(hosts(cluster)["gpu_nodes"], "healthy")


def test_every_dashboard_expression_returns_data(prometheus: str) -> None:
    sys.path.insert(0, str(collection_root() / "scripts"))
    from dashboard import expressions  # scripts/dashboard.py

    exprs = expressions(json.loads(DASHBOARD.read_text()))
    assert len(exprs) >= 10
    for expr in exprs:
        eventually(f"dashboard query {expr!r}", lambda expr=expr: query(prometheus, expr),
                   timeout=240)


def test_gpu_at_95_percent_fires_gpu_utilization_high(cluster: Path, prometheus: str) -> None:
    node = sorted(hosts(cluster)["gpu_nodes"])[0]
    done = node_exec(node, "sh", "-c", f"echo '0 util=95' > {GPU_LOAD_FILE}")
    assert done.returncode == 0, done.stderr
    alerts = eventually("GpuUtilizationHigh firing", lambda: firing(prometheus,
                                                                    "GpuUtilizationHigh"))
    assert {a["labels"]["Hostname"] for a in alerts} == {node}
    assert {a["labels"]["gpu"] for a in alerts} == {"0"}
    node_exec(node, "rm", "-f", GPU_LOAD_FILE)


def test_xid_in_the_kernel_log_turns_health_nonzero_and_fires(cluster: Path,
                                                              prometheus: str) -> None:
    node = sorted(hosts(cluster)["gpu_nodes"])[-1]
    line = ("[ 9999.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python3, "
            "GPU has fallen off the bus.")
    done = node_exec(node, "sh", "-c", f"echo '{line}' >> {KERNEL_LOG}")
    assert done.returncode == 0, done.stderr
    # Within one timer period (20 s) plus a scrape, the node reports unhealthy.
    rows = eventually("gpucluster_health_status == 2", lambda: query(
        prometheus, f'gpucluster_health_status{{instance="{node}"}} == 2'), timeout=60)
    assert rows
    check = node_exec(node, "/usr/local/sbin/gpuc-health", "--state", "")
    assert check.returncode == 2 and "Xid 79" in check.stdout, check.stdout
    eventually("GpuClusterXidErrors firing", lambda: firing(prometheus, "GpuClusterXidErrors"))
    eventually("GpuClusterNodeUnhealthy firing",
               lambda: firing(prometheus, "GpuClusterNodeUnhealthy"))


def test_nvlink_taken_down_fires_gpu_cluster_nvlink_down(cluster: Path, prometheus: str) -> None:
    node = sorted(hosts(cluster)["gpu_nodes"])[0]
    done = node_exec(node, "sh", "-c", f"echo gpu2-nvlink-link3-down >> {FAULTS_FILE}")
    assert done.returncode == 0, done.stderr
    alerts = eventually("GpuClusterNvlinkDown firing",
                        lambda: firing(prometheus, "GpuClusterNvlinkDown"))
    assert {(a["labels"]["instance"], a["labels"]["check"]) for a in alerts} == {
        (node, "gpu2_nvlink")}


def test_screenshot_of_the_alerts_page(prometheus: str, runs_dir: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    url = f"{prometheus}/alerts"
    shot = runs_dir / "prometheus-alerts.png"
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu",
              "--virtual-time-budget=15000", "--window-size=1400,2000"]
    done = subprocess.run([*common, f"--screenshot={shot}", url], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, done.stderr
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120, check=False)
    assert "GpuClusterXidErrors" in dom.stdout and "firing" in dom.stdout.lower()
    print(f"screenshot: {shot}")
