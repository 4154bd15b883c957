"""A role's verify through ansible-playbook on localhost, fed a reading with two problems: the
one check task (assert_all) reports both in one run, after the role published what it measured
for the report; a reading with none passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.localplay import ROOT, run_play

HEADER = "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR {minor}\n#define CUDNN_PATCHLEVEL 0\n"


def run_verify(tmp_path: Path, minor: int, mismatched: list[str]) -> dict[str, Any]:
    """roles/cudnn/tasks/verify.yml with the install call's reading faked: the header says
    9.<minor>.0, the plan 9.1.0.70; ``mismatched`` packages are off their pins."""
    install = {"changed": False, "probe": {
        "files": {"header": {"exists": True, "content": HEADER.format(minor=minor)}},
        "packages": {"mismatched": mismatched}}}
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"cudnn_version": "9.1.0.70", "__cudnn_header": "/usr/include/cudnn_version.h",
                      "__cudnn_install": install},
             "tasks": [
                 {"block": [{"name": "verify", "ansible.builtin.include_tasks":
                             str(ROOT / "roles/cudnn/tasks/verify.yml")}],
                  "rescue": [{"name": "keep the failure", "ansible.builtin.copy": {
                      "content": "{{ ansible_failed_result | to_json }}",
                      "dest": str(tmp_path / "failed.json")}}]},
                 {"name": "keep the report", "ansible.builtin.copy": {
                     "content": "{{ cudnn_report | to_json }}",
                     "dest": str(tmp_path / "report.json")}}]}]
    run_play(tmp_path, play)
    failed = tmp_path / "failed.json"
    return {"report": json.loads((tmp_path / "report.json").read_text()),
            **({"failed": json.loads(failed.read_text())} if failed.exists() else {})}


def test_two_problems_are_reported_in_one_run_after_the_report_is_published(tmp_path: Path) -> None:
    out = run_verify(tmp_path, minor=0, mismatched=["libcudnn9-cuda-12"])
    assert out["report"]["version"] == "9.0.0"
    failed = out["failed"]
    assert failed["failed"] and len(failed["failures"]) == 2
    assert "cudnn_version.h says 9.0.0; the plan says cudnn_version 9.1.0.70" in failed["msg"]
    assert "cuDNN packages not at their pins or not held: libcudnn9-cuda-12" in failed["msg"]


def test_one_problem_is_one_message(tmp_path: Path) -> None:
    out = run_verify(tmp_path, minor=1, mismatched=["libcudnn9-dev-cuda-12"])
    assert out["report"]["version"] == "9.1.0"
    assert [f["msg"].split(": ", 1)[1] for f in out["failed"]["failures"]] == [
        "cuDNN packages not at their pins or not held: libcudnn9-dev-cuda-12"]


def test_a_converged_reading_passes(tmp_path: Path) -> None:
    out = run_verify(tmp_path, minor=1, mismatched=[])
    assert "failed" not in out and out["report"]["version"] == "9.1.0"
