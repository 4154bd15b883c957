"""certify's burn-in tier judged (provisioner/burnin.py): copy bandwidth at and below the
profile's floors, skips that say why (no floor, no tool, MIG, no PyTorch), a hardware clock
slowdown in any sample fails naming the GPU, a new Xid fails (one from before does not), the NCCL
soak's band; the burn-in's failures are certify suspects, JUnit failures, exit 1 and drained
with --drain. The node's script (roles/certify/files/gpuc_burnin.py) runs here against the
simulated cluster's stand-ins (nvidia-smi, dcgmi, nvbandwidth) and a stand-in PyTorch and
all_reduce_perf, and its output is judged like a node's."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from provisioner import burnin, certify
from provisioner.profiles import load_profiles
from provisioner.results import HostStats, PlaybookResult
from provisioner.sim.bundle import tool_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles" / "certify" / "files" / "gpuc_burnin.py"
SIM = load_profiles()["sim-h100-8gpu"]
B200 = load_profiles()["hgx-b200-8gpu"]
REASONS = burnin.hw_slowdown_reasons()
BUS = ("19", "3B", "4C", "5D", "9B", "BB", "CB", "DB")
INDEXES = {(0, bus.lower(), "00"): i for i, bus in enumerate(BUS)}
FIELDS = ["index", "clocks.sm", "clocks_event_reasons.hw_slowdown",
          "clocks_event_reasons.hw_thermal_slowdown",
          "clocks_event_reasons.hw_power_brake_slowdown",
          "clocks_event_reasons.sw_thermal_slowdown", "temperature.gpu", "power.draw"]


def node_script() -> Any:
    spec = importlib.util.spec_from_file_location("gpuc_burnin", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_node_samples_the_reasons_the_health_policy_calls_hardware() -> None:
    # gpuc_burnin.py is copied to the node alone, so it spells them again.
    assert node_script().SAMPLE_REASONS == REASONS
    assert REASONS == ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                       "sw_thermal_slowdown")


# -- copy bandwidth -----------------------------------------------------------------------------


def pytorch_copy(**gpus: dict[str, Any]) -> dict[str, Any]:
    return {"tool": "pytorch", "gpus": {k.removeprefix("g"): v for k, v in gpus.items()}}


def test_a_copy_at_the_floor_passes_and_below_it_fails_naming_the_gpu() -> None:
    floor = SIM.copy_h2d_gbps_min
    assert floor is not None
    copy = pytorch_copy(g0={"h2d_gbps": floor, "d2h_gbps": 50.0, "d2d_gbps": 1300.0},
                        g3={"h2d_gbps": floor - 0.01, "d2h_gbps": 50.0, "d2d_gbps": 1300.0})
    checks = {c.name: c for c in burnin.judge_copy("n1", copy, SIM, INDEXES)}
    assert checks["burnin_gpu0_h2d"].status == "pass" and checks["burnin_gpu0_h2d"].gpus == ()
    bad = checks["burnin_gpu3_h2d"]
    assert (bad.status, bad.gpus, bad.measured, bad.expected) == ("fail", (3,), floor - 0.01,
                                                                  floor)
    assert "GPU 3: pytorch h2d" in bad.detail and "copy_h2d_gbps_min of sim-h100-8gpu" in bad.detail
    assert checks["burnin_gpu3_d2d"].status == "pass"


def test_a_copy_without_a_floor_or_a_tool_is_skipped_saying_why() -> None:
    copy = pytorch_copy(g0={"h2d_gbps": 50.0, "d2h_gbps": 50.0, "d2d_gbps": 1300.0})
    no_floor = B200.model_copy(update={"copy_h2d_gbps_min": None})
    checks = {c.name: c for c in burnin.judge_copy("n1", copy, no_floor, INDEXES)}
    assert checks["burnin_gpu0_h2d"].status == "skip"
    assert "profile has no floor (copy_h2d_gbps_min)" in checks["burnin_gpu0_h2d"].detail
    [skipped] = burnin.judge_copy("n1", {"tool": None, "skipped": "no copy test: nvbandwidth is "
                                         "not installed and torch 2.13.0 sees no CUDA device"},
                                  SIM, INDEXES)
    assert (skipped.name, skipped.status) == ("burnin_copy", "skip")
    assert "torch 2.13.0 sees no CUDA device" in skipped.detail


def test_nvbandwidth_output_is_mapped_to_nvidia_smi_indexes_by_bus_id() -> None:
    text = (ROOT / "tests/fixtures/nvbandwidth/h2d-d2h-local-4gpu.json").read_text()
    # nvidia-smi lists the same four GPUs in another order than the CUDA devices.
    indexes = {(0, "17", "00"): 3, (0, "31", "00"): 2, (0, "b1", "00"): 1, (0, "ca", "00"): 0}
    figures = burnin.copy_figures({"tool": "nvbandwidth", "rc": 0, "stdout": text}, indexes)
    assert figures[1]["h2d"] == pytest.approx(13.1187)  # CUDA device 2, bus b1
    l40s = load_profiles()["pcie-l40s-4gpu"]
    failed = [c for c in burnin.judge_copy("n1", {"tool": "nvbandwidth", "rc": 0, "stdout": text},
                                           l40s, indexes) if c.status == "fail"]
    assert [(c.name, c.gpus) for c in failed] == [("burnin_gpu1_h2d", (1,)),
                                                  ("burnin_gpu1_d2h", (1,))]
    [broken] = burnin.judge_copy("n1", {"tool": "nvbandwidth", "rc": 1, "stdout": "",
                                        "stderr": "CUDA_ERROR_NO_DEVICE"}, l40s, indexes)
    assert (broken.name, broken.status) == ("burnin_copy", "fail")
    assert "nvbandwidth exit 1: CUDA_ERROR_NO_DEVICE" in broken.detail


# -- DCGM ---------------------------------------------------------------------------------------


def test_a_failed_dcgm_diag_names_its_gpus_and_a_skip_says_why() -> None:
    text = (ROOT / "tests/fixtures/dcgmi-diag/r3-8gpu-memory-fail-power-warn.txt").read_text()
    [failed] = burnin.judge_dcgm("n1", {"level": 3, "rc": 226, "stdout": text})
    assert (failed.status, failed.gpus) == ("fail", (3,))
    assert failed.detail.startswith("dcgmi diag -r 3 failed (GPU 3): ")
    [garbage] = burnin.judge_dcgm("n1", {"level": 3, "rc": 255, "stdout": "",
                                         "stderr": "Error: unable to connect to host engine"})
    assert garbage.status == "fail" and "unable to connect to host engine" in garbage.detail
    passing = (ROOT / "tests/fixtures/dcgmi-diag/r1-4gpu-all-pass.txt").read_text()
    assert burnin.judge_dcgm("n1", {"level": 1, "rc": 0, "stdout": passing})[0].status == "pass"


# -- clocks under load --------------------------------------------------------------------------


def sampled(*rows: tuple[int, int, str], samples: int = 3) -> dict[str, Any]:
    """``rows``: (gpu, SM MHz, hw_slowdown value) per GPU, the same in every sample."""
    lines = [f"{gpu}, {mhz}, {hw}, Not Active, Not Active, Not Active, 61, 402.50"
             for gpu, mhz, hw in rows]
    return {"fields": FIELDS, "samples": [{"t": 5.0 * i, "phase": "matmul", "rc": 0,
                                           "lines": list(lines)} for i in range(samples)]}


def test_a_hardware_slowdown_in_any_sample_fails_naming_the_gpu() -> None:
    block = sampled((0, 1980, "Not Active"), (2, 990, "Active"))
    block["samples"][1]["lines"][0] = block["samples"][1]["lines"][0].replace(
        "Not Active, Not Active, Not Active, Not Active", "Not Active, Active, Not Active, "
        "Not Active")  # GPU 0 too hot once
    samples = burnin.parse_samples(block, REASONS)
    checks = {c.name: c for c in burnin.judge_clocks("n1", samples, [0, 1, 2], "the load")}
    assert checks["burnin_gpu2_clocks"].status == "fail"
    assert checks["burnin_gpu2_clocks"].gpus == (2,)
    assert checks["burnin_gpu2_clocks"].detail.startswith(
        "GPU 2: hw_slowdown active in 3 of 3 samples under the load (SM clock 990-990 MHz")
    assert checks["burnin_gpu0_clocks"].status == "fail"
    assert "hw_thermal_slowdown active in 1 of 3" in checks["burnin_gpu0_clocks"].detail
    assert checks["burnin_gpu1_clocks"].status == "skip"  # nvidia-smi never listed it


def test_clocks_without_a_hardware_reason_pass() -> None:
    samples = burnin.parse_samples(sampled((0, 1755, "Not Active")), REASONS)
    [check] = burnin.judge_clocks("n1", samples, [0], "the load")
    assert (check.status, check.measured) == ("pass", 0)
    assert "no hardware slowdown in 3 samples" in check.detail


# -- throughput ---------------------------------------------------------------------------------


def test_throughput_against_the_floor_and_not_measured_without_pytorch() -> None:
    floor = SIM.burn_tflops_min
    assert floor is not None
    load = {"load": "pytorch", "gpus": {
        "0": {"tflops": floor, "dtype": "torch.bfloat16", "n": 8192, "seconds": 60.0,
              "finite": True},
        "1": {"tflops": floor - 1, "dtype": "torch.bfloat16", "n": 8192, "seconds": 60.0,
              "finite": True},
        "2": {"error": "RuntimeError: CUDA error: uncorrectable ECC error encountered"},
        "3": {"tflops": 700.0, "finite": False}}}
    checks = {c.name: c for c in burnin.judge_throughput("n1", load, SIM)}
    assert checks["burnin_gpu0_tflops"].status == "pass"
    assert (checks["burnin_gpu1_tflops"].status, checks["burnin_gpu1_tflops"].gpus) == (
        "fail", (1,))
    assert "uncorrectable ECC" in checks["burnin_gpu2_tflops"].detail
    assert "non-finite" in checks["burnin_gpu3_tflops"].detail
    [no_floor] = [c for c in burnin.judge_throughput("n1", load, B200)
                  if c.name == "burnin_gpu0_tflops"]
    assert no_floor.status == "skip" and "profile has no floor (burn_tflops_min)" in no_floor.detail
    [skipped] = burnin.judge_throughput("n1", {"load": "dcgm", "why": "torch 2.13.0 sees no "
                                                                     "CUDA device"}, SIM)
    assert (skipped.name, skipped.status) == ("burnin_tflops", "skip")
    assert skipped.detail == ("throughput not measured: DCGM's diagnostic (torch 2.13.0 sees no "
                              "CUDA device)")


# -- Xid ----------------------------------------------------------------------------------------

OLD = "[  412.000003] NVRM: Xid (PCI:0000:5d:00): 79, pid=0, name=python3, GPU has fallen off"
NEW = "[ 7012.220311] NVRM: Xid (PCI:0000:4c:00): 48, pid=4242, name=python3, DBE (0x1)"


def test_a_new_xid_fails_naming_the_gpu_and_an_old_one_does_not() -> None:
    before = {"source": "dmesg", "lines": [OLD]}
    [same] = burnin.judge_xid("n1", before, {"source": "dmesg", "lines": [OLD]}, INDEXES)
    assert same.status == "pass" and "1 from before the burn-in" in same.detail
    [new] = burnin.judge_xid("n1", before, {"source": "dmesg", "lines": [OLD, NEW]}, INDEXES)
    assert (new.status, new.measured, new.gpus) == ("fail", 1, (2,))
    assert "Xid 48 on 0000:4c:00" in new.detail
    [unread] = burnin.judge_xid("n1", {"error": "dmesg: exit 1: Operation not permitted"},
                                {"lines": []}, INDEXES)
    assert unread.status == "skip" and "Operation not permitted" in unread.detail


# -- NCCL soak ----------------------------------------------------------------------------------

HEADER = """# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup iters: 5 \
iters: 20 agg iters: 1 validation: 1 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""


def soak_run(*busbw: float, wrong: int = 0, rc: int = 0) -> dict[str, Any]:
    rows = "".join(f"  1073741824     268435456     float     sum      -1   4000.0  268.00  "
                   f"{bw:.2f}  {wrong}   4000.0  268.00  {bw:.2f}  0\n" for bw in busbw)
    return {"rc": rc, "stdout": HEADER + rows, "stderr": "" if rc == 0 else "NCCL error"}


@pytest.mark.parametrize(("runs", "status", "why"), [
    ([soak_run(470, 468, 471, 469, 470), soak_run(466, 470)], "pass", "every cycle within 10%"),
    # One cycle 15% below the median: a link retrained, a GPU held down.
    ([soak_run(470, 468, 400, 469, 470)], "fail", "a cycle is not within 10%"),
    ([soak_run(470, 469)], "fail", "2 cycles measured, 3 needed"),
    ([soak_run(470, 468, 471), soak_run(300, rc=1)], "fail", "all_reduce_perf exit 1: NCCL error"),
    ([soak_run(470, 468, 471, wrong=3)], "fail", "counted wrong results at cycle 1"),
])
def test_the_soak_band(runs: list[dict[str, Any]], status: str, why: str) -> None:
    [check] = burnin.judge_soak("n1", {"binary": "/usr/local/bin/all_reduce_perf", "gpus": 8,
                                       "runs": runs})
    assert (check.name, check.status, check.gpus) == ("burnin_nccl_soak", status, ())
    assert why in check.detail


def test_the_soak_is_skipped_where_all_reduce_perf_is_absent() -> None:
    [check] = burnin.judge_soak("n1", {"skipped": "nccl-tests' all_reduce_perf is not installed"})
    assert check.status == "skip" and "not installed" in check.detail


# -- the node's script against the simulated node's tools --------------------------------------

FAKE_PYTHON = """#!/bin/sh
# A Python whose torch sees CUDA (stand-in): the probe, then each worker's figures.
case "$*" in
  *"--worker copy"*) echo '{"h2d_gbps": 55.1, "d2h_gbps": 56.3, "d2d_gbps": 1402.7}' ;;
  *"--worker matmul"*) if [ "$CUDA_VISIBLE_DEVICES" = 5 ]; then t=301.5; else t=702.4; fi
    echo "{\\"tflops\\": $t, \\"dtype\\": \\"torch.bfloat16\\", \\"n\\": 8192, \\"products\\": 400, \\"seconds\\": 1.0, \\"finite\\": true}" ;;
  *) echo '{"version": "2.13.0+cu126", "cuda": true}' ;;
esac
"""


def fake_all_reduce_perf() -> str:
    return "#!/bin/sh\ncat <<'EOF'\n" + soak_run(470, 468, 471, 469, 470)["stdout"] + "EOF\n"


@pytest.fixture
def sim_node(tmp_path: Path) -> Path:
    """A simulated GPU node: its files under tmp_path/root, its tools under tmp_path/bin."""
    root, tools = tmp_path / "root", tmp_path / "bin"
    (root / "etc/gpu-sim").mkdir(parents=True)
    (root / "etc/gpu-sim/profile.json").write_text(json.dumps(dict(SIM.sim_json(),
                                                                   hostname="sim-gpu-1")))
    (root / "usr/lib/gpu-sim").mkdir(parents=True)
    (root / "usr/lib/gpu-sim/driver-version").write_text("550.54.15\n")
    (root / "usr/lib/gpu-sim/cuda-version").write_text("12.4\n")
    (root / "var/lib/gpu-sim").mkdir(parents=True)
    (root / "var/lib/gpu-sim/dmesg").write_text(OLD + "\n")
    tools.mkdir()
    for tool, name, params in (("nvidia_smi", "nvidia-smi", {}),
                               ("dcgmi", "dcgmi", {"version": "3.3.5"}),
                               ("nvbandwidth", "nvbandwidth", {})):
        (tools / name).write_bytes(tool_script(tool, **params))
    (tools / "python").write_text(FAKE_PYTHON)
    # Not on PATH: found only where the burn-in is told to look.
    (tmp_path / "nccl-tests").mkdir()
    (tmp_path / "nccl-tests/all_reduce_perf").write_text(fake_all_reduce_perf())
    for path in [*tools.iterdir(), tmp_path / "nccl-tests/all_reduce_perf"]:
        path.chmod(0o755)
    return tmp_path


def burn_node(node: Path, *faults: str, torch: bool = False) -> dict[str, Any]:
    (node / "root/etc/gpu-sim/faults").write_text("".join(f"{f}\n" for f in faults))
    args = ["--seconds", "1", "--sample-interval", "0.2",
            "--kernel-log", str(node / "root/var/lib/gpu-sim/dmesg"),
            "--torch-python", str(node / "bin/python") if torch else "/nonexistent/python",
            "--all-reduce-perf", str(node / "nccl-tests/*_perf") if torch else "/nonexistent"]
    env = {**os.environ, "GPU_SIM_ROOT": str(node / "root"),
           "PATH": f"{node / 'bin'}:/usr/bin:/bin"}
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                         env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


def judged(result: dict[str, Any]) -> dict[str, burnin.BurnCheck]:
    checks, _ = burnin.judge_node("sim-gpu-1", {"rc": 0, "result": result, "error": ""}, SIM,
                                  REASONS)
    return {c.name: c for c in checks}


def test_the_simulated_node_passes_and_says_what_it_cannot_show(sim_node: Path) -> None:
    checks = judged(burn_node(sim_node))
    assert [c.name for c in checks.values() if c.status == "fail"] == []
    assert {c.name for c in checks.values() if c.status == "skip"} == {
        "burnin_tflops", "burnin_nccl_soak"}
    assert checks["burnin_tflops"].detail.startswith(
        "throughput not measured: DCGM's diagnostic (no Python at /nonexistent/python)")
    assert checks["burnin_gpu7_h2d"].detail.startswith("GPU 7: nvbandwidth host_to_device")
    assert checks["burnin_dcgm_diag"].status == "pass"
    assert checks["burnin_xid"].status == "pass"  # the Xid 79 was there before


def test_the_faulted_gpus_are_named_on_the_simulated_node(sim_node: Path) -> None:
    checks = judged(burn_node(sim_node, "gpu3-pcie-downgrade", "gpu2-hw-slowdown"))
    failed = {c.name: c.gpus for c in checks.values() if c.status == "fail"}
    assert failed == {"burnin_gpu3_h2d": (3,), "burnin_gpu3_d2h": (3,),
                      "burnin_gpu2_clocks": (2,)}


def test_a_driver_before_r535_is_sampled_by_the_old_names(sim_node: Path) -> None:
    (sim_node / "root/usr/lib/gpu-sim/driver-version").write_text("525.147.05\n")
    result = burn_node(sim_node, "gpu1-hw-slowdown")
    assert result["dcgm"]["sampled"]["fields"][2] == "clocks_throttle_reasons.hw_slowdown"
    failed = {c.name: c.gpus for c in judged(result).values() if c.status == "fail"}
    assert failed == {"burnin_gpu1_clocks": (1,)}


def test_mig_mode_skips_the_dcgm_diagnostic_naming_the_gpus() -> None:
    script = node_script()
    opts = script.argparse.Namespace(sample_interval=1.0, dcgm_level=3, dcgm_timeout=60.0)
    got = script.dcgm_diag(opts, [0, 5], 0.0)
    assert got == {"skipped": "MIG mode is enabled on GPU 0, 5: the DCGM diagnostic runs on "
                              "whole GPUs only here"}
    [check] = burnin.judge_dcgm("n1", got)
    assert (check.status, check.detail) == ("skip", got["skipped"])


def test_with_pytorch_the_load_is_measured_and_the_soak_runs(sim_node: Path) -> None:
    result = burn_node(sim_node, torch=True)
    assert result["copy"]["tool"] == "nvbandwidth"  # nvbandwidth first where it is installed
    assert result["load"]["load"] == "pytorch"
    checks = judged(result)
    assert checks["burnin_gpu5_tflops"].status == "fail"
    assert checks["burnin_gpu5_tflops"].gpus == (5,)
    assert checks["burnin_gpu4_tflops"].status == "pass"
    assert checks["burnin_nccl_soak"].status == "pass"
    assert "busbw 468.0-471.0 GB/s" in checks["burnin_nccl_soak"].detail
    assert checks["burnin_gpu0_clocks"].status == "pass"


def test_a_node_that_did_not_finish_is_a_failure_of_its_own() -> None:
    checks, facts = burnin.judge_node("n1", {"rc": 1, "result": None,
                                             "error": "Traceback: KeyboardInterrupt"}, SIM,
                                      REASONS)
    assert [(c.name, c.status, c.gpus) for c in checks] == [("burnin", "fail", ())]
    assert "did not run to its end on this node: Traceback" in checks[0].detail
    assert facts == {}


# -- certify --level burn-in, end to end with the playbooks stood in -----------------------------

INVENTORY = {"all": {"children": {
    "gpu_nodes": {"hosts": {name: {"gpu_profile": "sim-h100-8gpu", "ansible_host": address,
                                   "provisioner_simulated": True}
                            for name, address in (("sim-gpu-1", "192.0.2.10"),
                                                  ("sim-gpu-2", "192.0.2.11"))}},
    "cpu_nodes": {"hosts": {"sim-login-1": {"ansible_host": "192.0.2.12",
                                            "provisioner_simulated": True}}},
    "slurm_controller": {"hosts": {"sim-login-1": {}}}}}}


def test_burn_in_failures_are_suspects_junit_failures_exit_1_and_drained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sim_node: Path) -> None:
    from provisioner.plan import build

    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "hosts.yml").write_text(json.dumps(INVENTORY))
    plan = build(tmp_path / "hosts.yml")
    healthy = burn_node(sim_node)
    faulted = burn_node(sim_node, "gpu3-pcie-downgrade")
    calls: list[tuple[str, dict[str, Any]]] = []

    def playbook(name: str, _inv: Any, run_dir: Path, _ident: str, *,
                 extravars: dict[str, Any] | None = None, **_kw: Any) -> PlaybookResult:
        calls.append((name, dict(extravars or {})))
        hosts = ("sim-gpu-1", "sim-gpu-2", "sim-login-1")
        result = PlaybookResult(name, "successful", 0, 1.0, run_dir,
                                stats={h: HostStats(ok=1) for h in hosts})
        if name == certify.PLAYBOOK:
            rounds: list[dict[str, dict[str, Any]]] = (extravars or {})["certify_rounds"]
            for number, pairs in enumerate(rounds, start=1):
                for host, side in pairs.items():
                    result.reports.setdefault(host, {"certify": {"pairs": []}})
                    result.reports[host]["certify"]["pairs"].append(
                        {"round": number, "peer": side["peer"], "rc": 0,
                         "result": {"rx_gbps": 10.0}})
        elif name == burnin.PLAYBOOK:
            result.reports = {h: {"certify": {"burnin": {"rc": 0, "result": r, "error": ""}}}
                              for h, r in (("sim-gpu-1", healthy), ("sim-gpu-2", faulted))}
        return result

    monkeypatch.setattr(certify, "run_playbook", playbook)
    monkeypatch.setattr(burnin, "run_playbook", playbook)
    done = certify.run(plan, drain=True, level=certify.BURN_IN, burn_seconds=30)
    assert done.report.exit_code == 1
    section = done.report.certify or {}
    assert section["level"] == "burn-in"
    assert [(s["host"], s["component"], s["check"]) for s in section["suspects"]] == [
        ("sim-gpu-2", "gpu:3", "burnin_gpu3_h2d"), ("sim-gpu-2", "gpu:3", "burnin_gpu3_d2h")]
    assert section["suspects"][0]["evidence"][0].startswith("GPU 3: nvbandwidth host_to_device")
    assert section["burnin"]["nodes"]["sim-gpu-1"]["copy_tool"] == "nvbandwidth"
    assert section["burnin"]["soak_band"] == burnin.SOAK_BAND
    assert [name for name, _ in calls] == [certify.PLAYBOOK, burnin.PLAYBOOK,
                                           certify.DRAIN_PLAYBOOK]
    assert calls[1][1]["certify_burnin_seconds"] == 30
    raw = json.loads((done.run_dir / "burnin" / "sim-gpu-2.json").read_text())
    assert raw["result"]["copy"]["tool"] == "nvbandwidth"  # every tool's output, as published
    assert (done.run_dir / "burnin" / "sim-gpu-2.json").stat().st_mode & 0o777 == 0o600
    assert calls[1][1]["certify_burnin_hosts"] == "sim-gpu-1:sim-gpu-2"
    assert list(calls[2][1]["certify_drain"]) == ["sim-gpu-2"]
    assert calls[2][1]["certify_drain"]["sim-gpu-2"].startswith(
        "gpuc certify burnin_gpu3_h2d: gpu:3 measured ")
    junit = ET.fromstring(done.report.junit())
    failures = [case.get("name") for case in junit.iter("testcase")
                if case.find("failure") is not None]
    assert failures == ["sim-gpu-2.burnin_gpu3_h2d", "sim-gpu-2.burnin_gpu3_d2h",
                        "certify verdict"]
    skipped = {case.get("name") for case in junit.iter("testcase")
               if case.find("skipped") is not None}
    assert {"sim-gpu-1.burnin_tflops", "sim-gpu-1.burnin_nccl_soak"} <= skipped


def test_the_level_is_checked_before_anything_runs(tmp_path: Path) -> None:
    from provisioner.errors import InputError
    from provisioner.plan import build

    (tmp_path / "hosts.yml").write_text(json.dumps(INVENTORY))
    with pytest.raises(InputError, match="certify: --level must be one of quick, burn-in, "
                                         "not 'soak'"):
        certify.check_input(build(tmp_path / "hosts.yml"), 0.25, level="soak")


@pytest.mark.parametrize(("slow_times", "suspect"), [
    (2, False),  # slow twice (a loaded machine), fine the third time: no suspect
    (3, True),   # slow every time: the link is named
])
def test_a_slow_pair_is_measured_again_up_to_twice_for_longer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow_times: int, suspect: bool) -> None:
    from provisioner.plan import build

    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "hosts.yml").write_text(json.dumps(INVENTORY))
    plan = build(tmp_path / "hosts.yml")
    calls: list[dict[str, Any]] = []

    def playbook(name: str, _inv: Any, run_dir: Path, _ident: str, *,
                 extravars: dict[str, Any] | None = None, **_kw: Any) -> PlaybookResult:
        calls.append(dict(extravars or {}))
        hosts = ("sim-gpu-1", "sim-gpu-2", "sim-login-1")
        result = PlaybookResult(name, "successful", 0, 1.0, run_dir,
                                stats={h: HostStats(ok=1) for h in hosts})
        rounds: list[dict[str, dict[str, Any]]] = (extravars or {})["certify_rounds"]
        for number, pairs in enumerate(rounds, start=1):
            for host, side in pairs.items():
                slow = ({host, side["peer"]} == {"sim-gpu-1", "sim-login-1"}
                        and len(calls) <= slow_times)
                result.reports.setdefault(host, {"certify": {"pairs": []}})
                result.reports[host]["certify"]["pairs"].append(
                    {"round": number, "peer": side["peer"], "rc": 0,
                     "result": {"rx_gbps": 6.0 if slow else 12.0}})
        return result

    monkeypatch.setattr(certify, "run_playbook", playbook)
    done = certify.run(plan)
    assert [c["certify_seconds"] for c in calls] == [certify.SECONDS] + [
        certify.SECONDS * 2] * min(slow_times, certify.RETESTS)
    # Measured again: only the slow pair, in a round of its own.
    assert all(len(c["certify_rounds"]) == 1 and set(c["certify_rounds"][0]) == {
        "sim-gpu-1", "sim-login-1"} for c in calls[1:])
    section = done.report.certify or {}
    assert [s["component"] for s in section["suspects"]] == (
        ["link:sim-login-1-sim-gpu-1"] if suspect else [])
    [again] = [p for p in section["pairs"] if p["retested"]]
    assert again["first_gbps"] == 6.0 and again["gbps"] == (6.0 if suspect else 12.0)
    assert done.report.exit_code == (1 if suspect else 0)
