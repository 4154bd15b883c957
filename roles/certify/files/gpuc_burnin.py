"""gpuc_burnin: the burn-in tier of `provisioner certify` on one GPU node (gpu-cluster-provisioner).

Runs, in order, and prints one JSON document with what each step measured, raw (the controller
judges it: provisioner/burnin.py):

1. the kernel log's Xid lines before anything runs;
2. copy bandwidth per GPU: NVIDIA's ``nvbandwidth -t host_to_device_memcpy_ce
   device_to_host_memcpy_ce device_local_copy -j`` where it is installed, else this script's
   PyTorch copy test (``--worker copy``, one process per GPU) under the Python given by
   ``--torch-python`` when its torch sees CUDA, else nothing (said why);
3. ``dcgmi diag -r LEVEL`` (skipped on a node without dcgmi, or with MIG mode enabled on a GPU),
   sampled with nvidia-smi every ``--sample-interval`` seconds while it runs;
4. a sustained load of ``--seconds``: the PyTorch matrix-product loop (``--worker matmul``, one
   process per GPU, every GPU at once) when torch sees CUDA, sampled the same way; without it,
   the DCGM diagnostic of step 3 was the load (or, without either, the GPUs are sampled idle);
5. an NCCL all-reduce soak of ``--seconds`` with nccl-tests' all_reduce_perf (the first of
   ``--all-reduce-perf`` that exists, else on PATH; 1 GiB, every GPU, ``-N`` cycles per run,
   runs repeated until the time is up), skipped where there is none;
6. the kernel log's Xid lines again.

CUDA numbers devices in PCI bus order here (CUDA_DEVICE_ORDER=PCI_BUS_ID), as nvidia-smi does,
and each worker sees one GPU (CUDA_VISIBLE_DEVICES). Read-only: run by Ansible's script module
(copied, run, removed); the workers re-run this file under the torch Python while it is there.
Standard library only outside the workers (which import torch).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

NVBANDWIDTH_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_local_copy")
# What is sampled while the GPUs are loaded (nvidia-smi --help-query-gpu): r535 renamed the
# clock throttle reasons to clock event reasons and still takes the old names, older drivers
# take only the old ones.
SAMPLE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                  "sw_thermal_slowdown")
SAMPLE_PREFIXES = ("clocks_event_reasons", "clocks_throttle_reasons")
# The soak: one large size (nccl-tests' busbw is flat from 1 GiB on), 20 iterations a cycle,
# 5 cycles a run, each cycle one row of the table (nccl-tests -N).
SOAK_ARGS = ("-b", "1G", "-e", "1G", "-f", "2", "-g", "1", "-n", "20", "-w", "5", "-N", "5")
KEEP = 20000  # characters of a tool's output kept (its end)
CUDA_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def run_tool(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a tool; its exit code (127: not found, 124: timed out), output ends and duration."""
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})}, check=False)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except FileNotFoundError as exc:
        rc, out, err = 127, "", str(exc)
    except subprocess.TimeoutExpired as exc:
        rc = 124
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        err = f"timed out after {timeout:g} s"
    return {"argv": argv, "rc": rc, "stdout": out[-KEEP:], "stderr": (err or "")[-2000:],
            "seconds": round(time.monotonic() - started, 2)}


def list_gpus() -> dict[str, Any]:
    """The GPUs as nvidia-smi indexes them, with their PCI bus id and MIG mode."""
    answer = run_tool(["nvidia-smi", "--query-gpu=index,pci.bus_id,mig.mode.current",
                       "--format=csv,noheader"], 60)
    if answer["rc"] != 0:
        return {"error": f"nvidia-smi exit {answer['rc']}: "
                         f"{(answer['stdout'] + answer['stderr']).strip()[-300:]}", "gpus": []}
    gpus = []
    for line in answer["stdout"].splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            gpus.append({"index": int(parts[0]), "bus_id": parts[1],
                         "mig": parts[2] == "Enabled"})
    return {"gpus": gpus}


def xid_lines(kernel_log: str) -> dict[str, Any]:
    """The kernel log's NVRM Xid lines: ``kernel_log`` when given, else journalctl -k -b,
    else dmesg."""
    if kernel_log:
        try:
            with open(kernel_log, encoding="utf-8", errors="replace") as handle:
                text, source = handle.read(), kernel_log
        except OSError as exc:
            return {"error": f"cannot read {kernel_log}: {exc.strerror or exc}"}
    else:
        answer = run_tool(["journalctl", "-k", "-b", "--no-pager"], 120)
        source = "journalctl -k -b"
        if answer["rc"] != 0:
            answer, source = run_tool(["dmesg"], 120), "dmesg"
        if answer["rc"] != 0:
            return {"error": f"{source}: exit {answer['rc']}: {answer['stderr'].strip()[-200:]}"}
        text = answer["stdout"]
    return {"source": source, "lines": [line for line in text.splitlines()
                                        if "NVRM: Xid" in line]}


class Sampler(threading.Thread):
    """nvidia-smi --query-gpu every ``interval`` seconds until stopped: one sample at the
    start, one at the stop, the others in between."""

    def __init__(self, interval: float, phase: str, started: float) -> None:
        super().__init__(daemon=True)
        self.interval, self.phase, self.started = interval, phase, started
        self.samples: list[dict[str, Any]] = []
        self.fields: list[str] | None = None
        self.halt = threading.Event()

    def _query(self, prefix: str) -> tuple[list[str], dict[str, Any]]:
        fields = ["index", "clocks.sm", *[f"{prefix}.{r}" for r in SAMPLE_REASONS],
                  "temperature.gpu", "power.draw"]
        return fields, run_tool(["nvidia-smi", f"--query-gpu={','.join(fields)}",
                                 "--format=csv,noheader,nounits"], 30)

    def sample(self) -> None:
        for prefix in SAMPLE_PREFIXES if self.fields is None else (self.fields[2].split(".")[0],):
            fields, answer = self._query(prefix)
            if answer["rc"] == 0 or "not a valid field" not in answer["stdout"] + answer["stderr"]:
                break
        self.fields = fields
        self.samples.append({"t": round(time.monotonic() - self.started, 1), "phase": self.phase,
                             "rc": answer["rc"], "lines": answer["stdout"].splitlines()[:64]})

    def run(self) -> None:
        self.sample()
        while not self.halt.wait(self.interval):
            self.sample()
        self.sample()

    def stop(self) -> dict[str, Any]:
        self.halt.set()
        self.join()
        return {"fields": self.fields, "samples": self.samples}


def torch_probe(python: str) -> dict[str, Any]:
    """Whether ``python`` has torch and torch sees CUDA."""
    if not python or not os.access(python, os.X_OK):
        return {"python": python, "cuda": False, "why": f"no Python at {python or '(none)'}"}
    answer = run_tool([python, "-c", "import json, torch; print(json.dumps({'version': "
                       "torch.__version__, 'cuda': torch.cuda.is_available()}))"], 300, CUDA_ENV)
    try:
        found = json.loads(answer["stdout"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"python": python, "cuda": False,
                "why": f"{python} has no usable torch ({answer['stderr'].strip()[-200:]})"}
    why = "" if found["cuda"] else f"torch {found['version']} sees no CUDA device"
    return {"python": python, "cuda": bool(found["cuda"]), "version": found["version"],
            "why": why}


def workers(python: str, mode: str, gpus: list[int], seconds: float) -> dict[str, Any]:
    """This file's ``--worker MODE`` under ``python``, one process per GPU, all at once."""
    procs = {}
    for index in gpus:
        env = {**os.environ, **CUDA_ENV, "CUDA_VISIBLE_DEVICES": str(index)}
        procs[index] = subprocess.Popen(
            [python, os.path.abspath(__file__), "--worker", mode, "--seconds", str(seconds)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out = {}
    for index, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=seconds + 600)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        lines = stdout.strip().splitlines()
        try:
            out[str(index)] = json.loads(lines[-1]) if lines else {"error": stderr[-300:]}
        except ValueError:
            out[str(index)] = {"error": (stdout + stderr).strip()[-300:]}
        if proc.returncode and "error" not in out[str(index)]:
            out[str(index)]["error"] = f"exit {proc.returncode}: {stderr.strip()[-300:]}"
    return out


def copy_test(opts: argparse.Namespace, torch: dict[str, Any], gpus: list[int]) -> dict[str, Any]:
    tool = shutil.which(opts.nvbandwidth) or (opts.nvbandwidth if os.access(
        opts.nvbandwidth, os.X_OK) else None)
    if tool:
        answer = run_tool([tool, "-t", *NVBANDWIDTH_TESTS, "-j"], 1800, CUDA_ENV)
        return {"tool": "nvbandwidth", **answer}
    if torch["cuda"]:
        return {"tool": "pytorch", "gpus": workers(torch["python"], "copy", gpus, 0)}
    return {"tool": None, "skipped": f"no copy test: {opts.nvbandwidth} is not installed and "
                                     f"{torch['why']}"}


def dcgm_diag(opts: argparse.Namespace, mig: list[int], started: float) -> dict[str, Any]:
    if mig:
        return {"skipped": f"MIG mode is enabled on GPU {', '.join(map(str, mig))}: the DCGM "
                           "diagnostic runs on whole GPUs only here"}
    if not shutil.which("dcgmi"):
        return {"skipped": "dcgmi is not installed (NVIDIA DCGM)"}
    sampler = Sampler(opts.sample_interval, "dcgm", started)
    sampler.start()
    answer = run_tool(["dcgmi", "diag", "-r", str(opts.dcgm_level)], opts.dcgm_timeout)
    return {"level": opts.dcgm_level, **answer, "sampled": sampler.stop()}


def load(opts: argparse.Namespace, torch: dict[str, Any], gpus: list[int],
         diag: dict[str, Any], started: float) -> dict[str, Any]:
    if torch["cuda"]:
        sampler = Sampler(opts.sample_interval, "matmul", started)
        sampler.start()
        result = workers(torch["python"], "matmul", gpus, opts.seconds)
        return {"load": "pytorch", "gpus": result, "sampled": sampler.stop()}
    if "sampled" in diag:
        return {"load": "dcgm", "why": torch["why"]}
    sampler = Sampler(opts.sample_interval, "idle", started)
    sampler.start()
    time.sleep(opts.seconds)
    return {"load": None, "why": f"{torch['why']}; {diag.get('skipped', 'no DCGM')}",
            "sampled": sampler.stop()}


def soak(opts: argparse.Namespace, count: int) -> dict[str, Any]:
    found = [path for pattern in opts.all_reduce_perf for path in sorted(glob.glob(pattern))
             if os.access(path, os.X_OK)] + [p for p in [shutil.which("all_reduce_perf")] if p]
    if not found:
        return {"skipped": "nccl-tests' all_reduce_perf is not installed (looked at "
                           f"{', '.join(opts.all_reduce_perf) or '-'} and PATH)"}
    if count < 1:
        return {"skipped": "no GPU to run all_reduce_perf on"}
    runs: list[dict[str, Any]] = []
    end = time.monotonic() + opts.seconds
    while not runs or (time.monotonic() < end and runs[-1]["rc"] == 0):
        answer = run_tool([found[0], *SOAK_ARGS, "-t", str(count)], opts.seconds + 600, CUDA_ENV)
        answer["stdout"] = "\n".join(line for line in answer["stdout"].splitlines()
                                     if "NCCL INFO" not in line)[-KEEP:]
        runs.append(answer)
    return {"binary": found[0], "gpus": count, "runs": runs}


def burn_in(opts: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    result: dict[str, Any] = {"seconds": opts.seconds, "xid_before": xid_lines(opts.kernel_log)}
    listed = list_gpus()
    result["gpus"] = listed
    whole = [g["index"] for g in listed["gpus"] if not g["mig"]]
    torch = torch_probe(opts.torch_python)
    result["torch"] = torch
    result["copy"] = copy_test(opts, torch, whole)
    result["dcgm"] = dcgm_diag(opts, [g["index"] for g in listed["gpus"] if g["mig"]], started)
    result["load"] = load(opts, torch, whole, result["dcgm"], started)
    result["soak"] = soak(opts, len(whole))
    result["xid_after"] = xid_lines(opts.kernel_log)
    return result


def worker(mode: str, seconds: float) -> dict[str, Any]:
    """One GPU (CUDA_VISIBLE_DEVICES): ``copy`` (pinned host <-> device and device-local
    copies of 256 MiB, each timed over 10 copies with CUDA events, GB/s of 10^9 bytes) or
    ``matmul`` (dense 8192x8192 products, BF16 from compute capability 8.0 on, else FP16, for
    ``seconds``: TFLOPS = 2 n^3 per product)."""
    import torch

    if mode == "copy":
        size = 256 << 20
        host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        one = torch.empty(size, dtype=torch.uint8, device="cuda")
        two = torch.empty_like(one)

        def rate(copy: Any) -> float:
            copy()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _copy in range(10):
                copy()
            stop.record()
            stop.synchronize()
            return round(size * 10 / (start.elapsed_time(stop) / 1000) / 1e9, 2)

        return {"h2d_gbps": rate(lambda: one.copy_(host, non_blocking=True)),
                "d2h_gbps": rate(lambda: host.copy_(one, non_blocking=True)),
                "d2d_gbps": rate(lambda: two.copy_(one))}
    n = 8192
    dtype = torch.bfloat16 if torch.cuda.get_device_capability()[0] >= 8 else torch.float16
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    c = torch.matmul(a, b)
    torch.cuda.synchronize()
    began, products = time.monotonic(), 0
    while time.monotonic() - began < seconds:
        for _product in range(10):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        products += 10
    elapsed = time.monotonic() - began
    return {"tflops": round(2 * n ** 3 * products / elapsed / 1e12, 1), "dtype": str(dtype),
            "n": n, "products": products, "seconds": round(elapsed, 1),
            "finite": bool(torch.isfinite(c).all().item())}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuc_burnin")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--sample-interval", type=float, default=5.0)
    parser.add_argument("--dcgm-level", type=int, default=3)
    parser.add_argument("--dcgm-timeout", type=float, default=3600.0)
    parser.add_argument("--nvbandwidth", default="nvbandwidth")
    parser.add_argument("--torch-python", default="")
    parser.add_argument("--all-reduce-perf", action="append", default=[])
    parser.add_argument("--kernel-log", default="")
    parser.add_argument("--worker", choices=["copy", "matmul"])
    opts = parser.parse_args(argv)
    if opts.worker:
        try:
            print(json.dumps(worker(opts.worker, opts.seconds)))
        except Exception as exc:  # any torch or CUDA failure is this GPU's result
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}))
            return 1
        return 0
    print(json.dumps(burn_in(opts)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
