"""The gpu_node_facts module end to end against a scripted node: what it reads (nvidia-smi XML,
NVLink status, topology, /sys/class/infiniband, the kernel log, dcgmi diag), how a missing
tool, a failing command or garbage output lands in ``facts``, and which checks pass or fail.

Only AnsibleModule is replaced (the boundary): its params, get_bin_path and run_command come
from a ``Node`` that lists the installed tools and what each command line prints."""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any

import pytest

from tests.unit.collection_module import load_module

ROOT = Path(__file__).resolve().parents[2]


gnf: Any = load_module("gpu_node_facts")

Reply = tuple[int, str, str]


class Exited(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("exit_json")
        self.result = result


class Failed(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["msg"])
        self.result = result


class Node:
    """The tools a node has and what each command line prints (keyed by the tool's name and
    its arguments, ``"nvidia-smi -q -x"``). A tool with no scripted line can be installed
    through ``tools``; a command nobody scripted fails the test."""

    def __init__(self, replies: dict[str, Reply], tools: set[str] | None = None) -> None:
        self.replies = replies
        self.tools = {line.split()[0] for line in replies} if tools is None else tools
        self.commands: list[str] = []


def run(monkeypatch: pytest.MonkeyPatch, node: Node, check_mode: bool = False,
        **params: Any) -> dict[str, Any]:
    """main() with a fake AnsibleModule; returns what it passed to exit_json."""

    class FakeAnsibleModule:
        def __init__(self, argument_spec: dict[str, dict[str, Any]],
                     supports_check_mode: bool = False) -> None:
            assert not set(params) - set(argument_spec), "unknown option"
            assert all(k in params for k, s in argument_spec.items() if s.get("required"))
            self.params: dict[str, Any] = {k: s.get("default")
                                           for k, s in argument_spec.items()}
            self.params.update(params)
            for key, spec in argument_spec.items():
                if "choices" in spec and isinstance(self.params[key], list):
                    assert set(self.params[key]) <= set(spec["choices"])
            assert supports_check_mode or not check_mode
            self.check_mode = check_mode

        def get_bin_path(self, name: str, required: bool = False) -> str | None:
            return f"/usr/bin/{name}" if name in node.tools else None

        def run_command(self, args: list[str], **_kw: Any) -> Reply:
            assert args[0] == f"/usr/bin/{PurePath(args[0]).name}"
            line = " ".join([PurePath(args[0]).name, *args[1:]])
            node.commands.append(line)
            assert line in node.replies, f"unexpected command: {line}"
            return node.replies[line]

        def exit_json(self, **result: Any) -> None:
            raise Exited(result)

        def fail_json(self, **result: Any) -> None:
            raise Failed(result)

    monkeypatch.setattr(gnf, "AnsibleModule", FakeAnsibleModule)
    with pytest.raises(Exited) as done:
        gnf.main()
    return done.value.result


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in result["checks"]}


# --- what the commands print (hand-written, shaped like driver 580 on an H100 SXM node) ---

H100 = "NVIDIA H100 80GB HBM3"
BUSES = ("18", "2A")


def gpu(index: int, name: str = H100, persistence: str = "Enabled", ecc: str = "Enabled",
        volatile_unc: str = "0", aggregate_unc: str = "0", remap_pending: str = "No",
        gen: tuple[int, int] = (5, 5), width: tuple[int, int] = (16, 16)) -> str:
    bus = BUSES[index]
    return f"""\
\t<gpu id="00000000:{bus}:00.0">
\t\t<product_name>{name}</product_name>
\t\t<persistence_mode>{persistence}</persistence_mode>
\t\t<uuid>GPU-5c1e0a2b-77d4-4f2e-9c1a-00000000000{index}</uuid>
\t\t<minor_number>{index}</minor_number>
\t\t<pci>
\t\t\t<pci_bus_id>00000000:{bus}:00.0</pci_bus_id>
\t\t\t<pci_gpu_link_info>
\t\t\t\t<pcie_gen>
\t\t\t\t\t<max_link_gen>{gen[1]}</max_link_gen>
\t\t\t\t\t<current_link_gen>{gen[0]}</current_link_gen>
\t\t\t\t</pcie_gen>
\t\t\t\t<link_widths>
\t\t\t\t\t<max_link_width>{width[1]}x</max_link_width>
\t\t\t\t\t<current_link_width>{width[0]}x</current_link_width>
\t\t\t\t</link_widths>
\t\t\t</pci_gpu_link_info>
\t\t</pci>
\t\t<ecc_mode>
\t\t\t<current_ecc>{ecc}</current_ecc>
\t\t\t<pending_ecc>{ecc}</pending_ecc>
\t\t</ecc_mode>
\t\t<ecc_errors>
\t\t\t<volatile>
\t\t\t\t<sram_correctable>0</sram_correctable>
\t\t\t\t<sram_uncorrectable_parity>0</sram_uncorrectable_parity>
\t\t\t\t<sram_uncorrectable_secded>0</sram_uncorrectable_secded>
\t\t\t\t<dram_correctable>0</dram_correctable>
\t\t\t\t<dram_uncorrectable>{volatile_unc}</dram_uncorrectable>
\t\t\t</volatile>
\t\t\t<aggregate>
\t\t\t\t<sram_correctable>0</sram_correctable>
\t\t\t\t<sram_uncorrectable_parity>0</sram_uncorrectable_parity>
\t\t\t\t<sram_uncorrectable_secded>0</sram_uncorrectable_secded>
\t\t\t\t<dram_correctable>3</dram_correctable>
\t\t\t\t<dram_uncorrectable>{aggregate_unc}</dram_uncorrectable>
\t\t\t</aggregate>
\t\t</ecc_errors>
\t\t<remapped_rows>
\t\t\t<remapped_row_corr>0</remapped_row_corr>
\t\t\t<remapped_row_unc>0</remapped_row_unc>
\t\t\t<remapped_row_pending>{remap_pending}</remapped_row_pending>
\t\t\t<remapped_row_failure>No</remapped_row_failure>
\t\t</remapped_rows>
\t</gpu>
"""


def smi_xml(*gpus: str, driver: str = "580.95.05") -> str:
    return ('<?xml version="1.0" ?>\n'
            '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
            "<nvidia_smi_log>\n"
            "\t<timestamp>Tue Nov 25 10:11:02 2025</timestamp>\n"
            f"\t<driver_version>{driver}</driver_version>\n"
            "\t<cuda_version>13.0</cuda_version>\n"
            f"\t<attached_gpus>{len(gpus)}</attached_gpus>\n"
            + "".join(gpus) + "</nvidia_smi_log>\n")


def nvlink(down: dict[int, list[int]] | None = None, slow: dict[int, list[int]] | None = None,
           links: int = 18) -> str:
    lines = []
    for index in range(2):
        lines.append(f"GPU {index}: {H100} (UUID: GPU-5c1e0a2b-77d4-4f2e-9c1a-00000000000{index})")
        for link in range(links):
            if link in (down or {}).get(index, []):
                value = "<inactive>"
            elif link in (slow or {}).get(index, []):
                value = "13.281 GB/s"
            else:
                value = "26.562 GB/s"
            lines.append(f"\t Link {link}: {value}")
    return "\n".join(lines) + "\n"


TOPO = """\
\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tPXB\tSYS\t0-55,112-167\t0\t\tN/A
GPU1\tNV18\t X \tSYS\tPXB\t56-111,168-223\t1\t\tN/A
NIC0\tPXB\tSYS\t X \tSYS
NIC1\tSYS\tPXB\tSYS\t X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""

JOURNAL_CLEAN = """\
Nov 25 10:09:40 gpu-a kernel: nvidia-nvlink: Nvlink Core is being initialized, major device number 510
Nov 25 10:09:41 gpu-a kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.95.05
"""
XID_79 = ("Nov 25 10:31:07 gpu-a kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', "
          "name=<unknown>, GPU has fallen off the bus.\n")
XID_13 = ("Nov 25 10:20:15 gpu-a kernel: NVRM: Xid (PCI:0000:18:00): 13, pid=40213, "
          "name=python3, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range "
          "Address\n")

DCGM_HEAD = """\
Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.2.3                                          |
| Driver Version Detected   | 580.95.05                                      |
|-----  Deployment  --------+------------------------------------------------|
| Software                  | Pass                                           |
| Environment Variables     | Pass                                           |
"""
DCGM_FOOT = "+---------------------------+------------------------------------------------+\n"
DCGM_PASS = DCGM_HEAD + DCGM_FOOT
DCGM_MEMORY_FAIL = DCGM_HEAD + """\
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - GPU: 0                                  |
|                           | Fail - GPU: 1                                  |
| Warning                   | GPU 1 Error using CUDA API cudaMalloc: out of  |
|                           |  memory                                        |
""" + DCGM_FOOT

EXPECTED: dict[str, Any] = {
    "gpu_count": 2, "gpu_model": H100, "nvlink_links_per_gpu": 18,
    "nvlink_link_speed_gbps": 26.562, "ib_hcas": 2, "ib_rate_gbps": 400,
    "fabric": "infiniband", "driver_version": "580.95.05",
}


def expected(**over: Any) -> dict[str, Any]:
    return {**EXPECTED, **over}


def replies(**over: Reply) -> dict[str, Reply]:
    """The healthy node's command lines; ``over`` replaces one, named smi, nvlink, topo,
    journal or dcgm."""
    base: dict[str, Reply] = {
        "nvidia-smi -q -x": (0, smi_xml(gpu(0), gpu(1)), ""),
        "nvidia-smi nvlink -s": (0, nvlink(), ""),
        "nvidia-smi topo -m": (0, TOPO, ""),
        "journalctl -k -b --no-pager -q": (0, JOURNAL_CLEAN, ""),
        "dcgmi diag -r 1": (0, DCGM_PASS, ""),
    }
    keys = dict(zip(("smi", "nvlink", "topo", "journal", "dcgm"), base, strict=True))
    for short, reply in over.items():
        base[keys[short]] = reply
    return base


def ib_sysfs(root: Path, ports: dict[str, tuple[str, str, str, str]]) -> str:
    """A /sys/class/infiniband tree: device -> (state, phys_state, rate, link_layer) of port 1."""
    root.mkdir(parents=True, exist_ok=True)
    for device, (state, phys, rate, layer) in ports.items():
        (root / device).mkdir()
        (root / device / "fw_ver").write_text("28.43.1014\n")
        port = root / device / "ports" / "1"
        port.mkdir(parents=True)
        for name, value in (("state", state), ("phys_state", phys), ("rate", rate),
                            ("link_layer", layer)):
            (port / name).write_text(value + "\n")
        if layer == "Ethernet":  # a RoCE port's GID table: index 1 is RoCE v2 over IPv4
            (port / "gids").mkdir()
            (port / "gid_attrs" / "types").mkdir(parents=True)
            for index, (gid, kind) in enumerate((
                    ("fe80:0000:0000:0000:a288:c2ff:fe3b:506a", "IB/RoCE v1"),
                    ("0000:0000:0000:0000:0000:ffff:0ac8:010a", "RoCE v2"))):
                (port / "gids" / str(index)).write_text(gid + "\n")
                (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
            (port / "gids" / "2").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    return str(root)


NDR_UP = ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand")


@pytest.fixture
def ib_ok(tmp_path: Path) -> str:
    return ib_sysfs(tmp_path / "infiniband", {"mlx5_0": NDR_UP, "mlx5_1": NDR_UP})


def open_banner(ib_root: str) -> str:
    """A loaded open kernel module's /proc/driver/nvidia/version beside the IB tree."""
    banner = Path(ib_root).parent / "nvidia-version"
    banner.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  "
                      "Release Build  (dvs-builder@U22-I3-AF03-09-1)\n")
    return str(banner)


# --- the whole node ---

def test_a_healthy_node_passes_every_check_and_reads_each_subset_once(
        monkeypatch: pytest.MonkeyPatch, ib_ok: str) -> None:
    node = Node(replies())
    result = run(monkeypatch, node, expected=EXPECTED, ib_sysfs_root=ib_ok,
                 pci_sysfs_root=ib_ok + "/no-pci", nvidia_proc_version=open_banner(ib_ok))
    assert result["changed"] is False
    assert result["failed_checks"] == []
    statuses = {c["name"]: c["status"] for c in result["checks"]}
    assert statuses == {
        "gpu_count": "pass", "gpu_model": "pass", "driver_version": "pass",
        "gpu0_memory": "pass", "gpu0_pcie": "pass", "gpu1_memory": "pass", "gpu1_pcie": "pass",
        "persistence_mode": "pass", "gpu0_nvlink": "pass", "gpu1_nvlink": "pass",
        "ib_mlx5_0_port1": "pass", "ib_mlx5_1_port1": "pass", "ib_ports": "pass",
        "xid": "pass", "dcgm_diag": "pass", "gpudirect": "pass",
        # These ports have no counters/ directory, and nothing is known of an earlier reading.
        "ib_mlx5_0_port1_errors": "skip", "ib_mlx5_1_port1_errors": "skip"}
    assert node.commands == ["nvidia-smi -q -x", "nvidia-smi nvlink -s", "nvidia-smi topo -m",
                             "journalctl -k -b --no-pager -q", "dcgmi diag -r 1"]
    facts = result["facts"]
    assert set(facts) == {"gpu", "nvlink", "topo", "ib", "xid", "dcgm", "counters", "gpudirect"}
    # This machine has no CUDA driver library: the open module on its kernel decides.
    assert facts["gpudirect"]["kernel_module"] == "open"
    assert [g["bus_id"] for g in facts["gpu"]["gpus"]] == ["0000:18:00.0", "0000:2a:00.0"]
    assert facts["gpu"]["driver_version"] == "580.95.05"
    assert [g["links_up"] for g in facts["nvlink"]["gpus"]] == [18, 18]
    assert facts["topo"]["nvlink_pairs"] == {"GPU0-GPU1": 18}
    assert facts["topo"]["nic_legend"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    assert [d["name"] for d in facts["ib"]["devices"]] == ["mlx5_0", "mlx5_1"]
    assert facts["xid"] == {"events": []}
    assert facts["dcgm"]["level"] == 1 and facts["dcgm"]["failed_tests"] == []


def test_check_mode_reads_and_judges_exactly_as_a_normal_run(
        monkeypatch: pytest.MonkeyPatch, ib_ok: str) -> None:
    runs = {}
    for check_mode in (False, True):
        node = Node(replies(smi=(0, smi_xml(gpu(0)), "")))
        result = run(monkeypatch, node, check_mode=check_mode, expected=EXPECTED,
                     ib_sysfs_root=ib_ok, pci_sysfs_root=ib_ok + "/no-pci",
                     nvidia_proc_version=open_banner(ib_ok))
        del result["facts"]["counters"]["now"]["time"]  # when each run read the counters
        runs[check_mode] = (result, node.commands)
    assert runs[True] == runs[False]
    result, commands = runs[True]
    assert result["changed"] is False
    assert len(commands) == 5  # read-only: check mode runs every reader
    assert result["failed_checks"] == ["gpu_count"]
    assert by_name(result)["gpu_count"]["detail"].startswith("1 of 2 GPUs visible")


def test_only_the_asked_subsets_are_read_and_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(replies())
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["gpu", "xid"],
                 ib_sysfs_root="/nonexistent")
    assert set(result["facts"]) == {"gpu", "xid"}
    assert node.commands == ["nvidia-smi -q -x", "journalctl -k -b --no-pager -q"]
    names = set(by_name(result))
    assert "xid" in names and "gpu_count" in names
    assert not names & {"ib_ports", "dcgm_diag", "gpu0_nvlink", "nvlink"}


# --- nvidia-smi: missing, failing, empty, garbage ---

def test_without_nvidia_smi_every_gpu_subset_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(replies(), tools={"journalctl", "dcgmi"})
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["gpu", "nvlink", "topo"])
    facts = result["facts"]
    assert facts["gpu"] == facts["nvlink"] == facts["topo"] == {"error": "nvidia-smi not found"}
    assert node.commands == []
    assert result["failed_checks"] == ["gpu_visible", "nvlink"]
    checks = by_name(result)
    assert checks["gpu_visible"]["detail"] == "cannot read the GPUs: nvidia-smi not found"
    assert checks["nvlink"]["detail"] == "cannot read NVLink status: nvidia-smi not found"


def test_a_driver_that_is_not_loaded_reports_nvidia_smis_last_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    message = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n")
    node = Node(replies(smi=(9, message, "")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["gpu"])
    assert result["facts"]["gpu"] == {"error": message.strip()}
    check = by_name(result)["gpu_visible"]
    assert check["status"] == "fail" and check["expected"] == 2
    assert "couldn't communicate with the NVIDIA driver" in check["detail"]


def test_a_failing_command_keeps_the_last_line_of_stderr_over_stdout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    err = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95\n"
    node = Node(replies(smi=(18, "partial output\n", err)))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["gpu"])
    assert result["facts"]["gpu"] == {"error": "NVML library version: 580.95"}


def test_a_failing_command_without_output_reports_its_exit_code(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(replies(smi=(6, "", "  \n")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["gpu"])
    assert result["facts"]["gpu"] == {"error": "exit 6"}
    assert result["failed_checks"] == ["gpu_visible"]


@pytest.mark.parametrize(("output", "why"), [
    ("", "parse failed: not well-formed XML"),
    ("No devices were found\n", "parse failed: not well-formed XML"),
    ("<html><body>proxy error</body></html>",
     "parse failed: root element is <html>, expected <nvidia_smi_log>"),
], ids=["empty", "text", "other-xml"])
def test_output_that_is_not_nvidia_smi_xml_is_an_error_not_a_crash(
        monkeypatch: pytest.MonkeyPatch, output: str, why: str) -> None:
    node = Node(replies(smi=(0, output, "")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["gpu", "nvlink"])
    assert result["facts"]["gpu"]["error"].startswith(why)
    assert by_name(result)["gpu_visible"]["detail"].startswith("cannot read the GPUs: " + why)
    # The parser failure of one subset does not hide the next one.
    assert result["facts"]["nvlink"]["gpus"][0]["links_up"] == 18
    assert result["failed_checks"] == ["gpu_visible"]


# --- GPU facts judged against the profile ---

def test_zero_gpus_fail_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(replies(smi=(0, smi_xml(), "")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["gpu"])
    assert result["facts"]["gpu"]["gpus"] == [] and result["facts"]["gpu"]["gpu_count"] == 0
    count = by_name(result)["gpu_count"]
    assert (count["status"], count["measured"], count["expected"]) == ("fail", 0, 2)
    assert count["detail"].startswith("0 of 2 GPUs visible (the driver enumerates 0")
    assert result["failed_checks"] == ["gpu_count"]


def test_a_gpu_that_fell_off_the_bus_fails_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(replies(smi=(0, smi_xml(gpu(0)), "")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["gpu"])
    assert by_name(result)["gpu_count"]["detail"] == (
        "1 of 2 GPUs visible (the driver enumerates 1; a GPU fell off the bus or is not seated)")


def test_wrong_model_and_driver_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    xml = smi_xml(gpu(0), gpu(1, name="NVIDIA H100 PCIe"), driver="575.57.08")
    result = run(monkeypatch, Node(replies(smi=(0, xml, ""))), expected=EXPECTED,
                 subsets=["gpu"])
    checks = by_name(result)
    assert checks["gpu_model"]["detail"] == "unexpected model: GPU1 NVIDIA H100 PCIe"
    assert checks["gpu_model"]["measured"] == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"]
    assert (checks["driver_version"]["measured"], checks["driver_version"]["status"]) == (
        "575.57.08", "fail")
    assert result["failed_checks"] == ["gpu_model", "driver_version"]


def test_memory_faults_fail_only_their_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    xml = smi_xml(gpu(0), gpu(1, volatile_unc="2", remap_pending="Yes"))
    result = run(monkeypatch, Node(replies(smi=(0, xml, ""))), expected=EXPECTED,
                 subsets=["gpu"])
    checks = by_name(result)
    assert checks["gpu0_memory"]["status"] == "pass"
    assert checks["gpu1_memory"]["detail"] == (
        "GPU1: 2 volatile uncorrectable ECC error(s); a row remap is pending (reset the GPU)")
    assert checks["gpu1_memory"]["measured"] == {
        "volatile_uncorrectable": 2, "aggregate_uncorrectable": 0, "remap_pending": True}
    assert result["failed_checks"] == ["gpu1_memory"]


def test_ecc_disabled_fails_the_memory_check(monkeypatch: pytest.MonkeyPatch) -> None:
    xml = smi_xml(gpu(0, ecc="Disabled"), gpu(1))
    result = run(monkeypatch, Node(replies(smi=(0, xml, ""))), expected=EXPECTED,
                 subsets=["gpu"])
    assert by_name(result)["gpu0_memory"]["detail"] == "GPU0: ECC is disabled"
    assert result["failed_checks"] == ["gpu0_memory"]


def test_a_narrow_pcie_link_fails_and_a_low_generation_only_warns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    xml = smi_xml(gpu(0, width=(8, 16)), gpu(1, gen=(1, 5)))
    result = run(monkeypatch, Node(replies(smi=(0, xml, ""))), expected=EXPECTED,
                 subsets=["gpu"])
    checks = by_name(result)
    assert checks["gpu0_pcie"]["status"] == "fail"
    assert checks["gpu0_pcie"]["detail"] == (
        "GPU0 PCIe link trained at x8 of x16: reseat or check the riser")
    assert (checks["gpu1_pcie"]["status"], checks["gpu1_pcie"]["measured"]) == ("warn", "Gen1 x16")
    assert result["failed_checks"] == ["gpu0_pcie"]


def test_persistence_mode_off_warns_without_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    xml = smi_xml(gpu(0), gpu(1, persistence="Disabled"))
    result = run(monkeypatch, Node(replies(smi=(0, xml, ""))), expected=EXPECTED,
                 subsets=["gpu"])
    check = by_name(result)["persistence_mode"]
    assert (check["status"], check["measured"]) == ("warn", "off on GPU 1")
    assert result["failed_checks"] == []


# --- NVLink ---

def test_down_and_slow_nvlinks_fail_their_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(replies(nvlink=(0, nvlink(down={1: [3, 7]}, slow={0: [5]}), "")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["nvlink"])
    checks = by_name(result)
    assert checks["gpu1_nvlink"]["detail"] == "GPU1: 16 of 18 links up; down: link 3, 7"
    assert checks["gpu1_nvlink"]["measured"] == 16
    assert checks["gpu0_nvlink"]["detail"] == "GPU0: below 26.562 GB/s: link 5"
    assert result["failed_checks"] == ["gpu0_nvlink", "gpu1_nvlink"]


def test_all_nvlinks_inactive_fails_with_the_fabric_manager_hint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    text = (f"GPU 0: {H100} (UUID: GPU-5c1e0a2b-77d4-4f2e-9c1a-000000000000)\n"
            "NVML: Unable to retrieve NVLink information as all links are inActive\n")
    node = Node(replies(nvlink=(0, text, "")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["nvlink"])
    check = by_name(result)["gpu0_nvlink"]
    assert (check["status"], check["measured"]) == ("fail", 0)
    assert "all NVLinks inactive (fabric manager down" in check["detail"]


def test_a_profile_without_nvlink_skips_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "GPU 0: NVIDIA L40S (UUID: GPU-00000000-0000-0000-0000-000000000000)\n" \
           "Device does not have or support Nvlink\n"
    node = Node(replies(nvlink=(0, text, "")))
    result = run(monkeypatch, node, expected=expected(nvlink_links_per_gpu=0),
                 subsets=["nvlink"])
    assert result["facts"]["nvlink"]["gpus"][0]["status"] == "no_nvlink"
    assert [(c["name"], c["status"]) for c in result["checks"]] == [("nvlink", "skip")]


def test_unparseable_topology_is_kept_as_an_error_and_judges_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(replies(topo=(0, "garbage\x00 here\n", "")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["topo"])
    assert result["facts"]["topo"]["error"].startswith("parse failed: no topology matrix found")
    assert result["checks"] == [] and result["failed_checks"] == []


# --- InfiniBand (sysfs) ---

def test_a_missing_infiniband_class_fails_a_profile_with_hcas(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = str(tmp_path / "absent")
    node = Node({})
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["ib"], ib_sysfs_root=root)
    assert result["facts"]["ib"] == {
        "error": f"{root} does not exist (no RDMA devices or driver)"}
    check = by_name(result)["ib_ports"]
    assert check["status"] == "fail"
    assert check["detail"] == (f"cannot read RDMA devices: {root} does not exist (no RDMA "
                               "devices or driver)")
    # The same node judged against a profile without RDMA NICs: skipped.
    result = run(monkeypatch, node, expected=expected(ib_hcas=0), subsets=["ib"],
                 ib_sysfs_root=root)
    assert [(c["name"], c["status"]) for c in result["checks"]] == [("ib_ports", "skip")]


def test_a_down_port_and_a_slow_port_are_named(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    root = ib_sysfs(tmp_path / "ib", {
        "mlx5_0": ("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "InfiniBand"),
        "mlx5_1": ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"),
        "mlx5_2": NDR_UP,
        "mlx5_bond_0": ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "Ethernet")})
    result = run(monkeypatch, Node({}), expected=expected(ib_hcas=3), subsets=["ib"],
                 ib_sysfs_root=root)
    checks = by_name(result)
    assert checks["ib_mlx5_0_port1"]["detail"].startswith("mlx5_0/1: state DOWN (Disabled)")
    assert checks["ib_mlx5_1_port1"]["detail"] == (
        "mlx5_1/1: rate 200 Gb/s (4X HDR), expected 400")
    assert checks["ib_mlx5_2_port1"]["status"] == "pass"
    assert "ib_mlx5_bond_0_port1" not in checks  # an Ethernet port on an InfiniBand fabric
    assert checks["ib_ports"]["detail"] == "1 healthy InfiniBand port(s) of 3 expected"
    assert result["failed_checks"] == ["ib_mlx5_0_port1", "ib_mlx5_1_port1", "ib_ports"]


def test_a_roce_fabric_counts_ethernet_ports(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    eth = ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "Ethernet")
    root = ib_sysfs(tmp_path / "ib", {"mlx5_0": eth, "mlx5_1": eth})
    result = run(monkeypatch, Node({}), expected=expected(fabric="roce"), subsets=["ib"],
                 ib_sysfs_root=root)
    assert by_name(result)["ib_ports"]["detail"] == "2 healthy Ethernet port(s) of 2 expected"
    assert result["failed_checks"] == []
    assert by_name(result)["ib_mlx5_0_port1"]["measured"].endswith("RoCE v2 IPv4 GID 1")
    # The node's NCCL settings name another entry: every RoCE port fails, saying which it has.
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_IB_HCA=mlx5_0,mlx5_1\nNCCL_IB_GID_INDEX=3\n")
    result = run(monkeypatch, Node({}), expected=expected(fabric="roce"), subsets=["ib"],
                 ib_sysfs_root=root, nccl_conf=str(conf))
    assert result["facts"]["ib"]["nccl_ib_gid_index"] == "3"
    assert sorted(result["failed_checks"]) == ["ib_mlx5_0_port1", "ib_mlx5_1_port1", "ib_ports"]
    assert "NCCL_IB_GID_INDEX 3 is not its RoCE v2 IPv4 GID (index 1)" in by_name(result)[
        "ib_mlx5_0_port1"]["detail"]


def test_roce_ports_pfc_and_ecn_are_reported_never_failed(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    eth = ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "Ethernet")
    root = ib_sysfs(tmp_path / "ib", {"mlx5_0": eth, "mlx5_1": eth})
    net = tmp_path / "net"
    for device, netdev, ecn in (("mlx5_0", "ens1f0np0", "1"), ("mlx5_1", "ens1f1np1", "0")):
        ndevs = Path(root) / device / "ports" / "1" / "gid_attrs" / "ndevs"
        ndevs.mkdir()
        for index in ("0", "1"):
            (ndevs / index).write_text(netdev + "\n")
        for point in ("roce_np", "roce_rp"):
            enable = net / netdev / "ecn" / point / "enable"
            enable.mkdir(parents=True)
            for prio in range(8):
                (enable / str(prio)).write_text((ecn if prio == 3 else "0") + "\n")
    pfc3 = "pfc-cap 8 macsec-bypass off delay 0 \nprio-pfc " + " ".join(
        f"{p}:{'on' if p == 3 else 'off'}" for p in range(8)) + " \n"
    node = Node({"dcb pfc show dev ens1f0np0": (0, pfc3, ""),
                 "dcb pfc show dev ens1f1np1": (0, pfc3.replace("3:on", "3:off"), "")},
                tools={"dcb"})
    result = run(monkeypatch, node, expected=expected(fabric="roce"), subsets=["roce_qos"],
                 ib_sysfs_root=root, net_sysfs_root=str(net))
    checks = by_name(result)
    assert {n: (c["status"], c["measured"]) for n, c in checks.items()} == {
        "roce_qos_mlx5_0_port1": ("pass", "PFC 3; ECN 3"),
        "roce_qos_mlx5_1_port1": ("warn", "PFC off; ECN off")}
    assert checks["roce_qos_mlx5_1_port1"]["detail"].startswith(
        "mlx5_1/1 (ens1f1np1): PFC off on every priority (dcb); ECN off on every priority: "
        "lossless RoCE usually needs PFC or ECN")
    assert result["failed_checks"] == []
    assert node.commands == ["dcb pfc show dev ens1f0np0", "dcb pfc show dev ens1f1np1"]
    # Neither dcb nor mlnx_qos installed: PFC unknown, said; ECN still read.
    bare = run(monkeypatch, Node({}, tools=set()), expected=expected(fabric="roce"),
               subsets=["roce_qos"], ib_sysfs_root=root, net_sysfs_root=str(net))
    port = by_name(bare)["roce_qos_mlx5_1_port1"]
    assert (port["status"], port["measured"]) == ("skip", "PFC not read; ECN off")
    assert "PFC not read (dcb not found; mlnx_qos not found)" in port["detail"]
    # An InfiniBand fabric has no RoCE ports to read.
    ib = run(monkeypatch, Node({}), expected=EXPECTED, subsets=["roce_qos"],
             ib_sysfs_root=root, net_sysfs_root=str(net))
    assert ib["facts"] == {} and ib["checks"] == []


# --- Xid errors in the kernel log ---

def test_a_fatal_xid_fails_and_is_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(replies(journal=(0, JOURNAL_CLEAN + XID_13 + XID_79, "")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["xid"])
    events = result["facts"]["xid"]["events"]
    assert [(e["xid"], e["pci"], e["fatal"]) for e in events] == [
        (13, "0000:18:00", False), (79, "0000:2a:00", True)]
    check = by_name(result)["xid"]
    assert (check["status"], check["measured"]) == ("fail", 1)
    assert check["detail"] == ("fatal Xid errors since boot: Xid 79 on 0000:2a:00; "
                               "drain and reset/RMA")


def test_only_application_xids_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node(replies(journal=(0, XID_13, "")))
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["xid"])
    check = by_name(result)["xid"]
    assert (check["status"], check["detail"]) == ("warn", "1 non-fatal Xid event(s) since boot")
    assert result["failed_checks"] == []


@pytest.mark.parametrize(("tools", "journal", "dmesg", "commands"), [
    ({"journalctl", "dmesg"}, (1, "", "No journal files were found.\n"), (0, XID_79, ""),
     ["journalctl -k -b --no-pager -q", "dmesg"]),
    ({"dmesg"}, None, (0, XID_79, ""), ["dmesg"]),
], ids=["journal-fails", "no-journalctl"])
def test_without_a_journal_the_kernel_log_comes_from_dmesg(
        monkeypatch: pytest.MonkeyPatch, tools: set[str], journal: Reply | None, dmesg: Reply,
        commands: list[str]) -> None:
    lines = {"dmesg": dmesg}
    if journal:
        lines["journalctl -k -b --no-pager -q"] = journal
    node = Node(lines, tools=tools)
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["xid"])
    assert node.commands == commands
    assert [e["xid"] for e in result["facts"]["xid"]["events"]] == [79]
    assert result["failed_checks"] == ["xid"]


@pytest.mark.parametrize("tools", [set(), {"dmesg"}], ids=["no-tools", "dmesg-denied"])
def test_an_unreadable_kernel_log_skips_the_xid_check(monkeypatch: pytest.MonkeyPatch,
                                                      tools: set[str]) -> None:
    node = Node({"dmesg": (1, "", "dmesg: read kernel buffer failed: Operation not permitted\n")},
                tools=tools)
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["xid"])
    assert result["facts"]["xid"] is None
    check = by_name(result)["xid"]
    assert (check["status"], check["detail"]) == ("skip", "kernel log not read")


def test_a_kernel_log_file_is_read_instead_of_the_journal(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(JOURNAL_CLEAN + XID_79)
    node = Node(replies())
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["xid"], kernel_log=str(log))
    assert node.commands == []
    assert [(e["xid"], e["line"]) for e in result["facts"]["xid"]["events"]] == [(79, 3)]
    assert result["failed_checks"] == ["xid"]
    # A kernel_log that cannot be read: no fallback to the journal, the check is skipped.
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["xid"],
                 kernel_log=str(tmp_path / "missing.log"))
    assert node.commands == [] and result["facts"]["xid"] is None
    assert by_name(result)["xid"]["status"] == "skip"


# --- DCGM ---

def test_a_failing_dcgm_test_fails_even_though_dcgmi_exits_non_zero(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node({"dcgmi diag -r 2": (226, DCGM_MEMORY_FAIL, "")})
    result = run(monkeypatch, node, expected=EXPECTED, subsets=["dcgm"], dcgm_level=2)
    assert node.commands == ["dcgmi diag -r 2"]
    dcgm = result["facts"]["dcgm"]
    assert dcgm["level"] == 2 and dcgm["failed_tests"] == ["GPU Memory"]
    assert dcgm["tests"]["GPU Memory"]["gpus"] == {"0": "Pass", "1": "Fail"}
    check = by_name(result)["dcgm_diag"]
    assert (check["status"], check["measured"]) == ("fail", "fail: GPU Memory")
    assert check["detail"] == "DCGM level-2 diagnostic failed: GPU Memory"


@pytest.mark.parametrize(("required", "status"), [(False, "skip"), (True, "fail")])
def test_without_dcgmi_the_check_is_skipped_unless_required(
        monkeypatch: pytest.MonkeyPatch, required: bool, status: str) -> None:
    node = Node(replies(), tools={"nvidia-smi"})
    result = run(monkeypatch, node, expected=expected(dcgm_required=required), subsets=["dcgm"])
    assert result["facts"]["dcgm"] is None and node.commands == []
    check = by_name(result)["dcgm_diag"]
    assert (check["status"], check["detail"]) == (status, "dcgmi not installed")


@pytest.mark.parametrize(("reply", "error"), [
    ((255, "", "Error: unable to establish a connection to the specified host: localhost\n"),
     "Error: unable to establish a connection to the specified host: localhost"),
    ((255, "", ""), "exit 255"),
    ((1, "x" * 400 + "END\n", ""), "x" * 297 + "END"),
], ids=["no-hostengine", "silent", "long"])
def test_dcgmi_without_a_result_table_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                                  reply: Reply, error: str) -> None:
    result = run(monkeypatch, Node({"dcgmi diag -r 1": reply}), expected=EXPECTED,
                 subsets=["dcgm"])
    assert result["facts"]["dcgm"] == {"error": error}
    check = by_name(result)["dcgm_diag"]
    assert (check["status"], check["detail"]) == ("fail", "dcgmi diag failed: " + error)


def test_an_unparseable_dcgm_table_is_a_parse_error_with_its_level(
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = "Diagnostic run aborted before any test started.\n"
    result = run(monkeypatch, Node({"dcgmi diag -r 3": (0, out, "")}), expected=EXPECTED,
                 subsets=["dcgm"], dcgm_level=3)
    dcgm = result["facts"]["dcgm"]
    assert dcgm["error"].startswith("parse failed: no 'dcgmi diag' result rows")
    assert dcgm["level"] == 3
    assert result["failed_checks"] == ["dcgm_diag"]


# --- real captures (../shared/captures), read in place ---

def test_real_captures_through_the_module(monkeypatch: pytest.MonkeyPatch,
                                          captures: Path) -> None:
    inactive = (captures / "nvidia-smi-nvlink" / "a100-sxm4-80gb-all-inactive.txt").read_text()
    node = Node({"nvidia-smi nvlink -s": (0, inactive, "")})
    kern = captures / "dmesg-xid" / "h100-xe9680-xid119-gsp-timeout.txt"
    result = run(monkeypatch, node, expected=expected(nvlink_links_per_gpu=12),
                 subsets=["nvlink", "xid"], kernel_log=str(kern))
    assert result["failed_checks"] == ["gpu6_nvlink", "xid"]
    assert {(e["xid"], e["pci"], e["fatal"]) for e in result["facts"]["xid"]["events"]} == {
        (119, "0000:9b:00", True)}
    assert by_name(result)["xid"]["measured"] == 5
