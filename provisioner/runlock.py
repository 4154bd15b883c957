"""One run per cluster at a time: a lock file per set of hosts under the runs directory.

The lock is keyed on the hosts the inventory resolves to (each name with its ``ansible_host``),
not on the path that named them: ``inv/`` and ``inv/hosts.yml`` are the same cluster and share
one lock. It is an advisory ``flock`` on ``runs/locks/hosts-<hash>.lock``, which also holds the
holder's PID, start time, command and inventory path. The kernel drops the ``flock`` when its
holder dies, so a lock file left by a dead process (a stale lock) is detected and taken over; a
second run while the holder lives is refused at once with the holder's PID, start time and
inventory. Two inventories that share only some hosts take different locks.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner.errors import ProvisionerError

if TYPE_CHECKING:
    from provisioner.inventory import Inventory


class RunLocked(ProvisionerError):
    """Another run holds these hosts. Exit 2: nothing was started, nothing touched."""

    exit_code = 2


@dataclass
class RunLock:
    path: Path
    fd: int
    stale: dict[str, Any] | None  # what a dead holder left, when the lock was taken over

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
        os.close(self.fd)  # closing drops the flock
        self.fd = -1


def lock_path(runs: Path, inventory: Inventory) -> Path:
    """The lock of the inventory's hosts: the same for any path or host order that names them.
    The address is part of the key because simulated clusters (and sites) reuse host names."""
    members = sorted(f"{name}\t{entry.connection.get('ansible_host', name)}"
                     for name, entry in inventory.hosts.items())
    key = hashlib.sha256("\n".join(members).encode()).hexdigest()[:16]
    return runs / "locks" / f"hosts-{key}.lock"


def _read(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        data = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def acquire(runs: Path, inventory: Inventory, command: str) -> RunLock:
    """Take the lock of the inventory's hosts or raise RunLocked naming the holder."""
    source = inventory.source
    path = lock_path(runs, inventory)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read(fd)
        os.close(fd)
        pid = holder.get("pid", "?")
        raise RunLocked(
            f"inventory {source} is in use by `provisioner {holder.get('command', '?')}` on "
            f"the same hosts from {holder.get('inventory', '?')} (PID {pid}, started "
            f"{holder.get('started_at', '?')}); wait for it to finish "
            f"or stop it (lock: {path})") from None
    # A holder truncates the file when it releases; content without a held flock was left by
    # a process that died (killed, crashed, host rebooted): a stale lock, taken over.
    previous = _read(fd)
    stale = previous if previous.get("pid") else None
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps({
        "pid": os.getpid(), "command": command, "inventory": str(source.resolve()),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds")}).encode())
    return RunLock(path=path, fd=fd, stale=stale)
