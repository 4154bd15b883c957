"""SIMULATED nvcc (gpu-cluster-provisioner): answers ``--version`` like the real compiler driver.

Installed as ``/usr/local/cuda-X.Y/bin/nvcc`` by a simulated toolkit package, bundled with the
release it reports (see provisioner.sim.bundle). The ``nvcc-other-version`` fault makes it
report another release than the installed toolkit's, so version checks can be shown failing.
"""

from __future__ import annotations

import sys

from provisioner.sim.faults import has_fault, other_cuda_version, read_fault_file
from provisioner.sim.tools.node import FAULTS_FILE, read_text


def main(argv: list[str], release: str, toolkit: str) -> int:
    """``release``: the CUDA release (12.4); ``toolkit``: the toolkit version (12.4.1)."""
    if argv[:1] in (["--version"], ["-V"]):
        if has_fault(read_fault_file(read_text(FAULTS_FILE) or ""), "nvcc-other-version"):
            release, toolkit = other_cuda_version(release), other_cuda_version(toolkit)
        # The five lines a real nvcc prints (CUDA 12.4.1: "Built on Thu_Mar_28_02:18:24_PDT_2024",
        # "Build cuda_12.4.r12.4/compiler.34097967_0"), the simulation marked on the first.
        sys.stdout.write("nvcc: NVIDIA (R) Cuda compiler driver (SIMULATED)\n"
                         "Copyright (c) 2005-2024 NVIDIA Corporation\n"
                         "Built on Mon_Jan_01_00:00:00_UTC_2024\n"
                         f"Cuda compilation tools, release {release}, V{toolkit}\n"
                         f"Build cuda_{release}.r{release}/compiler.00000000_0\n")
        return 0
    sys.stderr.write("nvcc (SIMULATED): cannot compile on a simulated node\n")
    return 1
