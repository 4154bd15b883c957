"""The gpu_validate role through ansible-playbook on localhost, twice, against a simulated sysfs
tree: the first run publishes its error counter reading (a baseline, nothing judged); a symbol
error count raised before the second run, given the first reading as the provisioner gives it
(gpu_validate_last_readings), fails that port's check; the node's tree is only read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from provisioner.profiles import load_profiles
from provisioner.sim.sysfs import write_ib_sysfs, write_pci_sysfs
from tests.integration.localplay import run_play

PROFILE = dict(load_profiles()["sim-h100-8gpu"].sim_json(), hostname="localhost")


def validate(tmp_path: Path, last: dict[str, Any]) -> dict[str, Any]:
    (tmp_path / "last.json").write_text(json.dumps({"gpu_validate_last_readings": last}))
    play = [{"hosts": "localhost", "gather_facts": False,
             "roles": [{"role": "gpucluster.provisioner.gpu_validate", "vars": {
                 "gpu_validate_expected": PROFILE,
                 "gpu_validate_subsets": ["ib", "counters"],
                 "gpu_validate_ib_sysfs_root": str(tmp_path / "ib"),
                 "gpu_validate_pci_sysfs_root": str(tmp_path / "pci"),
                 "gpu_validate_fail_on_error": False}}],
             "post_tasks": [{"name": "keep the report", "ansible.builtin.copy": {
                 "content": "{{ gpu_validate_report | to_json }}",
                 "dest": str(tmp_path / "report.json")}}]}]
    run_play(tmp_path, play, "-e", f"@{tmp_path / 'last.json'}")
    return dict(json.loads((tmp_path / "report.json").read_text()))


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def test_a_rise_between_two_validate_runs_fails_the_port(tmp_path: Path) -> None:
    write_pci_sysfs(tmp_path / "pci", PROFILE, [])
    write_ib_sysfs(tmp_path / "ib", PROFILE, [], pci_root=tmp_path / "pci")
    first = validate(tmp_path, {})
    assert by_name(first)["ib_mlx5_3_port1_errors"]["status"] == "skip"
    reading = first["counters"]
    assert reading["ib"]["mlx5_3/1"]["symbol_error"] == 0
    assert reading["pcie"]["0000:a3:00.0"]["device"] == "mlx5_3"  # through its device link
    # Another host's reading is not this one's.
    assert by_name(validate(tmp_path, {"elsewhere": reading}))[
        "ib_mlx5_3_port1_errors"]["status"] == "skip"

    (tmp_path / "ib/mlx5_3/ports/1/counters/symbol_error").write_text("400\n")
    second = validate(tmp_path, {"localhost": reading})
    bad = by_name(second)["ib_mlx5_3_port1_errors"]
    assert bad["status"] == "fail" and bad["measured"]["symbol_error"] == 400
    assert bad["detail"].startswith("mlx5_3/1: symbol_error +400")
    assert by_name(second)["ib_mlx5_2_port1_errors"]["status"] == "pass"
    assert by_name(second)["mlx5_3_pcie_errors"]["status"] == "pass"
    assert second["counters"]["ib"]["mlx5_3/1"]["symbol_error"] == 400  # the next baseline
