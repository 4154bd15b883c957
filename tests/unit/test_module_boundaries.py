"""Module boundaries that keep the production path clean: the report model and the live display
read results without the runner (and so without ansible_runner), and nothing a real run
imports reaches into the simulator."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner import smoke_launch
from provisioner.plan import build

ROOT = Path(__file__).resolve().parents[2]


def _imported_after(module: str) -> set[str]:
    code = (f"import json, sys; import {module}; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('provisioner', "
            "'ansible_runner')))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                         capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)})
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("module", ["provisioner.report", "provisioner.progress",
                                    "provisioner.render"])
def test_report_and_display_do_not_import_the_runner(module: str) -> None:
    loaded = _imported_after(module)
    assert module in loaded
    assert "provisioner.runner" not in loaded
    assert "ansible_runner" not in loaded


def test_the_cli_parser_leaves_the_simulator_unimported() -> None:
    """Building the parser (every command does) imports nothing of provisioner.sim: the
    `sim up` epilog and --os choices are read when `sim` needs them (plan's start-up)."""
    loaded = _imported_after("provisioner.cli; provisioner.cli.build_parser()")
    assert "provisioner.cli" in loaded
    assert not {m for m in loaded if m.startswith("provisioner.sim")}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (function-level imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


# The CLI is the adapter that also offers `provisioner sim`; every other top-level module is
# what a run against real hosts executes.
PRODUCTION = sorted(p for p in (ROOT / "provisioner").glob("*.py") if p.name != "cli.py")


@pytest.mark.parametrize("path", PRODUCTION, ids=lambda p: p.name)
def test_production_modules_do_not_import_the_simulator(path: Path) -> None:
    assert not {m for m in _imports(path)
                if m == "provisioner.sim" or m.startswith("provisioner.sim.")}


def test_only_the_runner_imports_ansible_runner() -> None:
    users = {p.name for p in (ROOT / "provisioner").rglob("*.py")
             if any(m.split(".")[0] == "ansible_runner" for m in _imports(p))}
    assert users == {"runner.py"}


def _plan(tmp_path: Path, extra: dict[str, Any]) -> Any:
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"all": {"vars": {"gpu_package_source": "http://mirror:8080/",
                                                **extra},
                                       "children": {"gpu_nodes": {"hosts": {
                                           "gpu-01": {"gpu_profile": "hgx-h100-8gpu"}}}}}}))
    return build(inv)


def test_wheelhouse_goes_into_a_mirror_directory_on_the_controller(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    filled: list[Path] = []
    monkeypatch.setattr(smoke_launch, "ensure_wheelhouse", lambda dest, **_: filled.append(dest) or dest)
    plan = _plan(tmp_path, {"gpu_package_source_dir": str(tmp_path / "mirror")})
    with smoke_launch.wheelhouse_url(plan, tmp_path / "cache") as url:
        assert url == "http://mirror:8080/wheels/"
    assert filled == [tmp_path / "mirror" / "wheels"]


def test_wheelhouse_served_by_the_controller_without_a_mirror_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    filled: list[Path] = []

    def fill(dest: Path, **_: object) -> Path:
        dest.mkdir(parents=True)
        (dest / "marker.txt").write_text("served\n")
        filled.append(dest)
        return dest

    monkeypatch.setattr(smoke_launch, "ensure_wheelhouse", fill)
    towards: list[str] = []
    monkeypatch.setattr(smoke_launch, "_local_address_towards",
                        lambda host: towards.append(host) or "127.0.0.1")
    plan = _plan(tmp_path, {})
    with smoke_launch.wheelhouse_url(plan, tmp_path / "cache") as url:
        import urllib.request

        # Served on the address the nodes route to (here loopback), not on every interface.
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{url}marker.txt", timeout=10) as r:
            assert r.read() == b"served\n"
    assert towards == ["gpu-01"]
    assert filled == [tmp_path / "cache" / "wheelhouse"]
