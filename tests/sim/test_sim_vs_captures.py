"""The simulator checked against reality: for every tool it stands in for, a real capture
(../shared/captures, see its SOURCES.tsv) and the simulator's output for the same hardware go
through the same parser, and the same fields come out: same keys, same units, same shapes.

The values differ (another host, driver, load); what must agree is what a parser or a check can
see. Skipped when the captures are absent (one summary line says how many: tests/sim/conftest.py).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpucluster.dcgm import parse_dcgmi_diag
from gpucluster.ib_sysfs import parse_ib_sysfs_flat, read_ib_sysfs
from gpucluster.ibstat import parse_ibstat
from gpucluster.nvlink import parse_nvlink_status
from gpucluster.nvsmi_xml import parse_nvidia_smi_xml
from gpucluster.topo import parse_topo_matrix
from gpucluster.validate import ib_from_ibstat

from provisioner.profiles import load_profiles
from provisioner.sim.sysfs import MARKER_NAME, write_ib_sysfs
from tests.conftest import CAPTURES
from tests.sim.conftest import Bundled, run_tool, write_node

ROOT = Path(__file__).resolve().parents[2]
MARK = "sim_vs_capture"

# Keys that name things (GPU0, NIC3, mlx5_2) rather than fields: their values are compared as one.
_NAMED = re.compile(r"\b(GPU|NIC|CPU|mlx5_|GPU )\d+\b")


def capture(kind: str, name: str) -> str:
    path = CAPTURES / kind / name
    if not path.is_file():
        pytest.skip(f"{MARK}: capture {kind}/{name} not present")
    return path.read_text(encoding="utf-8")


def shape(value: Any) -> Any:
    """The structure a consumer sees: dict keys (named entities folded into one), list element
    shapes, scalar types (``None`` is N/A, allowed anywhere: a real GPU reports N/A)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            folded = _NAMED.sub(lambda m: f"{m.group(1)}#", str(key))
            folded = re.sub(r"^\d+$", "#", folded)  # numbered entries (links, GPUs by index)
            out[folded] = merge(out[folded], shape(item)) if folded in out else shape(item)
        return out
    if isinstance(value, list):
        merged: Any = None
        for item in value:
            merged = shape(item) if merged is None else merge(merged, shape(item))
        return [merged] if value else []
    if value is None:
        return None
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else type(value).__name__


def merge(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: merge(a.get(k), b.get(k)) for k in {*a, *b}}
    if isinstance(a, list) and isinstance(b, list):
        return [merge(a[0] if a else None, b[0] if b else None)] if a or b else []
    return a if a == b else f"{a}|{b}"


def differences(sim: Any, real: Any, path: str = "") -> list[str]:
    """Where the shapes disagree; ``None`` (N/A) on either side agrees with anything."""
    if sim is None or real is None:
        return []
    if isinstance(sim, dict) and isinstance(real, dict):
        out = [f"{path}.{k}: only in the simulator" for k in sim if k not in real]
        out += [f"{path}.{k}: only in the real output" for k in real if k not in sim]
        for key in sim.keys() & real.keys():
            out += differences(sim[key], real[key], f"{path}.{key}")
        return out
    if isinstance(sim, list) and isinstance(real, list):
        return differences(sim[0], real[0], f"{path}[]") if sim and real else []
    return [] if sim == real else [f"{path}: simulator {sim}, real {real}"]


def node(root: Path, profile: str, driver: str = "550.54.15") -> dict[str, Any]:
    data = load_profiles()[profile].sim_json()
    data["hostname"] = "sim-node-1"
    write_node(root, data, driver, "12.4")
    return data


def sim_output(bundled: Bundled, root: Path, tool: str, *args: str, **params: str) -> str:
    result = run_tool(bundled(tool, **params), root, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


# --------------------------------------------------------------------------- nvidia-smi -q -x

_UNIT = re.compile(r"^-?\d+(?:\.\d+)? ?([A-Za-z/%]+)$")


def _xml_leaves(text: str) -> dict[str, str]:
    leaves: dict[str, str] = {}

    def walk(element: ET.Element, path: str) -> None:
        here = f"{path}/{element.tag}"
        children = list(element)
        if not children:
            leaves.setdefault(here, (element.text or "").strip())
        for child in children:
            walk(child, here)

    walk(ET.fromstring(text), "")
    return leaves


def same_units(sim_text: str, real_text: str) -> int:
    """Every value both print with a unit (MiB, W, MHz, C, %...) carries the same one; how
    many were compared."""
    sim_leaves, real_leaves = _xml_leaves(sim_text), _xml_leaves(real_text)
    compared = 0
    for path in sim_leaves.keys() & real_leaves.keys():
        s, r = _UNIT.match(sim_leaves[path]), _UNIT.match(real_leaves[path])
        if s and r:
            compared += 1
            assert s.group(1) == r.group(1), (path, sim_leaves[path], real_leaves[path])
    return compared


def test_nvidia_smi_xml_a100(tmp_path: Path, bundled: Bundled) -> None:
    real_text = capture("nvidia-smi-xml", "a100-sxm4-80gb-mig-535.xml")
    node(tmp_path, "hgx-a100-8gpu", driver="535.54.03")  # the capture's driver
    sim_text = sim_output(bundled, tmp_path, "nvidia_smi", "-q", "-x")
    sim, real = parse_nvidia_smi_xml(sim_text), parse_nvidia_smi_xml(real_text)
    assert differences(shape(sim), shape(real)) == []
    assert sim["gpus"][0]["name"] == real["gpus"][0]["name"] == "NVIDIA A100-SXM4-80GB"
    assert same_units(sim_text, real_text) >= 20


# --------------------------------------------------------------------------- nvidia-smi topo -m


def test_nvidia_smi_topo_h100_gpus(tmp_path: Path, bundled: Bundled) -> None:
    real = parse_topo_matrix(capture("nvidia-smi-topo", "h100-8gpu-nv18-no-nics-2numa.txt"))
    node(tmp_path, "hgx-h100-8gpu")
    sim = parse_topo_matrix(sim_output(bundled, tmp_path, "nvidia_smi", "topo", "-m"))
    gpus = [f"GPU{i}" for i in range(8)]
    assert sim["matrix"]["GPU0"]["GPU1"] == real["matrix"]["GPU0"]["GPU1"] == "NV18"
    for table in ("matrix",):
        sim_gpu = {g: {k: v for k, v in sim[table][g].items() if k in gpus} for g in gpus}
        real_gpu = {g: {k: v for k, v in real[table][g].items() if k in gpus} for g in gpus}
        assert differences(shape(sim_gpu), shape(real_gpu)) == []
    # This capture is an older driver without the GPU NUMA ID column; the rest must agree.
    sim_aff = {g: {k: v for k, v in a.items() if k != "gpu_numa_id"}
               for g, a in sim["affinity"].items()}
    assert differences(shape(sim_aff), shape(real["affinity"])) == []


def test_nvidia_smi_topo_nics_and_numa_id(tmp_path: Path, bundled: Bundled) -> None:
    real = parse_topo_matrix(capture("nvidia-smi-topo", "h100-nvl-8gpu-2nic.txt"))
    node(tmp_path, "hgx-h100-8gpu")
    sim = parse_topo_matrix(sim_output(bundled, tmp_path, "nvidia_smi", "topo", "-m"))
    assert differences(shape(sim), shape(real)) == []
    assert set(real["nic_legend"].values()) <= {f"mlx5_{i}" for i in range(8)}
    assert sorted(sim["nic_legend"].values()) == sorted(f"mlx5_{i}" for i in range(8))


# --------------------------------------------------------------------------- nvidia-smi nvlink -s


def test_nvidia_smi_nvlink_a100(tmp_path: Path, bundled: Bundled) -> None:
    real = parse_nvlink_status(capture("nvidia-smi-nvlink", "a100-sxm4-80gb-8gpu-status.txt"))
    node(tmp_path, "hgx-a100-8gpu")
    sim = parse_nvlink_status(sim_output(bundled, tmp_path, "nvidia_smi", "nvlink", "-s"))
    assert differences(shape(sim), shape(real)) == []
    assert len(sim["gpus"]) == len(real["gpus"]) == 8


def test_nvidia_smi_nvlink_h100(tmp_path: Path, bundled: Bundled) -> None:
    real = parse_nvlink_status(capture("nvidia-smi-nvlink", "h100-sxm-590-status.txt"))
    node(tmp_path, "hgx-h100-8gpu")
    sim = parse_nvlink_status(sim_output(bundled, tmp_path, "nvidia_smi", "nvlink", "-s"))
    assert differences(shape(sim), shape(real)) == []
    real_links = real["gpus"][0]["links"]
    sim_links = sim["gpus"][0]["links"]
    assert len(sim_links) == len(real_links) == 18


# --------------------------------------------------------------------------- dcgmi diag


def test_dcgmi_diag_r1_against_dcgm3(tmp_path: Path, bundled: Bundled) -> None:
    real_text = capture("dcgmi-diag", "rtxpro6000-blackwell-2gpu-r3-all-skip.txt")
    node(tmp_path, "hgx-h100-8gpu")
    sim = parse_dcgmi_diag(sim_output(bundled, tmp_path, "dcgmi", "diag", "-r", "1",
                                      version="3.3.9"))
    real = parse_dcgmi_diag(real_text)
    # Same layout; the real run is level 3, so it has more test rows than level 1.
    sim_tests, real_tests = set(sim["results"]), set(real["results"])
    assert sim_tests <= real_tests, sim_tests - real_tests
    assert differences(shape(sim), shape(real)) == [
        d for d in differences(shape(sim), shape(real)) if "only in the real output" in d]
    assert set(sim["metadata"]) <= set(real["metadata"])


def test_dcgmi_diag_result_cells_match_older_dcgm(tmp_path: Path, bundled: Bundled) -> None:
    real = parse_dcgmi_diag(capture("dcgmi-diag", "dcgm1x-r1-deployment-pass-no-footer.txt"))
    node(tmp_path, "hgx-h100-8gpu")
    sim = parse_dcgmi_diag(sim_output(bundled, tmp_path, "dcgmi", "diag", "-r", "1",
                                      version="3.3.9"))
    # DCGM 1.x named two tests differently (Blacklist, Page Retirement); each row parses the same.
    assert differences(shape(list(sim["tests"].values())),
                       shape(list(real["tests"].values()))) == []
    assert set(shape(sim["results"]).values()) == set(shape(real["results"]).values()) == {"str"}


# --------------------------------------------------------------------------- ibstat / IB sysfs


def _flatten(root: Path) -> str:
    """The tree as the captures flatten /sys/class/infiniband ('<dev>/<path>: content')."""
    lines = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != MARKER_NAME):
        lines.append(f"{path.relative_to(root)}: {path.read_text().rstrip(chr(10))}")
    return "\n".join(lines) + "\n"


def test_ib_sysfs_h100_ndr(tmp_path: Path) -> None:
    real = parse_ib_sysfs_flat(capture("infiniband-sysfs", "gpud-h100-8x-ndr-plus-bf3-bond.txt"))
    profile = load_profiles()["hgx-h100-8gpu"].sim_json()
    write_ib_sysfs(tmp_path, profile, [])
    sim = parse_ib_sysfs_flat(_flatten(tmp_path))
    # The real node also has counters the simulator does not write (hw_counters, data and
    # packet counts): the simulator may have fewer counters, never other fields.
    problems = [d for d in differences(shape(sim), shape(real))
                if not ("counters" in d and "only in the real output" in d)]
    assert problems == []
    assert shape(read_ib_sysfs(str(tmp_path))["devices"]) == shape(sim["devices"])
    real_ib = [d for d in real["devices"] if d["ports"][0]["link_layer"] == "InfiniBand"]
    assert real_ib[0]["ports"][0]["rate_gbps"] == sim["devices"][0]["ports"][0]["rate_gbps"]
    assert real_ib[0]["hca_type"] == sim["devices"][0]["hca_type"] == "MT4129"


def test_ibstat_real_and_simulated_ib_facts_agree(tmp_path: Path) -> None:
    real = ib_from_ibstat(parse_ibstat(capture("ibstat", "h100-8x-cx7-ndr-plus-bf3-bond.txt")))
    write_ib_sysfs(tmp_path, load_profiles()["hgx-h100-8gpu"].sim_json(), [])
    sim = read_ib_sysfs(str(tmp_path))
    real_port, sim_port = real["devices"][0]["ports"][0], sim["devices"][0]["ports"][0]
    # What the IB checks read, in the same units: state upper-case, rate in Gb/s, link layer.
    for key in ("state", "rate_gbps", "link_layer", "number"):
        assert key in real_port and key in sim_port, key
        assert type(real_port[key]) is type(sim_port[key]), key
    assert (real_port["state"], real_port["rate_gbps"], real_port["link_layer"]) == \
        (sim_port["state"], sim_port["rate_gbps"], sim_port["link_layer"]) == \
        ("ACTIVE", 400, "InfiniBand")


# --------------------------------------------------------------------------- nvcc --version

# No nvcc capture is in ../shared/captures: tests/fixtures/nvcc holds the five lines CUDA 12.4.1's
# nvcc prints, as published in many public build logs and install guides.
NVCC_REAL = ROOT / "tests/fixtures/nvcc/cuda-12.4.1-version.txt"


def _role_nvcc_parse(text: str) -> dict[str, str]:
    """The cuda_toolkit role's own parse of ``nvcc --version`` (its regexes, from verify.yml)."""
    tasks = yaml.safe_load((ROOT / "roles/cuda_toolkit/tasks/verify.yml").read_text())
    report = next(t for t in tasks if "cuda_toolkit_report" in t.get("ansible.builtin.set_fact", {}))
    fields = report["ansible.builtin.set_fact"]["cuda_toolkit_report"]
    out = {}
    for key in ("release", "nvcc_build"):
        pattern = re.search(r"regex_search\('([^']+)'", fields[key])
        assert pattern, key
        found = re.search(pattern.group(1).replace("\\\\", "\\"), text)
        out[key] = found.group(1) if found else ""
    out["nvcc"] = next((line for line in text.splitlines() if "release" in line), "")
    return out


def test_nvcc_version(tmp_path: Path, bundled: Bundled) -> None:
    real_text = NVCC_REAL.read_text()
    node(tmp_path, "hgx-h100-8gpu")
    sim_text = sim_output(bundled, tmp_path, "nvcc", "--version", release="12.4",
                          toolkit="12.4.1")
    real, sim = _role_nvcc_parse(real_text), _role_nvcc_parse(sim_text)
    assert real == {"release": "12.4", "nvcc_build": "12.4.131",
                    "nvcc": "Cuda compilation tools, release 12.4, V12.4.131"}
    assert sim["release"] == "12.4" and re.fullmatch(r"\d+\.\d+\.\d+", sim["nvcc_build"])
    # Same lines in the same order: what each starts with, and the build line's form.
    assert [line.split()[:2] for line in sim_text.splitlines()][1:4] == \
        [line.split()[:2] for line in real_text.splitlines()][1:4]
    assert len(sim_text.splitlines()) == len(real_text.splitlines()) == 5
    build = re.compile(r"^Build cuda_\d+\.\d+\.r\d+\.\d+/compiler\.\d+_0$")
    assert build.match(sim_text.splitlines()[-1]) and build.match(real_text.splitlines()[-1])


def test_nvidia_smi_xml_h200_against_our_device_capture(tmp_path: Path, bundled: Bundled) -> None:
    """Our own capture from a lent H200 (tests/fixtures/device-h200, driver 580.159.04): the
    simulated H200 node prints the same fields, with the same units, as the real one."""
    real_text = (ROOT / "tests/fixtures/device-h200/nvidia-smi-q-x.xml").read_text()
    node(tmp_path, "hgx-h200-8gpu", driver="580.159.04")  # the capture's driver
    sim_text = sim_output(bundled, tmp_path, "nvidia_smi", "-q", "-x")
    sim, real = parse_nvidia_smi_xml(sim_text), parse_nvidia_smi_xml(real_text)
    assert differences(shape(sim), shape(real)) == []
    for key in ("name", "memory_total_mib", "power_limit_w"):
        assert sim["gpus"][0][key] == real["gpus"][0][key], key
    assert same_units(sim_text, real_text) >= 20
