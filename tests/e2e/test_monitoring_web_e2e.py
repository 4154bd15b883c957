"""TLS and basic auth on every monitoring endpoint of the simulated cluster, from the inventory's
prometheus_web_* settings (a CA and a server certificate made here for the nodes' addresses, a
bcrypt-hashed user): after `up`, Prometheus, node_exporter and dcgm-exporter answer only HTTPS
(the certificate checked against the CA), 401 without the user's password and their pages with
it; Prometheus scrapes every exporter through them (every target up); the key, the scrape
password and alertmanager.yml are readable by the services' group only. The settings are
removed and the cluster converged back to plain HTTP at the end. The same run pins dcgm-exporter
to the mirror's version (monitoring_dcgm_exporter_version): installed at it and held."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.sim.stand_in_packages import DCGM_EXPORTER_PACKAGE, DCGM_EXPORTER_VERSION
from tests.e2e import conftest as e2e
from tests.e2e.conftest import FirstUp

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e

USER, PASSWORD = "scraper", "e2e-scrape-pw"


def hosts(inventory: Path) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((inventory / "hosts.yml").read_text())["all"]["children"]
    return {group: dict(data[group]["hosts"] or {}) for group in data}


def openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def make_certificates(where: Path, addresses: list[str]) -> dict[str, str]:
    """A CA, and a server certificate it signs for every address (and 127.0.0.1)."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=gpuc e2e CA", "-keyout", str(where / "ca.key"), "-out", str(where / "ca.crt"))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=gpuc monitoring",
            "-keyout", str(where / "tls.key"), "-out", str(where / "tls.csr"))
    sans = ",".join(f"IP:{a}" for a in [*addresses, "127.0.0.1"])
    (where / "ext.cnf").write_text(f"subjectAltName={sans}\n")
    openssl("x509", "-req", "-in", str(where / "tls.csr"), "-CA", str(where / "ca.crt"),
            "-CAkey", str(where / "ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", str(where / "ext.cnf"), "-out", str(where / "tls.crt"))
    return {name: (where / name).read_text() for name in ("ca.crt", "tls.crt", "tls.key")}


def bcrypt(password: str) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 6))


@pytest.fixture(scope="module")
def web(cli: Cli, sim_inventory: Path, first_up: FirstUp, runs_dir: Path,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not available")
    inv = e2e.heal(cli, sim_inventory, first_up)
    groups = hosts(inv)
    addresses = {name: host["ansible_host"] for group in ("cpu_nodes", "gpu_nodes")
                 for name, host in groups[group].items()}
    pem = make_certificates(tmp_path_factory.mktemp("web"), sorted(addresses.values()))
    override = inv / "web-e2e.yml"
    override.write_text(yaml.safe_dump({"all": {"vars": {
        "prometheus_web_tls_cert": pem["tls.crt"], "prometheus_web_tls_key": pem["tls.key"],
        "prometheus_web_tls_ca": pem["ca.crt"], "prometheus_web_users": {USER: bcrypt(PASSWORD)},
        "prometheus_web_client_user": USER, "prometheus_web_client_password": PASSWORD,
        "monitoring_dcgm_exporter_version": DCGM_EXPORTER_VERSION}}}))
    try:
        out = cli("up", "--inventory", str(inv), "--yes", "--skip-smoke")
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr
        [monitor] = groups["monitoring"]
        yield {"inventory": inv, "addresses": addresses, "monitor": monitor, "ca": pem["ca.crt"],
               "report": e2e.newest_report(runs_dir),
               "stdout": out.stdout}
    finally:
        override.unlink()
        for node in groups["gpu_nodes"]:
            subprocess.run(["podman", "exec", node, "apt-mark", "unhold", DCGM_EXPORTER_PACKAGE],
                           capture_output=True, timeout=60, check=False)
        back = cli("up", "--inventory", str(inv), "--yes", "--skip-smoke")
        assert back.returncode == 0, back.stdout[-3000:] + back.stderr


def get(url: str, ca: str, login: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if login:
        request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
    context = ssl.create_default_context(cadata=ca)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), ""


def test_every_endpoint_answers_https_and_asks_for_the_password(web: dict[str, Any]) -> None:
    endpoints = [f"https://{web['addresses'][web['monitor']]}:9090/-/ready"]
    for node, address in web["addresses"].items():
        endpoints.append(f"https://{address}:9100/metrics")
        if node.startswith("sim-gpu"):
            endpoints.append(f"https://{address}:9400/metrics")
    for url in endpoints:
        assert get(url, web["ca"])[0] == 401, url
        assert get(url, web["ca"], f"{USER}:wrong")[0] == 401, url
        status, body = get(url, web["ca"], f"{USER}:{PASSWORD}")
        assert status == 200 and body, url
        # Plain HTTP on the same port gets nothing.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(url.replace("https://", "http://"), timeout=5).read()


def test_prometheus_scrapes_every_exporter_through_tls_and_auth(web: dict[str, Any]) -> None:
    base = f"https://{web['addresses'][web['monitor']]}:9090"
    deadline = time.monotonic() + 120
    while True:
        status, body = get(f"{base}/api/v1/targets", web["ca"], f"{USER}:{PASSWORD}")
        assert status == 200
        targets = json.loads(body)["data"]["activeTargets"]
        health = {(t["labels"]["job"], t["labels"]["instance"]): t["health"] for t in targets}
        if health and all(h == "up" for h in health.values()):
            break
        assert time.monotonic() < deadline, health
        time.sleep(3)
    jobs = {job for job, _instance in health}
    assert jobs == {"prometheus", "node", "dcgm"}, health
    assert len([1 for job, _i in health if job == "node"]) == len(web["addresses"])
    # `up` publishes the HTTPS address.
    assert f"https://{web['addresses'][web['monitor']]}:9090/" in web["stdout"]


def test_the_secrets_are_for_the_services_group_only(web: dict[str, Any]) -> None:
    monitor = web["monitor"]
    files = {"/etc/gpucluster-web/monitoring/tls.key": "640 root prometheus",
             "/etc/gpucluster-web/monitoring/client-password": "640 root prometheus",
             "/etc/gpucluster-web/monitoring/web-config.yml": "640 root prometheus",
             "/etc/gpucluster-web/node_exporter/tls.key": "640 root prometheus",
             "/etc/prometheus/alertmanager.yml": "640 root prometheus"}
    for path, want in files.items():
        done = subprocess.run(["podman", "exec", monitor, "stat", "-c", "%a %U %G", path],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.stdout.strip() == want, (path, done.stdout, done.stderr)
    # The password is in no file the world reads there, nor in the run's report.
    done = subprocess.run(["podman", "exec", monitor, "grep", "-rl", PASSWORD, "/etc"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.split() == ["/etc/gpucluster-web/monitoring/client-password"], done.stdout
    assert PASSWORD not in json.dumps(web["report"])


def test_dcgm_exporter_is_installed_at_the_pinned_version_and_held(web: dict[str, Any]) -> None:
    for node in web["addresses"]:
        if not node.startswith("sim-gpu"):
            continue
        done = subprocess.run(["podman", "exec", node, "dpkg-query", "-W", "-f", "${Version}",
                               DCGM_EXPORTER_PACKAGE], capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.stdout == DCGM_EXPORTER_VERSION, done.stdout + done.stderr
        held = subprocess.run(["podman", "exec", node, "apt-mark", "showhold"],
                              capture_output=True, text=True, timeout=60, check=False)
        assert DCGM_EXPORTER_PACKAGE in held.stdout.split(), held.stdout
