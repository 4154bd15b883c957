"""``dkms status`` in the shapes dkms 2 and 3 print it (Ubuntu 22.04 ships dkms 2.8, Debian 12
and Ubuntu 24.04 dkms 3): which kernels have the NVIDIA module at the planned version."""

from __future__ import annotations

import pytest
from gpucluster.dkms import boot_candidates, kernel_states, parse_status

DKMS3 = """\
nvidia/580.95.05, 6.1.0-18-amd64, x86_64: installed
nvidia/580.95.05, 6.1.0-20-amd64, x86_64: built
nvidia/575.57.08, 6.1.0-20-amd64, x86_64: installed
zfs/2.1.11, 6.1.0-18-amd64, x86_64: installed
"""
DKMS2 = """\
nvidia, 535.104.05, 5.15.0-91-generic, x86_64: installed
nvidia, 535.104.05, 5.15.0-94-generic, x86_64: installed (WARNING! Diff between built and installed module!)
"""


def test_dkms3_lines() -> None:
    rows = parse_status(DKMS3)
    assert rows[0] == {"module": "nvidia", "version": "580.95.05", "kernel": "6.1.0-18-amd64",
                       "arch": "x86_64", "state": "installed"}
    assert len(rows) == 4


def test_dkms2_lines_and_a_state_with_a_note() -> None:
    assert kernel_states(DKMS2, "535.104.05", ["5.15.0-91-generic", "5.15.0-94-generic"]) == {
        "5.15.0-91-generic": "installed", "5.15.0-94-generic": "installed"}


def test_each_kernel_at_the_planned_version_only() -> None:
    kernels = ["6.1.0-18-amd64", "6.1.0-20-amd64", "6.1.0-21-amd64"]
    assert kernel_states(DKMS3, "580.95.05", kernels) == {
        "6.1.0-18-amd64": "installed", "6.1.0-20-amd64": "built", "6.1.0-21-amd64": "missing"}
    # Another branch installed for a kernel is not the planned driver's module.
    assert kernel_states(DKMS3, "575.57.08", kernels)["6.1.0-18-amd64"] == "missing"


def test_added_only_and_other_modules_and_noise() -> None:
    text = ("nvidia-open/580.95.05: added\n"
            "Error! Could not locate dkms.conf file.\n"
            "nvidia-open/580.95.05, 6.8.0-45-generic, x86_64: installed\n"
            "zfs/2.2.2, 6.8.0-45-generic, x86_64: installed\n")
    assert [r["state"] for r in parse_status(text)] == ["added", "installed", "installed"]
    # A module named nvidia-open counts (NVIDIA's packaging names it either way).
    assert kernel_states(text, "580.95.05", ["6.8.0-45-generic"]) == {
        "6.8.0-45-generic": "installed"}
    assert kernel_states("", "580.95.05", ["6.8.0-45-generic"]) == {
        "6.8.0-45-generic": "missing"}


@pytest.mark.parametrize(("kernels", "running", "expected"), [
    (["6.1.0-17-amd64", "6.1.0-18-amd64", "6.1.0-20-amd64"], "6.1.0-18-amd64",
     ["6.1.0-18-amd64", "6.1.0-20-amd64"]),
    (["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64",
      "5.14.0-362.8.1.el9_3.x86_64"], "5.14.0-427.13.1.el9_4.x86_64",
     ["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64"]),
    (["6.8.0-45-generic", "6.8.0-9-generic"], "6.8.0-45-generic", ["6.8.0-45-generic"]),
    (["odd"], "odd", ["odd"]),
])
def test_the_kernels_a_reboot_may_bring_up(kernels: list[str], running: str,
                                           expected: list[str]) -> None:
    """Numbers compared as numbers: 6.8.0-45 is newer than 6.8.0-9."""
    assert boot_candidates(kernels, running) == expected
