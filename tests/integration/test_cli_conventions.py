"""CLI conventions through the real entry point: --version, --json (stdout carries one JSON
document and nothing else), -v/-q, `plan -o` and shell completion (argcomplete)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import cli
from provisioner.paths import collection_root
from provisioner.report import Check, Phase, Report
from tests.integration.test_cli import BIN, GOOD

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IBSTAT = FIXTURES / "ibstat" / "cx5-2port-spaces-sdr-ddr.txt"

SIM = {"all": {"children": {"gpu_nodes": {"hosts": {
    "sim-gpu-1": {"gpu_profile": "sim-h100-8gpu", "ansible_host": "sim-gpu-1.invalid",
                  "provisioner_simulated": True}}}}}}


def run(*args: str, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}, cwd=cwd,
                          stdin=subprocess.DEVNULL, check=False)


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def error_lines(out: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in out.stderr
    return [ln for ln in out.stderr.splitlines() if ln.strip()]


# --version --------------------------------------------------------------------------------


def test_version_names_package_collection_and_ansible_core() -> None:
    out = run("--version")
    assert out.returncode == 0, out.stderr
    lines = dict(ln.split(" ", 1) for ln in out.stdout.splitlines())
    assert lines["provisioner"] == metadata.version("gpu-cluster-provisioner")
    galaxy = yaml.safe_load((collection_root() / "galaxy.yml").read_text())
    assert lines["gpucluster.provisioner"].startswith(f"{galaxy['version']} (")
    assert lines["ansible-core"] == metadata.version("ansible-core")


def test_version_is_read_from_the_collection_in_use(tmp_path: Path) -> None:
    project = fake_project(tmp_path, version="9.8.7")
    out = run("--version", env={"PROVISIONER_HOME": str(project)})
    assert out.returncode == 0, out.stderr
    assert f"gpucluster.provisioner 9.8.7 ({project})" in out.stdout


# plan --json / -o ---------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "simulated"), [(GOOD, False), (SIM, True)])
def test_plan_json_is_the_only_stdout(tmp_path: Path, data: object, simulated: bool) -> None:
    out = run("plan", "-i", str(write(tmp_path / "hosts.yml", data)), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["simulated"] is simulated
    hosts = {h["host"]: h for h in doc["hosts"]}
    gpu = next(h for h in hosts.values() if h["kind"] == "gpu")
    assert gpu["variables"]["nvidia_driver_version"]
    assert ("SIMULATED" in out.stderr) is simulated  # the console says so on stderr only
    assert "inventory OK" in out.stderr and "inventory OK" not in out.stdout


def test_plan_output_writes_the_inventory_plain_ansible_reads(tmp_path: Path) -> None:
    inventory = write(tmp_path / "hosts.yml", GOOD)
    target = tmp_path / "out" / "plan.yml"
    out = run("plan", "--inventory", str(inventory), "-o", str(target), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["plan_inventory"] == str(target)
    assert f"plan inventory written to {target}" in out.stderr
    written = yaml.safe_load(target.read_text())["all"]["hosts"]
    assert written == {h["host"]: h["variables"] for h in doc["hosts"]}
    # The documented plain path: -i INVENTORY -i plan.yml merges the user's variables and the
    # plan's for every host (what ansible-playbook playbooks/site.yml then receives).
    merged = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inventory),
         "-i", str(target), "--host", "gpu-01"], capture_output=True, text=True, timeout=120,
        check=True, cwd=tmp_path)
    hostvars = json.loads(merged.stdout)
    assert hostvars["gpu_profile"] == "hgx-h100-8gpu"
    assert hostvars["nvidia_driver_version"] == written["gpu-01"]["nvidia_driver_version"]


def test_plan_output_message_goes_to_stdout_without_json(tmp_path: Path) -> None:
    target = tmp_path / "plan.yml"
    out = run("plan", "-i", str(write(tmp_path / "hosts.yml", GOOD)), "-o", str(target))
    assert out.returncode == 0, out.stderr
    assert f"plan inventory written to {target}" in out.stdout and target.is_file()


@pytest.mark.parametrize("where", ["directory", "under a file"])
def test_plan_output_to_an_unwritable_path_is_exit_2(tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    target = tmp_path if where == "directory" else blocker / "plan.yml"
    out = run("plan", "-i", str(write(tmp_path / "hosts.yml", GOOD)), "-o", str(target),
              "--json")
    assert out.returncode == 2
    [line] = error_lines(out)
    assert f"plan -o {target}" in line
    assert out.stdout == ""


def test_json_on_bad_input_leaves_stdout_empty(tmp_path: Path) -> None:
    out = run("plan", "-i", str(tmp_path / "missing.yml"), "--json")
    assert out.returncode == 2
    assert len(error_lines(out)) == 1 and out.stdout == ""


# -v / -q ----------------------------------------------------------------------------------


def test_quiet_plan_prints_only_the_verdict(tmp_path: Path) -> None:
    for args in (["-q", "plan"], ["plan", "-q"]):
        out = run(*args, "-i", str(write(tmp_path / "hosts.yml", SIM)))
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [
            "inventory OK (SIMULATED): 1 host(s), 1 GPU node(s)"], args


def test_verbose_plan_shows_the_plan_variables(tmp_path: Path) -> None:
    hosts = write(tmp_path / "hosts.yml", GOOD)
    plain, verbose = run("plan", "-i", str(hosts)), run("plan", "-v", "-i", str(hosts))
    assert "nvidia_repo_stack_packages" not in plain.stdout
    assert "nvidia_repo_stack_packages" in verbose.stdout


@pytest.mark.parametrize("args", [["-v", "-q", "plan"], ["-v", "plan", "-q"],
                                  ["plan", "-q", "--verbose"]])
def test_verbose_and_quiet_together_is_exit_2(tmp_path: Path, args: list[str]) -> None:
    out = run(*args, "-i", str(write(tmp_path / "hosts.yml", GOOD)))
    assert out.returncode == 2
    [line] = error_lines(out)
    assert "quiet" in line and "verbose" in line


# stacks / inspect -------------------------------------------------------------------------


def test_stacks_list_json_matches_the_completer() -> None:
    out = run("stacks", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["stack"] for r in rows] == cli.stack_names()
    assert sum(r["default"] == "yes" for r in rows) == 1


def test_stacks_show_json_and_table() -> None:
    name = cli.stack_names()[0]
    doc = json.loads(run("stacks", "show", name, "--json").stdout)
    assert doc["stack"] == name
    table = run("stacks", "show", name)
    assert table.returncode == 0
    assert doc["driver_version"] in table.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(table.stdout)


@pytest.mark.parametrize(("args", "fragment"), [
    (["stacks", "show", "cuda-1.0", "--json"], "stack cuda-1.0 is not known"),
    (["stacks", "list", "cuda-12.8"], "stacks list takes no name"),
    (["stacks", "show"], "stacks show: name a stack"),
])
def test_stacks_bad_input_is_one_line_exit_2(args: list[str], fragment: str) -> None:
    out = run(*args)
    assert out.returncode == 2
    [line] = error_lines(out)
    assert fragment in line and out.stdout == ""


def test_inspect_json_text_and_quiet() -> None:
    js = run("inspect", "--profile", "hgx-h100-8gpu", str(IBSTAT), "--json")
    doc = json.loads(js.stdout)
    failed = sum(c["status"] == "fail" for c in doc["checks"])
    assert failed and js.returncode == 1
    text = run("inspect", "--profile", "hgx-h100-8gpu", str(IBSTAT))
    assert text.returncode == 1
    verdict = f"inspected 1 file(s): {failed} check(s) failed against hgx-h100-8gpu"
    assert "ib_ports" in text.stdout and text.stdout.rstrip().endswith(verdict)
    quiet = run("-q", "inspect", "--profile", "hgx-h100-8gpu", str(IBSTAT))
    assert quiet.stdout.splitlines() == [verdict] and quiet.returncode == 1


# report / validate / up: one rendering for saved and fresh reports -------------------------


def saved_report(runs: Path, *, simulated: bool, fail: bool) -> Report:
    report = Report("20260101-000000-abcd", "validate", "hosts.yml", simulated=simulated,
                    started_at="2026-01-01T00:00:00+00:00")
    report.phases.append(Phase(name="validate", playbook="validate.yml", status="successful",
                               rc=0, duration_s=1.0, changed=0, ok=True,
                               hosts={"gpu-01": {"failed": 0, "unreachable": 0}}, failures=[]))
    report.checks.append(Check(host="gpu-01", phase="validate", name="gpu_count",
                               status="fail" if fail else "pass", measured=7, expected=8,
                               detail="one GPU missing" if fail else "ok"))
    report.checks.append(Check(host="gpu-01", phase="validate", name="ecc", status="pass",
                               measured=0, expected=0, detail="no uncorrectable errors"))
    report.finish(1 if fail else 0)
    report.save(runs / report.run_id)
    return report


def test_report_json_quiet_and_verbose(tmp_path: Path) -> None:
    env = {"PROVISIONER_RUNS_DIR": str(tmp_path)}
    saved_report(tmp_path, simulated=True, fail=True)
    js = run("report", "--json", env=env)
    doc = json.loads(js.stdout)
    assert js.returncode == 1 and doc["simulated"] is True and doc["outcome"] == "failed"
    quiet = run("report", "-q", env=env)
    [line] = quiet.stdout.splitlines()
    assert line.startswith("cluster FAILED (SIMULATED)")
    normal, verbose = run("report", env=env), run("report", "-v", env=env)
    assert "fail gpu-01 gpu_count" in normal.stdout and "SIMULATED CLUSTER" in normal.stdout
    assert "pass gpu-01 ecc" not in normal.stdout
    assert "pass gpu-01 ecc: measured 0, expected 0" in verbose.stdout


def fake_project(tmp_path: Path, version: str = "0.0.1", check: str = "pass") -> Path:
    """A collection whose phases are stand-in playbooks run on localhost: the real CLI, runner
    and report, no podman and no remote host."""
    root = tmp_path / "project"
    (root / "playbooks").mkdir(parents=True)
    (root / "roles").symlink_to(collection_root() / "roles")
    # The parsers and policies the controller shares with the modules (the judge among them).
    (root / "plugins").symlink_to(collection_root() / "plugins")
    (root / "galaxy.yml").write_text(f"namespace: gpucluster\nname: provisioner\n"
                                     f"version: {version}\n")
    (root / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    (root / "playbooks" / "site.yml").write_text("[]\n")
    for phase in ("preflight", "stack", "fabric", "validate", "monitoring"):
        (root / "playbooks" / f"{phase}.yml").write_text(yaml.safe_dump([{
            "name": f"Test | {phase} stand-in", "hosts": "all", "gather_facts": False,
            "tasks": [{"name": f"Test | {phase} report", "ansible.builtin.set_fact": {
                f"{phase}_report": {"checks": [{
                    "name": "gpu_count", "status": check, "measured": 8, "expected": 8,
                    "detail": "stand-in"}]}}}]}]))
    return root


def local_inventory(tmp_path: Path, simulated: bool) -> Path:
    host: dict[str, Any] = {"gpu_profile": "sim-h100-8gpu" if simulated else "hgx-h100-8gpu"}
    if simulated:
        host["provisioner_simulated"] = True
    return write(tmp_path / "local.yml", {"all": {
        "vars": {"ansible_connection": "local",
                 "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        "children": {"gpu_nodes": {"hosts": {"gpu-01": host}}}}})


@pytest.mark.parametrize(("simulated", "check", "rc"),
                         [(True, "pass", 0), (False, "fail", 1)])
def test_validate_json_from_a_real_run(tmp_path: Path, simulated: bool, check: str,
                                       rc: int) -> None:
    project = fake_project(tmp_path, check=check)
    env = {"PROVISIONER_HOME": str(project), "PROVISIONER_RUNS_DIR": str(tmp_path / "runs")}
    out = run("validate", "-i", str(local_inventory(tmp_path, simulated)), "--json", env=env)
    assert out.returncode == rc, out.stderr
    doc = json.loads(out.stdout)  # progress and banner did not leak into stdout
    assert doc["command"] == "validate" and doc["simulated"] is simulated
    assert doc["outcome"] == ("passed" if rc == 0 else "failed") and doc["exit_code"] == rc
    assert [(c["host"], c["name"], c["status"]) for c in doc["checks"]] == [
        ("gpu-01", "gpu_count", check)]
    assert Path(doc["report_path"]).is_file()
    assert "validate (validate.yml)" in out.stderr  # the progress display, on stderr
    assert ("SIMULATED CLUSTER" in out.stderr) is simulated


def test_validate_quiet_and_verbose(tmp_path: Path) -> None:
    project = fake_project(tmp_path)
    env = {"PROVISIONER_HOME": str(project), "PROVISIONER_RUNS_DIR": str(tmp_path / "runs")}
    inventory = str(local_inventory(tmp_path, True))
    quiet = run("-q", "validate", "-i", inventory, env=env)
    assert quiet.returncode == 0, quiet.stderr
    [line] = quiet.stdout.splitlines()
    assert line.startswith("cluster PASSED (SIMULATED)") and quiet.stderr == ""
    verbose = run("validate", "-v", "-i", inventory, env=env)
    assert "task: Test | validate report" in verbose.stdout
    assert "pass gpu-01 gpu_count" in verbose.stdout
    # ansible-playbook itself ran at -v: its output (kept in the run's artifacts) says which
    # config file it used, which it only says from -v up.
    runs = tmp_path / "runs"
    logs = {p.relative_to(runs).parts[0]: p.read_text()
            for p in runs.glob("*/ansible/artifacts/*/stdout")}
    assert len(logs) == 2
    assert sum("as config file" in text for text in logs.values()) == 1


def test_up_json_runs_every_phase_with_json_stdout(tmp_path: Path) -> None:
    project = fake_project(tmp_path)
    env = {"PROVISIONER_HOME": str(project), "PROVISIONER_RUNS_DIR": str(tmp_path / "runs")}
    out = run("up", "-i", str(local_inventory(tmp_path, True)), "--skip-smoke", "--json",
              env=env)
    doc = json.loads(out.stdout)
    assert doc["command"] == "up" and doc["simulated"] is True
    assert out.returncode == doc["exit_code"]
    assert doc["phases"] and doc["phases"][0]["name"] == "preflight"


def test_up_json_refusal_leaves_stdout_empty(tmp_path: Path) -> None:
    out = run("up", "-i", str(write(tmp_path / "hosts.yml", GOOD)), "--json",
              env={"PROVISIONER_RUNS_DIR": str(tmp_path / "runs")})
    assert out.returncode == 2 and out.stdout == ""
    [line] = error_lines(out)
    assert "pass --yes" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["up", "validate", "smoke", "plan", "stacks", "profiles",
                                     "inspect", "report", "export"])
def test_every_result_command_takes_json_and_loudness(command: str) -> None:
    required = {"up": ["-i", "x"], "validate": ["-i", "x"], "smoke": ["-i", "x"],
                "plan": ["-i", "x"], "inspect": ["f"], "export": ["k8s", "-i", "x"]}.get(
                    command, [])
    args = cli.build_parser().parse_args([command, *required, "--json", "-q"])
    assert args.json is True and args.quiet is True and args.verbose == 0
    args = cli.build_parser().parse_args(["-vv", command, *required])
    assert args.json is False and args.verbose == 2 and args.quiet is False


# completion -------------------------------------------------------------------------------


def complete(line: str, tmp_path: Path, cwd: Path | None = None) -> list[str]:
    """What bash gets from `eval "$(register-python-argcomplete provisioner)"` for a line."""
    target = tmp_path / "completions"
    out = run(env={"_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "COMP_LINE": line,
                   "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(target)},
              cwd=cwd)
    assert out.returncode == 0, out.stderr
    return [c.strip() for c in target.read_text().split("\n") if c.strip()]


def test_completion_of_stack_names(tmp_path: Path) -> None:
    names = cli.stack_names()
    assert complete("provisioner stacks show ", tmp_path) == names
    newest = names[-1]
    assert complete(f"provisioner stacks show {newest[:-1]}", tmp_path) == [
        n for n in names if n.startswith(newest[:-1])]


def test_completion_of_profiles_commands_and_inventory_files(tmp_path: Path) -> None:
    assert "hgx-h100-8gpu" in complete("provisioner inspect --profile hgx", tmp_path)
    assert complete("provisioner sim up --profile sim", tmp_path) == ["sim-gb200-4gpu", "sim-h100-8gpu"]
    assert complete("provisioner pla", tmp_path) == ["plan"]
    assert {"--inventory", "--output", "--json", "--quiet"} <= set(
        complete("provisioner plan --", tmp_path))
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "cluster-a.yml").write_text("all: {}\n")
    assert complete("provisioner plan -i inv/clu", tmp_path, cwd=tmp_path) == [
        "inv/cluster-a.yml"]


def test_console_script_carries_the_argcomplete_marker() -> None:
    """The shell hook only completes scripts whose module declares PYTHON_ARGCOMPLETE_OK; this
    is the check it runs."""
    out = subprocess.run([sys.executable, "-W", "ignore", "-m",
                          "argcomplete._check_console_script", BIN],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(("args", "fragment"), [
    (["up", "-i", "x", "--timeout", "-3"], "'-3' is not a number of seconds above 0"),
    (["smoke", "-i", "x", "--timeout", "soon"], "'soon' is not a number of seconds above 0"),
    (["inspect", "--json"], "the following arguments are required: files"),
    (["up", "-i", "x", "--reboot", "--batch-size", "0%"], "'0%' is not a number of nodes"),
    (["up", "-i", "x", "--reboot", "--reboot-timeout", "0"],
     "'0' is not a number of seconds above 0"),
    # How to reboot without --reboot: refused before the inventory is even read.
    (["up", "-i", "x", "--batch-size", "2"], "add --reboot, or leave them out"),
    (["up", "-i", "x", "--reboot-timeout", "600"], "add --reboot, or leave them out"),
])
def test_bad_arguments_are_one_line_exit_2(args: list[str], fragment: str) -> None:
    out = run(*args)
    assert out.returncode == 2 and out.stdout == ""
    [line] = error_lines(out)
    assert fragment in line
