"""The error counter policy validate and gpuc-health share (module_utils/gpucluster/counters.py,
pci_aer.py): InfiniBand port counters and PCIe AER counters judged by their rise between two
readings, per port and per PCI function."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpucluster import counters
from gpucluster.counters import (
    AER_CORRECTABLE_PER_HOUR,
    BASELINE_MAX_AGE_S,
    IB_COUNTER_BITS,
    IB_COUNTER_LIMITS,
    counter_checks,
    next_baseline,
)
from gpucluster.ib_sysfs import parse_ib_sysfs_flat, read_ib_sysfs
from gpucluster.pci_aer import parse_aer, read_aer
from gpucluster.validate import evaluate

from provisioner.profiles import load_profiles
from provisioner.sim.sysfs import write_ib_sysfs, write_pci_sysfs
from tests.conftest import CAPTURES

HOUR = 3600.0
ZERO = dict.fromkeys(IB_COUNTER_LIMITS, 0)
PROFILE = load_profiles()["sim-h100-8gpu"].sim_json()


def reading(when: float, ib: dict[str, dict[str, int]] | None = None,
            pcie: dict[str, dict[str, Any]] | None = None, boot: str = "boot-1") -> dict[str, Any]:
    return {"time": when, "boot_id": boot, "ib": ib or {}, "pcie": pcie or {}}


def port(**counts: int) -> dict[str, int]:
    return {**ZERO, **counts}


def judge(before: dict[str, Any] | None, now: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in counter_checks({"now": now, "before": before})}


def ib_check(before_counts: dict[str, int] | None, now_counts: dict[str, int],
             seconds: float = HOUR) -> dict[str, Any]:
    before = None if before_counts is None else reading(0.0, {"mlx5_0/1": before_counts})
    return judge(before, reading(seconds, {"mlx5_0/1": now_counts}))["ib_mlx5_0_port1_errors"]


# --- InfiniBand ports -----------------------------------------------------------------------

def test_symbol_errors_over_the_threshold_fail_naming_the_port_counter_and_interval() -> None:
    check = ib_check(port(), port(symbol_error=11))
    assert check["status"] == "fail"
    assert check["measured"]["symbol_error"] == 11
    assert check["expected"]["symbol_error"] == "at most 10 per hour"
    assert check["detail"].startswith("mlx5_0/1: symbol_error +11 (11 per hour, more than 10) "
                                      "in the 60 min since the last reading")
    assert "cable, transceiver and switch port" in check["detail"]


def test_an_increase_at_the_threshold_passes() -> None:
    check = ib_check(port(symbol_error=5), port(symbol_error=15))
    assert check["status"] == "pass"
    assert check["measured"]["symbol_error"] == 10
    assert check["detail"] == ("mlx5_0/1: no error counter over its threshold in the 60 min "
                               "since the last reading")


@pytest.mark.parametrize(("seconds", "rise", "status"), [
    (3 * HOUR, 30, "pass"),    # 10 per hour over 3 h
    (3 * HOUR, 31, "fail"),
    (300.0, 10, "pass"),       # 5 min: judged over 1 h, not extrapolated to 120 per hour
    (300.0, 11, "fail"),
    (10 * 86400.0, 2400, "pass"),  # validate ten days later: 10 per hour
])
def test_per_hour_counters_are_scaled_by_the_interval_of_at_least_an_hour(
        seconds: float, rise: int, status: str) -> None:
    assert ib_check(port(), port(symbol_error=rise), seconds)["status"] == status


def test_a_short_interval_says_rates_are_over_an_hour() -> None:
    detail = ib_check(port(), port(symbol_error=11), 300.0)["detail"]
    assert "in the 5 min since the last reading (per-hour rates over 1 h)" in detail


def test_one_link_down_between_two_readings_is_a_flap() -> None:
    check = ib_check(port(link_downed=3), port(link_downed=4), 30 * 86400.0)
    assert check["status"] == "fail"
    assert "link_downed +1 (more than 0 between two readings)" in check["detail"]
    assert "the link flapped" in check["detail"]
    assert check["expected"]["link_downed"] == "at most 0 between two readings"


def test_link_error_recovery_is_a_flap_per_hour() -> None:
    assert ib_check(port(), port(link_error_recovery=10))["status"] == "pass"
    check = ib_check(port(), port(link_error_recovery=11))
    assert check["status"] == "fail" and "the link flapped" in check["detail"]


def test_every_counter_over_its_threshold_is_named() -> None:
    check = ib_check(port(), port(symbol_error=50, port_rcv_errors=11, VL15_dropped=101,
                                  port_xmit_discards=100))
    assert check["status"] == "fail"
    for name in ("symbol_error +50", "port_rcv_errors +11", "VL15_dropped +101"):
        assert name in check["detail"]
    assert "port_xmit_discards" not in check["detail"]  # 100 is its threshold, not over it


def test_a_counter_lower_than_before_was_reset_and_its_value_is_the_increase() -> None:
    quiet = ib_check(port(symbol_error=500), port(symbol_error=3))
    assert quiet["status"] == "pass"
    assert quiet["measured"]["symbol_error"] == 3
    assert ("symbol_error lower than at the last reading (counters reset): the value is judged "
            "as the increase") in quiet["detail"]
    noisy = ib_check(port(symbol_error=500), port(symbol_error=40))
    assert noisy["status"] == "fail" and "symbol_error +40" in noisy["detail"]
    assert "counters reset" in noisy["detail"]


def test_the_first_reading_is_the_baseline() -> None:
    check = ib_check(None, port(symbol_error=9000, link_downed=7))
    assert check["status"] == "skip"
    assert check["detail"] == "mlx5_0/1: first reading: baseline recorded"


@pytest.mark.parametrize(("counter", "bits"), sorted(IB_COUNTER_BITS.items()))
def test_a_saturated_counter_fails_even_on_the_first_reading(counter: str, bits: int) -> None:
    top = 2 ** bits - 1
    check = ib_check(None, port(**{counter: top}))
    assert check["status"] == "fail"
    assert (f"{counter} is saturated at {top}, its {bits}-bit maximum: it no longer counts "
            "(reset the port's counters, perfquery -C mlx5_0 -P 1 -R, to judge it again)"
            ) in check["detail"]
    assert ib_check(None, port(**{counter: top - 1}))["status"] == "skip"
    # Stuck at its maximum since the last reading: still saturated, still a failure.
    assert ib_check(port(**{counter: top}), port(**{counter: top}))["status"] == "fail"


def test_the_saturation_values_are_the_pma_widths() -> None:
    assert 2 ** IB_COUNTER_BITS["symbol_error"] - 1 == 65535
    assert 2 ** IB_COUNTER_BITS["link_downed"] - 1 == 255
    assert 2 ** IB_COUNTER_BITS["excessive_buffer_overrun_errors"] - 1 == 15
    assert set(IB_COUNTER_BITS) == set(IB_COUNTER_LIMITS)


def test_a_reboot_starts_a_new_infiniband_baseline() -> None:
    before = reading(0.0, {"mlx5_0/1": port()}, boot="boot-1")
    now = reading(HOUR, {"mlx5_0/1": port(symbol_error=900)}, boot="boot-2")
    check = judge(before, now)["ib_mlx5_0_port1_errors"]
    assert check["status"] == "skip"
    assert check["detail"] == ("mlx5_0/1: the node rebooted since the last reading: baseline "
                               "recorded")


def test_a_port_new_since_the_last_reading_gets_its_baseline() -> None:
    before = reading(0.0, {"mlx5_0/1": port()})
    now = reading(HOUR, {"mlx5_0/1": port(), "mlx5_1/1": port(symbol_error=99)})
    checks = judge(before, now)
    assert checks["ib_mlx5_0_port1_errors"]["status"] == "pass"
    assert checks["ib_mlx5_1_port1_errors"]["status"] == "skip"


def test_a_port_without_readable_counters_is_skipped() -> None:
    check = judge(None, reading(0.0, {"mlx5_0/1": {}}))["ib_mlx5_0_port1_errors"]
    assert (check["status"], check["detail"]) == (
        "skip", "mlx5_0/1: no error counter could be read")


def test_a_reading_of_the_wrong_shape_is_no_earlier_reading() -> None:
    for junk in ({"time": "yesterday", "ib": {}, "pcie": {}}, {"time": 1.0}, [], "x", True):
        now = reading(HOUR, {"mlx5_0/1": port()})
        assert judge(junk, now)["ib_mlx5_0_port1_errors"]["status"] == "skip"  # type: ignore[arg-type]
    assert counter_checks(None)[0]["name"] == "error_counters"


# --- the readings ----------------------------------------------------------------------------

def test_the_reading_holds_the_fabric_ports_and_the_pci_functions(tmp_path: Path) -> None:
    profile = dict(PROFILE, hostname="node-a")
    write_pci_sysfs(tmp_path / "pci", profile, ["gpu2-aer-nonfatal", "mlx5_1-symbol-errors"])
    write_ib_sysfs(tmp_path / "ib", profile, ["mlx5_1-symbol-errors"], pci_root=tmp_path / "pci")
    ib = read_ib_sysfs(str(tmp_path / "ib"))
    gpu = {"gpus": [{"index": 0, "bus_id": "0000:19:00.0"}, {"index": 2, "bus_id": "0000:4c:00.0"}]}
    now = counters.take_reading(ib, gpu, PROFILE, str(tmp_path / "ib"), str(tmp_path / "pci"),
                                1000.0, "b")
    assert now["time"] == 1000.0 and now["boot_id"] == "b"
    assert sorted(now["ib"]) == [f"mlx5_{n}/1" for n in range(PROFILE["ib_hcas"])]
    assert now["ib"]["mlx5_1/1"] == port(symbol_error=1000)
    assert now["pcie"]["0000:4c:00.0"] == {
        "device": "gpu2", "correctable": {"total": 0}, "fatal": {"total": 0},
        "nonfatal": {"total": 1, "CmpltTO": 1}}
    # The HCA's PCI function through its device link, keyed by the address it links to.
    assert now["pcie"]["0000:a1:00.0"]["device"] == "mlx5_1"
    assert {v["device"] for v in now["pcie"].values()} == {
        "gpu0", "gpu2", *(f"mlx5_{n}" for n in range(PROFILE["ib_hcas"]))}
    # No RDMA fabric in the profile: no ports judged (the PCI functions still are).
    assert counters.ib_reading(ib, dict(PROFILE, fabric="ethernet")) == {}
    assert counters.ib_reading(ib, dict(PROFILE, ib_hcas=0)) == {}
    assert counters.ib_reading({"error": "x"}, PROFILE) == {}


def test_roce_ports_are_read_on_a_roce_fabric(tmp_path: Path) -> None:
    roce = dict(PROFILE, fabric="roce", ib_hcas=2, hostname="n")
    write_ib_sysfs(tmp_path, roce, [])
    assert sorted(counters.ib_reading(read_ib_sysfs(str(tmp_path)), roce)) == [
        "mlx5_0/1", "mlx5_1/1"]
    assert counters.ib_reading(read_ib_sysfs(str(tmp_path)), PROFILE) == {}  # not InfiniBand


def test_a_real_h100_port_with_a_saturated_4_bit_counter_fails_its_first_reading() -> None:
    path = CAPTURES / "infiniband-sysfs" / "gpud-h100-8x-ndr-plus-bf3-bond.txt"
    if not path.is_file():
        pytest.skip(f"capture {path} not present")
    ib = parse_ib_sysfs_flat(path.read_text(encoding="utf-8"))
    now = reading(0.0, counters.ib_reading(ib, {"ib_hcas": 8, "fabric": "infiniband"}))
    assert now["ib"]["mlx5_0/1"]["excessive_buffer_overrun_errors"] == 15
    check = judge(None, now)["ib_mlx5_0_port1_errors"]
    assert check["status"] == "fail"
    assert "excessive_buffer_overrun_errors is saturated at 15, its 4-bit maximum" in (
        check["detail"])
    # The bond's Ethernet ports are not the fabric's.
    assert all(key.startswith("mlx5_") for key in now["ib"])


# --- PCIe AER ---------------------------------------------------------------------------------

CORRECTABLE = ("RxErr 2\nBadTLP 0\nBadDLLP 1\nRollover 0\nTimeout 0\nNonFatalErr 0\n"
               "CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 3\n")


def test_aer_files_parse_as_the_kernel_writes_them(tmp_path: Path) -> None:
    assert parse_aer(CORRECTABLE, "TOTAL_ERR_COR") == {"total": 3, "RxErr": 2, "BadDLLP": 1}
    # Older kernels' names with spaces, and a bit the kernel has no name for.
    old = "Receiver Error 2\nBad TLP 0\ndev_cor_errs_bit[9] 4\nTOTAL_ERR_COR 6\n"
    assert parse_aer(old, "TOTAL_ERR_COR") == {"total": 6, "Receiver Error": 2,
                                               "dev_cor_errs_bit[9]": 4}
    assert parse_aer("garbage\n", "TOTAL_ERR_COR") == {}
    (tmp_path / "aer_dev_correctable").write_text(CORRECTABLE)
    (tmp_path / "aer_dev_fatal").write_text("Undefined 0\nTOTAL_ERR_FATAL 0\n")
    assert read_aer(str(tmp_path)) == {"correctable": {"total": 3, "RxErr": 2, "BadDLLP": 1},
                                       "fatal": {"total": 0}}
    assert read_aer(str(tmp_path / "absent")) is None


def aer(correctable: int = 0, fatal: int = 0, nonfatal: int = 0,
        **named: int) -> dict[str, Any]:
    return {"device": "gpu3", "correctable": {"total": correctable},
            "fatal": {"total": fatal}, "nonfatal": {"total": nonfatal, **named}}


def pcie_check(before: dict[str, Any] | None, now: dict[str, Any],
               seconds: float = HOUR) -> dict[str, Any]:
    old = None if before is None else reading(0.0, pcie={"0000:5d:00.0": before})
    return judge(old, reading(seconds, pcie={"0000:5d:00.0": now}))["gpu3_pcie_errors"]


def test_an_uncorrectable_aer_error_since_the_last_reading_fails() -> None:
    check = pcie_check(aer(), aer(nonfatal=1, CmpltTO=1), 2 * 86400.0)
    assert check["status"] == "fail"
    assert check["measured"] == {"fatal": 0, "nonfatal": 1, "correctable": 0}
    assert check["detail"].startswith(
        "gpu3 (0000:5d:00.0): 1 uncorrectable non-fatal PCIe error(s) (CmpltTO +1) in the 2.0 "
        "days since the last reading")
    assert "drain the node" in check["detail"]
    assert pcie_check(aer(fatal=2), aer(fatal=3))["status"] == "fail"


def test_correctable_aer_errors_warn_over_their_rate() -> None:
    assert pcie_check(aer(), aer(correctable=AER_CORRECTABLE_PER_HOUR))["status"] == "pass"
    check = pcie_check(aer(), aer(correctable=AER_CORRECTABLE_PER_HOUR + 1))
    assert check["status"] == "warn"
    assert f"more than {AER_CORRECTABLE_PER_HOUR}" in check["detail"]
    # Over 4 h the same count is a quarter of the rate.
    assert pcie_check(aer(), aer(correctable=4 * AER_CORRECTABLE_PER_HOUR),
                      4 * HOUR)["status"] == "pass"


def test_aer_first_reading_is_the_baseline_and_a_quiet_function_passes() -> None:
    assert pcie_check(None, aer(nonfatal=4))["status"] == "skip"
    quiet = pcie_check(aer(nonfatal=4), aer(nonfatal=4))
    assert quiet["status"] == "pass"
    assert quiet["detail"] == ("gpu3 (0000:5d:00.0): no uncorrectable PCIe error in the 60 min "
                               "since the last reading")


def test_after_a_reboot_the_aer_counts_are_since_boot() -> None:
    before = reading(0.0, pcie={"0000:5d:00.0": aer(nonfatal=4)}, boot="boot-1")
    now = reading(HOUR, pcie={"0000:5d:00.0": aer(nonfatal=1, CmpltTO=1)}, boot="boot-2")
    check = judge(before, now)["gpu3_pcie_errors"]
    assert check["status"] == "fail"
    assert "since boot (the node rebooted since the last reading)" in check["detail"]


def test_lower_aer_counts_were_reset() -> None:
    check = pcie_check(aer(correctable=900), aer(correctable=2))
    assert check["status"] == "pass"
    assert check["measured"]["correctable"] == 2
    assert "correctable counters lower than at the last reading (reset)" in check["detail"]


# --- gpuc-health's baseline --------------------------------------------------------------------

def test_gpuc_health_keeps_its_baseline_for_an_hour() -> None:
    base = reading(0.0, {"mlx5_0/1": port()})
    later = reading(BASELINE_MAX_AGE_S - 1, {"mlx5_0/1": port(symbol_error=5)})
    assert next_baseline(base, later) is base
    expired = reading(BASELINE_MAX_AGE_S, {"mlx5_0/1": port()})
    assert next_baseline(base, expired) is expired
    assert next_baseline(None, later) is later
    assert next_baseline(base, dict(later, boot_id="boot-2")) is not base
    assert next_baseline(base, reading(10.0, {"mlx5_1/1": port()}))["ib"] == {
        "mlx5_1/1": port()}  # another set of ports
    assert next_baseline(reading(100.0), reading(50.0))["time"] == 50.0  # the clock went back


# --- through validate's policy entry point ------------------------------------------------------

def test_validate_judges_the_counters_it_is_given() -> None:
    before = reading(0.0, {"mlx5_0/1": port()})
    now = reading(HOUR, {"mlx5_0/1": port(symbol_error=1000)})
    checks = {c["name"]: c for c in evaluate({"counters": {"now": now, "before": before}},
                                            PROFILE)}
    assert checks["ib_mlx5_0_port1_errors"]["status"] == "fail"
    assert "counters" not in {c["name"] for c in evaluate({}, PROFILE)}


def test_junk_in_an_earlier_reading_is_no_count() -> None:
    """A reading handed back from a report or a state file is data, not code: values of the
    wrong type count as absent instead of breaking the judgement."""
    junk = {"device": "gpu3", "correctable": {"total": "many"}, "fatal": "x",
            "nonfatal": {"total": None, "CmpltTO": "2"}}
    check = pcie_check(junk, aer(nonfatal=1, CmpltTO=1))
    assert check["status"] == "fail" and "CmpltTO +1" in check["detail"]
    assert ib_check({"symbol_error": "7", "link_downed": None},
                    port(symbol_error=3))["status"] == "pass"
