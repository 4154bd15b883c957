"""`provisioner plan` in-process (provisioner/commands/plan.py): the table's columns, --json, -q,
-v, the -o line, and a simulated profile in a real inventory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from provisioner import cli, plan, render
from provisioner.commands import common
from tests.unit.commands.cli_support import Tables, lines, write_inventory


def test_plan_table_shows_each_version_in_its_column(
        inventory: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    shown: list[list[dict[str, str]]] = []
    monkeypatch.setattr(render, "plan", lambda _console, rows, simulated: shown.append(rows))
    assert cli.main(["plan", "-i", str(inventory)]) == 0
    v = plan.build(str(inventory)).hosts["gpu-01"].variables()
    assert v["nvidia_fabricmanager_enabled"] is True  # an HGX board: its column has a version
    [rows] = shown
    gpu, cpu = ({r["host"]: r for r in rows}[h] for h in ("gpu-01", "login-01"))
    assert gpu == {
        "host": "gpu-01", "kind": "gpu", "profile": "hgx-h100-8gpu",
        "stack": v["gpu_stack"],
        "driver": f"{v['nvidia_driver_version']} ({v['nvidia_driver_module_flavor']})",
        "cuda": v["cuda_toolkit_version"], "cudnn": v["cudnn_version"],
        "nccl": v["nccl_version"], "ctk": v["nvidia_container_toolkit_version"],
        "fabric mgr": v["nvidia_fabricmanager_version"]}
    assert "-" not in gpu.values() and all(gpu.values())
    assert cpu == {"host": "login-01", "kind": "cpu", "profile": "-", "stack": "-",
                   "driver": "-", "cuda": "-", "cudnn": "-", "nccl": "-", "ctk": "-",
                   "fabric mgr": "-"}
    assert lines(capsys.readouterr().out) == ["inventory OK: 2 host(s), 1 GPU node(s)"]


def test_plan_table_without_fabric_manager_says_so(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path / "hosts.yml", {"l40s-01": "pcie-l40s-4gpu"}, cpu=False)
    cp = plan.build(str(inv))
    [row] = cli._plan_rows(cp)
    v = cp.hosts["l40s-01"].variables()
    assert v["nvidia_fabricmanager_enabled"] is False
    assert row["fabric mgr"] == "-" and row["ctk"] == v["nvidia_container_toolkit_version"]


def test_plan_json_names_each_host_its_kind_and_profile(
        inventory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "-i", str(inventory), "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["inventory"] == str(inventory) and doc["simulated"] is False
    assert doc["plan_inventory"] is None  # no -o
    assert sorted((h["host"], h["kind"], h["profile"]) for h in doc["hosts"]) == [
        ("gpu-01", "gpu", "hgx-h100-8gpu"), ("login-01", "cpu", None)]
    assert lines(out.err) == ["inventory OK: 2 host(s), 1 GPU node(s)"]


def test_plan_quiet_prints_the_verdict_only(inventory: Path, tables: Tables,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["-q", "plan", "-i", str(inventory)], ["plan", "-q", "-i", str(inventory)]):
        assert cli.main(argv) == 0
        assert capsys.readouterr().out == "inventory OK: 2 host(s), 1 GPU node(s)\n"
    assert tables.calls == []


def test_plan_output_line_is_one_line_however_long(tmp_path: Path, inventory: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / ("a" * 200) / ("b" * 200) / "plan.yml"
    target.parent.mkdir(parents=True)
    assert cli.main(["-q", "plan", "-i", str(inventory), "-o", str(target)]) == 0
    assert lines(capsys.readouterr().out) == [
        "inventory OK: 2 host(s), 1 GPU node(s)",
        f"plan inventory written to {target}: ansible-playbook -i {inventory} -i {target} "
        "playbooks/site.yml"]


def test_a_simulated_profile_in_a_real_inventory_names_the_first_host(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = write_inventory(tmp_path / "hosts.yml", {"sim-b": "sim-h100-8gpu",
                                                   "sim-a": "sim-h100-8gpu"}, cpu=False)
    assert cli.main(["plan", "-i", str(inv)]) == 2
    assert lines(capsys.readouterr().err) == [
        f"error: inventory {inv}: host sim-a uses the simulated profile sim-h100-8gpu but the "
        "inventory is not a simulated cluster (provisioner_simulated: true on every host); use "
        "a real hardware profile"]


def test_plan_verbose_prints_each_hosts_variables_sorted(
        inventory: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    monkeypatch.setattr(render, "plan", lambda *_a: None)
    monkeypatch.setattr(common, "console", Console(width=1000))  # no line of the YAML folded
    assert cli.main(["plan", "-v", "-i", str(inventory)]) == 0
    out = capsys.readouterr().out
    cp = plan.build(str(inventory))
    for name, host in cp.hosts.items():
        shown = yaml.safe_load(out.split(f"{name}:\n", 1)[1].split("\n\n", 1)[0])
        assert shown == host.variables()
        assert list(shown) == sorted(shown), name


def test_plan_row_of_a_stack_without_some_versions_shows_dashes() -> None:
    from types import SimpleNamespace

    stack = SimpleNamespace(as_vars=lambda: {"gpu_stack": "partial"})
    cp = SimpleNamespace(hosts={"gpu-01": SimpleNamespace(
        kind="gpu", profile=SimpleNamespace(name="p"), stack=stack)})
    assert cli._plan_rows(cp) == [{  # type: ignore[arg-type]
        "host": "gpu-01", "kind": "gpu", "profile": "p", "stack": "partial", "driver": "- (-)",
        "cuda": "-", "cudnn": "-", "nccl": "-", "ctk": "-", "fabric mgr": "-"}]
