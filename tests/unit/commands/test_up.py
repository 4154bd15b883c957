"""`provisioner up` in-process (provisioner/commands/up.py): the options and phases the run gets,
the options refused together, the confirmation prompt and --retry-failed. The run itself
is replaced at its boundary (bringup.run_phases): nothing here contacts a host."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from provisioner import bringup, cli
from tests.unit.commands.cli_support import FakeRun, Terminal, lines, saved_report, unwrapped


def test_up_passes_every_option_to_the_run(inventory: Path, fake_run: FakeRun,
                                           runs: Path) -> None:
    from provisioner.bringup import parse_max_fail
    from provisioner.upgrade import parse_batch_size

    assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--limit", "gpu-01",
                     "--timeout", "600", "--check", "--reboot", "--batch-size", "2",
                     "--reboot-timeout", "900", "--max-fail", "1",
                     "--framework", "tensorflow"]) == 0
    assert fake_run.options == bringup.RunOptions(
        limit="gpu-01", timeout_s=600, check_mode=True, reboot_ok=True,
        reboot_batch=parse_batch_size("2"), reboot_timeout_s=900,
        max_fail=parse_max_fail("1"), launcher="direct", framework="tensorflow",
        retry_hosts=(), executors=None, limit_hosts=None)
    assert fake_run.phases == bringup.UP_PHASES  # --check: no smoke job
    report = saved_report(runs)
    assert (report["command"], report["outcome"], report["exit_code"]) == ("up", "passed", 0)


def test_up_defaults(inventory: Path, fake_run: FakeRun) -> None:
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes"]) == 0
    assert fake_run.options == bringup.RunOptions(
        limit=None, timeout_s=7200, check_mode=False, reboot_ok=False, reboot_batch=None,
        reboot_timeout_s=None, max_fail=None, launcher="direct", framework="pytorch")
    assert fake_run.phases == (*bringup.UP_PHASES, bringup.SMOKE_PHASE)
    [call] = fake_run.calls
    assert call["plan"].inventory.source == inventory and call["report"].command == "up"


def test_up_skip_smoke_leaves_out_the_smoke_phase(inventory: Path, fake_run: FakeRun) -> None:
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--skip-smoke"]) == 0
    assert fake_run.phases == bringup.UP_PHASES
    assert fake_run.options.check_mode is False


def test_up_executors_get_the_limit_as_hosts(inventory: Path, fake_run: FakeRun,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import executors as ex

    checked: list[Any] = []
    monkeypatch.setattr(ex, "check", checked.append)
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--limit", "gpu-01",
                     "--executors", "exec-1,exec-2"]) == 0
    expected = ex.parse("exec-1,exec-2", None)
    assert checked == [expected]
    assert fake_run.options.executors == expected
    assert fake_run.options.limit_hosts == ("gpu-01",)
    assert fake_run.options.limit == "gpu-01"


def test_up_refuses_reboot_with_executors_before_contacting_them(
        inventory: Path, fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Each executor keeps its own reboot ledger and throttle: two executors could reboot two
    # batches at once. Refused, and no executor or node is contacted.
    from provisioner import executors as ex

    checked: list[Any] = []
    monkeypatch.setattr(ex, "check", checked.append)
    assert cli.main(["up", "-i", str(inventory), "--yes", "--reboot",
                     "--executors", "exec-1,exec-2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --reboot and --executors do not go together: each executor would "
                   "keep its own reboot limit, so the cluster could lose that many batches at "
                   "once; reboot without --executors"]
    assert checked == [] and fake_run.calls == []


@pytest.mark.parametrize(("argv", "message"), [
    (["--executor-ssh-config", "cfg"], "--executor-ssh-config says how to reach --executors: "
     "add --executors, or leave it out"),
    (["--executors", "e1", "--limit", "nothing-*"], "--limit nothing-*: matches no host of the "
     "inventory"),
    (["--batch-size", "2"], "--batch-size and --reboot-timeout say how `up --reboot` reboots: "
     "add --reboot, or leave them out"),
    (["--reboot-timeout", "60"], "--batch-size and --reboot-timeout say how `up --reboot` "
     "reboots: add --reboot, or leave them out"),
    (["--retry-failed", "r1", "--limit", "gpu-01"], "--retry-failed picks the hosts itself: "
     "drop --limit"),
])
def test_up_refuses_options_that_do_not_go_together(
        inventory: Path, fake_run: FakeRun, argv: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["up", "-i", str(inventory), "--yes", *argv]) == 2
    assert lines(capsys.readouterr().err) == [f"error: {message}"]
    assert fake_run.calls == []


def test_up_on_real_hosts_without_yes_and_no_terminal_is_refused(
        inventory: Path, fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(["up", "-i", str(inventory)]) == 2
    assert lines(capsys.readouterr().err) == [
        "error: up changes real hosts: pass --yes to run non-interactively"]
    assert fake_run.calls == []


def test_retry_failed_resumes_the_lost_hosts_from_their_phase(
        tmp_path: Path, inventory: Path, fake_run: FakeRun, runs: Path) -> None:
    run_id = "20261124-000000-abcd"
    (runs / run_id).mkdir(parents=True)
    hosts = {"gpu-01": {"failed": 0, "unreachable": 0}}
    (runs / run_id / "report.json").write_text(json.dumps({
        "run_id": run_id, "command": "up", "outcome": "failed", "exit_code": 1,
        "inventory": str(inventory), "checks": [],
        "lost_hosts": {"gpu-01": {"phase": "stack", "reason": "unreachable"}},
        "phases": [{"name": "preflight", "hosts": hosts}, {"name": "stack", "hosts": hosts}]}))
    # RUN as its directory (trailing slash) or its report.json: the same run.
    for given in (f"{runs / run_id}/", str(runs / run_id / "report.json"), run_id):
        fake_run.calls.clear()
        assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--retry-failed",
                         given]) == 0
        names = [name for name, _ in (*bringup.UP_PHASES, bringup.SMOKE_PHASE)]
        assert [name for name, _ in fake_run.phases] == names[names.index("stack"):]
        assert fake_run.options.retry_hosts == ("gpu-01",)
        report = fake_run.calls[0]["report"]
        assert report.resumes == run_id and report.retried_hosts == ["gpu-01"]
        assert report.notes[0] == (f"resumes run {run_id}: gpu-01 from stack, then "
                                   "validate and after on every node")


@pytest.mark.parametrize(("answer", "code", "error"), [
    ("y\n", 0, None), (" YES \n", 0, None),
    ("n\n", 2, "error: aborted: nothing was changed"),
    ("\n", 2, "error: aborted: nothing was changed"),
    ("", 2, "error: aborted: no answer (end of input at the confirmation prompt); nothing was "
     "changed"),
])
def test_up_asks_before_changing_real_hosts(
        inventory: Path, fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], answer: str, code: int, error: str | None) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    assert cli.main(["-q", "up", "-i", str(inventory)]) == code
    err = capsys.readouterr().err
    assert unwrapped(err).startswith(unwrapped(f"Provision 2 host(s) from {inventory}? [y/N]"))
    assert len(fake_run.calls) == (1 if code == 0 else 0)
    if error is not None:
        assert lines(err)[-1].endswith(error)


def test_retry_of_a_phase_this_run_skips_is_refused(
        inventory: Path, fake_run: FakeRun, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    run_id = "20261124-000000-abcd"
    (runs / run_id).mkdir(parents=True)
    (runs / run_id / "report.json").write_text(json.dumps({
        "run_id": run_id, "command": "up", "outcome": "failed", "exit_code": 1,
        "inventory": str(inventory), "checks": [], "phases": [],
        "lost_hosts": {"gpu-01": {"phase": "smoke", "reason": "failed"}}}))
    assert cli.main(["up", "-i", str(inventory), "--yes", "--skip-smoke",
                     "--retry-failed", run_id]) == 2
    assert lines(capsys.readouterr().err) == [
        f"error: run {run_id} lost its hosts in smoke, which this run does not have (drop "
        "--skip-smoke?)"]
    assert fake_run.calls == []


def test_up_executors_without_a_limit_run_every_host(inventory: Path, fake_run: FakeRun,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """limit_hosts None is "no --limit" to bringup's sharding; an empty value would leave
    every shard without a host."""
    from provisioner import executors as ex

    monkeypatch.setattr(ex, "check", lambda _e: None)
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--executors", "exec-1"]) == 0
    assert fake_run.options.executors == ex.parse("exec-1", None)
    assert fake_run.options.limit_hosts is None and fake_run.options.limit is None


def test_up_refuses_a_container_before_asking_to_change_real_hosts(
        inventory: Path, fake_run: FakeRun, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --yes on a terminal `up` asks first; input that cannot run is refused before."""
    from provisioner.commands import common

    asked: list[str] = []
    monkeypatch.setattr(common.sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(common.errconsole, "input",
                        lambda question: asked.append(question) or "y")
    assert cli.main(["-q", "up", "-i", str(inventory), "--container", "/opt/b"]) == 2
    assert "--container /opt/b: " in capsys.readouterr().err
    assert asked == [] and fake_run.calls == []
