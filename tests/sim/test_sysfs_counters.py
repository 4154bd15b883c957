"""The simulated error counters: the InfiniBand ports' counters/ files, the PCIe AER files of the
GPUs' and HCAs' PCI functions (the kernel's format), each HCA's device link, and the faults that
raise them."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from gpucluster.pci_aer import read_aer

from provisioner.profiles import load_profiles
from provisioner.sim import cluster as cluster_mod
from provisioner.sim.faults import SYMBOL_ERRORS
from provisioner.sim.sysfs import gpu_address, hca_address, write_ib_sysfs, write_pci_sysfs
from provisioner.sim.tools.node import IB_SYSFS, PCI_SYSFS

PROFILE: dict[str, Any] = dict(load_profiles()["sim-h100-8gpu"].sim_json(), hostname="n")
GPU_BUSES = ["19", "3b", "4c", "5d", "9b", "bb", "cb", "db"]

# The kernel's lines (drivers/pci/pcie/aer.c), in its order, as a healthy function shows them.
CORRECTABLE = ("RxErr 0\nBadTLP 0\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\n"
               "CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 0\n")
UNCORRECTABLE = ("Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\n"
                 "UnxCmplt 0\nRxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\n"
                 "BlockedTLP 0\nAtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\n"
                 "TOTAL_ERR_{} 0\n")


def test_every_gpu_and_hca_function_has_the_kernel_s_aer_files(tmp_path: Path) -> None:
    write_pci_sysfs(tmp_path, PROFILE, [])
    gpus = [f"0000:{bus}:00.0" for bus in GPU_BUSES]
    hcas = [f"0000:a{n}:00.0" for n in range(PROFILE["ib_hcas"])]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(gpus + hcas)
    for address in gpus + hcas:
        function = tmp_path / address
        assert (function / "aer_dev_correctable").read_text() == CORRECTABLE
        assert (function / "aer_dev_fatal").read_text() == UNCORRECTABLE.format("FATAL")
        assert (function / "aer_dev_nonfatal").read_text() == UNCORRECTABLE.format("NONFATAL")
        assert (function / "SIMULATED").is_file()
    assert [gpu_address(PROFILE, slot) for slot in range(8)] == gpus
    assert gpu_address({"pci_bus_ids": ["00000000:18:00.0"]}, 0) == "0000:18:00.0"
    assert hca_address(3) == "0000:a3:00.0"


def test_the_aer_fault_counts_one_completion_timeout_and_a_missing_gpu_has_no_function(
        tmp_path: Path) -> None:
    write_pci_sysfs(tmp_path, PROFILE, ["gpu2-aer-nonfatal", "gpu5-missing"])
    assert read_aer(str(tmp_path / "0000:4c:00.0")) == {
        "correctable": {"total": 0}, "fatal": {"total": 0},
        "nonfatal": {"total": 1, "CmpltTO": 1}}
    assert not (tmp_path / "0000:bb:00.0").exists()
    # Healed: the counters are back to 0 and the GPU is back on the bus; other files stay.
    write_pci_sysfs(tmp_path, PROFILE, [])
    assert read_aer(str(tmp_path / "0000:4c:00.0"))["nonfatal"] == {"total": 0}  # type: ignore[index]
    assert (tmp_path / "0000:bb:00.0").is_dir()
    (tmp_path / "0000:ff:00.0").mkdir()  # not one of ours (no marker): left alone
    write_pci_sysfs(tmp_path, dict(PROFILE, gpu_count=2, ib_hcas=0), [])
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "0000:19:00.0", "0000:3b:00.0", "0000:ff:00.0"]


def test_the_symbol_error_fault_raises_only_its_port(tmp_path: Path) -> None:
    write_ib_sysfs(tmp_path, PROFILE, ["mlx5_4-symbol-errors"])
    counters = {n: (tmp_path / f"mlx5_{n}/ports/1/counters/symbol_error").read_text()
                for n in range(PROFILE["ib_hcas"])}
    assert counters.pop(4) == f"{SYMBOL_ERRORS}\n"
    assert set(counters.values()) == {"0\n"}
    names = sorted(p.name for p in (tmp_path / "mlx5_0/ports/1/counters").iterdir())
    assert {"port_xmit_constraint_errors", "port_rcv_constraint_errors", "VL15_dropped",
            "link_downed", "symbol_error"} <= set(names)


def test_each_hca_links_to_its_pci_function_as_the_kernel_does(tmp_path: Path) -> None:
    ib, pci = tmp_path / "class/infiniband", tmp_path / "bus/pci/devices"
    write_pci_sysfs(pci, PROFILE, [])
    write_ib_sysfs(ib, PROFILE, [], pci_root=pci)
    link = ib / "mlx5_1/device"
    assert link.is_symlink() and os.readlink(link) == "../../../bus/pci/devices/0000:a1:00.0"
    assert (link / "aer_dev_fatal").read_text() == UNCORRECTABLE.format("FATAL")
    write_ib_sysfs(ib, PROFILE, [], pci_root=pci)  # rewritten unchanged
    assert os.readlink(link) == "../../../bus/pci/devices/0000:a1:00.0"


def test_a_node_gets_both_trees_and_the_link_travels_as_a_symlink() -> None:
    files = {path: (data, mode) for path, data, mode in cluster_mod.sim_files(
        "gpu_nodes", PROFILE, ["mlx5_0-symbol-errors", "gpu0-aer-nonfatal"], os.uname().release)}
    base = IB_SYSFS.lstrip("/")
    assert files[f"{base}/mlx5_0/device"] == (b"../../../bus/pci/devices/0000:a0:00.0", -1)
    assert files[f"{base}/mlx5_0/ports/1/counters/symbol_error"][0] == b"1000\n"
    nonfatal = files[f"{PCI_SYSFS.lstrip('/')}/0000:19:00.0/aer_dev_nonfatal"][0]
    assert nonfatal is not None and re.search(rb"^CmpltTO 1$", nonfatal, re.M)
    # Every directory on the way is in the tree podman unpacks on the node.
    paths = [path for path in files if path.startswith("var/lib/gpu-sim/sysfs")]
    assert all(os.path.dirname(p) in files for p in paths if p != "var/lib/gpu-sim/sysfs")
    # The inventory points both roles at the same trees, where the files land.
    extra = cluster_mod.sim_inventory_vars()
    assert extra["gpu_validate_pci_sysfs_root"] == extra["node_health_pci_sysfs_root"] == PCI_SYSFS
    assert (cluster_mod.SIM_IB_SYSFS, cluster_mod.SIM_PCI_SYSFS) == (IB_SYSFS, PCI_SYSFS)


def test_the_pci_functions_say_who_they_are_as_lspci_reads_them(tmp_path: Path) -> None:
    from gpucluster.preflight import parse_pci_sysfs

    def entries() -> dict[str, dict[str, str]]:
        return {f.name: {a: (f / a).read_text() for a in ("vendor", "device", "class")}
                for f in tmp_path.iterdir()}

    write_pci_sysfs(tmp_path, PROFILE, [])
    gpus = [d for d in parse_pci_sysfs(entries()) if d["kind"] == "gpu"]
    assert [d["slot"] for d in gpus] == [gpu_address(PROFILE, s) for s in range(8)]
    assert {d["device_id"] for d in gpus} == {PROFILE["pci_device_ids"][0].lower()}
    hca = entries()[hca_address(0)]
    assert (hca["vendor"], hca["class"]) == ("0x15b3\n", "0x020700\n")
    # A GPU that fell off the bus is gone from the bus.
    write_pci_sysfs(tmp_path, PROFILE, ["gpu3-missing"])
    assert len([d for d in parse_pci_sysfs(entries()) if d["kind"] == "gpu"]) == 7
