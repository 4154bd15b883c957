"""What a playbook run produced, as the report and the live display read it: per-host
counters, task failures, the roles' report facts, and the progress events of the stream.

Plain data, no Ansible: ``run_events.py`` (the event sink of ``runner.py``, the one module that
imports ansible_runner) fills these in; ``report.py`` and ``progress.py`` read them without
importing the runner.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def healthy(self) -> bool:
        return self.failed == 0 and self.unreachable == 0


@dataclass(frozen=True)
class TaskFailure:
    host: str
    task: str
    message: str
    unreachable: bool = False


@dataclass(frozen=True)
class ProgressEvent:
    """What the live display needs; kind is play|task|ok|changed|failed|unreachable|skipped."""

    kind: str
    host: str | None = None
    task: str | None = None


ProgressCallback = Callable[[ProgressEvent], None]


@dataclass
class PlaybookResult:
    playbook: str
    status: str
    rc: int
    duration_s: float
    artifact_dir: Path
    stats: dict[str, HostStats] = field(default_factory=dict)
    failures: list[TaskFailure] = field(default_factory=list)
    dropped_failures: int = 0
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    events_seen: int = 0
    # `up --executors`: the executor that ran each host (empty when the controller ran them).
    executors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Judged from status, rc and stats (never from stdout)."""
        return (self.status == "successful" and self.rc == 0
                and all(s.healthy for s in self.stats.values()))

    @property
    def changed_total(self) -> int:
        return sum(s.changed for s in self.stats.values())
