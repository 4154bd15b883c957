"""ansible.builtin.reboot with a circuit breaker for rolling reboots (the module's documentation
is plugins/modules/rolling_reboot.py).

Run under ``throttle``, a play reboots its nodes a few at a time. A node that does not come back
is written to a ledger the whole play shares (a file named after the play's id, so each run has
its own); once more nodes than ``max_lost`` are in it, the reboots not started yet are
withheld: a driver that leaves nodes unbootable costs a batch, not the fleet."""

from __future__ import annotations

import fcntl
import tempfile
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


class ActionModule(RebootAction):
    _VALID_ARGS = RebootAction._VALID_ARGS | frozenset(("max_lost",))

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
        self._task.args = args
        host = str((task_vars or {}).get("inventory_hostname", "?"))
        ledger = ledger_path(self._play_id())
        if max_lost >= 0 and not self._task.check_mode:
            lost = lost_nodes(ledger)
            if len(lost) > max_lost:
                return {"failed": True, "rebooted": False, "changed": False, "withheld": True,
                        "lost_in_this_run": lost, "msg": withheld_message(lost, max_lost)}
        result: dict[str, Any] = super().run(tmp, task_vars)
        if result.get("failed") and result.get("rebooted"):  # went down, never came back
            record_lost(ledger, host)
        return result
