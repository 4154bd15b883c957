"""provisioner.detect: a hardware profile written from a machine's saved tool outputs, and what
a profile without busbw floors does (loads; smoke and inspect report busbw without judging it).

The core runs without ../shared: profiles of provisioner/data/profiles.yml rendered by the
project's simulator (nvidia-smi -q -x, nvlink -s, topo -m, the plain table and its
/sys/class/infiniband tree, flattened) and small texts built here are detected back. The real
captures in ../shared/captures (see its SOURCES.tsv; read in place, never copied) are checked
when present and skipped otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import plan as plan_mod
from provisioner import smoke_launch
from provisioner.detect import (
    DETECTED_FIELDS,
    FLOOR_FIELDS,
    Detected,
    detect_profile,
    render_profile_yaml,
)
from provisioner.errors import InputError
from provisioner.inspect import _busbw_check, check_against_profile, inspect_file
from provisioner.profiles import Profile, load_profiles
from provisioner.report import Check, Report
from provisioner.sim.bundle import tool_script
from provisioner.sim.sysfs import MARKER_NAME, write_ib_sysfs
from tests.conftest import CAPTURES
from tests.smoke.test_smoke_launch_entries import GIB, HEADER, RESULT, row

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
PROFILES = load_profiles()


# --------------------------------------------------------------------------- the simulator


@pytest.fixture(scope="module")
def smi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulated nvidia-smi as the node packages install it."""
    path = tmp_path_factory.mktemp("tools") / "nvidia-smi"
    path.write_bytes(tool_script("nvidia_smi"))
    path.chmod(0o755)
    return path


def simulated_outputs(smi: Path, base: Path, profile: dict[str, Any],
                      tools: tuple[str, ...] = ("xml", "nvlink", "topo", "ib")) -> list[Path]:
    """The simulated node's outputs for ``profile`` (sim_json), saved as files under ``base``."""
    root = base / "node"
    (root / "etc/gpu-sim").mkdir(parents=True)
    (root / "etc/gpu-sim/profile.json").write_text(json.dumps({**profile, "hostname": "n1"}))
    (root / "etc/gpu-sim/faults").write_text("")
    (root / "usr/lib/gpu-sim").mkdir(parents=True)
    (root / "usr/lib/gpu-sim/driver-version").write_text("550.54.15\n")
    (root / "usr/lib/gpu-sim/cuda-version").write_text("12.4\n")
    saved = base / "saved"
    saved.mkdir()
    args = {"xml": ("nvidia-smi-q-x.xml", ["-q", "-x"]), "nvlink": ("nvlink-s.txt", ["nvlink", "-s"]),
            "topo": ("topo-m.txt", ["topo", "-m"]), "table": ("nvidia-smi.txt", [])}
    out = []
    for tool in tools:
        if tool == "ib":
            sysfs = base / "infiniband"
            write_ib_sysfs(sysfs, profile, [])
            lines = [f"{p.relative_to(sysfs)}: {p.read_text().rstrip(chr(10))}"
                     for p in sorted(sysfs.rglob("*")) if p.is_file() and p.name != MARKER_NAME]
            (saved / "ib-sysfs.txt").write_text("\n".join(lines) + "\n")
            out.append(saved / "ib-sysfs.txt")
            continue
        name, argv = args[tool]
        ran = subprocess.run([sys.executable, "-I", "-S", str(smi), *argv],
                             env={**os.environ, "GPU_SIM_ROOT": str(root)},
                             capture_output=True, text=True, timeout=30, check=False)
        assert ran.returncode == 0, ran.stderr
        (saved / name).write_text(ran.stdout)
        out.append(saved / name)
    return out


def expected(profile: Profile) -> dict[str, Any]:
    return {key: list(v) if isinstance(v := getattr(profile, key), tuple) else v
            for key in DETECTED_FIELDS}


def no_nvlink(gpus: int) -> str:
    """`nvidia-smi nvlink -s` of GPUs without NVLink, as the real tool prints it (the simulator
    prints the GPU lines only)."""
    return "".join(f"GPU {i}: NVIDIA L40S (UUID: GPU-0000000{i}-0000-0000-0000-000000000000)\n"
                   "Device does not have or support Nvlink\n" for i in range(gpus))


def test_the_simulated_hgx_h100_is_detected_back(smi: Path, tmp_path: Path) -> None:
    profile = PROFILES["sim-h100-8gpu"]
    detected = detect_profile(simulated_outputs(smi, tmp_path, profile.sim_json()), "my-h100")
    assert detected.facts == expected(profile)
    assert detected.facts["pci_device_ids"] == ["10de:2330"]
    assert (detected.facts["nvlink_links_per_gpu"], detected.facts["nvlink_link_speed_gbps"],
            detected.facts["ib_hcas"], detected.facts["ib_rate_gbps"]) == (18, 26.562, 8, 400)
    # NVSwitch is seen, but its chip generation is in no tool output: both are left to a person.
    assert detected.missing == ["nvswitch", "nvswitch_generation"]
    assert list(detected.withheld) == ["nvswitch"]
    assert "nvswitch_generation" in detected.reasons["nvswitch_generation"]
    assert detected.sources["gpu_model"] == "nvidia-smi-q-x.xml (nvidia-smi -q -x)"
    assert detected.sources["power_limit_w"] == (
        "nvidia-smi-q-x.xml (nvidia-smi -q -x, default_power_limit)")
    assert detected.sources["pcie_gen"] == "nvidia-smi-q-x.xml (nvidia-smi -q -x, max_link_gen)"
    assert detected.sources["architecture"] == (
        "nvidia-smi-q-x.xml (nvidia-smi -q -x, product_architecture Hopper)")
    assert detected.sources["nvlink_links_per_gpu"].startswith("nvlink-s.txt (nvidia-smi nvlink -s")
    assert detected.sources["nvswitch"].startswith(
        "topo-m.txt (nvidia-smi topo -m, NV18 between every GPU pair, all 18 links")
    assert detected.sources["ib_hcas"].startswith(
        "ib-sysfs.txt (/sys/class/infiniband dump, 8 ACTIVE InfiniBand port(s) at 400 Gb/s")
    assert detected.inputs == [
        "nvidia-smi-q-x.xml (nvidia-smi -q -x)", "nvlink-s.txt (nvidia-smi nvlink -s)",
        "topo-m.txt (nvidia-smi topo -m)", "ib-sysfs.txt (/sys/class/infiniband dump)"]


def test_the_written_h100_profile_loads_once_a_person_adds_nvswitch(smi: Path,
                                                                    tmp_path: Path) -> None:
    profile = PROFILES["sim-h100-8gpu"]
    detected = detect_profile(simulated_outputs(smi, tmp_path, profile.sim_json()), "my-h100")
    text = render_profile_yaml(detected, "my-h100")
    document = yaml.safe_load(text)
    assert document["schema_version"] == 1 and list(document["profiles"]) == ["my-h100"]
    body = document["profiles"]["my-h100"]
    assert body["simulated"] is False
    assert "nvswitch" not in body and "nvswitch_generation" not in body
    assert not set(FLOOR_FIELDS) & set(body)
    assert body["sources"][0] == (
        "nvidia-smi-q-x.xml (nvidia-smi -q -x): gpu_model, gpu_count, architecture, "
        "pci_device_ids, memory_mib, power_limit_w, pcie_gen, pcie_width")
    assert body["sources"][2] == "topo-m.txt (nvidia-smi topo -m): nvswitch"
    # Each measured field carries its source beside it; the floors only appear in a comment.
    for key in DETECTED_FIELDS:
        line = next(x for x in text.splitlines() if x.lstrip(" #").startswith(f"{key}:"))
        if key == "nvswitch":
            assert line.startswith("    # nvswitch: true  # LEFT OUT, measured by topo-m.txt")
        else:
            assert line.startswith(f"    {key}: ") and f"# {detected.sources[key]}" in line
    floors = [x for x in text.splitlines() if "busbw_floor_intra_gbps" in x]
    assert len(floors) == 1 and floors[0].lstrip().startswith("# Performance floors left out")
    assert "must come from a measured healthy node or a cited source" in " ".join(
        x.lstrip(" #") for x in text.splitlines())
    path = tmp_path / "my-h100.yml"
    path.write_text(text)
    with pytest.raises(InputError, match=r"profiles\.my-h100\.nvswitch: Field required"):
        load_profiles(path)
    body.update(nvswitch=True, nvswitch_generation=3)
    path.write_text(yaml.safe_dump(document))
    loaded = load_profiles(path)["my-h100"]
    assert expected(loaded) == expected(profile)
    assert (loaded.simulated, loaded.busbw_floor_intra_gbps, loaded.busbw_floor_inter_gbps,
            loaded.ib_write_bw_floor_gbps, loaded.burn_tflops_min) == (False, None, None, 0.0, None)


def test_an_l40s_roce_node_is_written_complete_and_the_simulator_runs_it(
        smi: Path, tmp_path: Path) -> None:
    profile = PROFILES["pcie-l40s-4gpu"]
    files = simulated_outputs(smi, tmp_path, profile.sim_json(), ("xml", "topo", "ib"))
    (tmp_path / "saved" / "nvlink-s.txt").write_text(no_nvlink(4))
    detected = detect_profile([*files, tmp_path / "saved" / "nvlink-s.txt"], "l40s-box")
    assert detected.facts == expected(profile)
    assert (detected.facts["fabric"], detected.facts["ib_hcas"], detected.facts["nvswitch"],
            detected.facts["nvlink_links_per_gpu"]) == ("roce", 2, False, 0)
    assert detected.missing == [] and detected.withheld == {}
    assert detected.sources["nvswitch"] == (
        "topo-m.txt (nvidia-smi topo -m, no GPU pair joined by NVLink)")
    path = tmp_path / "l40s.yml"
    path.write_text(render_profile_yaml(detected, "l40s-box"))
    loaded = load_profiles(path)["l40s-box"]  # valid as written: nothing left to a person
    assert expected(loaded) == expected(profile)
    assert loaded.busbw_floor_intra_gbps is None and loaded.copy_h2d_gbps_min is None
    # A profile without floors drives the simulator: the floors are JSON nulls it ignores.
    sim = loaded.sim_json()
    assert '"busbw_floor_intra_gbps": null' in json.dumps(sim)
    again = detect_profile(simulated_outputs(smi, tmp_path / "again", sim, ("xml", "topo", "ib")),
                           "l40s-box")
    assert {k: again.facts[k] for k in again.facts} == {
        k: expected(profile)[k] for k in again.facts}
    assert sorted(again.missing) == ["nvlink_link_speed_gbps", "nvlink_links_per_gpu"]


def test_the_simulators_nvlink_of_gpus_without_nvlink_is_not_taken(smi: Path,
                                                                   tmp_path: Path) -> None:
    """The simulated `nvlink -s` lists GPUs without NVLink with no line under them, where the
    real tool prints "Device does not have or support Nvlink": no format matches that."""
    files = simulated_outputs(smi, tmp_path, PROFILES["pcie-l40s-4gpu"].sim_json(), ("nvlink",))
    with pytest.raises(InputError, match=r"nvlink-s\.txt: unrecognised format"):
        detect_profile(files, "x")


def test_the_plain_table_shows_less_and_says_which_power_limit(smi: Path,
                                                              tmp_path: Path) -> None:
    profile = PROFILES["sim-h100-8gpu"]
    files = simulated_outputs(smi, tmp_path, profile.sim_json(), ("table",))
    detected = detect_profile(files, "x")
    assert detected.facts == {"gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3",
                              "architecture": "hopper", "memory_mib": 81559, "power_limit_w": 700}
    assert detected.sources["power_limit_w"] == (
        "nvidia-smi.txt (nvidia-smi, Pwr:Usage/Cap: the enforced limit, not the default)")
    assert detected.sources["architecture"] == (
        "nvidia-smi.txt (nvidia-smi, from the model name 'NVIDIA H100 80GB HBM3')")
    assert detected.missing[:3] == ["pci_device_ids", "pcie_gen", "pcie_width"]
    # With the XML as well, the XML's default limit is the source; the table agrees.
    both = detect_profile(
        [*files, *simulated_outputs(smi, tmp_path / "b", profile.sim_json(), ("xml",))], "x")
    assert both.sources["power_limit_w"].endswith("(nvidia-smi -q -x, default_power_limit)")


def test_files_of_two_machines_are_refused_in_one_line(smi: Path, tmp_path: Path) -> None:
    h100 = simulated_outputs(smi, tmp_path / "a", PROFILES["sim-h100-8gpu"].sim_json(), ("xml",))
    l40s = simulated_outputs(smi, tmp_path / "b", PROFILES["pcie-l40s-4gpu"].sim_json(),
                             ("topo",))
    with pytest.raises(InputError) as caught:
        detect_profile([*h100, *l40s], "x")
    message = str(caught.value)
    assert message == ("gpu_count: nvidia-smi-q-x.xml (nvidia-smi -q -x) shows 8 but topo-m.txt "
                       "(nvidia-smi topo -m, GPU columns) shows 4; are the files of one machine?")


# --------------------------------------------------------------------------- inputs built here


def topo(n: int, links: dict[tuple[int, int], int]) -> str:
    """`nvidia-smi topo -m` of ``n`` GPUs joined by NV<links> where given, PCIe elsewhere."""
    names = [f"GPU{i}" for i in range(n)]
    lines = ["\t" + "\t".join([*names, "CPU Affinity", "NUMA Affinity"])]
    for i in range(n):
        cells = [" X " if i == j else
                 f"NV{links[(min(i, j), max(i, j))]}" if (min(i, j), max(i, j)) in links
                 else "SYS" for j in range(n)]
        lines.append("\t".join([names[i], *cells, "0-15", "0"]))
    return "\n".join(lines) + "\n"


def nvlink(n: int, links: int, speed: str = "25.000 GB/s") -> str:
    return "".join(f"GPU {i}: NVIDIA A100-SXM4-80GB (UUID: GPU-{i})\n"
                   + "".join(f"\t Link {k}: {speed}\n" for k in range(links)) for i in range(n))


def all_pairs(n: int, count: int) -> dict[tuple[int, int], int]:
    return {(i, j): count for i in range(n) for j in range(i + 1, n)}


@pytest.mark.parametrize(("matrix", "links", "nvswitch", "why"), [
    (topo(8, all_pairs(8, 12)), None, True, "NV12 between every GPU pair: more links than"),
    (topo(8, all_pairs(8, 12)), 12, True, "NV12 between every GPU pair, all 12 links"),
    (topo(4, all_pairs(4, 4)), 12, False, "NV4 between every GPU pair, 12 links a GPU: direct"),
    (topo(4, all_pairs(4, 4)), None, None, "without nvidia-smi nvlink -s a direct mesh"),
    (topo(2, {(0, 1): 12}), 12, None, "NV12 between every GPU pair of two: an NVLink bridge"),
    (topo(4, {(0, 1): 12, (2, 3): 12}), None, False, "NVLink joins GPUs in pairs (bridges)"),
    (topo(4, {(0, 1): 6, (0, 2): 6, (1, 2): 6}), None, None, "NVLink joins some GPU pairs only"),
    (topo(4, {}), None, False, "no GPU pair joined by NVLink"),
    (topo(1, {}), None, False, "one GPU"),
], ids=["8-nv12", "8-nv12-links", "4-mesh", "4-mesh-no-nvlink", "2-bridge-or-switch",
        "bridge-pairs", "partial-mesh", "pcie", "one-gpu"])
def test_nvswitch_from_topo(tmp_path: Path, matrix: str, links: int | None,
                            nvswitch: bool | None, why: str) -> None:
    files = [tmp_path / "topo.txt"]
    files[0].write_text(matrix)
    if links is not None:
        files.append(tmp_path / "nvlink.txt")
        files[1].write_text(nvlink(matrix.count("\nGPU"), links))
    detected = detect_profile(files, "x")
    assert detected.facts.get("nvswitch") is nvswitch
    text = detected.sources.get("nvswitch") if nvswitch is not None else \
        detected.reasons["nvswitch"]
    assert text is not None and why in text
    assert ("nvswitch_generation" in detected.missing) is (nvswitch is True)


def ibstat(*cas: tuple[str, str, str, int, str]) -> str:
    """ibstat of CAs ``(name, CA type, state, rate, link layer)``, one port each."""
    return "".join(
        f"CA '{name}'\n\tCA type: {kind}\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: {state}\n"
        f"\t\tPhysical state: {'LinkUp' if state == 'Active' else 'Disabled'}\n"
        f"\t\tRate: {rate}\n\t\tLink layer: {layer}\n" for name, kind, state, rate, layer in cas)


@pytest.mark.parametrize(("cas", "facts", "missing"), [
    ([("mlx5_0", "MT4123", "Active", 200, "InfiniBand"),
      ("mlx5_1", "MT4123", "Active", 200, "InfiniBand"),
      ("mlx5_2", "MT4125", "Active", 100, "Ethernet")],
     {"fabric": "infiniband", "ib_hcas": 2, "ib_rate_gbps": 200}, []),
    ([("mlx5_0", "MT4129", "Active", 400, "Ethernet"),
      ("mlx5_1", "MT4129", "Down", 10, "Ethernet")],
     {"fabric": "roce", "ib_hcas": 1, "ib_rate_gbps": 400}, []),
    ([("mlx5_0", "MT4129", "Down", 10, "InfiniBand")],
     {"fabric": "infiniband"}, ["ib_hcas", "ib_rate_gbps", "fabric"]),
    ([("irdma0", "", "Active", 100, "Ethernet")], {}, ["ib_hcas", "ib_rate_gbps", "fabric"]),
], ids=["ib-plus-ethernet", "roce-one-down", "ib-all-down", "ethernet-not-mellanox"])
def test_fabric_and_hcas_from_ibstat(tmp_path: Path, cas: list[tuple[str, str, str, int, str]],
                                     facts: dict[str, Any], missing: list[str]) -> None:
    path = tmp_path / "ibstat.txt"
    path.write_text(ibstat(*cas))
    detected = detect_profile([path], "x")
    assert {k: detected.facts[k] for k in ("fabric", "ib_hcas", "ib_rate_gbps")
            if k in detected.facts} == facts
    assert [k for k in detected.missing if k.startswith(("ib_", "fabric"))] == missing
    if "fabric" in facts and "fabric" in missing:
        # link layer shown, no ACTIVE port: fabric would need ib_hcas > 0, so it is left out
        assert detected.withheld == {
            "fabric": "fabric: infiniband needs ib_hcas > 0, which no input shows"}
        assert "# fabric: infiniband  # LEFT OUT" in render_profile_yaml(detected, "x")


def test_ibv_devinfo_counts_hcas_and_rate_with_v() -> None:
    detected = detect_profile([FIXTURES / "ibv-devinfo/cx7-ndr-ib-plus-eth-down-verbose.txt"],
                              "x")
    assert {k: detected.facts[k] for k in ("fabric", "ib_hcas", "ib_rate_gbps")} == {
        "fabric": "infiniband", "ib_hcas": 1, "ib_rate_gbps": 400}
    assert detected.sources["ib_hcas"] == (
        "cx7-ndr-ib-plus-eth-down-verbose.txt (ibv_devinfo, 1 ACTIVE InfiniBand port(s) at "
        "400 Gb/s; 1 port(s) of another link layer or vendor, not counted)")


def test_the_plain_table_fixture_and_an_unusable_log(tmp_path: Path) -> None:
    detected = detect_profile([FIXTURES / "nvidia-smi-plain/l40s-2gpu-535-capped-325w.txt",
                               FIXTURES / "nccl-tests/h100-2node-16rank-allreduce-ncclinfo.txt"],
                              "x")
    assert detected.facts == {"gpu_count": 2, "gpu_model": "NVIDIA L40S", "architecture": "ada",
                              "memory_mib": 46068, "power_limit_w": 325}
    assert detected.unused == ["h100-2node-16rank-allreduce-ncclinfo.txt (nccl-tests)"]
    assert detected.inputs == ["l40s-2gpu-535-capped-325w.txt (nvidia-smi)"]


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    lspci = tmp_path / "lspci.txt"
    lspci.write_text("19:00.0 3D controller [0302]: NVIDIA Corporation GH100 [10de:2330]\n")
    with pytest.raises(InputError) as caught:
        detect_profile([FIXTURES / "nvidia-smi-plain/l40s-2gpu-535-capped-325w.txt", lspci], "x")
    assert str(caught.value).startswith(f"{lspci}: unrecognised format; expected the saved ")
    assert "\n" not in str(caught.value)
    with pytest.raises(InputError, match=r"^detect: dmesg\.log \(dmesg-xid\) show\(s\) nothing "):
        dmesg = tmp_path / "dmesg.log"
        dmesg.write_text("[ 1.0] NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus.\n")
        detect_profile([dmesg], "x")
    with pytest.raises(InputError, match="no input files"):
        detect_profile([], "x")
    with pytest.raises(InputError, match="needs a name"):
        detect_profile([lspci], " ")
    with pytest.raises(InputError, match=r"missing\.xml: no such file"):
        detect_profile([tmp_path / "missing.xml"], "x")


def test_the_yaml_quotes_what_yaml_would_misread() -> None:
    detected = Detected(facts={"gpu_model": "yes", "fabric": "roce", "ib_hcas": 2,
                               "ib_rate_gbps": 200},
                        sources={"gpu_model": "a (b)", "fabric": "c (d)", "ib_hcas": "c (d)",
                                 "ib_rate_gbps": "c (d)"}, inputs=["a (b)", "c (d)"])
    body = yaml.safe_load(render_profile_yaml(detected, "true"))["profiles"]["true"]
    assert (body["gpu_model"], body["fabric"], body["sources"]) == (
        "yes", "roce", ["a (b): gpu_model", "c (d): ib_hcas, ib_rate_gbps, fabric"])


def test_the_repository_h200_capture_one_gpu_passed_through() -> None:
    """tests/fixtures/device-h200: one H200 of an HGX board, passed through alone."""
    here = FIXTURES / "device-h200"
    detected = detect_profile([here / "nvidia-smi-q-x.xml", here / "nvidia-smi-topo-m.txt"],
                              "h200-vm")
    h200 = PROFILES["hgx-h200-8gpu"]
    for key in ("gpu_model", "architecture", "memory_mib", "power_limit_w", "pcie_gen",
                "pcie_width"):
        assert detected.facts[key] == getattr(h200, key), key
    assert detected.facts["pci_device_ids"] == ["10de:2335"]
    assert (detected.facts["gpu_count"], detected.facts["nvswitch"]) == (1, False)
    assert detected.missing == ["nvlink_links_per_gpu", "nvlink_link_speed_gbps", "ib_hcas",
                                "ib_rate_gbps", "fabric"]


# --------------------------------------------------------------------------- real captures


def capture(relative: str) -> Path:
    if not CAPTURES.is_dir():
        pytest.skip(f"{CAPTURES} not present")
    path = CAPTURES / relative
    if not path.is_file():
        pytest.skip(f"capture {relative} not present")
    return path


# capture -> every fact detected from it alone (values read off the capture)
CAPTURE_FACTS: dict[str, dict[str, Any]] = {
    "nvidia-smi-xml/v100s-pcie-8gpu-460.xml": {
        "gpu_count": 8, "gpu_model": "Tesla V100S-PCIE-32GB", "architecture": "volta",
        "pci_device_ids": ["10de:1df6"], "memory_mib": 32510, "power_limit_w": 250,
        "pcie_gen": 3, "pcie_width": 16},
    "nvidia-smi-xml/a100-sxm4-80gb-mig-535.xml": {
        "gpu_count": 4, "gpu_model": "NVIDIA A100-SXM4-80GB", "architecture": "ampere",
        "pci_device_ids": ["10de:20b2"], "memory_mib": 81920, "power_limit_w": 500,
        "pcie_gen": 4, "pcie_width": 16},
    "nvidia-smi-xml/rtx-4000-sff-ada-595-v13.xml": {
        "gpu_count": 1, "gpu_model": "NVIDIA RTX 4000 SFF Ada Generation", "architecture": "ada",
        "pci_device_ids": ["10de:27b0"], "memory_mib": 20475, "power_limit_w": 70,
        "pcie_gen": 4, "pcie_width": 16},
    "nvidia-smi-xml/tesla-p100-pcie-510.xml": {
        "gpu_count": 1, "gpu_model": "Tesla P100-PCIE-16GB", "pci_device_ids": ["10de:15f8"],
        "memory_mib": 16384, "power_limit_w": 250, "pcie_gen": 3, "pcie_width": 16},
    "nvidia-smi-plain/h100-8gpu-550.txt": {
        "gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3", "architecture": "hopper",
        "memory_mib": 81559, "power_limit_w": 700},
    "nvidia-smi-plain/rtx6000ada-4gpu-575-ecc-off.txt": {
        "gpu_count": 4, "architecture": "ada", "memory_mib": 49140, "power_limit_w": 300},
    "nvidia-smi-nvlink/a100-sxm4-80gb-8gpu-status.txt": {
        "nvlink_links_per_gpu": 12, "nvlink_link_speed_gbps": 25.0},
    "nvidia-smi-nvlink/h100-sxm-590-status.txt": {
        "nvlink_links_per_gpu": 18, "nvlink_link_speed_gbps": 26.562},
    "nvidia-smi-nvlink/l40s-no-nvlink.txt": {
        "nvlink_links_per_gpu": 0, "nvlink_link_speed_gbps": 0.0},
    "nvidia-smi-nvlink/h200-mig-unsupported.txt": {},
    "nvidia-smi-nvlink/a100-sxm4-80gb-all-inactive.txt": {},
    "nvidia-smi-topo/h100-8gpu-nv18-no-nics-2numa.txt": {"gpu_count": 8, "nvswitch": True},
    "nvidia-smi-topo/h100-nvl-8gpu-2nic.txt": {"gpu_count": 8, "nvswitch": False},
    "nvidia-smi-topo/h100-single-gpu-ansi.txt": {"gpu_count": 1, "nvswitch": False},
    "nvidia-smi-topo/rtx6000ada-4gpu-4nic-no-nvlink.txt": {"gpu_count": 4, "nvswitch": False},
    "ibstat/h100-8x-cx7-ndr-plus-bf3-bond.txt": {
        "fabric": "infiniband", "ib_hcas": 8, "ib_rate_gbps": 400},
    "ibstat/a100-9ca-hdr-ib-plus-eth.txt": {
        "fabric": "infiniband", "ib_hcas": 8, "ib_rate_gbps": 200},
    "ibstat/h100-12ca-roce-all-active.txt": {"fabric": "roce", "ib_hcas": 8, "ib_rate_gbps": 400},
    "ibstat/h100-12ca-roce-two-down.txt": {"fabric": "roce", "ib_hcas": 6, "ib_rate_gbps": 400},
    "ibstat/cx3-mlx4-2ca-2port-fdr56.txt": {
        "fabric": "infiniband", "ib_hcas": 4, "ib_rate_gbps": 56},
    "infiniband-sysfs/gpud-h100-8x-ndr-plus-bf3-bond.txt": {
        "fabric": "infiniband", "ib_hcas": 8, "ib_rate_gbps": 400},
    "ibv_devinfo/cx3-mlx4-2hca-2port.txt": {"fabric": "infiniband", "ib_hcas": 2},
    "ibv_devinfo/cx7-4hca-ethernet-all-down.txt": {"fabric": "roce"},
}


@pytest.mark.parametrize("relative", sorted(CAPTURE_FACTS))
def test_each_capture_alone(relative: str) -> None:
    detected = detect_profile([capture(relative)], "x")
    assert detected.facts == CAPTURE_FACTS[relative]
    assert sorted(detected.sources) == sorted(detected.facts)
    assert set(detected.missing) | set(detected.facts) >= set(DETECTED_FIELDS)


def test_capture_reasons_name_what_the_output_said() -> None:
    p100 = detect_profile([capture("nvidia-smi-xml/tesla-p100-pcie-510.xml")], "x")
    assert p100.reasons["architecture"] == (
        "tesla-p100-pcie-510.xml (nvidia-smi -q -x): product_architecture Pascal is not one the "
        "profiles know (volta, turing, ampere, ada, hopper, blackwell)")
    mig = detect_profile([capture("nvidia-smi-nvlink/h200-mig-unsupported.txt")], "x")
    assert mig.reasons["nvlink_links_per_gpu"] == (
        "h200-mig-unsupported.txt (nvidia-smi nvlink -s): 1 GPU(s): nvlink -s does not answer "
        "for GPUs in MIG mode")
    cut = detect_profile([capture("nvidia-smi-plain/rtx6000ada-4gpu-575-ecc-off.txt")], "x")
    assert "cut short (NVIDIA RTX 6000 Ada Gene...)" in cut.reasons["gpu_model"]
    a100 = detect_profile([capture("nvidia-smi-xml/a100-sxm4-80gb-mig-535.xml")], "x")
    assert a100.sources["gpu_count"] == ("a100-sxm4-80gb-mig-535.xml (nvidia-smi -q -x, "
                                         "attached_gpus 4, 1 <gpu> in the file)")
    v100 = detect_profile([capture("nvidia-smi-xml/v100s-pcie-8gpu-460.xml")], "x")
    assert v100.sources["architecture"] == (
        "v100s-pcie-8gpu-460.xml (nvidia-smi -q -x, from the model name; product_architecture "
        "not shown)")


def test_captures_of_one_h100_node_agree_and_of_two_hosts_do_not() -> None:
    """ibstat and the sysfs tree of the same H100 node (SOURCES.tsv) give one answer; the two
    ConnectX-3 captures, taken with different ports up, are refused as not one machine."""
    both = detect_profile([capture("ibstat/h100-8x-cx7-ndr-plus-bf3-bond.txt"),
                           capture("infiniband-sysfs/gpud-h100-8x-ndr-plus-bf3-bond.txt")], "x")
    assert both.facts == {"fabric": "infiniband", "ib_hcas": 8, "ib_rate_gbps": 400}
    with pytest.raises(InputError, match=r"^ib_hcas: cx3-mlx4-2ca-2port-fdr56\.txt \(ibstat, 4 "
                                         r"ACTIVE InfiniBand port\(s\) at 56 Gb/s\) shows 4 but "):
        detect_profile([capture("ibv_devinfo/cx3-mlx4-2hca-2port.txt"),
                        capture("ibstat/cx3-mlx4-2ca-2port-fdr56.txt")], "x")


def test_a_mixed_set_of_captures_renders_loadable_yaml(tmp_path: Path) -> None:
    files = [capture("nvidia-smi-plain/h100-8gpu-550.txt"),
             capture("nvidia-smi-topo/h100-8gpu-nv18-no-nics-2numa.txt"),
             capture("ibstat/h100-8x-cx7-ndr-plus-bf3-bond.txt")]
    detected = detect_profile(files, "h100-node")
    body = yaml.safe_load(render_profile_yaml(detected, "h100-node"))["profiles"]["h100-node"]
    assert {k: v for k, v in body.items() if k != "sources"} == {
        "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "architecture": "hopper",
        "memory_mib": 81559, "power_limit_w": 700, "ib_hcas": 8, "ib_rate_gbps": 400,
        "fabric": "infiniband", "simulated": False}
    assert detected.missing == ["pci_device_ids", "pcie_gen", "pcie_width", "nvlink_links_per_gpu",
                                "nvlink_link_speed_gbps", "nvswitch", "nvswitch_generation"]


# --------------------------------------------------------------------------- no busbw floors


def floorless(name: str = "sim-h100-8gpu") -> Profile:
    body = PROFILES[name].model_dump(exclude={"busbw_floor_intra_gbps", "busbw_floor_inter_gbps"})
    return Profile.model_validate({**body, "name": "no-floors"})


def test_a_profile_without_busbw_floors_loads(tmp_path: Path) -> None:
    body = PROFILES["hgx-h100-8gpu"].model_dump(
        exclude={"name", "busbw_floor_intra_gbps", "busbw_floor_inter_gbps"})
    path = tmp_path / "profiles.yml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "profiles": {"no-floors": body}}))
    profile = load_profiles(path)["no-floors"]
    assert (profile.busbw_floor_intra_gbps, profile.busbw_floor_inter_gbps) == (None, None)
    assert json.loads(json.dumps(profile.sim_json()))["busbw_floor_inter_gbps"] is None
    body["busbw_floor_intra_gbps"] = 0
    path.write_text(yaml.safe_dump({"schema_version": 1, "profiles": {"zero": body}}))
    with pytest.raises(InputError, match="busbw_floor_intra_gbps: Input should be greater than 0"):
        load_profiles(path)


def nccl_facts(busbw: float, hosts: tuple[str, ...]) -> dict[str, Any]:
    return {"ranks": [{"host": h} for h in hosts],
            "rows": [{"size_bytes": GIB, "out_of_place": {"busbw_gbps": busbw},
                      "in_place": {"busbw_gbps": busbw}}]}


@pytest.mark.parametrize(("hosts", "key"), [(("a",), "busbw_floor_intra_gbps"),
                                            (("a", "b"), "busbw_floor_inter_gbps")])
def test_inspect_reports_busbw_unjudged_without_a_floor(hosts: tuple[str, ...], key: str) -> None:
    check = _busbw_check(nccl_facts(123.4, hosts), floorless())
    assert check == {
        "name": "nccl_busbw", "status": "skip", "measured": 123.4, "expected": None,
        "detail": f"busbw 123.4 GB/s at 1 GiB (the largest size), not judged: profile no-floors "
                  f"has no {key} ({'multi-node' if len(hosts) > 1 else 'single-node (or unknown hosts)'})"}


def test_inspect_of_a_saved_log_against_a_floorless_profile_fails_nothing() -> None:
    result = inspect_file(FIXTURES / "nccl-tests/h100-2node-16rank-allreduce-ncclinfo.txt")
    [check] = check_against_profile(result, floorless())
    assert (check["status"], check["expected"]) == ("skip", None)
    assert isinstance(check["measured"], float) and check["measured"] > 0
    assert "busbw_floor_inter_gbps" in check["detail"]


def test_smoke_reports_busbw_unjudged_without_a_floor(tmp_path: Path) -> None:
    reason = ("profile no-floors has no busbw_floor_intra_gbps, so busbw is reported, "
              "not judged")
    run = smoke_launch._nccl_tests_run("gpu-a", {"rc": 0, "output": HEADER + row(GIB, 50.0)},
                                   floorless())
    assert run["verdict"] == {
        "passed": True, "best_busbw_gbps": 50.0, "floor_gbps": None, "floor_skipped": reason,
        "summary": f"PASS: nccl-tests all_reduce_perf: busbw 50.00 GB/s at 1 GiB, {reason}"}
    # a failing run still fails: no floor takes nothing else away
    bad = smoke_launch._nccl_tests_run("gpu-a", {"rc": 3, "output": HEADER + row(GIB, 50.0)},
                                   floorless())
    assert bad["verdict"]["passed"] is False
    intra = smoke_launch._judge_pass("gpu-a", "intra", {"rc": 0, "result": RESULT}, None, False,
                                 tmp_path, [], reason)
    assert intra["verdict"] == {
        "passed": True, "best_busbw_gbps": 466.666666, "floor_gbps": None,
        "floor_skipped": reason,
        "summary": "PASS: correct all-reduce, DDP loss decreased, parameters identical; busbw "
                   f"466.67 GB/s at 1 GiB; floor skipped: {reason}"}


def test_the_smoke_phase_report_of_a_floorless_host(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-a": {"gpu_profile": "hgx-h100-8gpu"}}}}}}))
    cluster = plan_mod.build(inv)
    cluster.hosts["gpu-a"] = dataclasses.replace(cluster.hosts["gpu-a"],
                                                 profile=floorless("hgx-h100-8gpu"))
    reports = {"gpu-a": {"smoke_job": {"passes": {
        "intra": {"rc": 0, "result": RESULT, "log": []},
        "nccl_tests": {"rc": 0, "output": HEADER + row(GIB, 50.0)},
        "inter": {"rc": 0, "result": {**RESULT, "label": "inter-node"}, "log": []}}}}}
    report = Report("r", "smoke", "inv", simulated=False, started_at="t")
    assert smoke_launch.fold_results(cluster, report, tmp_path, reports, []) is True
    no = "so busbw is reported, not judged"
    assert report.checks == [
        Check("gpu-a", "smoke", "intra_node", "pass", 466.667, None,
              "PASS: correct all-reduce, DDP loss decreased, parameters identical; busbw 466.67 "
              f"GB/s at 1 GiB; floor skipped: profile no-floors has no busbw_floor_intra_gbps, {no}"),
        Check("gpu-a", "smoke", "nccl_tests_busbw", "skip", 50.0, None,
              "PASS: nccl-tests all_reduce_perf: busbw 50.00 GB/s at 1 GiB, profile no-floors "
              f"has no busbw_floor_intra_gbps, {no}"),
        Check("gpu-a", "smoke", "inter_node", "pass", 466.667, None,
              "PASS: correct all-reduce, DDP loss decreased, parameters identical; busbw 466.67 "
              f"GB/s at 1 GiB; floor skipped: profile no-floors has no busbw_floor_inter_gbps, {no}"),
    ]


def test_a_profile_read_from_a_simulated_node_says_so() -> None:
    from provisioner.detect import Detected, render_profile_yaml

    found = Detected(facts={"gpu_count": 8}, sources={"gpu_count": "x.xml (nvidia-smi -q -x)"},
                     inputs=["x.xml (nvidia-smi -q -x)"])
    simulated = yaml.safe_load(render_profile_yaml(found, "p", simulated=True))["profiles"]["p"]
    assert simulated["simulated"] is True
    assert yaml.safe_load(render_profile_yaml(found, "p"))["profiles"]["p"]["simulated"] is False
    assert "# SIMULATED: read from a simulated node" in render_profile_yaml(found, "p", True)
