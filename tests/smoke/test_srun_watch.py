"""gpuc_srun_watch.py (roles/smoke_job/files): srun's output passes through unchanged; a job
whose task failed while srun waits for a node that never answers is cancelled through
slurmctld once srun's own announced wait (plus a margin) is over; a job that ends by itself,
failed or not, is never cancelled; signals reach srun. Run as the node runs it, against a fake
srun and a fake scancel (shell scripts) that record what they were asked."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

WATCH = Path(__file__).resolve().parents[2] / "roles/smoke_job/files/gpuc_srun_watch.py"

# What srun printed in the e2e run whose second node was killed mid-job (Slurm 22.05).
FAILED_LINES = (
    "srun: error: sim-gpu-1: task 0: Exited with exit code 1\n"
    "srun: launch/slurm: _step_signal: Terminating StepId=9.0\n"
    "srun: forcing job termination\n"
    "srun: Job step aborted: Waiting up to {wait} seconds for job step to finish.\n"
)


def script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fakes(tmp_path: Path, srun_body: str, ends_srun: bool = True) -> tuple[Path, Path]:
    """A fake srun (its pid in srun.pid, each signal it gets in srun.signals) and a fake
    scancel that records its argv and (``ends_srun``) ends srun as slurmctld's cancellation
    can; otherwise srun goes on waiting, as it does for a dead node's step."""
    srun = script(tmp_path / "srun", (
        f"trap 'echo TERM >> {tmp_path}/srun.signals; exit 143' TERM\n"
        f"trap 'echo USR1 >> {tmp_path}/srun.signals; exit 1' USR1\n"
        f"echo $$ > {tmp_path}/srun.pid\n" + srun_body))
    scancel = script(tmp_path / "scancel", (
        f'echo "$@" > {tmp_path}/scancel.args\n'
        + (f"kill -USR1 $(cat {tmp_path}/srun.pid)\n" if ends_srun else "")))
    return srun, scancel


def run_watch(tmp_path: Path, srun_body: str, margin: float = 0.5, timeout: float = 30,
              ends_srun: bool = True) -> tuple[subprocess.CompletedProcess[str], float]:
    srun, scancel = fakes(tmp_path, srun_body, ends_srun)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(WATCH), "--job-name", "gpuc-smoke-run1-inter", "--margin",
         str(margin), "--scancel", str(scancel), "--poll", "0.05", "--", str(srun), "--nodes",
         "2"], capture_output=True, text=True, timeout=timeout, check=False)
    return done, time.monotonic() - started


def test_a_failed_task_and_a_step_that_never_ends_are_cancelled(tmp_path: Path) -> None:
    body = (f"printf '{FAILED_LINES.format(wait=1)}' >&2\n"
            # the dead node: srun waits on, as it would until SlurmdTimeout
            "while true; do sleep 0.1; done\n")
    done, took = run_watch(tmp_path, body)
    assert done.returncode == 1, done.stderr
    assert (tmp_path / "scancel.args").read_text().split() == [
        "--quiet", "--name", "gpuc-smoke-run1-inter"]
    # srun's own lines pass through, then the wrapper's line saying why it cancelled
    assert FAILED_LINES.format(wait=1) in done.stderr
    assert "gpuc-smoke-run1-inter failed and srun still waits" in done.stderr
    assert took < 15, took  # announced 1 s + 0.5 s margin, not the 30 s kill deadline


def test_srun_still_waiting_after_the_cancel_is_killed(tmp_path: Path) -> None:
    body = (f"printf '{FAILED_LINES.format(wait=1)}' >&2\n"
            "while true; do sleep 0.1; done\n")
    done, took = run_watch(tmp_path, body, ends_srun=False)
    assert (tmp_path / "scancel.args").exists()
    assert done.returncode == 137, done.stderr  # SIGKILL
    assert 1.5 + 5 <= took < 20, took  # the wait, the margin, then 5 s for srun to end


def test_a_job_that_ends_by_itself_is_not_cancelled(tmp_path: Path) -> None:
    # A failed task, then srun ends within the wait it announced: its exit code stands.
    body = (f"printf '{FAILED_LINES.format(wait=30)}' >&2\n"
            "sleep 0.5\necho 'rank output'\nexit 7\n")
    done, _took = run_watch(tmp_path, body, margin=0.1)
    assert done.returncode == 7
    assert done.stdout == "rank output\n"
    assert not (tmp_path / "scancel.args").exists()


def test_a_healthy_job_passes_through(tmp_path: Path) -> None:
    done, _took = run_watch(tmp_path, "echo 'all-reduce ok'\necho 'srun: note' >&2\nexit 0\n")
    assert (done.returncode, done.stdout, done.stderr) == (0, "all-reduce ok\n", "srun: note\n")
    assert not (tmp_path / "scancel.args").exists()


def test_the_announced_wait_is_honoured(tmp_path: Path) -> None:
    # srun announces 3 s: nothing is cancelled before that has passed.
    body = (f"printf '{FAILED_LINES.format(wait=3)}' >&2\n"
            "while true; do sleep 0.1; done\n")
    done, took = run_watch(tmp_path, body, margin=0.2)
    assert done.returncode == 1 and (tmp_path / "scancel.args").exists()
    assert took >= 3.2, took


def test_sigterm_reaches_srun(tmp_path: Path) -> None:
    srun, scancel = fakes(tmp_path, "while true; do sleep 0.1; done\n")
    proc = subprocess.Popen([sys.executable, str(WATCH), "--job-name", "j", "--scancel",
                             str(scancel), "--poll", "0.05", "--", str(srun)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not (tmp_path / "srun.pid").exists():
        assert time.monotonic() < deadline, "the fake srun did not start"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=10)
    assert proc.returncode == 143
    assert (tmp_path / "srun.signals").read_text() == "TERM\n"
    assert not (tmp_path / "scancel.args").exists()
