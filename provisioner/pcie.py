"""PCIe line rates: what a link of a given generation and width carries per direction.

Standard library only: the simulated nodes' stand-in tools import it too (provisioner.sim.bundle),
so the hardware profiles' copy floors and the simulated nvbandwidth use the same figures.
"""

from __future__ import annotations

# PCIe payload rate per lane and direction, GB/s (10^9 bytes), by generation: the transfer
# rate times the line code's efficiency, over 8 bits. Gen1/2: 2.5/5 GT/s, 8b/10b; Gen3/4/5:
# 8/16/32 GT/s, 128b/130b (PCI-SIG, PCI Express Base Specification 3.0 onwards); Gen6: 64 GT/s in
# 256-byte FLITs of which 242 carry TLPs and DLLPs (PCIe 6.0) -- derived, no measured figure.
# x16 gives 15.75 (Gen3), 31.5 (Gen4), 63.0 (Gen5) GB/s per direction.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8,
                  5: 32 * 128 / 130 / 8, 6: 64 * 242 / 256 / 8}


def pcie_gbps(generation: int, width: int) -> float:
    """A PCIe link's payload line rate per direction, GB/s (PCIE_LANE_GBPS x lanes)."""
    return PCIE_LANE_GBPS[generation] * width
