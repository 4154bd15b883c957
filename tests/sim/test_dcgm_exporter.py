"""The stand-in dcgm-exporter as the simulated package installs it: the real exporter's metric
names, types and labels for the simulated GPUs, values driven by the gpu-load file, served over
HTTP on the real port's protocol."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from provisioner.matrix import load_matrix
from provisioner.sim.stand_in_packages import DCGM_EXPORTER_VERSION, all_packages
from tests.sim.conftest import Bundled, run_tool
from tests.sim.test_tools import node

LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}


def scrape(exporter: Path, root: Path) -> dict[str, list[tuple[dict[str, str], float]]]:
    done = run_tool(exporter, root, "--once")
    assert done.returncode == 0, done.stderr
    return {f.name: [(s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(done.stdout)}


def by_gpu(samples: list[tuple[dict[str, str], float]]) -> dict[str, float]:
    return {labels["gpu"]: value for labels, value in samples}


def test_real_metric_names_and_labels(tmp_path: Path, bundled: Bundled) -> None:
    exporter = bundled("dcgm_exporter", version="4.8.3")
    metrics = scrape(exporter, node(tmp_path, gpus=4))
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                 "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS",
                 "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK"):
        assert len(metrics[name]) == 4, name
        labels = metrics[name][0][0]
        assert set(labels) == LABELS
        assert labels["modelName"] == "NVIDIA H100 80GB HBM3" and labels["Hostname"] == "n1"
        assert labels["device"] == "nvidia0" and labels["UUID"].startswith("GPU-")
    # Counters keep their _total-less names in the exposition, as the real exporter's do.
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH" in metrics or \
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" in metrics
    assert by_gpu(metrics["DCGM_FI_DEV_GPU_UTIL"]) == {"0": 0, "1": 0, "2": 0, "3": 0}


def test_gpu_load_file_sets_utilisation_temperature_memory(tmp_path: Path,
                                                           bundled: Bundled) -> None:
    exporter = bundled("dcgm_exporter", version="4.8.3")
    root = node(tmp_path, gpus=4)
    (root / "var/lib/gpu-sim").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/gpu-sim/gpu-load").write_text(
        "all util=40\n2 util=95 temp=91 fb_used=80000\n# comment\nbogus line\n")
    metrics = scrape(exporter, root)
    assert by_gpu(metrics["DCGM_FI_DEV_GPU_UTIL"]) == {"0": 40, "1": 40, "2": 95, "3": 40}
    assert by_gpu(metrics["DCGM_FI_DEV_GPU_TEMP"])["2"] == 91
    assert by_gpu(metrics["DCGM_FI_DEV_FB_USED"])["2"] == 80000
    free = by_gpu(metrics["DCGM_FI_DEV_FB_FREE"])
    assert free["0"] - free["2"] == 80000
    power = by_gpu(metrics["DCGM_FI_DEV_POWER_USAGE"])
    assert power["2"] > power["0"] > 0


def test_xid_from_the_kernel_log_and_missing_gpu(tmp_path: Path, bundled: Bundled) -> None:
    exporter = bundled("dcgm_exporter", version="4.8.3")
    root = node(tmp_path, "gpu1-missing", gpus=4)
    (root / "var/lib/gpu-sim").mkdir(parents=True, exist_ok=True)
    # GPU in slot 2 (bus 4c) enumerates as index 1 once slot 1 is gone.
    (root / "var/lib/gpu-sim/dmesg").write_text(
        "[  412.000002] NVRM: Xid (PCI:0000:4c:00): 79, pid=0, name=python3, fell off\n")
    xids = by_gpu(scrape(exporter, root)["DCGM_FI_DEV_XID_ERRORS"])
    assert xids == {"0": 0, "1": 79, "2": 0}


def test_no_driver_no_gpus(tmp_path: Path, bundled: Bundled) -> None:
    exporter = bundled("dcgm_exporter", version="4.8.3")
    root = node(tmp_path)
    (root / "usr/lib/gpu-sim/driver-version").unlink()
    done = run_tool(exporter, root, "--once")
    assert done.returncode == 0 and "DCGM_FI_DEV_GPU_UTIL{" not in done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serves_metrics_over_http(tmp_path: Path, bundled: Bundled) -> None:
    exporter = bundled("dcgm_exporter", version="4.8.3")
    root = node(tmp_path, gpus=2)
    port = free_port()
    import os

    proc = subprocess.Popen([sys.executable, "-I", "-S", str(exporter), "--address",
                             f"127.0.0.1:{port}"], env={**os.environ, "GPU_SIM_ROOT": str(root)})
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
                    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert body.count("DCGM_FI_DEV_GPU_UTIL{") == 2
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=2)
        assert err.value.code == 404
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_mirror_carries_a_dcgm_exporter_package_with_its_unit() -> None:
    cuda, _ctk = all_packages(load_matrix())
    # NVIDIA's names: the package, and its unit (no address: the exporter's ":9400").
    [pkg] = [p for p in cuda if p.name == "datacenter-gpu-manager-exporter"]
    assert pkg.version == DCGM_EXPORTER_VERSION
    unit = str(pkg.files["/lib/systemd/system/nvidia-dcgm-exporter.service"])
    assert "ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv" in unit
    assert pkg.modes["/usr/bin/dcgm-exporter"] == 0o755
    assert bytes(pkg.files["/usr/bin/dcgm-exporter"]).startswith(b"#!/usr/bin/python3\n")


def test_web_config_file_serves_tls_and_asks_for_basic_auth(tmp_path: Path,
                                                            bundled: Bundled) -> None:
    """--web-config-file as the real exporter takes it: HTTPS with the given certificate, 401
    without the user's password, the metrics with it."""
    import base64
    import json
    import os
    import shutil
    import ssl
    import warnings

    if shutil.which("openssl") is None:
        pytest.skip("openssl not available")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
    exporter = bundled("dcgm_exporter", version="4.8.3")
    root = node(tmp_path, gpus=1)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    hashed = crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=1 << 4))
    web = tmp_path / "web-config.yml"
    web.write_text("# written by the monitoring role\n" + json.dumps({
        "tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
        "basic_auth_users": {"scraper": hashed}}))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-I", "-S", str(exporter), "--address",
                             f"127.0.0.1:{port}", "--web-config-file", str(web)],
                            env={**os.environ, "GPU_SIM_ROOT": str(root)})
    context = ssl.create_default_context(cafile=str(cert))

    def get(login: str | None) -> int:
        request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
        if login:
            request.add_header("Authorization", "Basic " + base64.b64encode(login.encode()).decode())
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as r:
                return int(r.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                status = get(None)
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert status == 401
        assert get("scraper:wrong") == 401
        assert get("scraper:s3cret") == 200
        # Plain HTTP on the TLS port gets no metrics.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3).read()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
