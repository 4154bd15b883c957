"""roles/smoke_job nccl-tests through real ansible-playbook on localhost: the build is skipped
with its reason where nvcc cannot compile; a run is recorded, parsed and judged by the same
policy as the smoke job (provisioner.busbw) — here on the public captures."""

from __future__ import annotations

import getpass
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provisioner.profiles import load_profiles
from provisioner.smoke_launch import judge_nccl_tests

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent / "ansible-playbook"

PLAY = """
- name: Test | nccl-tests of the smoke job
  hosts: all
  gather_facts: false
  tasks:
    - name: Test | Preflight
      ansible.builtin.include_role:
        name: gpucluster.provisioner.smoke_job
        tasks_from: preflight.yml
    - name: Test | nccl-tests
      ansible.builtin.include_role:
        name: gpucluster.provisioner.smoke_job
        tasks_from: nccl_tests.yml
    - name: Test | Save what the role recorded
      ansible.builtin.copy:
        content: "{{ __smoke_job_results | to_json }}"
        dest: "{{ out_file }}"
        mode: "0644"
"""


def run_role(tmp_path: Path, **extra: Any) -> tuple[int, dict[str, Any], str]:
    for name in ("job", "work"):
        (tmp_path / name).mkdir(exist_ok=True)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"gpu-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (tmp_path / "play.yml").write_text(PLAY)
    # The role runs the job's commands as smoke_job_user through runuser: here, this user.
    variables = {"smoke_job_user": getpass.getuser(),
                 "smoke_job_wheelhouse_url": "http://127.0.0.1:1/", "smoke_job_dir":
                 str(tmp_path / "job"), "smoke_job_work_dir": str(tmp_path / "work"),
                 "smoke_job_expect_gpus_per_node": 8, "smoke_job_timeout_s": 30,
                 "out_file": str(tmp_path / "out.json"), **extra}
    proc = subprocess.run(
        [str(BIN), "-i", str(inventory), str(tmp_path / "play.yml"), "-e", json.dumps(variables)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    out = tmp_path / "out.json"
    return proc.returncode, json.loads(out.read_text()) if out.is_file() else {}, \
        proc.stdout + proc.stderr


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture(autouse=True)
def _tools() -> None:
    if not BIN.exists() or shutil.which("timeout") is None or shutil.which("runuser") is None:
        pytest.skip("ansible-playbook, coreutils timeout or util-linux runuser not available")
    if os.geteuid() != 0:
        pytest.skip("runuser runs as root only (the role runs as root on the nodes)")


def test_a_version_without_a_pinned_sum_is_refused_before_any_download(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda"
    script(cuda / "bin" / "nvcc", "exit 0\n")  # compiles: the build would go ahead
    rc, _results, out = run_role(tmp_path, smoke_job_cuda_home=str(cuda),
                                 smoke_job_nccl_tests_bin=str(tmp_path / "absent"),
                                 smoke_job_nccl_tests_version="v9.9.9")
    assert rc != 0, out
    assert "no SHA-256 is pinned for nccl-tests v9.9.9 (the role pins v2.17.6)" in out, out[-3000:]
    assert not list((tmp_path / "job").glob("nccl-tests-*"))  # nothing downloaded


def test_build_skipped_with_the_reason_when_nvcc_cannot_compile(tmp_path: Path) -> None:
    cuda = tmp_path / "cuda"
    script(cuda / "bin" / "nvcc", 'case "$1" in --version) echo "Cuda compilation tools, '
           'release 12.4, V12.4.131";; *) echo "nvcc fatal   : cannot find a host compiler" >&2;'
           ' exit 1;; esac\n')
    rc, results, out = run_role(tmp_path, smoke_job_cuda_home=str(cuda),
                                smoke_job_nccl_tests_bin=str(tmp_path / "absent"))
    assert rc == 0, out
    skipped = results["nccl_tests"]["skipped"]
    assert skipped.startswith(f"nccl-tests not built: {cuda}/bin/nvcc cannot compile a CUDA "
                              "source (exit 1: nvcc fatal   : cannot find a host compiler)")
    assert results["nccl_tests"]["rc"] == 0
    assert not (tmp_path / "job" / "nccl-tests-v2.17.6").exists()  # nothing downloaded
    run = judge_nccl_tests_entry(results)
    assert run["verdict"]["passed"] and run["verdict"]["summary"].startswith("SKIPPED: ")


def judge_nccl_tests_entry(results: dict[str, Any]) -> dict[str, Any]:
    from provisioner.smoke_launch import _nccl_tests_run

    return _nccl_tests_run("gpu-a", results["nccl_tests"], load_profiles()["hgx-a100-8gpu"])


def test_run_parse_judge_on_a_public_capture(tmp_path: Path, captures: Path) -> None:
    capture = captures / "nccl-tests" / "a100-sxm4-40gb-8gpu-allreduce.txt"
    args_log = tmp_path / "args"
    fake = script(tmp_path / "bin" / "all_reduce_perf",
                  f'echo "$@" > {args_log}\ncat {capture}\n')
    rc, results, out = run_role(tmp_path, smoke_job_nccl_tests_bin=str(fake))
    assert rc == 0, out
    assert args_log.read_text().split() == ["-b", "8", "-e", "8G", "-f", "2", "-g", "1",
                                            "-t", "8"]
    assert results["nccl_tests"]["rc"] == 0
    run = judge_nccl_tests_entry(results)
    # The capture's 8 GiB row (235.26 / 235.03 GB/s) against Azure's 8x A100 floor, 228 GB/s.
    assert run["verdict"]["passed"], run["verdict"]["summary"]
    assert run["verdict"]["best_busbw_gbps"] == pytest.approx(235.145)
    strict = judge_nccl_tests("x", "gpu-a", results["nccl_tests"]["output"], 0, 240.0)
    assert not strict["verdict"]["passed"]


def test_a_failed_run_is_recorded_and_fails_the_judge(tmp_path: Path) -> None:
    fake = script(tmp_path / "bin" / "all_reduce_perf",
                  'echo "gpu-a: Test NCCL failure common.cu:1034 \'unhandled cuda error\'"\n'
                  "exit 3\n")
    rc, results, out = run_role(tmp_path, smoke_job_nccl_tests_bin=str(fake))
    assert rc == 0, out
    assert results["nccl_tests"]["rc"] == 3
    assert not judge_nccl_tests_entry(results)["verdict"]["passed"]
