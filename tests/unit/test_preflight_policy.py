from __future__ import annotations

from typing import Any

import pytest
from gpucluster.preflight import evaluate, failed, os_dir, parse_lspci_nvidia

from provisioner.matrix import load_matrix

LSPCI = """\
18:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)
19:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
3b:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
00:02.0 VGA compatible controller [0300]: Intel Corporation Device [8086:a780] (rev 04)
"""

POLICY: dict[str, Any] = {
    "supported_os": ["debian12", "ubuntu2204"],
    "min_free_gb": 20, "expect_gpus": True, "expected_gpu_count": 2,
    "expected_pci_ids": ["10de:2330"],
}


def facts(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "os_id": "debian", "os_version": "12", "architecture": "x86_64", "kernel": "6.1.0-18",
        "kernel_headers": "installable", "disk": [{"path": "/", "free_gb": 120.0}],
        "secure_boot": "disabled", "pci_devices": parse_lspci_nvidia(LSPCI),
        "pci_source": "lspci", "time_sync": "synchronized",
    }
    base.update(over)
    return base


def by_name(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in checks}


def test_lspci_counts_gpus_not_nvswitch_or_other_vendors() -> None:
    devs = parse_lspci_nvidia(LSPCI)
    assert [d["kind"] for d in devs] == ["nvswitch", "gpu", "gpu"]
    assert devs[1]["device_id"] == "10de:2330"


def test_healthy_node_passes_everything() -> None:
    checks = evaluate(facts(), POLICY)
    assert failed(checks) == []
    assert by_name(checks)["nvidia_pci_devices"]["measured"] == 2


def test_each_bad_fact_fails_its_own_check() -> None:
    cases = {
        "os_supported": facts(os_id="centos", os_version="7"),
        "architecture": facts(architecture="ppc64le"),
        "kernel_headers": facts(kernel_headers="missing"),
        "free_disk:/": facts(disk=[{"path": "/", "free_gb": 3.2}]),
        "secure_boot": facts(secure_boot="enabled"),
        "nvidia_pci_devices": facts(pci_devices=parse_lspci_nvidia(LSPCI)[:2]),
        "nvidia_pci_ids": facts(pci_devices=parse_lspci_nvidia(LSPCI.replace("2330", "20b5"))),
    }
    for name, bad in cases.items():
        assert [c["name"] for c in failed(evaluate(bad, POLICY))] == [name], name


def test_missing_gpu_message_names_counts() -> None:
    checks = by_name(evaluate(facts(pci_devices=[]), POLICY))
    assert checks["nvidia_pci_devices"]["status"] == "fail"
    assert "shows 0 NVIDIA GPU(s), the profile expects 2" in checks["nvidia_pci_devices"]["detail"]


def test_unsynchronised_clock_warns_but_does_not_fail() -> None:
    checks = evaluate(facts(time_sync="unsynchronized"), POLICY)
    assert by_name(checks)["time_sync"]["status"] == "warn"
    assert failed(checks) == []


def test_secure_boot_accepted_with_mok() -> None:
    checks = evaluate(facts(secure_boot="enabled"), {**POLICY, "secure_boot_ok": True})
    assert by_name(checks)["secure_boot"]["status"] == "pass"


def test_cpu_node_skips_gpu_checks() -> None:
    checks = by_name(evaluate(facts(pci_devices=[]), {**POLICY, "expect_gpus": False}))
    assert "nvidia_pci_devices" not in checks


def test_real_lspci_captures_count_gpus(captures: Any) -> None:
    text = (captures / "lspci-nvidia" / "azure-a100-sxm4-8gpu-lspci-nn.txt").read_text()
    gpus = [d for d in parse_lspci_nvidia(text) if d["kind"] == "gpu"]
    assert len(gpus) == 8
    assert {d["device_id"] for d in gpus} == {"10de:20b2"}


@pytest.mark.parametrize(("os_id", "version", "expected"), [
    ("debian", "12", "debian12"), ("debian", "13", "debian13"), ("ubuntu", "22.04", "ubuntu2204"),
    ("ubuntu", "24.04", "ubuntu2404"), ("rhel", "9.4", "rhel9"), ("rocky", "9.3", "rhel9"),
    ("almalinux", "9", "rhel9"), ("centos", "7", "centos7"),
])
def test_os_is_named_like_the_matrix_repository_directories(os_id: str, version: str,
                                                             expected: str) -> None:
    assert os_dir(os_id, version) == expected


def test_every_matrix_repository_is_reachable_by_some_os_release() -> None:
    # The registry's keys must be names a real os-release can produce, or no node could match.
    releases = [("debian", "12"), ("ubuntu", "22.04"), ("ubuntu", "24.04"), ("rhel", "9.4")]
    assert set(load_matrix().repositories.cuda) <= {os_dir(i, v) for i, v in releases}


def test_debian_13_is_refused_in_one_line_naming_it_and_the_supported_ones() -> None:
    # The OS list the plan hands preflight: the default stack's OSes that have a repository.
    matrix = load_matrix()
    stack = matrix.stacks[matrix.default_stack]
    supported = sorted(set(stack.os_support) & set(matrix.repositories.cuda))
    assert "debian12" in supported and "debian13" not in supported
    checks = evaluate(facts(os_id="debian", os_version="13"), {**POLICY, "supported_os": supported})
    assert [c["name"] for c in failed(checks)] == ["os_supported"]
    detail = by_name(checks)["os_supported"]["detail"]
    assert "\n" not in detail
    assert "debian 13 (debian13)" in detail and ", ".join(supported) in detail
    ok = evaluate(facts(os_id="debian", os_version="12"), {**POLICY, "supported_os": supported})
    assert by_name(ok)["os_supported"]["status"] == "pass"
