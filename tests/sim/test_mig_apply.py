"""The node side of MIG (module_utils/gpucluster/mig.py, which the gpu_mig module and the
gpuc-mig boot program both call) against the simulated nvidia-smi of an H100 node: from MIG off
to the plan, a rerun that changes nothing, a reboot (instances and, on Hopper, the mode gone)
after which the same layout comes back with the same capability files, a change of one GPU that
leaves the others alone, MIG taken off, and the program's exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.profiles import load_profiles
from provisioner.sim.tools.node import mig_minor
from tests.sim.conftest import Bundled, run_tool, write_node

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from gpucluster import mig  # noqa: E402

PROGRAM = ROOT / "roles" / "gpu_mig" / "files" / "gpuc_mig.py"
PLAN: list[Any] = [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], ["7g.80gb"]] + [None] * 6
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


class H100:
    """A simulated H100 node under ``root`` with its driver's /proc stand-ins."""

    def __init__(self, root: Path, bundled: Bundled) -> None:
        self.root, self.tool = root, bundled("nvidia_smi")
        profile = dict(load_profiles()["sim-h100-8gpu"].sim_json(), hostname="sim-gpu-2")
        write_node(root, profile, "580.159.04", "13.0")
        self.proc = root / "proc"
        (self.proc / "driver/nvidia-caps").mkdir(parents=True)
        (self.proc / "devices").write_text("195 nvidia\n508 nvidia-caps\n")
        lines = ["config 1", "monitor 2"] + [
            f"gpu{g}/gi{i}/access {mig_minor(g, i)}\n" + "\n".join(
                f"gpu{g}/gi{i}/ci{c}/access {mig_minor(g, i, c)}" for c in range(8))
            for g in range(8) for i in range(15)]
        (self.proc / "driver/nvidia-caps/mig-minors").write_text("\n".join(lines) + "\n")
        self.dev = root / "devroot"

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        done = run_tool(self.tool, self.root, *argv[1:])
        return done.returncode, done.stdout, done.stderr

    def converge(self, planned: list[Any]) -> dict[str, Any]:
        return mig.converge(self.run, planned, "nvidia-smi", str(self.proc), str(self.dev))

    def reboot(self) -> None:
        subprocess.run(["rm", "-rf", str(self.root / "run")], check=True)


@pytest.fixture
def node(tmp_path: Path, bundled: Bundled) -> H100:
    return H100(tmp_path, bundled)


@needs_root
def test_from_off_to_the_plan_then_a_rerun_changes_nothing(node: H100) -> None:
    first = node.converge(PLAN)
    assert first["changed"] is True and first["gpus"] == [0, 1]
    names = sorted(d["name"] for d in first["devices"])
    assert names == sorted(PLAN[0] + PLAN[1])
    seven = next(d for d in first["devices"] if d["name"] == "7g.80gb")
    assert seven["files"] == ["/dev/nvidia1", f"/dev/nvidia-caps/nvidia-cap{mig_minor(1, 0)}",
                              f"/dev/nvidia-caps/nvidia-cap{mig_minor(1, 0, 0)}"]
    made = node.dev / "dev/nvidia-caps" / f"nvidia-cap{mig_minor(1, 0)}"
    assert made.is_char_device() and os.major(made.stat().st_rdev) == 508
    again = node.converge(PLAN)
    assert (again["changed"], again["gpus"], again["nodes_made"]) == (False, [], [])
    assert again["devices"] == first["devices"]


@needs_root
def test_a_reboot_loses_the_layout_and_the_same_one_comes_back(node: H100) -> None:
    before = node.converge(PLAN)["devices"]
    node.reboot()
    modes = mig.read_modes(node.run, "nvidia-smi")
    assert not any(modes.values())  # an H100 keeps no MIG mode over a reboot
    after = node.converge(PLAN)
    assert after["changed"] is True and after["devices"] == before


@needs_root
def test_changing_one_gpu_leaves_the_others_alone_and_off_is_off(node: H100) -> None:
    node.converge(PLAN)
    changed = node.converge([["7g.80gb"], ["7g.80gb"]] + [None] * 6)
    assert changed["gpus"] == [0]
    off = node.converge([None] * 8)
    assert off["gpus"] == [0, 1] and off["devices"] == []
    assert not any(mig.read_modes(node.run, "nvidia-smi").values())


def test_a_layout_the_gpu_cannot_hold_names_the_gpu(node: H100) -> None:
    # The plan refuses this; a hand-written layout file meets nvidia-smi's own refusal.
    with pytest.raises(RuntimeError, match=r"GPU 0: nvidia-smi mig -i 0 -cgi "
                                           r"3g.40gb,3g.40gb,3g.40gb -C failed"):
        node.converge([["3g.40gb"] * 3] + [None] * 7)


@needs_root
def test_the_boot_program_applies_the_file_and_says_what_it_did(node: H100,
                                                                tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "nvidia-smi"
    shim.write_text(f"#!/bin/sh\nGPU_SIM_ROOT={node.root} exec {sys.executable} -I -S "
                    f"{node.tool} \"$@\"\n")
    shim.chmod(0o755)
    lib = tmp_path / "prefix"
    (lib / "lib/gpuc-mig/gpucluster").mkdir(parents=True)
    (lib / "sbin").mkdir()
    (lib / "lib/gpuc-mig/gpucluster/mig.py").write_text(
        (ROOT / "plugins/module_utils/gpucluster/mig.py").read_text())
    program = lib / "sbin" / "gpuc-mig"
    program.write_text(PROGRAM.read_text())
    spec = tmp_path / "mig-layout.json"
    spec.write_text(json.dumps({"layout": PLAN, "proc_root": str(node.proc),
                                "dev_root": str(node.dev)}))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def gpuc_mig(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(program), *args], env=env,
                              capture_output=True, text=True, check=False, timeout=60)

    done = gpuc_mig(str(spec))
    assert (done.returncode, done.stdout) == (
        0, "gpuc-mig: 5 MIG device(s); GPUs changed: 0, 1\n"), done.stderr
    assert gpuc_mig(str(spec)).stdout == "gpuc-mig: 5 MIG device(s); GPUs changed: none\n"
    spec.write_text("{not json")
    bad = gpuc_mig(str(spec))
    assert bad.returncode == 2 and bad.stderr.startswith(f"gpuc-mig: cannot read {spec}: ")
    spec.write_text(json.dumps({"layout": [["3g.40gb"] * 3] + [None] * 7,
                                "proc_root": str(node.proc), "dev_root": str(node.dev)}))
    failed = gpuc_mig(str(spec))
    assert failed.returncode == 1 and "GPU 0: nvidia-smi" in failed.stderr, failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
