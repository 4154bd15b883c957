"""SIMULATED dcb (gpu-cluster-provisioner): iproute2's ``dcb pfc show dev DEV`` for the network
interfaces of the simulated RoCE HCAs (sysfs.roce_netdev), which the node's own network
namespace does not have.

Installed as ``/usr/local/bin/dcb`` on the GPU nodes of a RoCE profile, ahead of the image's
iproute2 on PATH (sudo's secure_path too), as the lspci stand-in is. PFC is on at
faults.ROCE_PRIORITY, off everywhere with ``mlx5_N-pfc-off`` (read from the node's fault file
at every call). Nothing else of dcb is simulated: other commands and other interfaces fail.

The output is dcb's own (iproute2 dcb/dcb_pfc.c dcb_pfc_print, @ ee2a4a8; dcb-pfc(8), "Show
what was set"): "pfc-cap N macsec-bypass on|off delay N", then "prio-pfc" and "P:on|off" for
priorities 0-7, each item followed by a space. pfc-cap 8 and macsec-bypass off are the man
page's example; delay 0 is the simulation's (what a ConnectX port reports is unconfirmed).
"""

from __future__ import annotations

import json
import sys

from provisioner.sim.faults import read_fault_file, roce_lossless_priorities
from provisioner.sim.sysfs import roce_netdev
from provisioner.sim.tools.node import FAULTS_FILE, PROFILE_FILE, read_text

USAGE = "dcb (SIMULATED): only `dcb pfc show dev DEV` is simulated\n"


def _hca_of(dev: str) -> int | None:
    """The number of the simulated RoCE HCA whose interface is ``dev``, or None."""
    try:
        profile = json.loads(read_text(PROFILE_FILE) or "{}")
    except ValueError:
        return None
    if str(profile.get("fabric", "")).lower() != "roce":
        return None
    hcas = profile.get("ib_hcas")
    count = hcas if isinstance(hcas, int) and not isinstance(hcas, bool) else 0
    return next((n for n in range(count) if roce_netdev(n) == dev), None)


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[:3] != ["pfc", "show", "dev"]:
        sys.stderr.write(USAGE)
        return 1
    dev = argv[3]
    hca = _hca_of(dev)
    if hca is None:
        sys.stderr.write(f"dcb (SIMULATED): {dev} is not the interface of a simulated RoCE "
                         "HCA\n")
        return 1
    on = roce_lossless_priorities(read_fault_file(read_text(FAULTS_FILE) or ""), hca, "pfc")
    prios = "".join(f"{p}:{'on' if p in on else 'off'} " for p in range(8))
    sys.stdout.write(f"pfc-cap 8 macsec-bypass off delay 0 \nprio-pfc {prios}\n")
    return 0
