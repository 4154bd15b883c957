"""The stand-in tools as installed (bundled, stdlib-only) and the version faults they show."""

from __future__ import annotations

import io
import json
import re
import stat
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
import yaml

from provisioner.matrix import load_matrix
from provisioner.sim import bundle
from provisioner.sim.bundle import BundleError, daemon_script, modules_of, tool_script
from provisioner.sim.stand_in_packages import all_packages
from tests.sim.conftest import Bundled, run_tool, write_faults


def node(root: Path, *faults: str, gpus: int = 4, driver: str = "580.95.05") -> Path:
    """A simulated node: profile, driver version files and the given faults."""
    (root / "etc/gpu-sim").mkdir(parents=True, exist_ok=True)
    (root / "etc/gpu-sim/profile.json").write_text(json.dumps(
        {"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": gpus, "hostname": "n1",
         "nvlink_links_per_gpu": 18}))
    (root / "usr/lib/gpu-sim").mkdir(parents=True, exist_ok=True)
    (root / "usr/lib/gpu-sim/driver-version").write_text(f"{driver}\n")
    (root / "usr/lib/gpu-sim/cuda-version").write_text("13.0\n")
    write_faults(root, *faults)
    return root


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


# --- nvcc -----------------------------------------------------------------------------------


def test_nvcc_reports_the_installed_release(tmp_path: Path, bundled: Bundled) -> None:
    nvcc = bundled("nvcc", release="12.4", toolkit="12.4.1")
    node(tmp_path)
    assert ok(run_tool(nvcc, tmp_path, "--version")) == (
        "nvcc: NVIDIA (R) Cuda compiler driver (SIMULATED)\n"
        "Copyright (c) 2005-2024 NVIDIA Corporation\n"
        "Built on Mon_Jan_01_00:00:00_UTC_2024\n"
        "Cuda compilation tools, release 12.4, V12.4.1\n"
        "Build cuda_12.4.r12.4/compiler.00000000_0\n")
    assert ok(run_tool(nvcc, tmp_path, "-V")) == ok(run_tool(nvcc, tmp_path, "--version"))
    compile_ = run_tool(nvcc, tmp_path, "-o", "x", "x.cu")
    assert compile_.returncode == 1
    assert "cannot compile on a simulated node" in compile_.stderr


def test_nvcc_other_version_reports_another_release(tmp_path: Path, bundled: Bundled) -> None:
    nvcc = bundled("nvcc", release="12.4", toolkit="12.4.1")
    node(tmp_path, "gpu1-missing", "nvcc-other-version")
    assert "release 12.5, V12.5.1\n" in ok(run_tool(nvcc, tmp_path, "--version"))
    write_faults(tmp_path, "driver-other-version")  # not nvcc's fault
    assert "release 12.4, V12.4.1\n" in ok(run_tool(nvcc, tmp_path, "--version"))


# --- nvidia-smi under driver-other-version --------------------------------------------------


def driver_views(smi: Path, root: Path) -> dict[str, str]:
    xml = ET.fromstring(ok(run_tool(smi, root, "-q", "-x")))
    table = ok(run_tool(smi, root))
    header = next(line for line in table.splitlines() if "Driver Version:" in line)
    return {
        "query": ok(run_tool(smi, root, "--query-gpu=driver_version",
                             "--format=csv,noheader")).splitlines()[0],
        "xml": xml.findtext("driver_version") or "",
        "table": header.split("Driver Version:")[1].split()[0],
        "version": ok(run_tool(smi, root, "--version")),
    }


def test_nvidia_smi_reports_the_installed_driver(tmp_path: Path, bundled: Bundled) -> None:
    views = driver_views(bundled("nvidia_smi"), node(tmp_path))
    assert views["query"] == views["xml"] == views["table"] == "580.95.05"
    assert "580.95.05" in views["version"]


def test_driver_other_version_changes_every_view_of_the_driver(tmp_path: Path,
                                                                bundled: Bundled) -> None:
    views = driver_views(bundled("nvidia_smi"), node(tmp_path, "driver-other-version"))
    assert views["query"] == views["xml"] == views["table"] == "581.95.05"
    assert "581.95.05" in views["version"] and "580.95.05" not in views["version"]
    # The installed state is untouched: only what the tool reports differs.
    assert (tmp_path / "usr/lib/gpu-sim/driver-version").read_text() == "580.95.05\n"


def test_a_missing_driver_stays_missing_under_driver_other_version(tmp_path: Path,
                                                                    bundled: Bundled) -> None:
    node(tmp_path, "driver-other-version")
    (tmp_path / "usr/lib/gpu-sim/driver-version").unlink()
    assert run_tool(bundled("nvidia_smi"), tmp_path, "-L").returncode == 9


# --- dcgmi and nvidia-ctk -------------------------------------------------------------------


def test_dcgmi_version_and_healthy_diag(tmp_path: Path, bundled: Bundled) -> None:
    dcgmi = bundled("dcgmi", version="4.2.3")
    node(tmp_path)
    assert ok(run_tool(dcgmi, tmp_path, "--version")) == "dcgmi  version: 4.2.3 (SIMULATED)\n"
    out = ok(run_tool(dcgmi, tmp_path, "diag", "-r", "1"))
    assert "| DCGM Version              | 4.2.3 (SIMULATED)" in out
    assert "Fail" not in out and out.count("| Pass ") == 9
    bad = run_tool(dcgmi, tmp_path, "stats")
    assert bad.returncode == 2 and "unsupported command: stats" in bad.stderr


def test_dcgmi_diag_fails_row_remap_for_ecc_faults(tmp_path: Path, bundled: Bundled) -> None:
    node(tmp_path, "gpu2-ecc-uncorrectable", "gpu0-ecc-uncorrectable", "gpu1-missing")
    out = run_tool(bundled("dcgmi", version="4.2.3"), tmp_path, "diag", "-r", "2")
    assert out.returncode == 226
    lines = out.stdout.splitlines()
    at = lines.index(f"| {'Page Retirement/Row Remap':<25} | {'Fail':<46} |")
    assert lines[at + 1:at + 3] == [
        f"| {'   GPU: 2':<25} | {'Fail - pending row remapping':<46} |",
        f"| {'   GPU: 0':<25} | {'Fail - pending row remapping':<46} |",
    ]


def test_nvidia_ctk_cdi_spec_omits_missing_gpus(tmp_path: Path, bundled: Bundled) -> None:
    ctk = bundled("nvidia_ctk", version="1.17.8")
    node(tmp_path, "gpu1-missing")
    assert ok(run_tool(ctk, tmp_path, "--version")) == (
        "NVIDIA Container Toolkit CLI version 1.17.8 (SIMULATED)\n")
    spec_file = tmp_path / "cdi" / "nvidia.yaml"
    ok(run_tool(ctk, tmp_path, "cdi", "generate", f"--output={spec_file}"))
    spec = yaml.safe_load(spec_file.read_text())
    assert [d["name"] for d in spec["devices"]] == ["0", "2", "3", "all"]
    assert spec["devices"][-1]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0"}, {"path": "/dev/nvidia2"}, {"path": "/dev/nvidia3"}]
    assert ok(run_tool(ctk, tmp_path, "cdi", "generate")) == spec_file.read_text()


# --- the bundles ----------------------------------------------------------------------------


def test_a_bundle_holds_the_tool_and_only_the_modules_it_imports() -> None:
    data = tool_script("nvcc", release="12.4", toolkit="12.4.1")
    assert data.startswith(b"#!/usr/bin/python3\n")
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert sorted(names) == [
        "__main__.py", "provisioner/__init__.py", "provisioner/errors.py",
        "provisioner/sim/__init__.py", "provisioner/sim/faults.py",
        "provisioner/sim/tools/__init__.py", "provisioner/sim/tools/node.py",
        "provisioner/sim/tools/nvcc.py",
    ]
    main = zipfile.ZipFile(io.BytesIO(data)).read("__main__.py").decode()
    assert "main(sys.argv[1:], **{'release': '12.4', 'toolkit': '12.4.1'})" in main


def test_bundles_are_byte_identical_for_identical_inputs() -> None:
    assert tool_script("nvidia_smi") == tool_script("nvidia_smi")
    assert tool_script("dcgmi", version="1") != tool_script("dcgmi", version="2")


def test_a_tool_importing_a_third_party_module_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = {"provisioner.sim.tools.bad": "from provisioner.sim.tools.worse import x\n",
               "provisioner.sim.tools.worse": "import yaml\nx = 1\n"}
    monkeypatch.setattr(bundle, "_source", sources.get)
    with pytest.raises(BundleError, match=re.escape(
            "provisioner.sim.tools.worse imports yaml, which is not in the standard library")):
        modules_of("provisioner.sim.tools.bad")
    with pytest.raises(BundleError, match="no such module"):
        modules_of("provisioner.sim.tools.absent")


def test_daemon_scripts() -> None:
    plain = daemon_script("nv-hostengine")
    assert plain.startswith("#!/bin/sh\n")
    assert plain.endswith('echo "nv-hostengine (SIMULATED) started"\nexec sleep infinity\n')
    persist = daemon_script("nvidia-persistenced", "/usr/bin/nvidia-smi -pm 1 || true\n")
    assert persist.endswith('started"\n/usr/bin/nvidia-smi -pm 1 || true\nexec sleep infinity\n')
    assert "@" not in plain + persist


def test_every_packaged_tool_runs_on_a_bare_python(tmp_path: Path) -> None:
    """Each executable of the matrix's simulated packages, installed with the package's other
    files on a node and run as the node runs it, reports the package's version."""
    cuda, ctk = all_packages(load_matrix())
    seen = set()
    for package in cuda + ctk:
        upstream = package.version.split(":", 1)[-1].rsplit("-", 1)[0]
        root = tmp_path / package.name / package.version
        node(root)
        for path, data in package.files.items():
            (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / path.lstrip("/")).write_bytes(data if isinstance(data, bytes)
                                                  else data.encode())
        for path, mode in package.modes.items():
            if mode & stat.S_IXUSR and isinstance(package.files[path], bytes):
                out = ok(run_tool(root / path.lstrip("/"), root, "--version"))
                assert upstream in out, (package.name, out)
                seen.add(Path(path).name)
    assert seen == {"nvidia-smi", "nvcc", "dcgmi", "nvidia-ctk", "dcgm-exporter"}
