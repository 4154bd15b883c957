"""Stopping a run: a signal (SIGINT, SIGTERM, SIGHUP) that arrives while a phase runs is
recorded, the phase's ansible-playbook process tree is stopped, and the run raises Interrupted
between phases. The CLI's signal handler records; ansible-runner's cancel callback (or the
executors' wait loop) acts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (SIGINT, SIGTERM, SIGHUP); the CLI exits 128 + signum.
    A KeyboardInterrupt, so that nothing which catches Exception swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class _Cancel:
    """A stop requested by a signal. While a playbook runs, the request is only recorded:
    ansible-runner polls it (every PEXPECT_TIMEOUT_S) and kills ansible-playbook's process
    group, which pexpect made a session of its own, so no ansible-playbook outlives us."""

    signum: int | None = None
    running: bool = False


PEXPECT_TIMEOUT_S = 0.5


def request_cancel(signum: int) -> bool:
    """Record a stop request; True when a playbook is running and will be stopped (the signal
    handler must then return), False when nothing runs (the handler raises Interrupted)."""
    _Cancel.signum = signum
    return _Cancel.running


GRACE_S = 5.0


def cancel_requested() -> bool:
    """ansible-runner's cancel callback. ansible-runner would SIGKILL ansible-playbook's
    process group only, but ansible's workers call setsid(): they and the task processes they
    started would live on. So the whole process tree is stopped here first: SIGTERM to
    ansible-playbook (it tells its workers, which kill their own sessions), then SIGKILL to
    whatever of the tree is left after a grace period."""
    if _Cancel.signum is None:
        return False
    tree = _descendants(os.getpid())
    for pid in _children_map().get(os.getpid(), []):  # ansible-playbook itself
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(pid) for pid in tree):
        time.sleep(0.1)
    for pid in [*tree, *_descendants(os.getpid())]:
        _signal(pid, signal.SIGKILL)
    return True


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _descendants(root: int) -> list[int]:
    """Every process below ``root``, parents before children (Linux /proc; none elsewhere)."""
    children = _children_map()
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signum)


def raise_if_cancelled() -> None:
    """Called between phases: turn a recorded stop request into Interrupted."""
    if _Cancel.signum is not None:
        raise Interrupted(_Cancel.signum)


def reset_cancel() -> None:
    _Cancel.signum = None
    _Cancel.running = False


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """Around a phase (runner.run_playbook, provisioner.executors): a signal is recorded for
    ``cancel_requested`` to see instead of raised at once (the phase stops its own processes;
    the caller raises Interrupted after it)."""
    if _Cancel.signum is not None:  # stopped before this phase could start
        raise Interrupted(_Cancel.signum)
    _Cancel.running = True
    try:
        yield
    finally:
        _Cancel.running = False
