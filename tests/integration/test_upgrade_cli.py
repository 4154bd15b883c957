"""`provisioner upgrade` through the real entry point: bad input is one line on stderr, exit 2,
nothing run and no report; --json and -q like every command that prints a report; and a real
run on localhost with stand-in phase playbooks (no Slurm: nothing drained, the report says so)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner import cli
from tests.integration.test_cli import GOOD
from tests.integration.test_cli_conventions import (
    error_lines,
    fake_project,
    local_inventory,
    run,
    write,
)

VOLTA = {"all": {"children": {"gpu_nodes": {"hosts": {
    "gpu-01": {"gpu_profile": "sxm2-v100-8gpu", "ansible_host": "gpu-01.invalid"}}}}}}


@pytest.mark.parametrize(("data", "args", "fragment"), [
    (GOOD, ["--stack", "cuda-1.0"], "stack 'cuda-1.0' is not a known stack; choose one of"),
    (VOLTA, ["--stack", "cuda-13.0"], "host gpu-01: cuda_version 13.0 cannot target volta"),
    (GOOD, ["--stack", "cuda-12.9", "--batch-size", "0"],
     "argument --batch-size: '0' is not a number of nodes"),
    (GOOD, ["--stack", "cuda-12.9", "--batch-size", "abc"],
     "argument --batch-size: 'abc' is not a number of nodes"),
    (GOOD, ["--stack", "cuda-12.9", "--max-failed-batches", "0"],
     "argument --max-failed-batches: '0' is not a whole number above 0"),
    (GOOD, ["--stack", "cuda-12.9", "--drain-timeout", "soon"],
     "argument --drain-timeout: 'soon' is not a number of seconds above 0"),
    (GOOD, [], "the following arguments are required: --stack"),
    (GOOD, ["--stack", "cuda-12.9"], "upgrade changes real hosts: pass --yes"),
])
def test_bad_input_is_one_line_exit_2_and_touches_nothing(
        tmp_path: Path, data: object, args: list[str], fragment: str) -> None:
    runs = tmp_path / "runs"
    out = run("upgrade", "-i", str(write(tmp_path / "hosts.yml", data)), *args, "--json",
              env={"PROVISIONER_RUNS_DIR": str(runs)})
    assert out.returncode == 2
    [line] = error_lines(out)
    assert fragment in line
    assert out.stdout == ""
    assert not runs.exists()  # no run started, so no host was contacted


def test_upgrade_takes_json_and_loudness_like_up() -> None:
    args = cli.build_parser().parse_args(["upgrade", "-i", "x", "--stack", "cuda-12.9",
                                          "--json", "-q"])
    assert args.json is True and args.quiet is True
    assert (args.batch_size, args.drain_timeout, args.max_failed_batches) == ("1", 3600, 1)
    assert args.force is False and args.reboot is False


def test_upgrade_json_from_a_real_run_without_slurm(tmp_path: Path) -> None:
    """The stand-in stack playbook installs nothing, so the stack checks (judged from what the
    roles measured) fail it: exit 1, the batch failed in its stack phase, validate not run."""
    project = fake_project(tmp_path)
    for name in ("drain", "resume"):  # must not run: the inventory has no Slurm
        (project / "playbooks" / f"{name}.yml").write_text("not: [a playbook\n")
    env = {"PROVISIONER_HOME": str(project), "PROVISIONER_RUNS_DIR": str(tmp_path / "runs")}
    out = run("upgrade", "-i", str(local_inventory(tmp_path, True)), "--stack", "cuda-12.9",
              "--json", env=env)
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)  # progress and banner did not leak into stdout
    assert doc["command"] == "upgrade" and doc["exit_code"] == 1
    assert [p["name"] for p in doc["phases"]] == ["batch 1 stack"]
    [batch] = doc["batches"]
    assert batch["nodes"] == ["gpu-01"] and batch["outcome"] == "failed"
    assert batch["phases"] == {"stack": "failed on gpu-01", "validate": "not run",
                               "monitoring": "not run"}
    assert batch["drained_at"] is None and batch["kept_drained"] == {}
    assert batch["detail"].startswith("gpu-01: gpuc upgrade to cuda-12.9 failed: stack: ")
    assert any(n.startswith("no scheduler drained the nodes") for n in doc["notes"])
    assert any("set gpu_stack: cuda-12.9 in it" in n for n in doc["notes"])
    assert doc["hosts"]["gpu-01"]["stack"]["gpu_stack"] == "cuda-12.9"
    assert "batch 1/1: stack (stack.yml)" in out.stderr  # the progress display, on stderr
    junit = (Path(doc["report_path"]).parent / "junit.xml").read_text()
    assert '<testcase classname="upgrade" name="batch 1: gpu-01">' in junit
    assert 'type="batch"' in junit
