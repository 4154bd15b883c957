"""The preflight's host firewall reading: what filters incoming traffic in firewalld's active
zones, nft's ruleset (as `nft list ruleset` prints it) and iptables' INPUT chain, and the
warning (never a failure) that names it with what the cluster must reach; a node without a
filtering firewall, or without the tools, passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.module_utils.gpucluster.preflight import (
    parse_firewalld_zones,
    parse_iptables_input,
    parse_nft_filtering,
)
from tests.unit.test_node_preflight_module import (
    DEBIAN_12,
    GPU_POLICY,
    Node,
    by_name,
    replies,
    run,
)

# firewalld's own tables on EL 9 (firewalld 1.x, nftables backend), abridged.
FIREWALLD_NFT = """\
table inet firewalld {
\tchain filter_INPUT {
\t\ttype filter hook input priority filter + 10; policy accept;
\t\tct state { established, related } accept
\t\tiifname "lo" accept
\t\tjump filter_INPUT_ZONES
\t\treject with icmpx admin-prohibited
\t}
\tchain filter_FORWARD {
\t\ttype filter hook forward priority filter + 10; policy accept;
\t\treject with icmpx admin-prohibited
\t}
}
"""
# A hand-written host firewall (Debian's /etc/nftables.conf pattern).
DROP_NFT = """\
table inet filter {
\tchain input {
\t\ttype filter hook input priority filter; policy drop;
\t\tct state established,related accept
\t\ttcp dport 22 accept
\t}
\tchain output {
\t\ttype filter hook output priority filter; policy accept;
\t}
}
"""
# Podman's own NAT tables: nothing hooked on input filters.
PODMAN_NFT = """\
table ip netavark {
\tchain POSTROUTING {
\t\ttype nat hook postrouting priority srcnat; policy accept;
\t\tmeta mark & 0x00002000 == 0x00002000 masquerade
\t}
}
"""
ZONES = "public\n  interfaces: eth0\ntrusted\n  sources: 10.89.0.0/24\n"


def test_nft_input_chains_that_drop_or_reject_are_named() -> None:
    assert parse_nft_filtering(FIREWALLD_NFT) == [
        "inet firewalld filter_INPUT: reject with icmpx admin-prohibited"]
    assert parse_nft_filtering(DROP_NFT) == ["inet filter input: policy drop"]
    assert parse_nft_filtering(PODMAN_NFT) == []
    assert parse_nft_filtering("") == []


def test_iptables_input_policy_and_rules() -> None:
    assert parse_iptables_input("-P INPUT ACCEPT\n-A INPUT -i lo -j ACCEPT\n") == []
    assert parse_iptables_input("-P INPUT DROP\n-A INPUT -p tcp --dport 22 -j ACCEPT\n") == [
        "iptables INPUT: policy drop"]
    assert parse_iptables_input("-P INPUT ACCEPT\n-A INPUT -p tcp -j REJECT --reject-with "
                                "icmp-port-unreachable\n") == [
        "iptables: -A INPUT -p tcp -j REJECT --reject-with icmp-port-unreachable"]


def test_firewalld_trusted_zone_lets_everything_in() -> None:
    assert parse_firewalld_zones(ZONES) == ["public (interfaces: eth0)"]
    assert parse_firewalld_zones("trusted\n  interfaces: eth0\n") == []


FIREWALL_CMD_STATE = "firewall-cmd --state"
ZONES_CMD = "firewall-cmd --get-active-zones"
NFT = "nft list ruleset"
IPTABLES = "iptables -S INPUT"


@pytest.mark.parametrize(("extra", "status", "measured"), [
    ({}, "pass", "none"),
    ({NFT: (0, PODMAN_NFT, ""), IPTABLES: (0, "-P INPUT ACCEPT\n", "")}, "pass", "none"),
    ({FIREWALL_CMD_STATE: (0, "running\n", ""), ZONES_CMD: (0, ZONES, ""),
      NFT: (0, FIREWALLD_NFT, "")}, "warn",
     "firewalld zone public (interfaces: eth0); "
     "nft inet firewalld filter_INPUT: reject with icmpx admin-prohibited"),
    ({FIREWALL_CMD_STATE: (252, "not running\n", "")}, "pass", "none"),
    ({NFT: (0, DROP_NFT, "")}, "warn", "nft inet filter input: policy drop"),
    ({IPTABLES: (0, "-P INPUT DROP\n", "")}, "warn", "iptables INPUT: policy drop"),
], ids=["no-tools", "podman-nat-only", "firewalld-public", "firewalld-stopped", "nft-drop",
        "iptables-drop"])
def test_a_filtering_firewall_warns_and_names_what_the_cluster_must_reach(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, extra: dict[str, tuple[int, str, str]],
        status: str, measured: str) -> None:
    node = Node(tmp_path, {**replies(), **extra})
    node.os_release(DEBIAN_12)
    node.headers_built()
    node.secure_boot(b"\x06\x00\x00\x00\x00")
    result = run(monkeypatch, node, cluster_ports=["slurmd 6818", "smoke job 29500"],
                 **GPU_POLICY)
    check = by_name(result)["host_firewall"]
    assert (check["status"], check["measured"]) == (status, measured)
    assert result["failed_checks"] == []  # a warning, never a failure
    if status == "warn":
        assert "reach slurmd 6818, smoke job 29500" in check["detail"]
        assert "--zone=trusted --add-source" in check["detail"]


def test_a_ruleset_that_cannot_be_read_is_said(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    node = Node(tmp_path, {**replies(), NFT: (1, "", "Operation not permitted\n")})
    node.os_release(DEBIAN_12)
    node.headers_built()
    node.secure_boot(b"\x06\x00\x00\x00\x00")
    check = by_name(run(monkeypatch, node, **GPU_POLICY))["host_firewall"]
    assert check["status"] == "pass"
    assert check["detail"] == ("no host firewall filters incoming traffic "
                               "(not read: nft list ruleset)")
