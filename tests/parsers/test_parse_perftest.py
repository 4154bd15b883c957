"""perftest ib_write_bw parser on outputs in perftest's real format (tests/fixtures/perftest)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gpucluster.perftest import parse_ib_write_bw
from gpucluster.values import ParseError

Fixture = Callable[[str, str], str]


def test_ndr_gpudirect_client(fixture_text: Fixture) -> None:
    facts = parse_ib_write_bw(fixture_text("perftest", "ndr-ib-gdr-8m-client.txt"))
    assert facts["test"] == "RDMA_Write BW Test"
    assert (facts["device"], facts["link_type"], facts["transport"]) == ("mlx5_3", "IB", "IB")
    assert (facts["qps"], facts["mtu"], facts["connection"]) == (1, 4096, "RC")
    assert facts["use_cuda"] is True
    assert facts["unit"] == "Gb/sec"
    assert facts["rows"] == [{"bytes": 8388608, "iterations": 5000, "bw_peak_gbps": 392.41,
                              "bw_avg_gbps": 391.87, "msg_rate_mpps": 0.005839}]
    assert (facts["bw_avg_gbps"], facts["bytes"]) == (391.87, 8388608)
    assert facts["errors"] == []


def test_roce_with_a_warning_inside_the_table(fixture_text: Fixture) -> None:
    facts = parse_ib_write_bw(fixture_text("perftest", "roce-100g-64k-cpufreq-warning.txt"))
    assert facts["link_type"] == "Ethernet" and facts["gid_index"] == 3
    assert facts["use_cuda"] is False
    assert facts["bw_avg_gbps"] == 97.65 and facts["bytes"] == 65536
    assert facts["errors"] == []  # the CPU frequency warning is not a failure


def test_mb_per_second_sweep_is_converted_and_the_largest_size_counts(
        fixture_text: Fixture) -> None:
    facts = parse_ib_write_bw(fixture_text("perftest", "hdr-sweep-mb-sec.txt"))
    assert facts["unit"] == "MB/sec"
    assert [r["bytes"] for r in facts["rows"]] == [2, 65536, 1048576, 8388608]
    # 23424.88 MiB/s = 196.5 Gb/s: an HDR 200 Gb/s port near line rate.
    assert facts["bw_avg_gbps"] == pytest.approx(23424.88 * 2**20 * 8 / 1e9, abs=1e-3)
    assert facts["bytes"] == 8388608


def test_refused_connection_is_reported_without_rows(fixture_text: Fixture) -> None:
    facts = parse_ib_write_bw(fixture_text("perftest", "connect-refused.txt"))
    assert facts["rows"] == [] and facts["bw_avg_gbps"] is None
    assert facts["errors"][0] == "Couldn't connect to 10.1.0.12:18512"
    assert len(facts["errors"]) == 2


@pytest.mark.parametrize("text", ["", "hello\nworld\n", "# size count type\n"])
def test_not_perftest_output(text: str) -> None:
    with pytest.raises(ParseError, match="no perftest banner"):
        parse_ib_write_bw(text)


def test_unknown_unit_is_refused() -> None:
    with pytest.raises(ParseError, match="unknown unit"):
        parse_ib_write_bw(" #bytes     #iterations    BW peak[Kb/sec]    BW average[Kb/sec]\n")
