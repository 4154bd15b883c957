"""nvbandwidth's outputs (plain text and -j JSON, v0.8's formats) parsed into per-testcase
matrices; per-GPU figures by CUDA device; what is not nvbandwidth output is refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gpucluster.nvbandwidth import parse_nvbandwidth, per_device
from gpucluster.values import ParseError

Fixture = Callable[[str, str], str]


@pytest.mark.parametrize("name", ["h2d-d2h-local-4gpu.txt", "h2d-d2h-local-4gpu.json"])
def test_both_formats_give_the_same_facts(fixture_text: Fixture, name: str) -> None:
    got = parse_nvbandwidth(fixture_text("nvbandwidth", name))
    assert got["format"] == ("json" if name.endswith(".json") else "text")
    assert (got["version"], got["driver_version"], got["cuda_runtime_version"]) == (
        "v0.8", "550.90.07", 12040)
    assert [(d["index"], d["name"], d["bus_id"]) for d in got["devices"]] == [
        (0, "NVIDIA L40S", "00000000:17:00"), (1, "NVIDIA L40S", "00000000:31:00"),
        (2, "NVIDIA L40S", "00000000:b1:00"), (3, "NVIDIA L40S", "00000000:ca:00")]
    h2d = per_device(got, "host_to_device_memcpy_ce")
    assert h2d is not None and h2d[2] == pytest.approx(13.12, abs=0.01)
    assert h2d[0] == pytest.approx(26.14, abs=0.01)
    local = got["testcases"]["device_local_copy"]
    assert local["status"] == "Passed"
    assert local["description"] == "memcpy local GPU(column) bandwidth (GB/s)"
    assert local["sum"] == pytest.approx(1428.25, abs=0.01)
    assert got["testcases"]["device_to_host_memcpy_ce"]["matrix"][0][3] == pytest.approx(
        26.90, abs=0.01)


def test_a_waived_testcase_is_named_in_json_only(fixture_text: Fixture) -> None:
    # Plain text prints "Waived: " without the testcase's name (output.cpp addTestcase).
    json_cases = parse_nvbandwidth(fixture_text("nvbandwidth", "h2d-d2h-local-4gpu.json"))
    assert json_cases["testcases"]["device_to_device_memcpy_read_ce"]["status"] == "Waived"
    assert per_device(json_cases, "device_to_device_memcpy_read_ce") is None
    text = parse_nvbandwidth(fixture_text("nvbandwidth", "h2d-d2h-local-4gpu.txt"))
    assert set(text["testcases"]) == {"host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
                                      "device_local_copy"}


def test_not_measured_cells_and_errors() -> None:
    text = ("nvbandwidth Version: v0.8\n\nRunning host_to_device_memcpy_ce.\n"
            "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n"
            "           0         1\n 0     53.10       N/A\n\n"
            "SUM host_to_device_memcpy_ce 53.10\n\n"
            "Running device_local_copy.\nError: CUDA_ERROR_OUT_OF_MEMORY\n"
            "ERROR: Testcase nonsense not found!\n")
    got = parse_nvbandwidth(text)
    assert per_device(got, "host_to_device_memcpy_ce") == {0: 53.10, 1: None}
    assert got["testcases"]["device_local_copy"]["status"] == "Error"
    assert got["testcases"]["device_local_copy"]["error"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert got["errors"] == ["ERROR: Testcase nonsense not found!"]


@pytest.mark.parametrize("text", ["", "hello", "{not json", "[1, 2]", '{"other": {}}'])
def test_what_is_not_nvbandwidth_output_is_refused(text: str) -> None:
    with pytest.raises(ParseError):
        parse_nvbandwidth(text)
