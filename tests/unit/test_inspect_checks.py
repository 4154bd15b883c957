"""`inspect --profile` in-process: the checks each saved output gets against a hardware profile,
whole. Our own fixtures (tests/fixtures), so they run wherever the suite runs (the
real-capture tests need ../shared, and the CLI tests run a subprocess mutmut cannot see)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provisioner.inspect import _busbw_check, check_against_profile, inspect_file
from provisioner.profiles import load_profiles

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H100 = load_profiles()["hgx-h100-8gpu"]


def checks(relative: str) -> list[dict[str, Any]]:
    return check_against_profile(inspect_file(FIXTURES / relative), H100)


def test_fatal_xids_fail_naming_each_gpu() -> None:
    assert checks("dmesg-xid/mixed-formats-fatal.log") == [
        {"name": "xid", "status": "fail", "measured": 4, "expected": 0,
         "detail": "fatal Xid errors since boot: Xid 79 on 0000:c1:00, Xid 74 on 0000:4c:00, "
                   "Xid 62 on 0000:db:00, Xid 140 on 0000:db:00; drain and reset/RMA"}]


def test_application_xids_only_warn() -> None:
    assert checks("dmesg-xid/app-faults-only.log") == [
        {"name": "xid", "status": "warn", "measured": 3, "expected": 0,
         "detail": "3 non-fatal Xid event(s) since boot"}]


def test_xid_events_given_as_a_list_are_judged_the_same() -> None:
    result = inspect_file(FIXTURES / "dmesg-xid/mixed-formats-fatal.log")
    as_list = {**result, "facts": result["facts"]["events"]}
    assert check_against_profile(as_list, H100) == checks("dmesg-xid/mixed-formats-fatal.log")


def test_ibstat_ports_at_half_rate_or_down_fail() -> None:
    got = {c["name"]: (c["status"], c["measured"], c["detail"])
           for c in checks("ibstat/cx7-ndr-9ca-half-rate-down-roce-ibpanic.txt")}
    healthy = ("pass", "ACTIVE 400 Gb/s", "port healthy")
    assert got == {
        **{f"ib_mlx5_{i}_port1": healthy for i in (0, 1, 2, 4, 5, 7)},
        "ib_mlx5_3_port1": ("fail", "ACTIVE 200 Gb/s",
                            "mlx5_3/1: rate 200 Gb/s (None), expected 400"),
        "ib_mlx5_6_port1": ("fail", "DOWN 10 Gb/s",
                            "mlx5_6/1: state DOWN (Polling); rate 10 Gb/s (None), expected 400"),
        "ib_ports": ("fail", 6, "6 healthy InfiniBand port(s) of 8 expected"),
    }


def test_nvlink_links_down_fail_their_gpu() -> None:
    got = {c["name"]: (c["status"], c["measured"]) for c in checks(
        "nvidia-smi-nvlink/h100-sxm-8gpu-link-down.txt")}
    assert got == {**{f"gpu{i}_nvlink": ("pass", 18) for i in (0, 1, 3, 4, 6, 7)},
                   "gpu2_nvlink": ("fail", 17), "gpu5_nvlink": ("fail", 0)}


def test_a_format_no_check_applies_to_gets_none() -> None:
    topo = sorted((FIXTURES / "nvidia-smi-topo").iterdir())[0]
    assert check_against_profile(inspect_file(topo), H100) == []


def test_nccl_tests_without_a_large_size_skip_with_the_reason() -> None:
    assert checks("nccl-tests/allgather-old-no-redop-markdown.txt") == [
        {"name": "nccl_busbw", "status": "skip", "measured": None, "expected": 460.0,
         "detail": "no all-reduce size >= 1 GiB in the log; rerun with -e 8G (the floors are "
                   "defined at the largest sizes)"}]


def facts(busbw: float, hosts: tuple[str, ...] = ("a",)) -> dict[str, Any]:
    return {"ranks": [{"host": h} for h in hosts],
            "rows": [{"size_bytes": 1 << 30, "out_of_place": {"busbw_gbps": busbw},
                      "in_place": {"busbw_gbps": busbw}}]}


@pytest.mark.parametrize(("busbw", "hosts", "expected"), [
    (470.12345, ("a",), {
        "name": "nccl_busbw", "status": "pass", "measured": 470.123, "expected": 460.0,
        "detail": "busbw 470.123 GB/s at 1 GiB (the largest size) vs the single-node (or "
                  "unknown hosts) floor 460 GB/s"}),
    # At the floor is enough: the floor is a minimum.
    (460.0, ("a",), {
        "name": "nccl_busbw", "status": "pass", "measured": 460.0, "expected": 460.0,
        "detail": "busbw 460 GB/s at 1 GiB (the largest size) vs the single-node (or unknown "
                  "hosts) floor 460 GB/s"}),
    (300.0, ("a", "b"), {
        "name": "nccl_busbw", "status": "fail", "measured": 300.0, "expected": 320.0,
        "detail": "busbw 300 GB/s at 1 GiB (the largest size) vs the multi-node floor 320 GB/s: "
                  "below the profile's floor"}),
])
def test_the_busbw_check_whole(busbw: float, hosts: tuple[str, ...],
                               expected: dict[str, Any]) -> None:
    assert _busbw_check(facts(busbw, hosts), H100) == expected


# --- what inspect accepts: the reader's limits, exactly at them --------------------------------

def _xid_lines(count: int, end: str = "\n") -> str:
    return f"NVRM: Xid (PCI:0000:01:00): 13, pid=1{end}" * count


def test_a_file_of_max_lines_is_read_and_one_more_is_refused(tmp_path: Path) -> None:
    from provisioner.errors import InputError
    from provisioner.inspect import MAX_LINES

    at = tmp_path / "at.log"
    at.write_text(_xid_lines(MAX_LINES))
    assert inspect_file(at)["format"] == "dmesg-xid"
    # CRLF is one line end, a lone CR another (old Mac pastes): still MAX_LINES lines.
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(_xid_lines(MAX_LINES, "\r\n").encode())
    assert inspect_file(crlf)["format"] == "dmesg-xid"
    over = tmp_path / "over.log"
    over.write_bytes(_xid_lines(MAX_LINES - 1).encode() + b"x\ry\n")
    with pytest.raises(InputError) as err:
        inspect_file(over)
    assert str(err.value) == (
        f"{over}: {MAX_LINES + 1} lines, longer than any output of the tools inspect reads "
        f"(limit {MAX_LINES:,}); keep the part that matters, e.g. `grep -E 'NVRM|Xid'` of a "
        "kernel log")


def test_a_file_of_max_bytes_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    from provisioner.errors import InputError
    from provisioner.inspect import MAX_BYTES

    line = "NVRM: Xid (PCI:0000:01:00): 13, pid=1 " + "x" * 4000 + "\n"
    body = line * (MAX_BYTES // len(line))
    at = tmp_path / "at.log"
    at.write_text(body + "y" * (MAX_BYTES - len(body)))
    assert at.stat().st_size == MAX_BYTES
    assert inspect_file(at)["format"] == "dmesg-xid"
    over = tmp_path / "over.log"
    over.write_text(body + "y" * (MAX_BYTES - len(body) + 1))
    with pytest.raises(InputError) as err:
        inspect_file(over)
    assert str(err.value) == f"{over}: larger than 64 MiB, not a tool output"


# --- format detection at its edges ---------------------------------------------------------------

def test_an_nccl_tests_json_needs_both_results_and_config() -> None:
    from provisioner.inspect import _is_nccl_json

    assert _is_nccl_json('  {"results": [], "config": {}}')
    assert not _is_nccl_json('{"results": []}')
    assert not _is_nccl_json('{"config": {}}')
    assert not _is_nccl_json('[{"results": [], "config": {}}]')
    assert not _is_nccl_json('{"results": [], "config": {}')  # cut short: no JSON


@pytest.mark.parametrize(("line", "found"), [
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)", True),
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)   ", True),
    ("GPU 0: (UUID: GPU-1234)", True),
    # The last "(UUID: " counts, and nothing after it may close a bracket before the end.
    ("GPU 0: x (UUID: a) y (UUID: GPU-1234)", True),
    ("GPU 0: NVIDIA H100 (UUID: GPU-1234) extra)", False),
    ("GPU 0: NVIDIA H100 (UUID: GPU-1234", False),
    ("GPU 0: NVIDIA H100 80GB HBM3", False),
])
def test_the_nvlink_gpu_line(line: str, found: bool) -> None:
    from provisioner.inspect import _has_nvlink_gpu_line

    assert _has_nvlink_gpu_line(line) is found  # the last line of a file, no newline
    assert _has_nvlink_gpu_line(f"{line}\n\t Link 0: 26.562 GB/s\n") is found


def test_the_nvlink_gpu_line_is_the_one_its_match_starts() -> None:
    from provisioner.inspect import _has_nvlink_gpu_line

    # A first GPU line without a UUID, then a second with one: each line on its own.
    assert _has_nvlink_gpu_line("GPU 0: NVIDIA H100\nGPU 1: NVIDIA H100 (UUID: GPU-2)\n")
    assert not _has_nvlink_gpu_line("GPU 0: NVIDIA H100\nnot a gpu (UUID: GPU-2)\n")


def test_detection_looks_past_colour_codes_and_leading_blank_lines() -> None:
    from provisioner.inspect import detect_format

    xml = (FIXTURES / "nvidia-smi-xml" / "h100-sxm-8gpu-v13-tabs-ecc-error.xml").read_text()
    assert detect_format("\n\n   \n" + xml) == "nvidia-smi-xml"
    nvlink = (FIXTURES / "nvidia-smi-nvlink" / "h100-sxm-8gpu-link-down.txt").read_text()
    coloured = nvlink.replace("GPU 0:", "\x1b[1mGPU 0:\x1b[0m", 1)
    assert detect_format(coloured) == "nvidia-smi-nvlink"
    # A GPU line alone, without link lines, is no nvlink output.
    with pytest.raises(Exception, match="unrecognised format; expected the saved output of "
                                        "one of: nvidia-smi-xml, "):
        detect_format("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n")


def test_a_topology_matrix_with_tabs_is_detected() -> None:
    from provisioner.inspect import detect_format

    assert detect_format("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n") == "nvidia-smi-topo"
