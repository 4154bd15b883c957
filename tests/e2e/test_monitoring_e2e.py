"""Day two on the 3-node simulated cluster (sim-login-1 in [monitoring], two GPU nodes): `up`
runs the monitoring phase and says where Prometheus listens; Prometheus scrapes every exporter
and gpuc-health's metrics arrive; every dashboard expression returns data; faults injected into
running nodes (an Xid in the kernel log, an NVLink down, a GPU at 95%) turn gpuc-health non-zero
within one timer period and fire their alerts; a headless browser screenshots the alerts page.

Short periods: the simulated cluster's inventory sets them through the roles' variables
(provisioner.sim.cluster.SIM_MONITORING_PERIODS: the timer every 15 s, scrapes and rule
evaluation every 5 s, every alert's `for:` 20 s), so `up` converges a running cluster to them
and nothing needs restoring but the node files the faults edit (and the Xid acknowledged).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.paths import collection_root
from provisioner.sim.cluster import SIM_MONITORING_PERIODS
from provisioner.sim.tools.node import FAULTS_FILE, GPU_LOAD_FILE, IB_SYSFS, KERNEL_LOG
from tests.e2e import conftest as e2e
from tests.e2e.conftest import FirstUp

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e

PROMETHEUS_PORT = 9090
TIMER_S = int(SIM_MONITORING_PERIODS["node_health_interval"].removesuffix("s"))
# The timer's AccuracySec (roles/node_health/templates/.../gpuc-health.timer.j2).
TIMER_ACCURACY_S = 5
TEXTFILE = "/var/lib/prometheus/node-exporter/gpucluster_health.prom"
GPUC_HEALTH = "/usr/local/sbin/gpuc-health"
DASHBOARD = collection_root() / "roles/monitoring/files/dashboards/gpucluster.json"
XID_LINE = ("[ 9999.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=python3, "
            "GPU has fallen off the bus.")
NVLINK_FAULT = "gpu2-nvlink-link3-down"


def hosts(inventory: Path) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((inventory / "hosts.yml").read_text())["all"]["children"]
    return {group: dict(data[group]["hosts"] or {}) for group in data}


def node_exec(node: str, *command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", "exec", node, *command], capture_output=True, text=True,
                          timeout=timeout, check=False)


def sh(node: str, script: str) -> subprocess.CompletedProcess[str]:
    done = node_exec(node, "sh", "-c", script)
    assert done.returncode == 0, f"{node}: {script}: {done.stderr}"
    return done


@pytest.fixture(scope="module")
def cluster(cli: Cli, sim_inventory: Path, first_up: FirstUp) -> Path:
    # The session's shared cluster, healed. The session's first `up` (the whole flow) is the
    # run whose report and output the tests read: no `up` of this module's own (a converged
    # rerun would cost a minute and prove nothing the first one does not).
    return e2e.heal(cli, sim_inventory, first_up)


@pytest.fixture(scope="module")
def prometheus(cluster: Path) -> str:
    groups = hosts(cluster)
    [monitor] = groups["monitoring"]
    address = groups["cpu_nodes"][monitor]["ansible_host"]
    return f"http://{address}:{PROMETHEUS_PORT}/"


def api(base: str, path: str, **params: str) -> Any:
    url = urllib.parse.urljoin(base, path)
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def query(base: str, expr: str) -> list[dict[str, Any]]:
    return list(api(base, "api/v1/query", query=expr)["result"])


def eventually(what: str, probe: Callable[[], Any], timeout: float = 120,
               every: float = 2) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (OSError, AssertionError, ValueError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def firing(base: str, alert: str) -> list[dict[str, Any]]:
    return [a for a in api(base, "api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == alert and a["state"] == "firing"]


def textfile_is(node: str, status: int) -> bool:
    return textfile_status(node) == status


def textfile_status(node: str) -> int | None:
    done = node_exec(node, "cat", TEXTFILE)
    for line in done.stdout.splitlines():
        if line.startswith("gpucluster_health_status "):
            return int(line.split()[1])
    return None


# ---------------------------------------------------------------------------------------------


def test_up_runs_the_monitoring_phase_and_says_where_prometheus_listens(
        cluster: Path, prometheus: str, first_up: FirstUp) -> None:
    report = first_up.report
    assert [p["name"] for p in report["phases"]] == ["preflight", "stack", "fabric", "validate",
                                                      "monitoring", "scheduler", "facts",
                                                      "smoke"]
    assert all(p["ok"] for p in report["phases"])
    [monitor] = hosts(cluster)["monitoring"]
    # Recorded in the report, printed at the end of `up`: the login container's address on
    # the podman network, which this machine reaches directly.
    assert report["hosts"][monitor]["facts"]["monitoring"]["prometheus_url"] == prometheus
    assert f"Prometheus on {monitor}: {prometheus}" in " ".join(first_up.stdout.split())
    assert any(n.startswith(f"Prometheus on {monitor}: {prometheus}") for n in report["notes"])
    with urllib.request.urlopen(urllib.parse.urljoin(prometheus, "-/ready"), timeout=10) as r:
        assert r.status == 200


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
    stack = query(prometheus, "gpucluster_stack_info")
    assert {r["metric"]["instance"] for r in stack} == set(groups["gpu_nodes"])
    assert all(r["metric"]["driver"] and r["metric"]["stack"] for r in stack), stack


# Where each service answers, tried from inside the nodes (a TCP connect: "open" or the error).
CONNECT = """
import json, socket, sys
out = {}
for address, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((address, port), timeout=3).close()
        out[f"{address}:{port}"] = "open"
    except OSError as exc:
        out[f"{address}:{port}"] = type(exc).__name__
print(json.dumps(out))
"""


def connect_from(node: str, *targets: tuple[str, int]) -> dict[str, str]:
    done = node_exec(node, "python3", "-c", CONNECT, json.dumps(targets))
    assert done.returncode == 0, f"{node}: {done.stderr}"
    result: dict[str, str] = json.loads(done.stdout)
    return result


def listening_ports(node: str) -> set[int]:
    lines = sh(node, "ss -ltnH").stdout.splitlines()
    return {int(line.split()[3].rsplit(":", 1)[1]) for line in lines}


def test_servers_and_exporters_listen_only_where_they_are_reached(cluster: Path) -> None:
    """Alertmanager on the monitoring host's loopback alone (its API silences alerts), its
    cluster gossip off; Prometheus on the host's cluster address; node_exporter and
    dcgm-exporter on each node's cluster address, where Prometheus scrapes them, not on
    loopback. The roles' verify measured the same on `up`; this proves it from another node."""
    groups = hosts(cluster)
    [monitor] = groups["monitoring"]
    server = groups["cpu_nodes"][monitor]["ansible_host"]
    gpu = sorted(groups["gpu_nodes"])[0]
    node = groups["gpu_nodes"][gpu]["ansible_host"]

    on_server = connect_from(monitor, ("127.0.0.1", 9093), (server, 9093), ("127.0.0.1", 9094),
                             (server, 9094), ("127.0.0.1", PROMETHEUS_PORT),
                             (server, PROMETHEUS_PORT), (server, 9100), (node, 9100),
                             (node, 9400))
    from_gpu_node = connect_from(gpu, (server, 9093), (server, 9094), (server, PROMETHEUS_PORT),
                                 ("127.0.0.1", 9100), ("127.0.0.1", 9400), (node, 9400))
    assert on_server == {
        "127.0.0.1:9093": "open", f"{server}:9093": "ConnectionRefusedError",
        "127.0.0.1:9094": "ConnectionRefusedError", f"{server}:9094": "ConnectionRefusedError",
        f"127.0.0.1:{PROMETHEUS_PORT}": "ConnectionRefusedError",
        f"{server}:{PROMETHEUS_PORT}": "open", f"{server}:9100": "open", f"{node}:9100": "open",
        f"{node}:9400": "open"}, on_server
    assert from_gpu_node == {
        f"{server}:9093": "ConnectionRefusedError", f"{server}:9094": "ConnectionRefusedError",
        f"{server}:{PROMETHEUS_PORT}": "open", "127.0.0.1:9100": "ConnectionRefusedError",
        "127.0.0.1:9400": "ConnectionRefusedError", f"{node}:9400": "open"}, from_gpu_node
    # No gossip socket on any address (Alertmanager's default cluster port).
    assert 9094 not in listening_ports(monitor)
    # Alertmanager's published URL is where Prometheus on the host reaches it.
    with urllib.request.urlopen(f"http://{server}:{PROMETHEUS_PORT}/api/v1/alertmanagers",
                                timeout=10) as r:
        active = json.loads(r.read())["data"]["activeAlertmanagers"]
    assert [a["url"] for a in active] == ["http://127.0.0.1:9093/api/v2/alerts"], active


def test_provisioner_health_reports_every_gpu_node_healthy(cli: Cli, cluster: Path) -> None:
    out = cli("health", "--inventory", str(cluster), "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    nodes = {n["host"]: n["status_name"] for n in json.loads(out.stdout)["nodes"]}
    assert nodes == dict.fromkeys(hosts(cluster)["gpu_nodes"], "healthy")


def test_every_dashboard_expression_returns_data(prometheus: str) -> None:
    sys.path.insert(0, str(collection_root() / "scripts"))
    from dashboard import expressions  # type: ignore[import-not-found]  # scripts/dashboard.py

    exprs = expressions(json.loads(DASHBOARD.read_text()))
    assert len(exprs) >= 10
    for expr in exprs:
        eventually(f"dashboard query {expr!r}", partial(query, prometheus, expr), timeout=60)


# Faults, injected at once into the running nodes (the waits overlap), healed afterwards -----


def heal(saved: dict[str, dict[str, str]]) -> None:
    """The node files as they were, the Xid acknowledged, a fresh gpuc-health result."""
    for node, files in saved.items():
        for path, text in files.items():
            sh(node, f"printf %s {shlex.quote(text)} > {path}")
        sh(node, f"rm -f {GPU_LOAD_FILE}")
        # Fatal Xids stay reported until acknowledged (`--clear-xid`), as on a real node
        # after a GPU reset; this run also rewrites the textfile at once.
        node_exec(node, GPUC_HEALTH, "--clear-xid", "--kernel-log", KERNEL_LOG,
                  "--ib-sysfs-root", IB_SYSFS, "--textfile", str(Path(TEXTFILE).parent))


@pytest.fixture(scope="module")
def faults(cluster: Path, prometheus: str) -> Iterator[dict[str, Any]]:
    gpus = sorted(hosts(cluster)["gpu_nodes"])
    first, last = gpus[0], gpus[-1]
    saved = {node: {path: sh(node, f"cat {path}").stdout for path in (KERNEL_LOG, FAULTS_FILE)}
             for node in gpus}
    try:
        sh(last, f"echo {shlex.quote(XID_LINE)} >> {KERNEL_LOG}")
        sh(first, f"echo {NVLINK_FAULT} >> {FAULTS_FILE}")
        sh(first, f"echo '0 util=95' > {GPU_LOAD_FILE}")
        yield {"xid": last, "nvlink": first, "util": first, "injected": time.monotonic(),
               "saved": saved}
    finally:
        heal(saved)


def test_faults_turn_gpuc_health_nonzero_within_one_timer_period(
        faults: dict[str, Any]) -> None:
    waited: dict[str, float] = {}
    for node in {faults["xid"], faults["nvlink"]}:
        eventually(f"{node}: the timer's gpuc-health reports unhealthy",
                   partial(textfile_is, node, 2), timeout=60, every=1)
        waited[node] = time.monotonic() - faults["injected"]
    # One timer period (plus its accuracy window and this loop's polling).
    assert max(waited.values()) <= TIMER_S + TIMER_ACCURACY_S + 5, waited
    # Run by hand, stateless, gpuc-health names the faults and exits 2 (unhealthy).
    xid = node_exec(faults["xid"], GPUC_HEALTH, "--state", "", "--kernel-log", KERNEL_LOG,
                    "--ib-sysfs-root", IB_SYSFS)
    assert xid.returncode == 2 and "Xid 79" in xid.stdout, xid.stdout + xid.stderr
    nvlink = node_exec(faults["nvlink"], GPUC_HEALTH, "--state", "", "--kernel-log",
                       KERNEL_LOG, "--ib-sysfs-root", IB_SYSFS)
    assert nvlink.returncode == 2 and "gpu2_nvlink" in nvlink.stdout, nvlink.stdout


def test_xid_in_the_kernel_log_fires_xid_and_unhealthy_alerts(
        faults: dict[str, Any], prometheus: str) -> None:
    node = faults["xid"]
    rows = eventually("gpucluster_health_status == 2 in Prometheus", lambda: query(
        prometheus, f'gpucluster_health_status{{instance="{node}"}} == 2'), timeout=60)
    assert rows
    alerts = eventually("GpuClusterXidErrors firing", lambda: firing(prometheus,
                                                                     "GpuClusterXidErrors"))
    assert {a["labels"]["instance"] for a in alerts} == {node}
    # The NVLink node is unhealthy too: wait for this node's alert among them.
    eventually(f"GpuClusterNodeUnhealthy firing for {node}", lambda: node in {
        a["labels"]["instance"] for a in firing(prometheus, "GpuClusterNodeUnhealthy")})


def test_nvlink_taken_down_fires_gpu_cluster_nvlink_down(faults: dict[str, Any],
                                                         prometheus: str) -> None:
    alerts = eventually("GpuClusterNvlinkDown firing",
                        lambda: firing(prometheus, "GpuClusterNvlinkDown"))
    assert {(a["labels"]["instance"], a["labels"]["check"]) for a in alerts} == {
        (faults["nvlink"], "gpu2_nvlink")}


def test_gpu_at_95_percent_fires_gpu_utilization_high(faults: dict[str, Any],
                                                      prometheus: str) -> None:
    rows = query(prometheus, "DCGM_FI_DEV_GPU_UTIL > 85")
    assert {(r["metric"]["Hostname"], r["metric"]["gpu"]) for r in rows} <= {
        (faults["util"], "0")}
    alerts = eventually("GpuUtilizationHigh firing",
                        lambda: firing(prometheus, "GpuUtilizationHigh"))
    assert {(a["labels"]["Hostname"], a["labels"]["gpu"]) for a in alerts} == {
        (faults["util"], "0")}


def test_screenshot_of_the_alerts_page(cluster: Path, faults: dict[str, Any], prometheus: str,
                                       runs_dir: Path, first_up: FirstUp) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (make system-deps installs it)")
    eventually("GpuClusterXidErrors firing", lambda: firing(prometheus, "GpuClusterXidErrors"))
    # The page the monitoring role published (Debian's Prometheus: the classic UI's), saved
    # under the run directory of the `up` that installed this Prometheus (the session's first).
    report = first_up.report
    [monitor] = hosts(cluster)["monitoring"]
    url = report["hosts"][monitor]["facts"]["monitoring"]["alerts_url"]
    shot = runs_dir / report["run_id"] / "prometheus-alerts.png"
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--virtual-time-budget=10000", "--window-size=1400,1200"]
    done = subprocess.run([*common, f"--screenshot={shot}", url], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, done.stderr
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True,
                         timeout=120, check=False).stdout
    # The rendered page lists the alert by name in a firing (red, "N active") header row.
    listed = re.search(r'<tr class="alert alert-danger alert_header">\s*<td>(?:<i[^>]*></i>)?'
                       r'\s*<b>GpuClusterXidErrors</b>\s*\((\d+) active\)', dom)
    assert listed and int(listed.group(1)) >= 1, dom[-3000:]
    print(f"screenshot of {url}: {shot}")


def test_healed_nodes_are_healthy_again(faults: dict[str, Any], prometheus: str) -> None:
    heal(faults["saved"])
    for node in faults["saved"]:
        assert textfile_status(node) == 0, node
        done = node_exec(node, GPUC_HEALTH, "--state", "", "--kernel-log", KERNEL_LOG,
                         "--ib-sysfs-root", IB_SYSFS)
        assert done.returncode == 0, done.stdout + done.stderr
    eventually("gpucluster_health_status back to 0 in Prometheus", lambda: {
        r["metric"]["instance"] for r in query(prometheus, "gpucluster_health_status == 0")}
        == set(faults["saved"]), timeout=30)
