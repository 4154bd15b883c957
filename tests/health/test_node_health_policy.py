"""The node health policy (module_utils/gpucluster/node_health_policy.py) on its own, and on
real captures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpucluster import node_health_policy as policy
from gpucluster.nvsmi_xml import parse_nvidia_smi_xml
from gpucluster.xid import FATAL_XIDS, parse_xid

DCGMI_HEALTHY = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Healthy                                                  |
+---------------------------+----------------------------------------------------------+
"""
DCGMI_FAILED = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Failure                                                  |
| GPU ID: 0                 | Failure                                                  |
|                           | PCIe system: Warning - Detected more than 8 PCIe replays |
|                           | Memory system: Failure - A DBE has occurred              |
+---------------------------+----------------------------------------------------------+
"""


def test_dcgmi_health_table() -> None:
    assert policy.parse_dcgmi_health(DCGMI_HEALTHY) == {"overall": "Healthy", "incidents": []}
    found = policy.parse_dcgmi_health(DCGMI_FAILED)
    assert found["overall"] == "Failure"
    assert "Memory system: Failure - A DBE has occurred" in found["incidents"]
    [check] = policy.dcgm_health_check(found)
    assert check["status"] == "fail" and "GPU ID: 0 Failure" in check["detail"]
    assert policy.dcgm_health_check(None)[0]["status"] == "skip"
    assert policy.dcgm_health_check({"error": "Unable to connect"})[0]["status"] == "warn"
    assert policy.parse_dcgmi_health("Error: host engine not running")["overall"] is None


def test_overall_status_is_the_worst_check() -> None:
    def c(status: str) -> dict[str, str]:
        return {"name": status, "status": status}

    assert policy.overall([c("pass"), c("skip")]) == policy.HEALTHY
    assert policy.overall([c("pass"), c("warn")]) == policy.DEGRADED
    assert policy.overall([c("warn"), c("fail")]) == policy.UNHEALTHY
    assert policy.overall([c("pass")], ["nvidia-smi not found"]) == policy.UNKNOWN


def test_xid_state_across_boots() -> None:
    soft = {"xid": 13, "pci": "0000:19:00", "timestamp": "1.0", "fatal": False}
    fatal = {"xid": 79, "pci": "0000:3b:00", "timestamp": "2.0", "fatal": True}
    judged, state = policy.xid_since_last_run([soft], None, "boot-1")
    assert judged == [soft] and state["xid_seen"] == 1
    judged, state = policy.xid_since_last_run([soft, fatal], state, "boot-1")
    assert judged == [fatal]
    judged, state = policy.xid_since_last_run([soft, fatal], state, "boot-1")
    assert judged == [fatal]  # fatal stays reported
    judged, _ = policy.xid_since_last_run([], state, "boot-2")
    assert judged == []  # a reboot resets the GPUs


def test_ping_summary() -> None:
    text = ("--- node-b ping statistics ---\n3 packets transmitted, 3 received, 0% packet loss, "
            "time 404ms\nrtt min/avg/max/mdev = 0.041/2.500/0.061/0.008 ms\n")
    assert policy.parse_ping_rtt(text) == pytest.approx(0.0025)
    assert policy.parse_ping_rtt("3 packets transmitted, 0 received, 100% packet loss") is None


def test_hardware_slowdown_warns() -> None:
    gpu = {"gpus": [{"index": 0, "clock_reasons": ["gpu_idle", "sw_power_cap"]},
                    {"index": 1, "clock_reasons": ["hw_thermal_slowdown"]}]}
    by = {c["name"]: c for c in policy.gpu_extra_checks(gpu)}
    assert by["gpu0_clocks"]["status"] == "pass"
    assert by["gpu1_clocks"]["status"] == "warn" and "hw_thermal_slowdown" in by["gpu1_clocks"][
        "detail"]


def test_a_driver_older_than_the_planned_cuda_fails_the_driver_support_check() -> None:
    def driver_support(driver_cuda: str) -> dict[str, Any]:
        checks = policy.stack_checks({"cuda_toolkit": "12.9", "driver_cuda": driver_cuda},
                                     {"cuda_version": "12.9"})
        found: dict[str, Any] = {c["name"]: c for c in checks}["cuda_driver_support"]
        return found

    old = driver_support("12.8")
    assert old["status"] == "fail"
    assert old["detail"] == "the driver supports CUDA up to 12.8, the toolkit is 12.9"
    assert driver_support("11.8")["status"] == "fail"
    # The same release, a newer minor, a newer major: supported. Versions compare as numbers
    # (12.10 is newer than 12.9, as text it would sort before).
    for newer in ("12.9", "12.10", "13.0"):
        supported = driver_support(newer)
        assert supported["status"] == "pass", newer
        assert supported["detail"] == f"driver supports CUDA {newer}"
    # nvidia-smi did not say: no verdict on the driver, only on the toolkit.
    only_toolkit = policy.stack_checks({"cuda_toolkit": "12.9", "driver_cuda": None},
                                       {"cuda_version": "12.9"})
    assert [c["name"] for c in only_toolkit] == ["cuda_version"]


def test_a_pending_page_retirement_fails_and_retired_pages_alone_pass() -> None:
    gpu = {"gpus": [
        {"index": 0, "retired_pages": {"single_bit": 2, "double_bit": 1, "pending": True}},
        {"index": 1, "retired_pages": {"single_bit": 2, "double_bit": 1, "pending": False}},
        {"index": 2, "retired_pages": {"single_bit": None, "double_bit": None,
                                       "pending": None}},
    ]}
    by = {c["name"]: c for c in policy.gpu_extra_checks(gpu)}
    assert by["gpu0_retired_pages"]["status"] == "fail"
    assert by["gpu0_retired_pages"]["detail"] == \
        "GPU0: a page retirement is pending (reset the GPU)"
    assert by["gpu0_retired_pages"]["measured"] == {"double_bit": 1, "pending": True}
    # Pages already retired are the repair working; only a pending one needs a reset.
    assert by["gpu1_retired_pages"]["status"] == "pass"
    assert by["gpu1_retired_pages"]["detail"] == "no page retirement pending"
    # A GPU that does not report retirement (Ampere and later: row remapping) gets no check.
    assert "gpu2_retired_pages" not in by
    checks = policy.judge({"gpu": gpu}, {}, {})
    assert [c["name"] for c in checks if c["status"] == "fail"] == ["gpu0_retired_pages"]
    assert policy.overall(checks) == policy.UNHEALTHY


def test_judge_quick_judges_only_the_quick_facts() -> None:
    gpu = {"driver_version": "580.95.05", "gpus": [
        {"index": 0, "name": "H100", "ecc": {"mode": True}, "remapped_rows": {"pending": True},
         "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": False}}]}
    fatal = {"events": [{"xid": 79, "pci": "0000:19:00.0", "fatal": True}]}
    facts = {"gpu": gpu, "nvlink": {}, "ib": {}, "fabricmanager": "inactive", "xid": fatal,
             "dcgm_health": {"overall": "Failure", "incidents": []},
             "measured": {"cuda_toolkit": None}}
    expected = {"gpu_count": 1, "gpu_model": "H100", "driver_version": "580.95.05",
                "nvswitch": True}
    quick = policy.judge_quick(facts, expected)
    failed = {c["name"] for c in quick if c["status"] == "fail"}
    assert failed == {"gpu0_memory", "fabricmanager"}
    names = {c["name"] for c in quick}
    assert not names & {"xid", "dcgm_health", "cuda_version"}
    assert set(policy.QUICK_FACTS) == {"gpu", "nvlink", "ib", "fabricmanager", "mig"}
    # The full check judges the same facts with the same functions, and the rest besides.
    full = policy.judge(facts, expected, {"cuda_version": "13.0"})
    by_full = {c["name"]: c for c in full}
    assert all(by_full[c["name"]] == c for c in quick)
    assert {"xid", "dcgm_health", "cuda_version"} <= set(by_full)


def test_label_values_are_escaped() -> None:
    res = policy.result("h", [{"name": 'a"b\\c', "status": "fail"}], [], {"name": "s\n"}, {},
                        0.0, 1.0)
    text = policy.render_textfile(res)
    assert 'gpucluster_health_ok{check="a\\"b\\\\c"} 0' in text
    assert 'stack="s\\n"' in text


# --- real captures (../shared/captures), skipped when absent -----------------------------------


def test_real_nvidia_smi_captures_parse_clock_reasons_and_retired_pages(captures: Path) -> None:
    seen_reasons = 0
    for path in sorted((captures / "nvidia-smi-xml").glob("*.xml")):
        facts = parse_nvidia_smi_xml(path.read_text(encoding="utf-8", errors="replace"))
        checks = policy.gpu_extra_checks(facts)
        for gpu in facts["gpus"]:
            if gpu["clock_reasons"] is not None:
                seen_reasons += 1
                assert {c["name"] for c in checks} >= {f"gpu{gpu['index']}_clocks"}
        # None of these captures was taken on a GPU holding its clocks down in hardware.
        assert all(c["status"] == "pass" for c in checks if c["name"].endswith("_clocks")), path
    assert seen_reasons > 0


def test_real_v100_capture_reports_retired_pages(captures: Path) -> None:
    path = captures / "nvidia-smi-xml" / "v100s-pcie-8gpu-460.xml"
    if not path.is_file():
        pytest.skip("capture absent")
    checks = policy.gpu_extra_checks(parse_nvidia_smi_xml(path.read_text()))
    assert any(c["name"].endswith("_retired_pages") for c in checks)


def test_real_fatal_xid_log_is_unhealthy(captures: Path) -> None:
    path = captures / "dmesg-xid" / "xid31-xid48-dmesg-T.txt"
    if not path.is_file():
        pytest.skip("capture absent")
    events = parse_xid(path.read_text())
    for event in events:
        event["fatal"] = event["xid"] in FATAL_XIDS
    judged, _ = policy.xid_since_last_run(events, None, "b")
    checks = policy.judge({"xid": {"events": judged}}, {}, {})
    assert policy.overall(checks) == policy.UNHEALTHY
    assert "Xid 48" in checks[0]["detail"] and "since the last run" in checks[0]["detail"]
