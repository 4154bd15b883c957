"""inspect's bandwidth verdict against a profile's floor."""

from __future__ import annotations

import pytest

from provisioner.inspect import _busbw_check
from provisioner.profiles import load_profiles


def facts(busbw: float, hosts: tuple[str, ...] = ("a",), size: int = 1 << 30) -> dict[str, object]:
    return {"ranks": [{"host": h} for h in hosts],
            "rows": [{"size_bytes": size, "out_of_place": {"busbw_gbps": busbw},
                      "in_place": {"busbw_gbps": busbw}}]}


@pytest.mark.parametrize(("busbw", "status"), [(100.0, "fail"), (1000.0, "pass")])
def test_below_the_floor_fails_above_passes(busbw: float, status: str) -> None:
    profile = load_profiles()["hgx-h100-8gpu"]
    check = _busbw_check(facts(busbw), profile)
    assert check["status"] == status and check["measured"] == busbw
    assert check["expected"] == profile.busbw_floor_intra_gbps
    assert check["detail"].endswith("below the profile's floor") is (status == "fail")


def test_multi_node_uses_the_inter_node_floor_and_small_sizes_skip() -> None:
    profile = load_profiles()["hgx-h100-8gpu"]
    check = _busbw_check(facts(profile.busbw_floor_inter_gbps - 1, ("a", "b")), profile)
    assert (check["status"], check["expected"]) == ("fail", profile.busbw_floor_inter_gbps)
    assert _busbw_check(facts(1e6, size=1 << 20), profile)["status"] == "skip"
