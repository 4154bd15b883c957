"""The stand-in tools as the nodes get them: bundled by provisioner.sim.bundle and run by a
python3 that sees only the standard library (``-I -S``: no PYTHONPATH, no site-packages)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from provisioner.sim.bundle import tool_script

Bundled = Callable[..., Path]
RunTool = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Bundled:
    """``bundled(tool, **params)``: the path of the executable the packages install."""
    built: dict[tuple[str, tuple[tuple[str, str], ...]], Path] = {}

    def build(tool: str, **params: str) -> Path:
        key = (tool, tuple(sorted(params.items())))
        if key not in built:
            path = tmp_path_factory.mktemp("tools") / tool
            path.write_bytes(tool_script(tool, **params))
            path.chmod(0o755)
            built[key] = path
        return built[key]

    return build


def run_tool(script: Path, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a bundled tool against the simulated node under ``root`` (GPU_SIM_ROOT)."""
    return subprocess.run(
        [sys.executable, "-I", "-S", str(script), *args],
        env={**os.environ, "GPU_SIM_ROOT": str(root)},
        capture_output=True, text=True, timeout=30, check=False,
    )


def write_node(root: Path, profile: dict[str, Any], driver: str, cuda: str) -> None:
    """The files a simulated node's tools read: its profile, no faults, the installed driver
    and CUDA versions."""
    (root / "etc/gpu-sim").mkdir(parents=True, exist_ok=True)
    (root / "etc/gpu-sim/profile.json").write_text(json.dumps(profile))
    (root / "etc/gpu-sim/faults").write_text("")
    (root / "usr/lib/gpu-sim").mkdir(parents=True, exist_ok=True)
    (root / "usr/lib/gpu-sim/driver-version").write_text(f"{driver}\n")
    (root / "usr/lib/gpu-sim/cuda-version").write_text(f"{cuda}\n")


def write_faults(root: Path, *faults: str) -> None:
    (root / "etc/gpu-sim").mkdir(parents=True, exist_ok=True)
    (root / "etc/gpu-sim/faults").write_text("".join(f"{fault}\n" for fault in faults))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line: how many simulator-vs-capture checks were skipped (captures absent)."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "test_sim_vs_captures" in getattr(r, "nodeid", "")]
    ran = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])
           if "test_sim_vs_captures" in getattr(r, "nodeid", "") and r.when == "call"]
    if skipped or ran:
        terminalreporter.write_line(
            f"simulator vs real captures: {len(ran)} compared, {len(skipped)} skipped "
            "(captures absent)" if skipped else
            f"simulator vs real captures: {len(ran)} compared, 0 skipped")
