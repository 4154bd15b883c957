"""The simulated dkms, bundled as the nodes run it, against a node tree under GPU_SIM_ROOT: the
real tool's tree layout, status lines and errors, so the driver role's DKMS check reads it as
it reads the real one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sim.conftest import Bundled, run_tool

V = "580.95.05"
RUNNING, NEWER, BARE = "6.1.0-18-amd64", "6.1.1-18-amd64", "6.1.2-18-amd64"


@pytest.fixture
def node(tmp_path: Path) -> Path:
    (tmp_path / f"usr/src/nvidia-{V}").mkdir(parents=True)
    (tmp_path / f"usr/src/nvidia-{V}/dkms.conf").write_text(
        f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{V}"\nAUTOINSTALL="yes"\n')
    for kernel in (RUNNING, NEWER):
        (tmp_path / f"usr/src/linux-headers-{kernel}").mkdir(parents=True)
        (tmp_path / f"lib/modules/{kernel}").mkdir(parents=True)
        # Absolute, as on a node: resolved inside the node's tree, not the test machine's.
        (tmp_path / f"lib/modules/{kernel}/build").symlink_to(f"/usr/src/linux-headers-{kernel}")
    (tmp_path / f"lib/modules/{BARE}").mkdir(parents=True)
    return tmp_path


def test_add_install_status_remove(bundled: Bundled, node: Path) -> None:
    dkms = bundled("dkms")
    assert run_tool(dkms, node, "status").stdout == ""
    assert run_tool(dkms, node, "add", "-m", "nvidia", "-v", V).returncode == 0
    assert run_tool(dkms, node, "status").stdout == f"nvidia/{V}: added\n"
    assert run_tool(dkms, node, "install", f"nvidia/{V}", "-k", RUNNING).returncode == 0
    assert (node / f"lib/modules/{RUNNING}/updates/dkms/nvidia.ko").is_file()
    assert run_tool(dkms, node, "status").stdout == f"nvidia/{V}, {RUNNING}, x86_64: installed\n"
    # The kernel's install hook: every AUTOINSTALL module, for that kernel.
    assert run_tool(dkms, node, "autoinstall", "-k", NEWER).returncode == 0
    assert run_tool(dkms, node, "status", "-k", NEWER).stdout == (
        f"nvidia/{V}, {NEWER}, x86_64: installed\n")
    removed = run_tool(dkms, node, "remove", f"nvidia/{V}", "--all")
    assert removed.returncode == 0, removed.stderr
    assert run_tool(dkms, node, "status").stdout == ""
    assert not (node / f"lib/modules/{NEWER}/updates/dkms/nvidia.ko").exists()


def test_a_kernel_without_headers_gets_no_module(bundled: Bundled, node: Path) -> None:
    dkms = bundled("dkms")
    run_tool(dkms, node, "add", f"nvidia/{V}")
    out = run_tool(dkms, node, "autoinstall", "-k", BARE)
    assert out.returncode != 0
    assert out.stderr.startswith(f"Error! Your kernel headers for kernel {BARE} cannot be found")
    assert f"nvidia/{V}, {BARE}" not in run_tool(dkms, node, "status").stdout


def test_a_module_of_another_version_is_built_not_installed(bundled: Bundled,
                                                             node: Path) -> None:
    """Two versions built for one kernel: only the one whose .ko is in place is installed."""
    dkms = bundled("dkms")
    other = "575.57.08"
    (node / f"usr/src/nvidia-{other}").mkdir()
    (node / f"usr/src/nvidia-{other}/dkms.conf").write_text('AUTOINSTALL="yes"\n')
    for version in (V, other):
        run_tool(dkms, node, "add", f"nvidia/{version}")
        assert run_tool(dkms, node, "install", f"nvidia/{version}", "-k", RUNNING).returncode == 0
    assert run_tool(dkms, node, "status").stdout.splitlines() == [
        f"nvidia/{other}, {RUNNING}, x86_64: installed",
        f"nvidia/{V}, {RUNNING}, x86_64: built"]


def test_errors_are_the_real_tools(bundled: Bundled, node: Path) -> None:
    dkms = bundled("dkms")
    missing = run_tool(dkms, node, "install", "nvidia/1.0", "-k", RUNNING)
    assert missing.returncode == 3
    assert "is not located in the DKMS tree" in missing.stderr
    run_tool(dkms, node, "add", f"nvidia/{V}")
    again = run_tool(dkms, node, "add", f"nvidia/{V}")
    assert again.returncode == 3 and "already contains" in again.stderr
