"""`up --executors` without containers: ansible-runner's transmit -> worker -> process protocol
run for real, with the "ssh" to each executor replaced by a local shell (the worker runs on
this machine) and a small collection whose playbook runs on local hosts. What is proven here:
the shards, the merged event stream and stats, the executor named per host, the extra
variables reaching the worker, what is left on disk, and an executor that fails."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner import executors as ex
from provisioner.errors import EnvironmentProblem, InputError
from provisioner.results import ProgressEvent, TaskFailure

PROBE = """\
- name: Probe | Each host says who ran it
  hosts: all
  gather_facts: false
  connection: local
  tasks:
    - name: Probe | Publish a report fact
      ansible.builtin.set_fact:
        probe_report:
          secret_seen: "{{ probe_secret | default('') }}"
          worker_cwd: "{{ lookup('ansible.builtin.env', 'PWD') }}"
    - name: Probe | Sleep when told to (a phase to interrupt)
      ansible.builtin.command: sleep {{ probe_sleep }}
      changed_when: false
      when: probe_sleep is defined
    - name: Probe | Fail the host that is told to
      ansible.builtin.fail:
        msg: "{{ inventory_hostname }} was told to fail"
      when: inventory_hostname in (probe_fail | default([]))
"""


@pytest.fixture
def collection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "collection"
    (root / "playbooks").mkdir(parents=True)
    (root / "galaxy.yml").write_text("namespace: gpucluster\nname: provisioner\nversion: 0.0.1\n")
    (root / "playbooks" / "site.yml").write_text("[]\n")
    (root / "playbooks" / "probe.yml").write_text(PROBE)
    (root / "ansible.cfg").write_text("[defaults]\ncollections_path = .ansible/collections\n"
                                      "retry_files_enabled = false\n")
    monkeypatch.setenv("PROVISIONER_HOME", str(root))
    return root


@pytest.fixture
def project(collection: Path) -> Iterator[Path]:
    with ex.bundled() as out:
        yield out


def local_executors(monkeypatch: pytest.MonkeyPatch, broken: tuple[str, ...] = ()) -> ex.Executors:
    """Executors whose 'ssh' is a local shell running the remote command; a broken one is an
    ssh that cannot connect (exit 255, ssh's own message)."""

    def ssh(self: ex.Executors, name: str, remote: str) -> list[str]:
        if name in broken:
            return ["sh", "-c", f"echo 'ssh: connect to host {name} port 22: Connection "
                    "refused' >&2; exit 255"]
        return ["sh", "-c", remote]

    monkeypatch.setattr(ex.Executors, "ssh", ssh)
    return ex.Executors(names=("exec-a", "exec-b"), bin_dir=str(Path(sys.executable).parent))


def inventory(tmp_path: Path, hosts: list[str]) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps({"all": {"hosts": {h: {"ansible_python_interpreter":
                                                       sys.executable} for h in hosts}}}))
    path.chmod(0o600)
    return path


HOSTS = ["node-1", "node-2", "node-3"]


def test_each_executor_runs_its_shard_and_the_results_merge(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    executors = local_executors(monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shards = ex.shard(HOSTS, executors.names)
    seen: list[ProgressEvent] = []
    result = ex.run_sharded("probe.yml", [inventory(tmp_path, HOSTS)], run_dir, "00-probe",
                            shards, executors, project, extravars={"probe_secret": "s3cret"},
                            timeout=300, on_progress=seen.append)
    assert result.status == "successful", result.failures
    assert result.rc == 0 and result.ok
    assert sorted(result.stats) == HOSTS
    assert result.executors == {"node-1": "exec-a", "node-2": "exec-a", "node-3": "exec-b"}
    # The extra variables reached every worker (through a file, not the command line).
    assert {h: r["probe"]["secret_seen"] for h, r in result.reports.items()} == dict.fromkeys(
        HOSTS, "s3cret")
    # The worker ran in a directory of its own (what it unpacked), not in the run dir.
    for report in result.reports.values():
        assert not report["probe"]["worker_cwd"].startswith(str(run_dir))
    assert {e.host for e in seen if e.kind == "ok"} == set(HOSTS)
    # Kept: each executor's artifacts; gone: what was sent (extra variables, inventories,
    # the collection's copy) and the worker's environment dump.
    for name in executors.names:
        pdd = run_dir / "executors" / name / "00-probe"
        assert (pdd / "artifacts" / "00-probe" / "job_events").is_dir()
        assert not (pdd / "env").exists() and not (pdd / "inventories").exists()
        assert not (pdd / "project").exists()
        assert not (pdd / "artifacts" / "00-probe" / "command").exists()
        leftover = [p for p in pdd.rglob("*") if p.is_file() and "s3cret" in p.read_text(
            errors="replace")]
        assert leftover == []


def test_a_failed_host_is_judged_like_a_local_run(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    executors = local_executors(monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = ex.run_sharded("probe.yml", [inventory(tmp_path, HOSTS)], run_dir, "01-probe",
                            ex.shard(HOSTS, executors.names), executors, project,
                            extravars={"probe_fail": ["node-3"]}, timeout=300)
    assert result.status == "failed"
    assert result.rc != 0 and not result.ok
    assert result.stats["node-3"].failed == 1
    assert result.stats["node-1"].failed == 0 and result.stats["node-2"].failed == 0
    assert [(f.host, f.message) for f in result.failures] == [
        ("node-3", "node-3 was told to fail")]


def test_an_executor_that_cannot_be_reached_fails_the_phase_with_its_reason(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    executors = local_executors(monkeypatch, broken=("exec-b",))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = ex.run_sharded("probe.yml", [inventory(tmp_path, HOSTS)], run_dir, "02-probe",
                            ex.shard(HOSTS, executors.names), executors, project,
                            timeout=300)
    assert not result.ok and result.status != "successful"
    # exec-a's shard ran; exec-b's node was not reached: unreachable, naming its executor and
    # ssh's reason (the run's loss policy and --retry-failed then treat it as any such node).
    assert result.stats["node-1"].healthy and result.stats["node-2"].healthy
    assert result.stats["node-3"].unreachable == 1
    assert result.failures == [TaskFailure(
        "node-3", "executor exec-b",
        "ssh: connect to host exec-b port 22: Connection refused", unreachable=True)]


def _processes_running(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_a_stop_signal_ends_every_executors_phase_and_its_processes(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT during a sharded phase: recorded (not raised mid-phase), every ssh session and
    worker ended, the phase comes back canceled with no executor blamed; run_phases then
    raises Interrupted (run_cancel.raise_if_cancelled) as after a local phase."""
    import signal
    import threading
    import time

    from provisioner import run_cancel

    local_executors(monkeypatch)
    # The worker and its ansible-playbook run from a bin directory of this test's own (links to
    # the venv's), so that their command lines name it: other workers on this machine (a
    # simulated cluster's executors, a parallel test) are not this test's business.
    own_bin = tmp_path / "bin"
    own_bin.mkdir()
    for tool in ("ansible-runner", "ansible-playbook"):
        (own_bin / tool).symlink_to(Path(sys.executable).parent / tool)
    executors = ex.Executors(names=("exec-a", "exec-b"), bin_dir=str(own_bin))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    marker = f"sleep {417 + os.getpid() % 100}"
    box: dict[str, Any] = {}

    def phase() -> None:
        box["result"] = ex.run_sharded(
            "probe.yml", [inventory(tmp_path, HOSTS)], run_dir, "04-probe",
            ex.shard(HOSTS, executors.names), executors, project,
            extravars={"probe_sleep": marker.split()[1]}, timeout=300)

    thread = threading.Thread(target=phase)
    try:
        thread.start()
        deadline = time.monotonic() + 120
        while len(_processes_running(marker)) < len(HOSTS) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_processes_running(marker)) == len(HOSTS), "the probe never slept"
        # The workers and their ansible-playbook carry the marker this test looks for after.
        assert len(_processes_running(str(own_bin))) >= 2 * len(executors.names)
        assert run_cancel.request_cancel(signal.SIGINT) is True  # a phase runs: recorded only
        stopped = time.monotonic()
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert time.monotonic() - stopped < 30
    finally:
        run_cancel.reset_cancel()
        thread.join(timeout=60)
        for pid in _processes_running(marker):  # the "nodes'" tasks, if any outlived it
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    result = box["result"]
    assert result.status == "canceled" and not result.ok
    assert not [f for f in result.failures if f.host.startswith("executor ")]
    # No worker and no ansible-playbook of the phase outlives it.
    deadline = time.monotonic() + 15
    while _processes_running(str(own_bin)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_running(str(own_bin)) == []


def test_an_executor_left_without_hosts_is_not_contacted(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    executors = local_executors(monkeypatch, broken=("exec-b",))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = ex.run_sharded("probe.yml", [inventory(tmp_path, HOSTS)], run_dir, "03-probe",
                            {"exec-a": ["node-2"], "exec-b": []}, executors, project,
                            timeout=300)
    assert result.ok, result.failures
    assert sorted(result.stats) == ["node-2"]
    assert not (run_dir / "executors" / "exec-b").exists()


def test_check_names_the_executor_ssh_cannot_reach(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    # A port nothing listens on, on this machine: ssh fails at once with its own message.
    config.write_text("Host nowhere\n  HostName 127.0.0.1\n  Port 1\n")
    executors = ex.parse("nowhere", str(config))
    with pytest.raises(EnvironmentProblem) as err:
        ex.check(executors)
    assert str(err.value).startswith("executor nowhere: ssh: connect to host 127.0.0.1 port 1")
    assert str(err.value).endswith("; nothing was changed")


def test_check_names_an_executor_without_ansible_runner(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    executors = local_executors(monkeypatch)
    executors = ex.Executors(names=("exec-a",), bin_dir=str(tmp_path / "no-venv" / "bin"))
    with pytest.raises(EnvironmentProblem) as err:
        ex.check(executors)
    assert str(err.value).startswith(
        f"executor exec-a: {tmp_path}/no-venv/bin/ansible-runner does not run there (")
    assert "set PROVISIONER_EXECUTOR_BIN" in str(err.value)


def test_check_passes_an_executor_that_has_ansible_runner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ex.check(local_executors(monkeypatch))


@pytest.mark.parametrize(("text", "message"), [
    ("", "--executors: name at least one executor (ssh destination), e.g. "
         "--executors exec1,exec2"),
    (" , ", "--executors: name at least one executor (ssh destination), e.g. "
            "--executors exec1,exec2"),
    ("-oProxyCommand=x", "--executors: '-oProxyCommand=x' is not an ssh destination "
                         "([user@]host)"),
    ("a b", "--executors: 'a b' is not an ssh destination ([user@]host)"),
    ("e1,e2,e1", "--executors: e1 is named twice"),
])
def test_bad_executor_lists_are_one_line(text: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        ex.parse(text)
    assert str(err.value) == message


def test_parse_reads_names_the_ssh_config_and_the_bin_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "cfg"
    config.write_text("")
    monkeypatch.setenv("PROVISIONER_EXECUTOR_BIN", "/opt/gpuc/bin")
    parsed = ex.parse(" ops@exec-1.example ,exec-2 ", str(config))
    assert parsed == ex.Executors(names=("ops@exec-1.example", "exec-2"), ssh_config=config,
                                  bin_dir="/opt/gpuc/bin")
    monkeypatch.delenv("PROVISIONER_EXECUTOR_BIN")
    assert ex.parse("e").bin_dir == str(Path(sys.executable).parent)
    with pytest.raises(InputError, match=r"^--executor-ssh-config: .*/missing is not a file$"):
        ex.parse("e", str(tmp_path / "missing"))


def test_the_ssh_command_ends_options_before_the_destination(tmp_path: Path) -> None:
    cmd = ex.Executors(names=("e",), ssh_config=tmp_path / "c", bin_dir="/v/bin").ssh("e", "x")
    assert cmd[0] == "ssh" and cmd[-3:] == ["--", "e", "x"]
    assert cmd[cmd.index("-F") + 1] == str(tmp_path / "c")
    assert "BatchMode=yes" in cmd and f"ConnectTimeout={ex.CONNECT_TIMEOUT_S}" in cmd
    assert ex.Executors(names=("e",), bin_dir="/v w/bin").worker_command() == (
        "PATH='/v w/bin':\"$PATH\" exec '/v w/bin'/ansible-runner worker")


@pytest.mark.parametrize(("hosts", "names", "expected"), [
    (["a", "b", "c"], ["x", "y"], {"x": ["a", "b"], "y": ["c"]}),
    (["a", "b", "c", "d"], ["x", "y"], {"x": ["a", "b"], "y": ["c", "d"]}),
    (["a"], ["x", "y", "z"], {"x": ["a"], "y": [], "z": []}),
    (["a", "b", "c", "d", "e"], ["x", "y", "z"], {"x": ["a", "b"], "y": ["c", "d"], "z": ["e"]}),
    ([], ["x"], {"x": []}),
])
def test_shards_are_contiguous_and_balanced(hosts: list[str], names: list[str],
                                            expected: dict[str, list[str]]) -> None:
    assert ex.shard(hosts, names) == expected


def test_the_bundle_is_the_collection_and_its_link(collection: Path, tmp_path: Path) -> None:
    (collection / "roles" / "r" / "tasks").mkdir(parents=True)
    (collection / "roles" / "r" / "tasks" / "main.yml").write_text("[]\n")
    (collection / "tests").mkdir()
    (collection / "tests" / "t.py").write_text("")
    with ex.bundled() as out:
        assert sorted(p.name for p in out.iterdir()) == [
            ".ansible", "ansible.cfg", "galaxy.yml", "playbooks", "roles"]
        link = (out / ".ansible" / "collections" / "ansible_collections" / "gpucluster"
                / "provisioner")
        assert link.is_symlink() and link.resolve() == out.resolve()
        assert not os.path.isabs(os.readlink(link))
        # Not in a run directory: the report's secret masking rewrites files there.
        assert not out.is_relative_to(tmp_path)
    assert not out.exists()


# The CLI: every refusal is one line, exit 2, before any host (or executor) is contacted.
def _cli(tmp_path: Path, *args: str, command: str = "up") -> tuple[int, str, str]:
    import shutil
    import subprocess

    from tests.integration.test_cli import GOOD, inv

    bin_ = shutil.which("provisioner", path=str(Path(sys.executable).parent)) or "provisioner"
    yes = ["--yes"] if command == "up" else []
    out = subprocess.run([bin_, command, "--inventory", str(inv(tmp_path, GOOD)), *yes, *args],
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "COLUMNS": "200",
                              "PROVISIONER_RUNS_DIR": str(tmp_path / "runs")})
    return out.returncode, out.stdout, out.stderr


@pytest.mark.parametrize(("args", "line"), [
    (["--executor-ssh-config", "/etc/hostname"],
     "--executor-ssh-config says how to reach --executors: add --executors, or leave it out"),
    (["--executors", "e1,e1"], "--executors: e1 is named twice"),
    (["--executors", "e1", "--limit", "nosuchhost"],
     "--limit nosuchhost: matches no host of the inventory"),
])
def test_up_refuses_bad_executor_options_in_one_line(tmp_path: Path, args: list[str],
                                                     line: str) -> None:
    rc, stdout, stderr = _cli(tmp_path, *args)
    assert rc == 2, stdout + stderr
    assert stderr.strip().splitlines()[-1] == f"error: {line}"
    assert "Traceback" not in stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["up", "validate"])
def test_an_executor_it_cannot_reach_is_refused_before_any_run(tmp_path: Path,
                                                               command: str) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host nowhere\n  HostName 127.0.0.1\n  Port 1\n")
    rc, stdout, stderr = _cli(tmp_path, "--executors", "nowhere", "--executor-ssh-config",
                              str(config), command=command)
    assert rc == 2, stdout + stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("error: executor nowhere: ssh: connect to host 127.0.0.1 port 1")
    assert last.endswith("; nothing was changed")
    assert not (tmp_path / "runs").exists()
