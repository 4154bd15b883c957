"""The simulated node's /proc/driver/nvidia/version: written when the module loads (the driver
package's install on a node with none loaded, every boot), in the flavour the installed kernel
module package names, and read by the GPUDirect policy as a real banner is."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from gpucluster.gpudirect import module_flavour

from provisioner.sim.tools.node import (
    DRIVER_VERSION_FILE,
    MIG_MINORS_FILE,
    MODULE_FLAVOR_FILE,
    MODULE_VERSION_FILE,
    PROC_DEVICES_FILE,
    PROC_VERSION_FILE,
    load_module_sh,
)

# Every node path the load lines name (files and the directories they create), moved under a
# test's root in one pass: a path that begins another (.../nvidia and .../nvidia-caps) is moved
# once.
NODE_PATHS = (DRIVER_VERSION_FILE, MODULE_FLAVOR_FILE, MODULE_VERSION_FILE, PROC_VERSION_FILE,
              MIG_MINORS_FILE, PROC_DEVICES_FILE)


def run_load_lines(root: Path) -> None:
    """Run the module load lines with every node path under ``root``."""
    paths = {path for file in NODE_PATHS for path in (file, file.rsplit("/", 1)[0])}
    pattern = "|".join(re.escape(path) for path in sorted(paths, key=len, reverse=True))
    script = re.sub(f"(?<![\\w/])({pattern})(?![\\w-])", lambda m: f"{root}{m.group(1)}",
                    load_module_sh())
    subprocess.run(["sh", "-e", "-c", script], check=True)


def load(root: Path, flavour: str | None) -> str:
    """Run the load lines with the node's paths under ``root``; the banner they wrote."""
    (root / DRIVER_VERSION_FILE.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / DRIVER_VERSION_FILE.lstrip("/")).write_text("580.159.04\n")
    if flavour:
        (root / MODULE_FLAVOR_FILE.lstrip("/")).write_text(f"{flavour}\n")
    run_load_lines(root)
    assert (root / MODULE_VERSION_FILE.lstrip("/")).read_text() == "580.159.04\n"
    return (root / PROC_VERSION_FILE.lstrip("/")).read_text()


@pytest.mark.parametrize(("flavour", "expected", "first"), [
    ("open", "open", "NVRM version: NVIDIA UNIX Open Kernel Module for "),
    ("proprietary", "proprietary", "NVRM version: NVIDIA UNIX "),
    (None, "proprietary", "NVRM version: NVIDIA UNIX "),
])
def test_the_banner_names_the_flavour(tmp_path: Path, flavour: str | None, expected: str,
                                      first: str) -> None:
    text = load(tmp_path, flavour)
    assert text.startswith(first) and "580.159.04" in text and "SIMULATED" in text
    assert module_flavour(text) == expected
    assert text.count("\n") == 2
