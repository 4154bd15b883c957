"""ansible.builtin.reboot with a circuit breaker for rolling reboots (the module's documentation
is plugins/modules/rolling_reboot.py).

Run under ``throttle``, a play reboots its nodes a few at a time. A node that does not come back
is written to a ledger the whole play shares (a file named after the play's id, so each run has
its own); once more nodes than ``max_lost`` are in it, the reboots not started yet are
withheld: a driver that leaves nodes unbootable costs a batch, not the fleet.

With ``record`` (a file on the controller), every reboot is also appended to it as one JSON
line: the host, when its reboot started and ended (the controller's clock, UTC), its boot id
before and after, and the outcome (``back``, ``lost``: went down and did not come back,
``failed``: never went down, ``withheld``). `provisioner up --reboot` keeps it in the run's
report, which shows how many nodes were down at once."""

from __future__ import annotations

import fcntl
import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ansible.plugins.action.reboot import ActionModule as RebootAction

LEDGER_PREFIX = "gpuc-rolling-reboot-"


def ledger_path(play_id: str, directory: str | None = None) -> Path:
    """The file in which a play's nodes that did not come back are listed, one per line."""
    safe = "".join(c for c in play_id if c.isalnum() or c in "-_") or "play"
    return Path(directory or tempfile.gettempdir()) / f"{LEDGER_PREFIX}{safe}.lost"


def lost_nodes(path: Path) -> list[str]:
    try:
        with path.open(encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_SH)
            return [line.strip() for line in fh if line.strip()]
    except FileNotFoundError:
        return []


def record_lost(path: Path, node: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(node + "\n")


def withheld_message(lost: list[str], max_lost: int) -> str:
    return (f"reboot withheld: {len(lost)} node(s) of this run did not come back from theirs "
            f"({', '.join(lost)}), more than the {max_lost} it may lose; the new driver is "
            "installed but not loaded here. Find out why those nodes did not boot before "
            "rebooting more.")


def append_record(path: Path, entry: dict[str, Any]) -> None:
    """One reboot, one JSON line; nodes rebooting at once append under a lock."""
    with path.open("a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(json.dumps(entry, sort_keys=True) + "\n")


def outcome(result: dict[str, Any]) -> str:
    if result.get("withheld"):
        return "withheld"
    if not result.get("failed"):
        return "back"
    return "lost" if result.get("rebooted") else "failed"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class ActionModule(RebootAction):
    _VALID_ARGS = RebootAction._VALID_ARGS | frozenset(("max_lost", "record"))
    _boot_ids: list[str]

    def get_system_boot_time(self, distribution: Any) -> str:
        """The node's boot id (the reboot action's default command reads it), kept: the first
        is the boot before the reboot, the last the one it came back with."""
        boot: str = super().get_system_boot_time(distribution)
        self._boot_ids.append(boot)
        return boot

    def _play_id(self) -> str:
        parent = self._task
        while parent is not None:
            play = getattr(parent, "_play", None)
            if play is not None:
                return str(play._uuid)
            parent = getattr(parent, "_parent", None)
        return "no-play"

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        args = dict(self._task.args)
        try:
            max_lost = int(args.pop("max_lost", -1))
        except (TypeError, ValueError):
            return {"failed": True, "rebooted": False, "changed": False,
                    "msg": f"max_lost must be a whole number, not {self._task.args['max_lost']!r}"}
        record = args.pop("record", None)
        self._task.args = args
        self._boot_ids = []
        host = str((task_vars or {}).get("inventory_hostname", "?"))
        ledger = ledger_path(self._play_id())
        started = _now()
        result: dict[str, Any]
        lost = lost_nodes(ledger) if max_lost >= 0 and not self._task.check_mode else []
        if len(lost) > max_lost >= 0:
            result = {"failed": True, "rebooted": False, "changed": False, "withheld": True,
                      "lost_in_this_run": lost, "msg": withheld_message(lost, max_lost)}
        else:
            result = super().run(tmp, task_vars)
            if result.get("failed") and result.get("rebooted"):  # went down, never came back
                record_lost(ledger, host)
        if record and not self._task.check_mode:
            back = outcome(result) == "back"
            append_record(Path(str(record)), {
                "host": host, "started_at": started, "ended_at": _now(),
                "outcome": outcome(result),
                "boot_id_before": self._boot_ids[0] if self._boot_ids else None,
                "boot_id_after": self._boot_ids[-1] if back and len(self._boot_ids) > 1
                else None})
        return result
