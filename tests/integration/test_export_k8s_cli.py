"""`provisioner export k8s` through the real entry point: the three hand-off files, --json,
the default directory, and bad input as one line with exit 2."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import yaml

from tests.integration.test_cli import BIN, GOOD

FILES = {"node-labels.yaml", "label-nodes.sh", "gpu-operator-values.yaml"}


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"}, stdin=subprocess.DEVNULL,
                          check=False)


def write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def error_lines(out: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in out.stderr
    return [ln for ln in out.stderr.splitlines() if ln.strip()]


def test_export_k8s_writes_the_files_and_json_names_them(tmp_path: Path) -> None:
    inventory = write(tmp_path / "hosts.yml", GOOD)
    target = tmp_path / "handoff"
    out = run("export", "k8s", "--inventory", str(inventory), "-o", str(target), "--json",
              cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)  # stdout is the JSON document only
    assert {Path(p).name for p in doc["files"].values()} == FILES
    assert {p.name for p in target.iterdir()} == FILES
    assert list(doc["labels"]) == ["gpu-01"]  # GPU nodes only
    labels = doc["labels"]["gpu-01"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["gpucluster.io/profile"] == "hgx-h100-8gpu"
    assert yaml.safe_load((target / "node-labels.yaml").read_text()) == doc["labels"]
    assert yaml.safe_load((target / "gpu-operator-values.yaml").read_text()) == doc[
        "gpu_operator_values"]
    [line] = [ln for ln in (target / "label-nodes.sh").read_text().splitlines()
              if ln.startswith("kubectl ")]
    words = shlex.split(line)
    assert words[:4] == ["kubectl", "label", "node", "gpu-01"] and words[-1] == "--overwrite"
    assert dict(w.split("=", 1) for w in words[4:-1]) == labels
    # The sanitized NCCL version is a note: in the JSON and on stderr, never on stdout.
    assert any("gpucluster.io/nccl" in n for n in doc["notes"])
    assert "note: label gpucluster.io/nccl" in out.stderr
    assert "Kubernetes hand-off for 1 GPU node(s)" in out.stderr


def test_export_k8s_defaults_to_k8s_handoff_in_the_current_directory(tmp_path: Path) -> None:
    inventory = write(tmp_path / "hosts.yml", GOOD)
    out = run("-q", "export", "k8s", "-i", str(inventory), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert {p.name for p in (tmp_path / "k8s-handoff").iterdir()} == FILES
    assert out.stdout.splitlines() == [
        "Kubernetes hand-off for 1 GPU node(s) written to k8s-handoff: node-labels.yaml, "
        "label-nodes.sh, gpu-operator-values.yaml; apply with sh k8s-handoff/label-nodes.sh "
        "and helm install --values k8s-handoff/gpu-operator-values.yaml"]


def test_export_k8s_bad_inventory_is_one_line_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    bad = {"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-01": {"gpu_profile": "hgx-h100-8gpu", "cuda_verison": "12.4"}}}}}}
    out = run("export", "k8s", "-i", str(write(tmp_path / "hosts.yml", bad)), "--json",
              cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    [line] = error_lines(out)
    assert "host gpu-01: unknown variable cuda_verison (did you mean cuda_version?)" in line
    assert not (tmp_path / "k8s-handoff").exists()


def test_export_k8s_to_a_file_is_one_line_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("mine\n")
    out = run("export", "k8s", "-i", str(write(tmp_path / "hosts.yml", GOOD)), "-o",
              str(blocker), cwd=tmp_path)
    assert out.returncode == 2
    [line] = error_lines(out)
    assert f"export k8s -o {blocker}: exists and is not a directory" in line
    assert blocker.read_text() == "mine\n"


def test_export_without_a_target_is_one_line_exit_2(tmp_path: Path) -> None:
    out = run("export", cwd=tmp_path)
    assert out.returncode == 2
    [line] = error_lines(out)
    assert "required: TARGET" in line
