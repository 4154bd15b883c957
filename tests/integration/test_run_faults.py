"""Faults of the controller side, through the real entry point and real ansible-runner on
localhost (stand-in playbooks, no remote host): signals, errors and a full disk while a run is
under way, two runs on one inventory, a failed run's JUnit file, credentials and terminal
control sequences in what a run writes and prints."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import cli
from provisioner.paths import collection_root
from tests.integration.test_cli import BIN

SECRET = "s3cr3t-Passw0rd"
TOKEN = "tok-9f8e7d6c5b"
MIRROR = f"https://alice:{SECRET}@mirror.example.invalid/nvidia/?token={TOKEN}"
EVIL = "evil \x1b]0;pwned\x07 clear \x1b[2J done"


def project(tmp_path: Path, tasks: dict[str, list[dict[str, Any]]]) -> Path:
    """A collection whose phases are the given localhost tasks (default: publish a passing
    check)."""
    root = tmp_path / "project"
    (root / "playbooks").mkdir(parents=True)
    (root / "roles").symlink_to(collection_root() / "roles")
    # The parsers and policies the controller shares with the modules (the judge among them).
    (root / "plugins").symlink_to(collection_root() / "plugins")
    (root / "galaxy.yml").write_text("namespace: gpucluster\nname: provisioner\nversion: 0.0.1\n")
    (root / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    (root / "playbooks" / "site.yml").write_text("[]\n")
    for phase in ("preflight", "stack", "fabric", "validate", "monitoring"):
        default = [{"name": f"Test | {phase} report", "ansible.builtin.set_fact": {
            f"{phase}_report": {"checks": [{"name": "gpu_count", "status": "pass",
                                            "measured": 8, "expected": 8,
                                            "detail": "stand-in"}]}}}]
        (root / "playbooks" / f"{phase}.yml").write_text(yaml.safe_dump([{
            "name": f"Test | {phase} stand-in", "hosts": "all", "gather_facts": False,
            "tasks": tasks.get(phase, default)}]))
    return root


def inventory(tmp_path: Path, hosts: int = 1, **host_vars: Any) -> Path:
    path = tmp_path / "local.yml"
    path.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local",
                 "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "provisioner_simulated": True},
        "children": {"gpu_nodes": {"hosts": {
            f"gpu-{i:02d}": {"gpu_profile": "sim-h100-8gpu", **host_vars}
            for i in range(1, hosts + 1)}}}}}))
    return path


def env_for(tmp_path: Path, root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return {**env, "PROVISIONER_HOME": str(root), "PROVISIONER_RUNS_DIR": str(tmp_path / "runs"),
            "COLUMNS": "200"}


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=180, env=env,
                          stdin=subprocess.DEVNULL, check=False)


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    [line] = [ln for ln in out.stderr.splitlines() if ln.strip()]
    return line


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (this test's tmp dir)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().split(") ")[-1][:1]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline}")
    return found


def slow(marker: Path) -> list[dict[str, Any]]:
    return [{"name": "Test | Slow task", "ansible.builtin.shell": f"touch {marker}; sleep 300",
             "changed_when": False}]


def start_slow_run(tmp_path: Path, command: str = "validate") -> tuple[subprocess.Popen[str],
                                                                        Path, dict[str, str]]:
    marker = tmp_path / "slow-task-started"
    root = project(tmp_path, {"validate": slow(marker), "preflight": slow(marker)})
    env = env_for(tmp_path, root)
    args = [BIN, command, "-i", str(inventory(tmp_path))]
    if command == "up":
        args += ["--skip-smoke"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the slow task never started"
        time.sleep(0.2)
    return proc, marker, env


# signals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sig", "code", "command"), [
    (signal.SIGINT, 130, "validate"), (signal.SIGTERM, 143, "up"),
    (signal.SIGHUP, 129, "validate")])
def test_a_signal_stops_the_run_saves_the_report_and_leaves_no_ansible(
        tmp_path: Path, sig: signal.Signals, code: int, command: str) -> None:
    proc, _marker, _env = start_slow_run(tmp_path, command)
    assert processes_mentioning(str(tmp_path))  # ansible-playbook and the sleeping task
    started = time.monotonic()
    proc.send_signal(sig)
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert time.monotonic() - started < 20
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith(f"error: interrupted by {sig.name}; report saved: ")
    assert "Traceback" not in stderr
    [report_path] = (tmp_path / "runs").glob("*/report.json")
    assert lines[-1].endswith(str(report_path))
    report = json.loads(report_path.read_text())
    assert (report["outcome"], report["exit_code"]) == ("interrupted", code)
    assert any(f"interrupted by {sig.name}" in n for n in report["notes"])
    assert report["phases"] and not report["phases"][-1]["ok"]
    assert report["phases"][-1]["status"] == "canceled"
    junit = ET.parse(report_path.parent / "junit.xml").getroot()
    assert sum(int(s.get("failures", "0")) for s in junit.findall("testsuite")) >= 2
    # No ansible-playbook, worker or task process of this run outlives it.
    deadline = time.monotonic() + 5
    while processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(str(tmp_path)) == []
    # ...and the lock is free again: the next run on the inventory is not refused.
    assert not (report_path.parent / "ansible" / "env").exists()


def test_an_error_of_ours_still_writes_the_report(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import bringup

    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))

    def broken(*_a: Any, **_k: Any) -> bool:
        raise RuntimeError("a bug in a phase")

    monkeypatch.setattr(bringup, "run_phases", broken)
    assert cli.main(["-q", "validate", "-i", str(inventory(tmp_path))]) == 1
    [path] = (tmp_path / "runs").glob("*/report.json")
    report = json.loads(path.read_text())
    assert (report["outcome"], report["exit_code"]) == ("error", 1)
    assert report["notes"] == ["the run stopped on an error: RuntimeError: a bug in a phase"]
    assert (path.parent / "junit.xml").is_file()
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_full_disk_when_saving_the_report_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    from provisioner import bringup, report

    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(bringup, "run_phases", lambda *_a, **_k: True)

    def full(path: Path, text: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(report, "write_private", full)
    assert cli.main(["validate", "-i", str(inventory(tmp_path))]) == 1
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "internal error" not in err[0]
    assert re.fullmatch(r"error: cannot save the report in .*/runs/[\w-]+: No space left on "
                        r"device", err[0]), err
    assert list((tmp_path / "runs").glob("*/report.json")) == []


# saved reports -------------------------------------------------------------------------------


@pytest.mark.parametrize(("content", "fragment"), [
    ('{"run_id": "x", "command": "up", "outc', "truncated or invalid report (JSON error at line 1"),
    ("", "truncated or invalid report"),
    ("[1, 2]", "not a provisioner report (missing or wrong: a JSON object)"),
    ('{"run_id": "x"}', "not a provisioner report (missing or wrong: command, outcome"),
    (b"\xff\xfe{", "not a report (not UTF-8 text at byte 0)"),
])
def test_a_broken_saved_report_is_one_line_exit_2(tmp_path: Path, content: str | bytes,
                                                  fragment: str) -> None:
    run_dir = tmp_path / "runs" / "20260101-000000-abcd"
    run_dir.mkdir(parents=True)
    target = run_dir / "report.json"
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    out = run(["report"], {**os.environ, "PROVISIONER_RUNS_DIR": str(tmp_path / "runs")})
    assert out.returncode == 2 and out.stdout == ""
    line = one_error_line(out)
    assert str(target) in line and fragment in line, line


def test_report_shows_the_newest_run(tmp_path: Path) -> None:
    from tests.integration.test_cli_conventions import saved_report

    runs = tmp_path / "runs"
    old = saved_report(runs, simulated=False, fail=True)
    new_dir = runs / "20270101-000000-ffff"
    new_dir.mkdir()
    data = json.loads((runs / old.run_id / "report.json").read_text())
    data.update(run_id="20270101-000000-ffff", outcome="passed", exit_code=0)
    (new_dir / "report.json").write_text(json.dumps(data))
    out = run(["report", "--json"], {**os.environ, "PROVISIONER_RUNS_DIR": str(runs)})
    assert out.returncode == 0 and json.loads(out.stdout)["run_id"] == "20270101-000000-ffff"
    out = run(["report", old.run_id, "-q"], {**os.environ, "PROVISIONER_RUNS_DIR": str(runs)})
    assert out.returncode == 1 and out.stdout.startswith("cluster FAILED")


# a failed run in JUnit -----------------------------------------------------------------------


def test_a_failed_preflight_is_failed_in_junit(tmp_path: Path) -> None:
    """preflight fails on one host of two, the other is unreachable: the file has a testcase
    per host of the phase (<failure>, <error>) and a failed verdict, never an empty file."""
    root = project(tmp_path, {"preflight": [
        {"name": "Test | Reach the host", "ansible.builtin.ping": {}},
        {"name": "Test | Refuse one host", "ansible.builtin.fail": {"msg": "disk too small"},
         "when": "inventory_hostname == 'gpu-01'"},
    ]})
    inv = tmp_path / "local.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "provisioner_simulated": True},
        "children": {"gpu_nodes": {"hosts": {
            "gpu-01": {"gpu_profile": "sim-h100-8gpu", "ansible_connection": "local"},
            "gpu-02": {"gpu_profile": "sim-h100-8gpu", "ansible_host": "192.0.2.1",
                       "ansible_ssh_common_args": "-o ConnectTimeout=1",
                       "ansible_ssh_timeout": 1}}}}}}))
    out = run(["up", "-i", str(inv), "--skip-smoke", "--json"], env_for(tmp_path, root))
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    junit = ET.parse(Path(doc["report_path"]).parent / "junit.xml").getroot()
    suites = {s.get("name"): s for s in junit.findall("testsuite")}
    pre = suites["SIMULATED preflight (preflight.yml)"]
    cases = {c.get("name"): c for c in pre.findall("testcase")}
    assert set(cases) == {"gpu-01", "gpu-02"}
    failure = cases["gpu-01"].find("failure")
    assert failure is not None and failure.get("message") == "disk too small"
    error = cases["gpu-02"].find("error")
    assert error is not None and error.get("type") == "unreachable"
    verdict = suites["SIMULATED run"].find("testcase/failure")
    assert verdict is not None and verdict.get("message", "").startswith("failed")
    assert sum(int(s.get("tests", "0")) for s in suites.values()) >= 3


# two runs on one inventory -------------------------------------------------------------------


def test_a_second_run_on_the_same_inventory_is_refused_at_once(tmp_path: Path) -> None:
    proc, _marker, env = start_slow_run(tmp_path)
    try:
        started = time.monotonic()
        second = run(["smoke", "-i", str(tmp_path / "local.yml")], env)
        assert time.monotonic() - started < 15
        assert second.returncode == 2
        line = one_error_line(second)
        assert f"(PID {proc.pid}, started 20" in line and "`provisioner validate`" in line
        assert "is in use by" in line
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    # The holder is gone: the inventory is free again.
    again = run(["validate", "-i", str(tmp_path / "local.yml"), "-q"],
                {**env, "PROVISIONER_HOME": str(project(tmp_path / "p2", {}))})
    assert again.returncode == 0, again.stderr


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    from provisioner.inventory import load
    from provisioner.runlock import lock_path

    inv = inventory(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock = lock_path(tmp_path / "runs", load(inv))
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": dead.pid, "command": "up",
                                "started_at": "2026-01-01T00:00:00+00:00"}))
    out = run(["validate", "-i", str(inv), "--json"], env_for(tmp_path, project(tmp_path, {})))
    assert out.returncode == 0, out.stderr
    notes = json.loads(out.stdout)["notes"]
    assert notes == [f"took over a stale lock of PID {dead.pid} (started "
                     "2026-01-01T00:00:00+00:00), which is no longer running"]
    assert lock.read_text() == ""  # released when the run ended


# secrets and untrusted text ------------------------------------------------------------------


def test_credentials_land_in_no_file_and_control_sequences_never_reach_the_console(
        tmp_path: Path) -> None:
    root = project(tmp_path, {"validate": [
        {"name": "Test | Echo the mirror {{ gpu_package_source }}",
         "ansible.builtin.command": "echo {{ gpu_package_source | quote }}",
         "changed_when": False},
        {"name": "Test | Fail quoting the mirror and the node's text",
         "ansible.builtin.fail": {"msg": "mirror {{ gpu_package_source }} said {{ evil }}"}},
    ]})
    inv = inventory(tmp_path, hosts=2, gpu_package_source=MIRROR, evil=EVIL)
    out = run(["validate", "-i", str(inv)], env_for(tmp_path, root))
    assert out.returncode == 1, out.stderr
    # The console: the failure is shown, without the credentials or raw control sequences.
    assert "said evil" in out.stdout and "mirror https://***@mirror.example.invalid" in out.stdout
    for text in (out.stdout, out.stderr):
        assert SECRET not in text and TOKEN not in text
        assert "\x1b]" not in text and "\x1b[2J" not in text and "\x07" not in text
    runs = tmp_path / "runs"
    [run_dir] = [p for p in runs.iterdir() if p.name != "locks"]
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(files) >= 4  # report, junit, plan, ansible's stdout and kept failure events
    for path in files:
        data = path.read_bytes()
        assert SECRET.encode() not in data and TOKEN.encode() not in data, path
        assert path.stat().st_mode & 0o777 == 0o600, path
    for path in [run_dir, *(p for p in run_dir.rglob("*") if p.is_dir())]:
        assert path.stat().st_mode & 0o777 == 0o700, path
    assert runs.stat().st_mode & 0o777 == 0o700
    assert not (run_dir / "ansible" / "env").exists()
    assert not list(run_dir.glob("ansible/artifacts/*/command"))
    report = json.loads((run_dir / "report.json").read_text())
    messages = [f["message"] for ph in report["phases"] for f in ph["failures"]]
    assert messages and all("https://***@mirror.example.invalid/nvidia/?token=***" in m
                            for m in messages), messages


@pytest.mark.parametrize(("name", "value"), [
    ("ANSIBLE_HOST_KEY_CHECKING", "False"), ("ANSIBLE_HOST_KEY_CHECKING", "0"),
    ("ANSIBLE_SSH_ARGS", "-o StrictHostKeyChecking=no"),
    ("ANSIBLE_SSH_COMMON_ARGS", "-o UserKnownHostsFile=/dev/null")])
def test_host_key_checking_off_from_the_environment_is_refused(
        tmp_path: Path, name: str, value: str) -> None:
    env = {**env_for(tmp_path, project(tmp_path, {})), name: value}
    out = run(["validate", "-i", str(inventory(tmp_path))], env)
    assert out.returncode == 2
    line = one_error_line(out)
    assert line.startswith(f"error: {name} in the environment would turn off SSH host key "
                           "checking")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/report.json"))


def test_host_key_checking_off_in_the_inventory_is_allowed_and_reported(tmp_path: Path) -> None:
    env = {**env_for(tmp_path, project(tmp_path, {})), "ANSIBLE_HOST_KEY_CHECKING": "False"}
    inv = inventory(tmp_path, hosts=2, ansible_host_key_checking=False)
    out = run(["validate", "-i", str(inv), "--json"], env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["host_key_checking_off"] == ["gpu-01", "gpu-02"]
    assert doc["notes"][0].startswith("SSH host key checking is OFF for 2 host(s) (gpu-01, "
                                      "gpu-02)")
    assert "warning: SSH host key checking is OFF" in out.stderr


# bad input: one line each ---------------------------------------------------------------------


def real_inventory(tmp_path: Path, **gpu_vars: Any) -> Path:
    path = tmp_path / "real.yml"
    path.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "local"},
        "children": {"gpu_nodes": {"hosts": {
            "gpu-01": {"gpu_profile": "hgx-h100-8gpu", **gpu_vars},
            "gpu-02": {"gpu_profile": "hgx-h100-8gpu"}}}}}}))
    return path


def test_eof_at_the_confirmation_prompt_is_one_line_exit_2(tmp_path: Path) -> None:
    import pty

    master, slave = pty.openpty()
    env = env_for(tmp_path, project(tmp_path, {}))
    proc = subprocess.Popen([BIN, "up", "-i", str(real_inventory(tmp_path))], stdin=slave,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    os.close(slave)
    time.sleep(0.5)
    os.write(master, b"\x04")  # Ctrl-D: end of input on the terminal
    _out, err = proc.communicate(timeout=120)
    os.close(master)
    assert proc.returncode == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1].endswith("error: aborted: no answer (end of input at the confirmation "
                              "prompt); nothing was changed")
    assert "Traceback" not in err and "internal error" not in err
    assert not list((tmp_path / "runs").glob("*/report.json"))


@pytest.mark.parametrize("value", ["0", "-1", "-3600"])
def test_timeout_zero_or_negative_is_one_line_exit_2(tmp_path: Path, value: str) -> None:
    out = run(["up", "-i", "x.yml", "--timeout", value], dict(os.environ))
    assert out.returncode == 2
    assert f"'{value}' is not a number of seconds above 0" in one_error_line(out)


def test_one_simulated_host_in_a_real_inventory_is_refused(tmp_path: Path) -> None:
    """It must not switch off the confirmation prompt for the whole run."""
    (tmp_path / "p").mkdir()
    env = env_for(tmp_path, project(tmp_path, {}))
    for inv in (real_inventory(tmp_path, provisioner_simulated=True),
                real_inventory(tmp_path / "p", gpu_profile="sim-h100-8gpu")):
        out = run(["up", "-i", str(inv), "--yes"], env)
        assert out.returncode == 2 and out.stdout == ""
        line = one_error_line(out)
        assert "gpu-01" in line and ("not on gpu-02" in line or "simulated profile" in line)
        assert not list((tmp_path / "runs").glob("*/report.json"))


@pytest.mark.parametrize("value", ["12.4; rm -rf /", "12.4$(id)", "12.4`id`", "12.4\nexport X=1",
                                   "12.4 && true", "'12.4'"])
def test_cuda_version_with_shell_metacharacters_is_refused_at_plan_time(
        tmp_path: Path, value: str) -> None:
    inv = real_inventory(tmp_path, cuda_version=value)
    env = env_for(tmp_path, project(tmp_path, {}))
    for command in (["plan", "-i", str(inv)], ["up", "-i", str(inv), "--yes"]):
        out = run(command, env)
        assert out.returncode == 2, out.stdout
        line = one_error_line(out)
        assert "cuda_version" in line and "gpu-01" in line
    assert not (tmp_path / "runs").exists()
