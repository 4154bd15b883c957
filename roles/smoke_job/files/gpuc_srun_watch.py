"""Run srun for the smoke job, and end it when a task failed and srun waits for a dead node.

When a task of a step fails, ``--kill-on-bad-exit`` makes srun kill the others and wait for the
step to end ("Job step aborted: Waiting up to N seconds for job step to finish"). A node that
died under the job never answers, and srun then waits until slurmctld declares it DOWN
(SlurmdTimeout, 300 s by default): the smoke job, which already failed, holds the run for
minutes. This wrapper passes srun's output through unchanged; once srun reported a failed
task (or the aborted step) and has not ended within the wait it announced plus a margin, it
cancels the job through slurmctld (``scancel --name``), kills srun if it is still waiting 5 s
later (the job is gone; srun would wait KillWait again for the same dead node), and exits
non-zero. Signals it gets (the outer ``timeout``, Ctrl-C) go to srun.

Usage: gpuc_srun_watch.py --job-name NAME [--margin S] [--scancel PATH] -- srun ARGS...
Standard library only: it runs on the node before anything else is installed there.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import threading
import time

# srun's lines (stderr) saying a task failed or the step is being torn down.
FAILED = re.compile(r"^srun: error: \S+: tasks? [\d,\-]+: |^srun: Job step aborted|"
                    r"^srun: forcing job termination")
# "srun: Job step aborted: Waiting up to 32 seconds for job step to finish." (KillWait + 2).
ANNOUNCED = re.compile(r"Waiting up to (\d+) seconds for job step to finish")
# Without an announced wait: slurm.conf's default KillWait (30 s) plus srun's 2.
DEFAULT_WAIT_S = 32
# How long srun may take to end after the job was cancelled before it is killed.
CANCELLED_WAIT_S = 5


class Watch:
    def __init__(self, margin: float) -> None:
        self.margin = margin
        self.failed_at: float | None = None
        self.wait_s = DEFAULT_WAIT_S
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            if FAILED.search(text) and self.failed_at is None:
                self.failed_at = time.monotonic()
            announced = ANNOUNCED.search(text)
            if announced:
                self.wait_s = int(announced.group(1))

    def overdue(self, now: float) -> bool:
        with self.lock:
            return (self.failed_at is not None
                    and now - self.failed_at > self.wait_s + self.margin)


def pump(stream, watch: Watch) -> None:  # type: ignore[no-untyped-def]
    for raw in iter(stream.readline, b""):
        sys.stderr.buffer.write(raw)
        sys.stderr.buffer.flush()
        watch.line(raw.decode("utf-8", "replace"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--job-name", required=True)
    parser.add_argument("--margin", type=float, default=8.0,
                        help="seconds past srun's own announced wait before cancelling")
    parser.add_argument("--scancel", default="scancel")
    parser.add_argument("--poll", type=float, default=0.5, help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no srun command after --")
    watch = Watch(args.margin)
    proc = subprocess.Popen(command, stderr=subprocess.PIPE)

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    reader = threading.Thread(target=pump, args=(proc.stderr, watch), daemon=True)
    reader.start()
    cancelled, deadline = False, 0.0
    while proc.poll() is None:
        if not cancelled and watch.overdue(time.monotonic()):
            print(f"gpuc_srun_watch: a task of {args.job_name} failed and srun still waits for "
                  f"its step {watch.wait_s + args.margin:.0f} s later (a node not responding?): "
                  f"cancelling the job", file=sys.stderr, flush=True)
            subprocess.run([args.scancel, "--quiet", "--name", args.job_name], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
            cancelled = True
            deadline = time.monotonic() + CANCELLED_WAIT_S
        if cancelled and time.monotonic() > deadline:
            # Cancelled, srun waits for the step again (KillWait + 2 s, for the same dead
            # node): the job is gone from slurmctld, nothing is left for srun to collect.
            proc.kill()
        time.sleep(args.poll)
    reader.join(timeout=5)
    if cancelled and proc.returncode == 0:
        return 1
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


if __name__ == "__main__":
    sys.exit(main())
