"""PFC and ECN of RoCE ports (module_utils roce_qos): the parsers of `dcb pfc show`, `mlnx_qos -i`
and mlx5's ECN enable files, the reader on a sysfs tree with a scripted command runner, and the
report-only checks (pass, warn, skip, each naming its port).

No capture of these outputs from a real node is at hand: the texts below follow the tools' own
sources and documentation, as cited in roce_qos.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from gpucluster.roce_qos import (
    parse_dcb_pfc,
    parse_ecn_enable,
    parse_mlnx_qos_pfc,
    port_netdev,
    read_pfc,
    read_roce_qos,
    roce_qos_checks,
)
from gpucluster.validate import evaluate
from gpucluster.values import ParseError

# dcb-pfc(8), EXAMPLE & USAGE, "Show what was set" (iproute2): after `prio-pfc all:off 6:on 7:on
# delay 0x1000`. dcb_pfc_print ends every item with a space.
DCB_MAN_EXAMPLE = ("pfc-cap 8 macsec-bypass off delay 4096 \n"
                   "prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:on 7:on \n")
# With -s (dcb_pfc_print_requests / _indications): the counters follow.
DCB_WITH_STATS = ("pfc-cap 8 macsec-bypass off delay 0 \n"
                  "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off \n"
                  "requests 0:0 1:0 2:0 3:1532 4:0 5:0 6:0 7:0 \n"
                  "indications 0:0 1:0 2:0 3:98 4:0 5:0 6:0 7:0 \n")
DCB_ALL_OFF = ("pfc-cap 8 macsec-bypass off delay 0 \n"
               "prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:off 7:off \n")

# mlnx_qos -i as Mellanox/mlnx-tools python/mlnx_qos pretty_print lays it out (tabs, columns of
# four, each value followed by three spaces), with a receive buffer line and a DSCP trust state.
ROW = "   ".join
MLNX_QOS = (
    "DCBX mode: OS controlled\nPriority trust state: dscp\ndscp2prio mapping:\n"
    "\tprio:0 dscp:07,06,05,04,03,02,01,00,\n\tprio:3 dscp:31,30,29,28,27,26,25,24,\n"
    "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,max_buffer_size=262016\n"
    "Cable len: 7\nPFC configuration:\n"
    "\tpriority    0   1   2   3   4   5   6   7\n"
    f"\tenabled     {ROW('00010000')}   \n"
    f"\tbuffer      {ROW('00010000')}   \n"
    "tc: 0 ratelimit: unlimited, tsa: vendor\n\t priority:  1\n"
    "tc: 3 ratelimit: unlimited, tsa: ets, bw: 50%\n\t priority:  3\n")
# The same section with the whitespace collapsed, as users post it (an MLNX_OFED 4.2 output on
# a web page), PFC on 0, 2, 6 and 7, and without the buffer row.
MLNX_QOS_FLAT = ("DCBX mode: OS controlled\nPriority trust state: dscp\nCable len: 10\n"
                 "PFC configuration:\npriority 0 1 2 3 4 5 6 7\nenabled 1 0 1 0 0 0 1 1\n\n"
                 "tc: 0 ratelimit: unlimited, tsa: ets, bw: 10%\npriority: 1\n")


def test_dcb_pfc_show_gives_the_priorities_with_pfc_on() -> None:
    assert parse_dcb_pfc(DCB_MAN_EXAMPLE) == [6, 7]
    assert parse_dcb_pfc(DCB_WITH_STATS) == [3]
    assert parse_dcb_pfc(DCB_ALL_OFF) == []
    # `dcb pfc show dev X prio-pfc` prints that line alone.
    assert parse_dcb_pfc("prio-pfc 0:on 1:off 2:off 3:off 4:off 5:off 6:off 7:off \n") == [0]


@pytest.mark.parametrize("text", ["", "pfc-cap 8 macsec-bypass off delay 0 \n",
                                  "prio-pfc 0:maybe 1:off\n", "prio-pfc x:on\n"])
def test_dcb_output_without_a_readable_prio_pfc_line_is_refused(text: str) -> None:
    with pytest.raises(ParseError):
        parse_dcb_pfc(text)


def test_mlnx_qos_gives_the_priorities_with_pfc_on() -> None:
    assert parse_mlnx_qos_pfc(MLNX_QOS) == [3]
    assert parse_mlnx_qos_pfc(MLNX_QOS_FLAT) == [0, 2, 6, 7]
    # lldpad's warning comes first when it runs (mlnx_qos prints it before the settings).
    warned = ("****** WARNING: lldpad service is running and may overwrite your settings "
              "******\n\n" + MLNX_QOS)
    assert parse_mlnx_qos_pfc(warned) == [3]


@pytest.mark.parametrize("text", [
    "", "DCBX mode: OS controlled\nCable len: 7\n",
    "PFC configuration:\n\tpriority    0   1   2\n\tenabled     0   1\n",
    "PFC configuration:\n\tpriority    0   1\n\tenabled     0   2\n",
])
def test_mlnx_qos_without_its_pfc_rows_is_refused(text: str) -> None:
    with pytest.raises(ParseError):
        parse_mlnx_qos_pfc(text)


def test_an_ecn_enable_file_reads_0_or_1() -> None:
    assert parse_ecn_enable("1\n") is True
    assert parse_ecn_enable("0\n") is False
    for bad in ("", "on", "2\n"):  # empty: the driver's firmware query failed
        with pytest.raises(ParseError):
            parse_ecn_enable(bad)


# --- the reader, on a tree ---------------------------------------------------------------------


def roce_port(ib: Path, device: str, netdev: str | None, layer: str = "Ethernet") -> None:
    port = ib / device / "ports" / "1"
    port.mkdir(parents=True)
    (port / "link_layer").write_text(f"{layer}\n")
    if netdev:
        (port / "gid_attrs" / "ndevs").mkdir(parents=True)
        (port / "gid_attrs" / "ndevs" / "0").write_text(f"{netdev}\n")


def ecn_files(net: Path, netdev: str, np_on: list[int], rp_on: list[int]) -> None:
    for point, on in (("roce_np", np_on), ("roce_rp", rp_on)):
        enable = net / netdev / "ecn" / point / "enable"
        enable.mkdir(parents=True)
        for prio in range(8):
            (enable / str(prio)).write_text("1\n" if prio in on else "0\n")


Runner = Callable[[list[str]], tuple[str | None, object]]


def runner(replies: dict[str, str], missing: tuple[str, ...] = ()) -> tuple[Runner, list[str]]:
    """A command runner as gpu_node_facts passes it: (output, None), or (None, why) for a
    tool that is not installed (``missing``) or a command that fails (no scripted reply; the
    error is a list of lines, as run_tool gives it)."""
    called: list[str] = []

    def run(args: list[str]) -> tuple[str | None, object]:
        line = " ".join(args)
        called.append(line)
        if args[0] in missing:
            return None, f"{args[0]} not found"
        if line in replies:
            return replies[line], None
        return None, ["Attribute read: Operation not supported"]

    return run, called


def test_the_reader_finds_each_roce_ports_interface_and_reads_ecn_and_pfc(tmp_path: Path) -> None:
    ib, net = tmp_path / "ib", tmp_path / "net"
    roce_port(ib, "mlx5_0", "ens1f0np0")
    roce_port(ib, "mlx5_1", "ens1f1np1")
    roce_port(ib, "mlx5_2", None, layer="InfiniBand")  # not RoCE: not read
    ecn_files(net, "ens1f0np0", [3], [3])
    ecn_files(net, "ens1f1np1", [], [])
    run, called = runner({"dcb pfc show dev ens1f0np0": DCB_WITH_STATS,
                          "mlnx_qos -i ens1f1np1": MLNX_QOS})
    facts = read_roce_qos(str(ib), str(net), run)
    by_name = {p["name"]: p for p in facts["ports"]}
    assert sorted(by_name) == ["mlx5_0/1", "mlx5_1/1"]
    first, second = by_name["mlx5_0/1"], by_name["mlx5_1/1"]
    assert (first["netdev"], first["netdev_source"]) == ("ens1f0np0", "gid_attrs/ndevs")
    assert first["ecn"] == {"roce_np": [3], "roce_rp": [3]}
    assert (first["pfc"], first["pfc_source"]) == ([3], "dcb")
    # dcb failed on the second: mlnx_qos answered.
    assert (second["pfc"], second["pfc_source"]) == ([3], "mlnx_qos")
    assert second["ecn"] == {"roce_np": [], "roce_rp": []}
    assert called == ["dcb pfc show dev ens1f0np0", "dcb pfc show dev ens1f1np1",
                      "mlnx_qos -i ens1f1np1"]


def test_without_a_gid_entry_the_pci_functions_one_interface_is_used(tmp_path: Path) -> None:
    ib = tmp_path / "ib"
    roce_port(ib, "mlx5_0", None)
    (ib / "mlx5_0" / "device" / "net" / "enp65s0f0np0").mkdir(parents=True)
    assert port_netdev(str(ib), "mlx5_0", 1) == ("enp65s0f0np0", "device/net", None)
    (ib / "mlx5_0" / "device" / "net" / "enp65s0f1np1").mkdir()
    netdev, source, why = port_netdev(str(ib), "mlx5_0", 1)
    assert netdev is None and source is None
    assert why == ("no GID entry names its interface and its PCI function lists 2 "
                   "(enp65s0f0np0, enp65s0f1np1)")


def test_what_cannot_be_read_is_said(tmp_path: Path) -> None:
    ib, net = tmp_path / "ib", tmp_path / "net"
    roce_port(ib, "mlx5_0", "ens1f0np0")
    roce_port(ib, "mlx5_1", None)
    (net / "ens1f0np0").mkdir(parents=True)  # an interface without ecn/ (no MLNX_OFED driver)
    run, _ = runner({}, missing=("dcb", "mlnx_qos"))
    facts = read_roce_qos(str(ib), str(net), run)
    port = facts["ports"][0]
    assert port["ecn"] is None and port["pfc"] is None
    assert port["ecn_error"] == f"no {net}/ens1f0np0/ecn (MLNX_OFED's mlx5 driver makes it)"
    assert port["pfc_error"] == "dcb not found; mlnx_qos not found"
    bare = facts["ports"][1]
    assert bare["netdev"] is None and "its PCI function lists none" in bare["netdev_error"]
    assert read_roce_qos(str(tmp_path / "none"), str(net), run) == {
        "error": f"{tmp_path / 'none'} does not exist (no RDMA devices or driver)"}


def test_an_unreadable_ecn_file_leaves_ecn_unknown(tmp_path: Path) -> None:
    ib, net = tmp_path / "ib", tmp_path / "net"
    roce_port(ib, "mlx5_0", "ens1f0np0")
    ecn_files(net, "ens1f0np0", [3], [3])
    (net / "ens1f0np0" / "ecn" / "roce_rp" / "enable" / "5").write_text("")
    run, _ = runner({"dcb pfc show dev ens1f0np0": DCB_ALL_OFF})
    [port] = read_roce_qos(str(ib), str(net), run)["ports"]
    assert port["ecn"] is None
    assert port["ecn_error"].endswith("roce_rp/enable/5: ECN enable file reads '', not 0 or 1")


def test_a_tool_that_prints_something_else_is_named() -> None:
    run, _ = runner({"dcb pfc show dev eth2": "garbage\n", "mlnx_qos -i eth2": "garbage\n"})
    assert read_pfc("eth2", run) == (
        None, None, "dcb: no prio-pfc line in dcb pfc show's output; mlnx_qos: no 'PFC "
        "configuration:' section in mlnx_qos output")
    failing, _ = runner({}, missing=("mlnx_qos",))
    assert read_pfc("eth2", failing) == (
        None, None, "dcb: Attribute read: Operation not supported; mlnx_qos not found")


# --- the checks --------------------------------------------------------------------------------


def port(name: str = "mlx5_0", pfc: list[int] | None = None,
         ecn: dict[str, list[int]] | None = None, **more: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "name": f"{name}/1", "device": name, "port": 1, "netdev": "ens1f0np0",
        "netdev_source": "gid_attrs/ndevs", "netdev_error": None, "pfc": pfc,
        "pfc_source": None if pfc is None else "dcb",
        "pfc_error": "dcb not found; mlnx_qos not found" if pfc is None else None,
        "ecn": ecn, "ecn_error": "no /sys/class/net/ens1f0np0/ecn (MLNX_OFED's mlx5 driver "
                                 "makes it)" if ecn is None else None}
    entry.update(more)
    return entry


ON3 = {"roce_np": [3], "roce_rp": [3]}
OFF = {"roce_np": [], "roce_rp": []}
NODE_ONLY = "judged on the node only: the switches' PFC and ECN are not read"


@pytest.mark.parametrize(("entry", "status", "measured", "detail"), [
    (port(pfc=[3], ecn=ON3), "pass", "PFC 3; ECN 3",
     f"mlx5_0/1 (ens1f0np0): PFC on priority 3 (dcb); ECN on priority 3; {NODE_ONLY}"),
    (port(pfc=[], ecn=ON3), "pass", "PFC off; ECN 3",
     f"mlx5_0/1 (ens1f0np0): PFC off on every priority (dcb); ECN on priority 3; {NODE_ONLY}"),
    (port(pfc=[3, 4], ecn=None), "pass", "PFC 3,4; ECN not read",
     "mlx5_0/1 (ens1f0np0): PFC on priority 3,4 (dcb); ECN not read (no "
     f"/sys/class/net/ens1f0np0/ecn (MLNX_OFED's mlx5 driver makes it)); {NODE_ONLY}"),
    (port(pfc=[], ecn=OFF), "warn", "PFC off; ECN off",
     "mlx5_0/1 (ens1f0np0): PFC off on every priority (dcb); ECN off on every priority: "
     "lossless RoCE usually needs PFC or ECN on the priority its traffic uses; " + NODE_ONLY),
    # ECN at one end only is no DCQCN: with PFC off, a warning that says which end.
    (port(pfc=[], ecn={"roce_np": [3], "roce_rp": []}), "warn", "PFC off; ECN roce_np 3, roce_rp off",
     "mlx5_0/1 (ens1f0np0): PFC off on every priority (dcb); ECN at one end only (roce_np 3, "
     "roce_rp off): lossless RoCE usually needs PFC or ECN"),
    (port(pfc=None, ecn=OFF), "skip", "PFC not read; ECN off",
     "mlx5_0/1 (ens1f0np0): PFC not read (dcb not found; mlnx_qos not found); ECN off on every "
     f"priority: cannot tell whether the port is lossless; {NODE_ONLY}"),
    (port(pfc=None, ecn=None), "skip", "PFC not read; ECN not read",
     "mlx5_0/1 (ens1f0np0): PFC not read (dcb not found; mlnx_qos not found); ECN not read (no "
     "/sys/class/net/ens1f0np0/ecn"),
    (port(netdev=None, netdev_source=None, netdev_error="no GID entry names its interface and "
          "its PCI function lists none"), "skip", None,
     "mlx5_0/1: its network interface was not found (no GID entry names its interface and its "
     "PCI function lists none): PFC and ECN not read"),
])
def test_each_roce_port_is_reported_by_name(entry: dict[str, object], status: str,
                                            measured: str | None, detail: str) -> None:
    [check] = roce_qos_checks({"ib_root": "/sys/class/infiniband", "ports": [entry]})
    assert check["name"] == "roce_qos_mlx5_0_port1"
    assert (check["status"], check["measured"]) == (status, measured)
    assert check["expected"] == "PFC or ECN on a priority"
    assert check["detail"].startswith(detail), check["detail"]


def test_a_node_without_roce_ports_or_sysfs_is_skipped_once() -> None:
    [none] = roce_qos_checks({"ib_root": "/sys/class/infiniband", "ports": []})
    assert (none["name"], none["status"]) == ("roce_qos", "skip")
    assert none["detail"] == ("no RoCE (Ethernet link layer) port under /sys/class/infiniband: "
                              "PFC and ECN not read")
    [missing] = roce_qos_checks({"error": "/x does not exist (no RDMA devices or driver)"})
    assert missing["detail"] == ("PFC and ECN not read: /x does not exist (no RDMA devices or "
                                 "driver)")


def test_validate_reports_every_port_and_never_fails_on_it() -> None:
    facts = {"roce_qos": {"ib_root": "/sys/class/infiniband", "ports": [
        port("mlx5_0", pfc=[3], ecn=ON3), port("mlx5_1", pfc=[], ecn=OFF)]}}
    checks = {c["name"]: c["status"] for c in evaluate(facts, {"fabric": "roce"})}
    assert checks == {"roce_qos_mlx5_0_port1": "pass", "roce_qos_mlx5_1_port1": "warn"}
    assert evaluate({}, {"fabric": "roce"}) == []  # not read: nothing judged
