"""`provisioner profiles detect --inventory X --limit HOST` on the shared simulated cluster: the
node's own tools (the simulated nvidia-smi and InfiniBand sysfs tree, sim-h100-8gpu) read
read-only, the profile written from what they printed, and, with the one fact no tool prints
added by hand (the NVSwitch generation), `validate` of both GPU nodes against that site profile
passes."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from provisioner.profiles import load_profiles
from tests.e2e.conftest import newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = pytest.mark.e2e
NODE = "sim-gpu-1"
MEASURED = ("gpu_model", "gpu_count", "architecture", "pci_device_ids", "memory_mib",
            "power_limit_w", "pcie_gen", "pcie_width", "nvlink_links_per_gpu",
            "nvlink_link_speed_gbps", "ib_hcas", "ib_rate_gbps", "fabric")


def test_a_profile_detected_from_a_node_validates_the_cluster(
        cli: Cli, healthy_cluster: Path, runs_dir: Path, tmp_path: Path) -> None:
    inventory = healthy_cluster / "hosts.yml"
    found = cli("profiles", "detect", "--inventory", str(inventory), "--limit", NODE,
                "--name", "detected-h100", "--json")
    assert found.returncode == 0, found.stdout[-3000:] + found.stderr
    data = json.loads(found.stdout)
    built_in = load_profiles()["sim-h100-8gpu"]
    assert {key: data["facts"][key] for key in MEASURED} == {
        key: (list(getattr(built_in, key)) if key == "pci_device_ids" else getattr(built_in, key))
        for key in MEASURED}, data["facts"]
    # NVSwitch is seen (every GPU pair joined by all 18 links) but its generation is printed by
    # no tool: left for a person, said on stderr.
    assert "nvswitch_generation" in data["missing"]
    assert "not detected: nvswitch_generation" in found.stderr
    assert data["from"].startswith(f"{NODE} (outputs kept in ")
    assert data["simulated"] is True and "SIMULATED" in found.stderr
    # Without --json or -o the standard output is the profile alone (progress on stderr), and
    # it says it was read from a simulated node.
    plain = cli("profiles", "detect", "--inventory", str(inventory), "--limit", NODE)
    assert plain.returncode == 0, plain.stderr
    assert yaml.safe_load(plain.stdout)["profiles"]["site-profile"]["simulated"] is True

    # The YAML, with the generation added as a person would, in site/ beside an inventory whose
    # GPU nodes name it.
    site = tmp_path / "site"
    site.mkdir()
    written = cli("profiles", "detect", "--inventory", str(inventory), "--limit", NODE,
                  "--name", "detected-h100", "-o", str(site / "profiles.yml"))
    assert written.returncode == 0, written.stderr
    text = (site / "profiles.yml").read_text()
    text, added = re.subn(r"(?m)^(\s+)# nvswitch: true\s.*$",
                          r"\1nvswitch: true\n\1nvswitch_generation: 3", text)
    assert added == 1, text
    text = re.sub(r"(?m)^(\s+)# nvswitch_generation: MISSING.*\n", "", text)
    (site / "profiles.yml").write_text(text)
    hosts = yaml.safe_load(inventory.read_text())
    for entry in hosts["all"]["children"]["gpu_nodes"]["hosts"].values():
        entry["gpu_profile"] = "detected-h100"
    mine = tmp_path / "hosts.yml"
    mine.write_text(yaml.safe_dump(hosts))
    shown = cli("profiles", "--site", str(site), "--json")
    rows = {row["profile"]: row for row in json.loads(shown.stdout)}
    assert rows["detected-h100"]["source"] == str(site / "profiles.yml")

    out = cli("validate", "--inventory", str(mine))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr
    report = newest_report(runs_dir)
    checks = [c for c in report["checks"] if c["host"] in ("sim-gpu-1", "sim-gpu-2")]
    assert checks and all(c["status"] in ("pass", "skip") for c in checks), [
        c for c in checks if c["status"] not in ("pass", "skip")]
    # The profile's own facts were judged: the count, the model, NVLink and the IB ports.
    judged = {c["name"] for c in checks if c["status"] == "pass"}
    assert {"gpu_count", "gpu_model", "ib_ports", *(f"gpu{i}_nvlink" for i in range(8))} <= \
        judged, sorted(judged)
