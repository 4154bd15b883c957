"""The fault registry: parsing, checks against the profile and the nodes, what each fault
writes, and `provisioner sim up` refusing a bad fault through the real entry point."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.errors import InputError
from provisioner.profiles import load_profiles
from provisioner.sim import faults
from provisioner.sim.cluster import sim_files
from provisioner.sim.faults import (
    FAULT_KINDS,
    for_node,
    kernel_log,
    other_cuda_version,
    other_driver_version,
    parse_fault,
    parse_faults,
    parse_spec,
    read_fault_file,
    validate,
)

H100 = load_profiles()["sim-h100-8gpu"].sim_json()
L40S = load_profiles()["pcie-l40s-4gpu"].sim_json()
GPU_NODES = ["sim-gpu-1", "sim-gpu-2"]
BIN = shutil.which("provisioner", path=str(Path(sys.executable).parent)) or "provisioner"

# One concrete example of every kind, with the numbers it carries.
EXAMPLES = {
    "gpu3-missing": ("missing", {"gpu": 3}),
    "gpu0-nvlink-down": ("nvlink-down", {"gpu": 0}),
    "gpu7-nvlink-link17-down": ("nvlink-link-down", {"gpu": 7, "link": 17}),
    "gpu2-ecc-uncorrectable": ("ecc-uncorrectable", {"gpu": 2}),
    "gpu5-pcie-downgrade": ("pcie-downgrade", {"gpu": 5}),
    "gpu2-hw-slowdown": ("hw-slowdown", {"gpu": 2}),
    "gpu6-xid-79": ("xid", {"gpu": 6, "xid": 79}),
    "mlx5_0-down": ("hca-down", {"hca": 0}),
    "mlx5_7-half-rate": ("hca-half-rate", {"hca": 7}),
    "mlx5_3-symbol-errors": ("hca-symbol-errors", {"hca": 3}),
    "gpu4-aer-nonfatal": ("aer-nonfatal", {"gpu": 4}),
    "nvcc-other-version": ("nvcc-other-version", {}),
    "driver-other-version": ("driver-other-version", {}),
    "kernel-newer-unbuilt": ("kernel-newer-unbuilt", {}),
    "kernel-newer-no-headers": ("kernel-newer-no-headers", {}),
    "reboot-no-return": ("reboot-no-return", {}),
    "secure-boot": ("secure-boot", {}),
    "mok-enrolled": ("mok-enrolled", {}),
    "net-slow": ("net-slow", {}),
    "net-slow-1400mbit": ("net-slow-mbit", {"mbit": 1400}),
    "mlx5_1-no-ipv4-gid": ("hca-no-ipv4-gid", {"hca": 1}),
    "mlx5_0-ecn-off": ("hca-ecn-off", {"hca": 0}),
    "mlx5_1-pfc-off": ("hca-pfc-off", {"hca": 1}),
    "gpu2-fabric-in-progress": ("fabric-in-progress", {"gpu": 2}),
    "mirror-503x2": ("mirror-503", {"count": 2}),
    "mirror-tampered-wheels": ("mirror-tampered-wheels", {}),
}


@pytest.mark.parametrize(("running", "newer"), [
    ("6.1.0-18-amd64", "6.1.1-18-amd64"),
    ("5.14.0-427.13.1.el9_4.x86_64", "5.14.1-427.13.1.el9_4.x86_64"),
    ("6.8.0-45-generic", "6.8.1-45-generic"),
    ("weird", "weird.newer"),
])
def test_the_newer_kernel_is_another_release(running: str, newer: str) -> None:
    from provisioner.sim.faults import newer_kernel

    assert newer_kernel(running) == newer


def test_every_kind_has_an_example_and_the_examples_parse_to_it() -> None:
    assert {kind for kind, _ in EXAMPLES.values()} == {kind.key for kind in FAULT_KINDS}
    for text, (key, numbers) in EXAMPLES.items():
        fault = parse_fault(text)
        assert fault is not None, text
        assert fault.kind.key == key and fault.text == text
        got = {name: getattr(fault, name) for name in ("gpu", "link", "hca", "xid", "count")}
        assert got == {name: numbers.get(name) for name in got}, text


def test_templates_are_unique_and_each_matches_only_its_own_example() -> None:
    assert len({kind.template for kind in FAULT_KINDS}) == len(FAULT_KINDS)
    for kind in FAULT_KINDS:
        matched = [text for text in EXAMPLES if re.fullmatch(kind.pattern, text)]
        assert [EXAMPLES[text][0] for text in matched] == [kind.key]
        assert kind.node_files and kind.read_by and kind.description


@pytest.mark.parametrize("text", ["gpu3-nvlnk-down", "gpu-missing", "GPU3-missing", "mlx5-down",
                                  "gpu3-missing ", "gpu3-xid-", "nvcc-other", ""])
def test_misspelled_faults_parse_to_nothing(text: str) -> None:
    assert parse_fault(text) is None
    with pytest.raises(InputError, match=r"^sim up: unknown fault"):
        parse_spec(text)


@pytest.mark.parametrize(("text", "suggestion"), [
    ("gpu3-nvlnk-down", "gpuN-nvlink-down"),
    ("gpu3-nvlink-link2-dwn", "gpuN-nvlink-linkK-down"),
    ("mlx5_1-half-rte", "mlx5_N-half-rate"),
    ("sim-gpu-2:gpu1-mising", "gpuN-missing"),
    ("nvcc-other-versoin", "nvcc-other-version"),
])
def test_a_misspelling_gets_one_line_with_the_closest_fault(text: str, suggestion: str) -> None:
    with pytest.raises(InputError) as err:
        parse_spec(text)
    message = str(err.value)
    assert "\n" not in message
    assert f"unknown fault {text!r}: did you mean {suggestion}?" in message


def test_nonsense_gets_the_list_of_faults() -> None:
    with pytest.raises(InputError) as err:
        parse_spec("reboot-everything")
    assert all(kind.template in str(err.value) for kind in FAULT_KINDS)


def test_specs_target_every_gpu_node_or_one() -> None:
    specs = validate(["gpu3-nvlink-down", "sim-gpu-2:mlx5_1-down"], H100, GPU_NODES)
    assert [(spec.node, spec.fault.text) for spec in specs] == [
        (None, "gpu3-nvlink-down"), ("sim-gpu-2", "mlx5_1-down")]
    assert [spec.text for spec in specs] == ["gpu3-nvlink-down", "sim-gpu-2:mlx5_1-down"]
    raw = [spec.text for spec in specs]
    assert for_node("sim-gpu-1", raw) == ["gpu3-nvlink-down"]
    assert for_node("sim-gpu-2", raw) == ["gpu3-nvlink-down", "mlx5_1-down"]


# Faults of a RoCE port: valid on a RoCE profile only; of a multi-node NVLink GPU: on such a
# profile only.
ROCE_ONLY = ("mlx5_1-no-ipv4-gid", "mlx5_0-ecn-off", "mlx5_1-pfc-off")
MNNVL_ONLY = ("gpu2-fabric-in-progress",)
GB200 = load_profiles()["sim-gb200-4gpu"].sim_json()


def test_every_example_is_valid_on_the_default_profile() -> None:
    others = [text for text in EXAMPLES if text not in ROCE_ONLY + MNNVL_ONLY]
    assert len(validate(others, H100, GPU_NODES)) == len(others)
    assert len(validate(ROCE_ONLY, L40S, GPU_NODES)) == len(ROCE_ONLY)
    assert len(validate(MNNVL_ONLY, GB200, GPU_NODES)) == len(MNNVL_ONLY)


@pytest.mark.parametrize(("profile", "text", "message"), [
    (H100, "gpu8-missing", "profile sim-h100-8gpu has 8 GPUs (gpu0..gpu7)"),
    (H100, "gpu0-nvlink-link18-down", "has 18 NVLinks per GPU (link0..link17)"),
    (H100, "mlx5_8-down", "profile sim-h100-8gpu has 8 HCAs (mlx5_0..mlx5_7)"),
    (H100, "gpu1-xid-0", "an Xid code is a positive number"),
    (L40S, "gpu4-pcie-downgrade", "profile pcie-l40s-4gpu has 4 GPUs (gpu0..gpu3)"),
    (L40S, "gpu0-nvlink-down", "profile pcie-l40s-4gpu has no NVLink"),
    (L40S, "gpu0-nvlink-link0-down", "profile pcie-l40s-4gpu has no NVLink"),
    (L40S, "mlx5_2-half-rate", "profile pcie-l40s-4gpu has 2 HCAs (mlx5_0..mlx5_1)"),
    ({**L40S, "fabric": "ethernet"}, "mlx5_0-down", "has 0 HCAs"),
])
def test_indexes_beyond_the_profile_are_refused(profile: dict[str, object], text: str,
                                                message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        validate([text], profile, GPU_NODES)


def test_unknown_and_non_gpu_nodes_are_refused() -> None:
    with pytest.raises(InputError, match="sim-gpu-3 is not a node of this cluster; the GPU "
                                         "nodes are sim-gpu-1, sim-gpu-2"):
        validate(["sim-gpu-3:gpu0-missing"], H100, GPU_NODES, ["sim-login-1"])
    with pytest.raises(InputError, match="sim-login-1 is not a GPU node"):
        validate(["sim-login-1:gpu0-missing"], H100, GPU_NODES, ["sim-login-1"])
    with pytest.raises(InputError, match="unknown fault ':gpu0-missing'"):
        validate([":gpu0-missing"], H100, GPU_NODES)


def test_the_node_file_reader_skips_comments_blanks_and_junk() -> None:
    text = "gpu1-missing  # fell off\n\n# a comment\nnot-a-fault\nmlx5_0-down\n"
    assert [f.text for f in read_fault_file(text)] == ["gpu1-missing", "mlx5_0-down"]
    assert parse_faults(["  gpu2-xid-48 ", "bogus"])[0].xid == 48


def test_kernel_log_has_one_dmesg_line_per_xid_fault_on_the_gpus_bus() -> None:
    log = kernel_log(parse_faults(["gpu0-xid-79", "gpu1-missing", "gpu9-xid-48"]))
    assert log.splitlines() == [
        "[  412.000000] NVRM: Xid (PCI:0000:19:00): 79, pid=0, name=python3, SIMULATED fault "
        "injected by gpu-cluster-provisioner",
        "[  412.000009] NVRM: Xid (PCI:0000:e9:00): 48, pid=0, name=python3, SIMULATED fault "
        "injected by gpu-cluster-provisioner",
    ]


def test_other_versions_differ_from_the_installed_ones() -> None:
    assert other_driver_version("550.54.15") == "551.54.15"
    assert other_driver_version("580.95.05") == "581.95.05"
    assert other_cuda_version("12.4") == "12.5"
    assert other_cuda_version("12.4.1") == "12.5.1"
    assert other_cuda_version("13.0") == "13.1"
    assert other_cuda_version("13") == "13.1"


def test_sim_files_write_the_fault_file_kernel_log_and_ib_tree() -> None:
    written = {path: data for path, data, _ in sim_files(
        "gpu_nodes", dict(H100, hostname="n1"),
        ["gpu2-xid-31", "mlx5_3-down", "nvcc-other-version"], "6.1.0-test")}
    assert written["etc/gpu-sim/faults"] == b"gpu2-xid-31\nmlx5_3-down\nnvcc-other-version\n"
    assert b"NVRM: Xid (PCI:0000:4c:00): 31," in (written["var/lib/gpu-sim/dmesg"] or b"")
    ib = "var/lib/gpu-sim/sysfs/class/infiniband"
    assert written[f"{ib}/mlx5_3/ports/1/state"] == b"1: DOWN\n"
    assert written[f"{ib}/mlx5_2/ports/1/state"] == b"4: ACTIVE\n"


def test_help_lists_every_fault_and_how_to_change_a_header() -> None:
    text = faults.help_text()
    for kind in FAULT_KINDS:
        assert re.search(rf"^  {re.escape(kind.template)} +\S", text, re.M), kind.template
    assert "nccl.h" in text and "cudnn_version" in text
    assert max(len(line) for line in text.splitlines()) <= 79


# --- through the real entry point ---------------------------------------------------------


def fake_podman(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose only podman records that it was called (and fails)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    called = tmp_path / "podman-was-called"
    podman = bindir / "podman"
    podman.write_text(f"#!/bin/sh\necho \"$@\" >> {called}\nexit 125\n")
    podman.chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
           "COLUMNS": "200"}
    return env, called


@pytest.mark.parametrize(("args", "message"), [
    (["--fault", "gpu3-nvlnk-down"],
     "error: sim up: unknown fault 'gpu3-nvlnk-down': did you mean gpuN-nvlink-down? "
     "(`provisioner sim up --help` describes them)"),
    (["--fault", "gpu1-missing", "--fault", "gpu8-missing"],
     "error: sim up: fault 'gpu8-missing': profile sim-h100-8gpu has 8 GPUs (gpu0..gpu7)"),
    (["--nodes", "2", "--fault", "sim-gpu-2:mlx5_0-down"],
     "error: sim up: fault 'sim-gpu-2:mlx5_0-down': sim-gpu-2 is not a node of this cluster; "
     "the GPU nodes are sim-gpu-1"),
])
def test_sim_up_refuses_a_bad_fault_in_one_line_before_podman(
        tmp_path: Path, args: list[str], message: str) -> None:
    env, called = fake_podman(tmp_path)
    out = subprocess.run([BIN, "sim", "up", "--inventory-dir", str(tmp_path / "inv"), *args],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.splitlines() == [message]
    assert out.stdout == ""
    assert not called.exists(), "podman ran before the faults were checked"
    assert not (tmp_path / "inv").exists()


def test_sim_up_help_lists_the_registry() -> None:
    out = subprocess.run([BIN, "sim", "up", "--help"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0
    assert faults.help_text() in out.stdout


def test_the_readme_names_every_fault() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert [kind.template for kind in FAULT_KINDS if f"`{kind.template}`" not in readme] == []


def test_the_mirror_fault_is_the_clusters_not_a_nodes() -> None:
    fault = parse_fault("mirror-503x2")
    assert fault is not None and fault.kind.target == "mirror" and fault.count == 2
    raw = [spec.text for spec in validate(["mirror-503x2", "gpu3-nvlink-down"], H100, GPU_NODES)]
    # No node gets it in its fault file; the mirror's file gets one STATUS COUNT line.
    assert for_node("sim-gpu-1", raw) == ["gpu3-nvlink-down"]
    assert faults.mirror_fault_text(raw) == "503 2\n"
    assert faults.mirror_fault_text(["gpu3-nvlink-down"]) == ""
    with pytest.raises(InputError, match=re.escape(
            "mirror-503xN is the package mirror's, not a node's: give it without a node "
            "(--fault mirror-503x2)")):
        validate(["sim-gpu-1:mirror-503x2"], H100, GPU_NODES)


def test_the_tampered_wheels_fault_is_the_mirrors_and_gets_its_own_line() -> None:
    from provisioner.sim.tools import mirror_server

    fault = parse_fault("mirror-tampered-wheels")
    assert fault is not None and fault.kind.target == "mirror" and fault.count is None
    raw = [spec.text for spec in validate(
        ["mirror-tampered-wheels", "mirror-503x2", "gpu3-nvlink-down"], H100, GPU_NODES)]
    assert for_node("sim-gpu-1", raw) == ["gpu3-nvlink-down"]
    assert faults.mirror_fault_text(raw) == "tamper-wheels\n503 2\n"
    assert faults.mirror_fault_text(["mirror-tampered-wheels"]) == "tamper-wheels\n"
    assert faults.mirror_fault_text(["mirror-tampered-wheels"] * 2) == "tamper-wheels\n"
    # The server, which cannot import this module on the mirror, reads the same line.
    assert faults.MIRROR_TAMPER_WHEELS == mirror_server.TAMPER_WHEELS
    assert "attacker" in faults.help_text()
    with pytest.raises(InputError, match=re.escape(
            "mirror-tampered-wheels is the package mirror's, not a node's: give it without a "
            "node (--fault mirror-tampered-wheels)")):
        validate(["sim-gpu-1:mirror-tampered-wheels"], H100, GPU_NODES)


@pytest.mark.parametrize(("lines", "mbit", "burst"), [
    (["net-slow"], 200, 256),
    # 4 ms of 1400 Mbit/s is 700 kB: tbf needs at least rate/HZ in its bucket.
    (["net-slow-1400mbit"], 1400, 700),
    (["net-slow", "net-slow-900mbit"], 900, 450),
    # Without a slow fault (or healed of one), the line rate every node has.
    (["gpu0-missing"], 2000, 1000),
    ([], 2000, 1000),
])
def test_the_slow_network_faults_set_the_token_bucket_below_the_line_rate(
        lines: list[str], mbit: int, burst: int) -> None:
    from provisioner.sim.faults import net_slow_script, parse_faults

    assert net_slow_script(parse_faults(lines)) == (
        f"echo {mbit} > /etc/gpu-sim/eth0-rate-mbit; tc qdisc replace dev eth0 root tbf "
        f"rate {mbit}mbit burst {burst}kb latency 100ms")


@pytest.mark.parametrize(("mbit", "burst"), [(200, 256), (513, 256), (2000, 1000)])
def test_the_boot_script_gives_the_same_bucket_as_the_fault(mbit: int, burst: int) -> None:
    """The node's boot applies the rate in its file with the shell's arithmetic: the same
    command the controller gives a running node."""
    import subprocess

    from provisioner.sim.faults import tc_command

    shell = subprocess.run(["sh", "-c", f'rate={mbit}; echo "{tc_command("${rate}")}"'],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert shell == tc_command(mbit)
    assert f"burst {burst}kb" in shell


@pytest.mark.parametrize("fault", ["net-slow-0mbit", "net-slow-2000mbit", "net-slow-6000mbit"])
def test_a_rate_of_zero_or_not_below_the_line_rate_is_refused_in_one_line(fault: str) -> None:
    from provisioner.errors import InputError
    from provisioner.sim.faults import validate

    with pytest.raises(InputError, match=r"positive number of Mbit/s below the simulated line "
                                         r"rate \(2000 Mbit/s\)"):
        validate([f"sim-gpu-1:{fault}"], {"name": "p", "gpu_count": 8}, ["sim-gpu-1"])
