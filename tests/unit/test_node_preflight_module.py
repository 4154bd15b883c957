"""The node_preflight module end to end against a scripted node: each check it measures (OS,
architecture, kernel headers, free disk, Secure Boot, NVIDIA PCI devices, clock sync) passing
and failing, the tools it falls back on, and lspci failing.

Only the boundaries are replaced: AnsibleModule (params, get_bin_path, run_command from a
``Node``), ``platform`` (kernel release, CPU architecture) and the filesystem the module reads
(``open``, ``os.path``, ``os.statvfs``), rooted in a temporary directory."""

from __future__ import annotations

import builtins
import os
import sys
from pathlib import Path, PurePath
from types import SimpleNamespace
from typing import IO, Any

import pytest

from tests.unit.collection_module import load_module

ROOT = Path(__file__).resolve().parents[2]


npf: Any = load_module("node_preflight")

Reply = tuple[int, str, str]
KERNEL = "6.1.0-18-amd64"
SB_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


class Exited(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("exit_json")
        self.result = result


class Failed(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["msg"])
        self.result = result


class Node:
    """The machine: its files under ``root``, free space per path (GB), CPU, kernel, and the
    tools it has with what each command line prints (``"lspci -nn -d 10de:"``). A tool with
    no scripted line can be installed through ``tools``; a command nobody scripted fails the
    test."""

    def __init__(self, root: Path, replies: dict[str, Reply], tools: set[str] | None = None,
                 machine: str = "x86_64") -> None:
        self.root = root
        self.replies = replies
        self.tools = {line.split()[0] for line in replies} if tools is None else tools
        self.machine = machine
        self.free_gb: dict[str, float] = {"/": 120.0, "/var": 80.0}
        self.commands: list[str] = []

    def file(self, path: str, content: str | bytes) -> None:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)

    def os_release(self, text: str) -> None:
        self.file("/etc/os-release", text)

    def secure_boot(self, value: bytes | None) -> None:
        """An EFI machine; ``value`` is the SecureBoot variable (4 attribute bytes + 1)."""
        (self.root / "sys/firmware/efi/efivars").mkdir(parents=True, exist_ok=True)
        if value is not None:
            self.file(SB_VAR, value)

    def headers_built(self) -> None:
        (self.root / "lib/modules" / KERNEL / "build").mkdir(parents=True)


def run(monkeypatch: pytest.MonkeyPatch, node: Node, check_mode: bool = False,
        **params: Any) -> dict[str, Any]:
    """main() on ``node`` with a fake AnsibleModule; returns what it passed to exit_json
    (raises Failed with what it passed to fail_json)."""

    class FakeAnsibleModule:
        def __init__(self, argument_spec: dict[str, dict[str, Any]],
                     supports_check_mode: bool = False) -> None:
            assert not set(params) - set(argument_spec), "unknown option"
            assert all(k in params for k, s in argument_spec.items() if s.get("required"))
            self.params: dict[str, Any] = {k: s.get("default")
                                           for k, s in argument_spec.items()}
            self.params.update(params)
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

    def inside(path: str) -> Path:
        assert path.startswith("/"), path
        return node.root / path.lstrip("/")

    def fake_open(path: str, mode: str = "r") -> IO[Any]:
        return builtins.open(inside(path), mode)

    def statvfs(path: str) -> SimpleNamespace:
        if path not in node.free_gb:
            raise FileNotFoundError(2, "No such file or directory", path)
        # f_bfree (root's reserve included) is deliberately larger than f_bavail.
        blocks = int(node.free_gb[path] * 1e9 / 4096)
        return SimpleNamespace(f_bavail=blocks, f_bfree=blocks + 10**7, f_frsize=4096)

    fake_os = SimpleNamespace(
        path=SimpleNamespace(exists=lambda p: inside(p).exists(),
                             isdir=lambda p: inside(p).is_dir(), join=os.path.join),
        listdir=lambda p: os.listdir(inside(p)), statvfs=statvfs)
    monkeypatch.setattr(npf, "AnsibleModule", FakeAnsibleModule)
    monkeypatch.setattr(npf, "os", fake_os)
    monkeypatch.setattr(npf, "open", fake_open, raising=False)
    # Secure Boot is read by module_utils' modsign, with the same view of the node.
    modsign = sys.modules[npf.read_secure_boot.__module__]
    monkeypatch.setattr(modsign, "os", fake_os)
    monkeypatch.setattr(modsign, "open", fake_open, raising=False)
    monkeypatch.setattr(npf, "platform", SimpleNamespace(release=lambda: KERNEL,
                                                         machine=lambda: node.machine))
    with pytest.raises(Exited) as done:
        npf.main()
    return done.value.result


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in result["checks"]}


DEBIAN_12 = """\
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
"""

LSPCI_2_H100 = """\
05:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)
18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
2a:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
"""

SUPPORTED = ["ubuntu2204", "debian12", "rhel9"]
GPU_POLICY: dict[str, Any] = {"supported_os": SUPPORTED, "expect_gpus": True,
                              "expected_gpu_count": 2, "expected_pci_ids": ["10de:2330"]}
TIMEDATECTL = "timedatectl show --property=NTPSynchronized --value"
VIRT = "systemd-detect-virt --container --quiet"
LSPCI = "lspci -nn -d 10de:"
APT = f"apt-cache policy linux-headers-{KERNEL}"
DNF = f"dnf -q list --available kernel-devel-{KERNEL}"


def replies(**over: Reply) -> dict[str, Reply]:
    """A bare-metal GPU node's command lines; ``over`` replaces one, named lspci, virt or
    timedatectl."""
    base: dict[str, Reply] = {
        LSPCI: (0, LSPCI_2_H100, ""),
        VIRT: (1, "", ""),  # exits 1 when not in a container
        TIMEDATECTL: (0, "yes\n", ""),
    }
    keys = dict(zip(("lspci", "virt", "timedatectl"), base, strict=True))
    for short, reply in over.items():
        base[keys[short]] = reply
    return base


@pytest.fixture
def node(tmp_path: Path) -> Node:
    """A healthy Debian 12 GPU node: headers installed, Secure Boot off, clock in sync."""
    machine = Node(tmp_path, replies())
    machine.os_release(DEBIAN_12)
    machine.headers_built()
    machine.secure_boot(b"\x06\x00\x00\x00\x00")
    return machine


# --- the whole node ---

def test_a_healthy_gpu_node_passes_and_reports_what_it_measured(
        monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    result = run(monkeypatch, node, **GPU_POLICY)
    assert result["changed"] is False
    assert result["failed_checks"] == []
    assert {c["name"]: c["status"] for c in result["checks"]} == {
        "os_supported": "pass", "architecture": "pass", "kernel_headers": "pass",
        "free_disk:/": "pass", "free_disk:/var": "pass", "secure_boot": "pass",
        "nvidia_pci_devices": "pass", "nvidia_pci_ids": "pass", "host_firewall": "pass",
        "time_sync": "pass"}
    facts = result["preflight"]
    gpus = [{"slot": "18:00.0", "class": "0302", "device_id": "10de:2330", "kind": "gpu"},
            {"slot": "2a:00.0", "class": "0302", "device_id": "10de:2330", "kind": "gpu"}]
    assert facts == {
        "os_id": "debian", "os_version": "12", "os_dir": "debian12", "architecture": "x86_64",
        "kernel": KERNEL, "kernel_headers": "installed",
        "disk": [{"path": "/", "free_gb": 120.0}, {"path": "/var", "free_gb": 80.0}],
        "secure_boot": "disabled",
        "pci_devices": [{"slot": "05:00.0", "class": "0680", "device_id": "10de:22a3",
                         "kind": "nvswitch"}, *gpus],
        "pci_source": "lspci", "time_sync": "synchronized",
        "host_firewall": {"filtering": [], "unread": []}}
    assert node.commands == [LSPCI, VIRT, TIMEDATECTL]  # headers built: no package query


def test_check_mode_measures_and_judges_exactly_as_a_normal_run(
        monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    node.free_gb["/var"] = 3.0
    normal = run(monkeypatch, node, **GPU_POLICY)
    commands = list(node.commands)
    node.commands.clear()
    checked = run(monkeypatch, node, check_mode=True, **GPU_POLICY)
    assert checked == normal and node.commands == commands
    assert checked["changed"] is False
    assert checked["failed_checks"] == ["free_disk:/var"]


def test_every_failure_is_listed_in_order(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    node = Node(tmp_path, replies(lspci=(0, "", ""), timedatectl=(0, "no\n", "")),
                machine="ppc64le")
    node.os_release("ID=debian\nVERSION_ID=11\n")
    node.free_gb = {"/": 5.0}
    node.secure_boot(b"\x06\x00\x00\x00\x01")
    result = run(monkeypatch, node, disk_paths=["/"], **GPU_POLICY)
    assert result["failed_checks"] == [
        "os_supported", "architecture", "kernel_headers", "free_disk:/", "secure_boot",
        "nvidia_pci_devices"]
    assert by_name(result)["time_sync"]["status"] == "warn"  # a warning is not a failure


# --- OS ---

@pytest.mark.parametrize(("text", "os_id", "version", "os_dir"), [
    ('ID=ubuntu\nVERSION_ID="22.04"\nID_LIKE=debian\n', "ubuntu", "22.04", "ubuntu2204"),
    ('ID="rhel"\nVERSION_ID="9.4"\n', "rhel", "9", "rhel9"),
    ('ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.3"\n', "rocky", "9", "rhel9"),
    ('ID="almalinux"\nVERSION_ID="9.5"\n', "almalinux", "9", "rhel9"),
    ('# a comment = with an equals sign\n\nPRETTY_NAME="a=b"\nID=debian\nVERSION_ID="12"\n',
     "debian", "12", "debian12"),
], ids=["ubuntu", "rhel", "rocky", "almalinux", "comments"])
def test_os_release_names_the_repository_directory(
        monkeypatch: pytest.MonkeyPatch, node: Node, text: str, os_id: str, version: str,
        os_dir: str) -> None:
    node.os_release(text)
    result = run(monkeypatch, node, supported_os=SUPPORTED)
    facts = result["preflight"]
    assert (facts["os_id"], facts["os_version"], facts["os_dir"]) == (os_id, version, os_dir)
    assert by_name(result)["os_supported"]["status"] == "pass"


def test_an_unsupported_os_fails_and_lists_the_supported_ones(
        monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    node.os_release('ID=debian\nVERSION_ID="11"\n')
    result = run(monkeypatch, node, supported_os=SUPPORTED)
    check = by_name(result)["os_supported"]
    assert (check["status"], check["measured"]) == ("fail", "debian11")
    assert check["detail"] == ("OS debian 11 (debian11) has no NVIDIA repository in the stack "
                               "matrix for this node's stack; supported: debian12, rhel9, "
                               "ubuntu2204")
    assert result["failed_checks"] == ["os_supported"]


def test_a_node_without_os_release_is_unknown_and_fails(monkeypatch: pytest.MonkeyPatch,
                                                        node: Node) -> None:
    (node.root / "etc/os-release").unlink()
    result = run(monkeypatch, node, supported_os=SUPPORTED)
    assert (result["preflight"]["os_id"], result["preflight"]["os_version"]) == (
        "unknown", "unknown")
    assert result["failed_checks"] == ["os_supported"]
    assert by_name(result)["os_supported"]["detail"].startswith("OS unknown unknown")


def test_single_quoted_os_release_values_are_unquoted(monkeypatch: pytest.MonkeyPatch,
                                                      node: Node) -> None:
    node.os_release("ID='ubuntu'\nVERSION_ID='24.04'\n")
    result = run(monkeypatch, node, supported_os=["ubuntu2404"])
    assert result["preflight"]["os_dir"] == "ubuntu2404"
    assert result["failed_checks"] == []


# --- architecture ---

@pytest.mark.parametrize(("machine", "status"), [("x86_64", "pass"), ("aarch64", "pass"),
                                                 ("ppc64le", "fail")])
def test_only_architectures_nvidia_publishes_for_pass(monkeypatch: pytest.MonkeyPatch,
                                                      node: Node, machine: str,
                                                      status: str) -> None:
    node.machine = machine
    result = run(monkeypatch, node, supported_os=SUPPORTED)
    check = by_name(result)["architecture"]
    assert (check["status"], check["measured"]) == (status, machine)
    if status == "fail":
        assert check["detail"] == "NVIDIA's repositories have no packages for ppc64le"


# --- kernel headers ---

@pytest.mark.parametrize(("tools", "lines", "state", "commands"), [
    ({"apt-cache"}, {APT: (0, f"linux-headers-{KERNEL}:\n  Installed: (none)\n"
                              "  Candidate: 6.1.76-1\n  Version table:\n", "")},
     "installable", [APT]),
    ({"apt-cache", "dnf"}, {APT: (0, f"linux-headers-{KERNEL}:\n  Installed: (none)\n"
                                     "  Candidate: (none)\n", "")}, "missing", [APT]),
    ({"apt-cache"}, {APT: (0, "", "N: Unable to locate package\n")}, "missing", [APT]),
    ({"apt-cache"}, {APT: (100, "  Candidate: 6.1.76-1\n", "E: lock\n")}, "missing", [APT]),
    ({"dnf"}, {DNF: (0, f"Available Packages\nkernel-devel.x86_64  {KERNEL}  baseos\n", "")},
     "installable", [DNF]),
    ({"dnf"}, {DNF: (1, "", "Error: No matching Packages to list\n")}, "missing", [DNF]),
    (set(), {}, "unknown", []),
], ids=["apt-candidate", "apt-none", "apt-unknown-package", "apt-fails", "dnf-available",
        "dnf-none", "no-package-manager"])
def test_headers_not_built_are_looked_up_in_the_package_manager(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tools: set[str],
        lines: dict[str, Reply], state: str, commands: list[str]) -> None:
    node = Node(tmp_path, lines, tools=tools)
    node.os_release(DEBIAN_12)
    result = run(monkeypatch, node, supported_os=SUPPORTED)
    assert node.commands == commands
    check = by_name(result)["kernel_headers"]
    assert (check["measured"], check["status"]) == (
        state, "pass" if state == "installable" else "fail")
    if state != "installable":
        assert check["detail"].startswith(f"no headers package for the running kernel {KERNEL}")
        assert result["failed_checks"] == ["kernel_headers"]


# --- free disk ---

def test_free_disk_is_judged_per_path_from_the_space_users_can_take(
        monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    node.free_gb = {"/": 20.0, "/var": 19.9}
    result = run(monkeypatch, node, supported_os=SUPPORTED)
    assert result["preflight"]["disk"] == [{"path": "/", "free_gb": 20.0},
                                           {"path": "/var", "free_gb": 19.9}]
    checks = by_name(result)
    assert checks["free_disk:/"]["status"] == "pass"  # exactly the minimum is enough
    assert checks["free_disk:/var"]["detail"] == (
        "19.9 GB free under /var, the stack needs 20 GB")
    assert result["failed_checks"] == ["free_disk:/var"]


def test_min_free_gb_and_disk_paths_are_honoured(monkeypatch: pytest.MonkeyPatch,
                                                 node: Node) -> None:
    node.free_gb = {"/": 120.0, "/opt": 40.0}
    result = run(monkeypatch, node, supported_os=SUPPORTED, min_free_gb=50.0,
                 disk_paths=["/", "/opt"])
    checks = by_name(result)
    assert "free_disk:/var" not in checks
    assert (checks["free_disk:/"]["expected"], checks["free_disk:/opt"]["measured"]) == (
        ">= 50 GB", "40.0 GB")
    assert result["failed_checks"] == ["free_disk:/opt"]


def test_a_disk_path_that_does_not_exist_is_skipped(monkeypatch: pytest.MonkeyPatch,
                                                    node: Node) -> None:
    result = run(monkeypatch, node, supported_os=SUPPORTED, disk_paths=["/", "/scratch"])
    assert result["preflight"]["disk"][1] == {"path": "/scratch", "free_gb": None}
    check = by_name(result)["free_disk:/scratch"]
    assert (check["status"], check["detail"]) == ("skip", "path does not exist")
    assert result["failed_checks"] == []


# --- Secure Boot ---

@pytest.mark.parametrize(("efi", "ok", "state", "status"), [
    ("bios", False, "not-efi", "pass"),
    (None, False, "unknown", "pass"),
    (b"\x06\x00\x00\x00\x00", False, "disabled", "pass"),
    (b"\x06\x00\x00\x00\x01", True, "enabled", "pass"),
    (b"\x06\x00\x00\x00\x01", False, "enabled", "fail"),
], ids=["bios", "no-variable", "disabled", "enabled-mok", "enabled"])
def test_secure_boot_blocks_the_driver_unless_a_key_is_enrolled(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, efi: bytes | str | None, ok: bool,
        state: str, status: str) -> None:
    node = Node(tmp_path, replies())
    node.os_release(DEBIAN_12)
    node.headers_built()
    if efi != "bios":
        node.secure_boot(efi if isinstance(efi, bytes) else None)
    result = run(monkeypatch, node, supported_os=SUPPORTED, secure_boot_ok=ok)
    assert result["preflight"]["secure_boot"] == state
    check = by_name(result)["secure_boot"]
    assert check["status"] == status
    if status == "fail":
        assert check["detail"].startswith("Secure Boot is on: the unsigned DKMS module will not "
                                          "load")
        assert result["failed_checks"] == ["secure_boot"]


@pytest.mark.parametrize(("value", "state", "status"), [
    (b"\x06\x00\x00\x00\x01", "enabled", "fail"),
    (b"\x06\x00\x00\x00\x00", "disabled", "pass"),
    (None, "not-efi", "pass"),
], ids=["enabled", "disabled", "no-directory"])
def test_secure_boot_is_read_under_efivars_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                value: bytes | None, state: str,
                                                status: str) -> None:
    """The variable is read where efivars_root says, not at the kernel's path: the kernel's
    efivarfs here says the opposite, and is not read."""
    node = Node(tmp_path, replies())
    node.os_release(DEBIAN_12)
    node.headers_built()
    node.secure_boot(b"\x06\x00\x00\x00\x00" if value and value[4] else b"\x06\x00\x00\x00\x01")
    root = "/var/lib/stand-in/efivars"
    if value is not None:
        node.file(f"{root}/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", value)
    result = run(monkeypatch, node, supported_os=SUPPORTED, efivars_root=root)
    assert result["preflight"]["secure_boot"] == state
    assert by_name(result)["secure_boot"]["status"] == status


# --- NVIDIA devices on the PCI bus ---

def test_a_cpu_node_does_not_look_for_gpus(monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    result = run(monkeypatch, node, supported_os=SUPPORTED)
    assert LSPCI not in node.commands
    assert (result["preflight"]["pci_devices"], result["preflight"]["pci_source"]) == (
        [], "not-checked")
    assert not {"nvidia_pci_devices", "nvidia_pci_ids"} & set(by_name(result))


def test_a_missing_gpu_fails_the_count_and_nvswitches_do_not_count(
        monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    node.replies[LSPCI] = (0, LSPCI_2_H100.replace("2a:00.0 3D controller [0302]",
                                                   "2a:00.0 Bridge [0680]"), "")
    result = run(monkeypatch, node, **GPU_POLICY)
    check = by_name(result)["nvidia_pci_devices"]
    assert (check["status"], check["measured"], check["expected"]) == ("fail", 1, "2")
    assert check["detail"].startswith("lspci shows 1 NVIDIA GPU(s), the profile expects 2")
    assert result["failed_checks"] == ["nvidia_pci_devices"]


@pytest.mark.parametrize(("output", "status"), [
    (LSPCI_2_H100, "pass"), ("", "fail"),
    ("lspci: Unable to load libkmod resources: error -2\n\x1b[0m%%%\n", "fail"),
], ids=["gpus", "empty", "garbage"])
def test_without_an_expected_count_any_gpu_will_do(monkeypatch: pytest.MonkeyPatch,
                                                   node: Node, output: str,
                                                   status: str) -> None:
    node.replies[LSPCI] = (0, output, "")
    result = run(monkeypatch, node, supported_os=SUPPORTED, expect_gpus=True)
    check = by_name(result)["nvidia_pci_devices"]
    assert (check["status"], check["expected"]) == (status, ">= 1")
    assert "nvidia_pci_ids" not in by_name(result)  # no ids asked for


def test_an_unexpected_device_id_names_it(monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    node.replies[LSPCI] = (0, LSPCI_2_H100.replace("2a:00.0 3D controller [0302]: NVIDIA "
                                                   "Corporation GH100 [H100 SXM5 80GB] [10de:2330]",
                                                   "2a:00.0 3D controller [0302]: NVIDIA "
                                                   "Corporation GH100 [H100 PCIe] [10de:2331]"), "")
    result = run(monkeypatch, node, **{**GPU_POLICY, "expected_pci_ids": ["10DE:2330"]})
    check = by_name(result)["nvidia_pci_ids"]
    assert (check["status"], check["measured"]) == ("fail", "10de:2330, 10de:2331")
    assert check["detail"] == "unexpected GPU device id(s) 10de:2331: wrong gpu_profile?"
    assert result["failed_checks"] == ["nvidia_pci_ids"]


def test_a_failing_lspci_fails_the_module(monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    node.replies[LSPCI] = (1, "", "pcilib: Cannot open /proc/bus/pci\n")
    with pytest.raises(Failed) as failed:
        run(monkeypatch, node, **GPU_POLICY)
    result = failed.value.result
    assert result["msg"] == "lspci failed"
    assert (result["rc"], result["stderr"]) == (1, "pcilib: Cannot open /proc/bus/pci\n")
    assert node.commands == [LSPCI]


def test_without_sysfs_or_lspci_no_gpu_is_seen_and_the_source_says_why(
        monkeypatch: pytest.MonkeyPatch, node: Node) -> None:
    node.tools.discard("lspci")
    result = run(monkeypatch, node, **GPU_POLICY)
    assert (result["preflight"]["pci_devices"], result["preflight"]["pci_source"]) == (
        [], "unread")
    assert LSPCI not in node.commands
    assert result["failed_checks"] == ["nvidia_pci_devices"]


def test_without_sysfs_or_lspci_the_failure_names_both(monkeypatch: pytest.MonkeyPatch,
                                                       node: Node) -> None:
    node.tools.discard("lspci")
    result = run(monkeypatch, node, **GPU_POLICY)
    detail = by_name(result)["nvidia_pci_devices"]["detail"]
    assert "seating" not in detail
    assert "/sys/bus/pci/devices" in detail and "lspci" in detail


def pci_function(node: Node, address: str, vendor: str, device: str, cls: str) -> None:
    for name, value in (("vendor", vendor), ("device", device), ("class", cls)):
        node.file(f"/sys/bus/pci/devices/{address}/{name}", f"{value}\n")


def test_the_gpus_are_counted_from_sysfs_without_pciutils(monkeypatch: pytest.MonkeyPatch,
                                                          node: Node) -> None:
    # A node without lspci (a cloud image without pciutils): sysfs is what lspci reads anyway.
    node.tools.discard("lspci")
    pci_function(node, "0000:05:00.0", "0x10de", "0x22a3", "0x068000")  # NVSwitch: a bridge
    pci_function(node, "0000:2a:00.0", "0x10de", "0x2330", "0x030200")
    pci_function(node, "0000:18:00.0", "0x10de", "0x2330", "0x030200")
    pci_function(node, "0000:a0:00.0", "0x15b3", "0x1021", "0x020700")  # a ConnectX-7
    result = run(monkeypatch, node, **GPU_POLICY)
    assert result["preflight"]["pci_source"] == "sysfs"
    assert [(d["slot"], d["kind"], d["device_id"]) for d in result["preflight"]["pci_devices"]] == [
        ("0000:05:00.0", "nvswitch", "10de:22a3"), ("0000:18:00.0", "gpu", "10de:2330"),
        ("0000:2a:00.0", "gpu", "10de:2330")]
    checks = by_name(result)
    assert checks["nvidia_pci_devices"]["status"] == "pass"
    assert checks["nvidia_pci_devices"]["measured"] == 2
    assert checks["nvidia_pci_ids"]["status"] == "pass"
    assert LSPCI not in node.commands


def test_a_gpu_missing_from_sysfs_fails_the_count_naming_sysfs(monkeypatch: pytest.MonkeyPatch,
                                                               node: Node) -> None:
    pci_function(node, "0000:18:00.0", "0x10de", "0x2330", "0x030200")
    result = run(monkeypatch, node, **GPU_POLICY)
    check = by_name(result)["nvidia_pci_devices"]
    assert (check["status"], check["measured"]) == ("fail", 1)
    assert check["detail"].startswith("/sys/bus/pci/devices shows 1 NVIDIA GPU(s)")
    assert LSPCI not in node.commands  # sysfs answered: lspci is not asked


# --- clock synchronisation ---

@pytest.mark.parametrize(("tools", "virt", "timedatectl", "state", "status", "commands"), [
    ({"systemd-detect-virt", "timedatectl"}, (0, "", ""), (0, "no\n", ""), "container", "pass",
     [VIRT]),
    ({"systemd-detect-virt", "timedatectl"}, (1, "", ""), (0, "yes\n", ""), "synchronized",
     "pass", [VIRT, TIMEDATECTL]),
    ({"timedatectl"}, (0, "", ""), (0, "yes\n", ""), "synchronized", "pass", [TIMEDATECTL]),
    ({"systemd-detect-virt", "timedatectl"}, (1, "", ""), (0, "no\n", ""), "unsynchronized",
     "warn", [VIRT, TIMEDATECTL]),
    ({"timedatectl"}, (0, "", ""), (1, "", "System has not been booted with systemd\n"),
     "unknown", "warn", [TIMEDATECTL]),
    (set(), (0, "", ""), (0, "yes\n", ""), "unknown", "warn", []),
], ids=["container", "synchronized", "no-detect-virt", "unsynchronized", "timedatectl-fails",
        "no-tools"])
def test_clock_sync_warns_but_never_fails(monkeypatch: pytest.MonkeyPatch, node: Node,
                                          tools: set[str], virt: Reply, timedatectl: Reply,
                                          state: str, status: str,
                                          commands: list[str]) -> None:
    node.tools = tools
    node.replies.update({VIRT: virt, TIMEDATECTL: timedatectl})
    result = run(monkeypatch, node, supported_os=SUPPORTED)
    assert node.commands == commands
    check = by_name(result)["time_sync"]
    assert (check["measured"], check["status"]) == (state, status)
    if status == "warn":
        assert check["detail"].startswith("clock not synchronized")
    assert result["failed_checks"] == []


# --- real captures (../shared/captures), read in place ---

def test_a_real_8_gpu_lspci_capture_passes_its_profile(monkeypatch: pytest.MonkeyPatch,
                                                       node: Node, captures: Path) -> None:
    text = (captures / "lspci-nvidia" / "azure-a100-sxm4-8gpu-lspci-nn.txt").read_text()
    node.replies[LSPCI] = (0, text, "")
    result = run(monkeypatch, node, supported_os=SUPPORTED, expect_gpus=True,
                 expected_gpu_count=8, expected_pci_ids=["10de:20b2"])
    assert result["failed_checks"] == []
    assert sum(d["kind"] == "nvswitch" for d in result["preflight"]["pci_devices"]) == 6
    result = run(monkeypatch, node, supported_os=SUPPORTED, expect_gpus=True,
                 expected_gpu_count=8, expected_pci_ids=["10de:2330"])
    assert result["failed_checks"] == ["nvidia_pci_ids"]
