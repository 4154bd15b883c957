"""Live per-host progress for a playbook run (rich), fed by results.ProgressEvent callbacks.

Two parts with one job each. ``ProgressModel`` folds events into counters: O(1) work per
event and a fixed amount of memory per host, whatever the fleet size. ``ProgressDisplay``
shows the model: on a terminal a compact table (one row per host up to ``MAX_ROWS`` hosts, an
aggregate row and the first hosts with failures beyond), redrawn by rich's refresh thread at a
fixed rate (``REFRESH_PER_SECOND``), never per event; elsewhere (CI logs) one line per play and
per failure, so a 2,000-host run does not print 2,000 lines per task.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from provisioner.results import ProgressEvent
from provisioner.untrusted import printable


def _text(value: str) -> str:
    """Host and task names come from the inventory and the playbooks' templating of node data:
    no terminal control sequence or rich markup of theirs reaches the console."""
    return escape(printable(value))

MAX_ROWS = 30
# Hosts with failures named under the aggregate row of a large run (the rest are counted).
MAX_FAILED_ROWS = 10
REFRESH_PER_SECOND = 4
# The host outcomes counted; a "skipped" event is counted but has no column.
KINDS = ("ok", "changed", "failed", "unreachable", "skipped")
_COLUMN_KINDS = KINDS[:4]
_INDEX = {kind: i for i, kind in enumerate(KINDS)}
_FAILED = _INDEX["failed"]
_UNREACHABLE = _INDEX["unreachable"]


@dataclass(slots=True)
class HostProgress:
    """One host's counters by kind (``KINDS`` order) and the task of its last event."""

    counts: list[int] = field(default_factory=lambda: [0] * len(KINDS))
    task: str = ""

    @property
    def failing(self) -> bool:
        return bool(self.counts[_FAILED] or self.counts[_UNREACHABLE])


@dataclass(frozen=True)
class ProgressSnapshot:
    """What one redraw shows, copied under the model's lock (the refresh thread reads it while
    the runner's thread keeps updating)."""

    task: str
    hosts: int
    failing_hosts: int
    totals: tuple[int, ...]
    rows: tuple[tuple[str, tuple[int, ...], str], ...]
    failing: tuple[str, ...]


class ProgressModel:
    """Event counters: per host, over all hosts, and the number of hosts with failures, each
    kept up to date as events arrive so that nothing is recounted per event or per redraw."""

    def __init__(self) -> None:
        self.hosts: dict[str, HostProgress] = {}
        self.totals = [0] * len(KINDS)
        self.failing_hosts = 0
        # The first hosts that failed, in order (bounded: a full-fleet outage names ten).
        self.first_failing: list[str] = []
        self.task = ""
        self.events = 0
        self._lock = threading.Lock()

    def update(self, ev: ProgressEvent) -> None:
        """Fold one event in: O(1) whatever the number of hosts."""
        with self._lock:
            self.events += 1
            if ev.kind == "task":
                self.task = ev.task or ""
                return
            index = _INDEX.get(ev.kind)
            if ev.host is None or index is None:
                return
            state = self.hosts.get(ev.host)
            if state is None:
                state = self.hosts[ev.host] = HostProgress()
            was_failing = state.failing
            state.counts[index] += 1
            state.task = ev.task or ""
            self.totals[index] += 1
            if not was_failing and state.failing:
                self.failing_hosts += 1
                if len(self.first_failing) < MAX_FAILED_ROWS:
                    self.first_failing.append(ev.host)

    def snapshot(self, max_rows: int = MAX_ROWS) -> ProgressSnapshot:
        """The state a redraw needs: every host's row while there are at most ``max_rows``
        hosts, else only the totals and the first hosts with failures (O(max_rows) either
        way)."""
        with self._lock:
            if len(self.hosts) <= max_rows:
                rows = tuple(sorted((h, tuple(s.counts), s.task) for h, s in self.hosts.items()))
            else:
                rows = tuple((h, tuple(self.hosts[h].counts), self.hosts[h].task)
                             for h in self.first_failing)
            return ProgressSnapshot(task=self.task, hosts=len(self.hosts),
                                    failing_hosts=self.failing_hosts, totals=tuple(self.totals),
                                    rows=rows, failing=tuple(self.first_failing))


class ProgressDisplay:
    def __init__(self, console: Console, title: str) -> None:
        self.console = console
        self.title = title
        self.model = ProgressModel()
        self.live: Live | None = None

    def __enter__(self) -> ProgressDisplay:
        if self.console.is_terminal:
            # rich's refresh thread pulls the table REFRESH_PER_SECOND times a second; an event
            # only updates counters.
            self.live = Live(console=self.console, refresh_per_second=REFRESH_PER_SECOND,
                             transient=True, get_renderable=self.render)
            self.live.__enter__()
        else:
            self.console.print(f"[bold]{self.title}[/bold]")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.live is not None:
            self.live.__exit__(exc_type, exc, tb)

    def __call__(self, ev: ProgressEvent) -> None:
        self.model.update(ev)
        if self.live is not None:
            return
        if ev.kind == "play":
            self.console.print(_text(f"  play: {ev.task}"))
        elif ev.kind in ("failed", "unreachable") and ev.host is not None:
            self.console.print(f"  [red]{ev.kind}[/red] " + _text(f"{ev.host}: {ev.task}"))

    def render(self) -> Table:
        """The table for the model's current state (built per redraw, not per event)."""
        snap = self.model.snapshot()
        table = Table(title=_text(f"{self.title} - {snap.task}"), expand=False)
        for col in ("host", *_COLUMN_KINDS, "last task"):
            table.add_column(col)
        if snap.hosts > MAX_ROWS:
            table.add_row(f"{snap.hosts} hosts ({snap.failing_hosts} with failures)",
                          *(str(snap.totals[_INDEX[k]]) for k in _COLUMN_KINDS),
                          _text(snap.task))
            more = snap.failing_hosts - len(snap.rows)
            for host, counts, task in snap.rows:
                table.add_row(_text(host), *(str(counts[_INDEX[k]]) for k in _COLUMN_KINDS),
                              _text(task), style="red")
            if more > 0:
                table.add_row(f"... {more} more with failures", "", "", "", "", "")
            return table
        for host, counts, task in snap.rows:
            table.add_row(_text(host), *(str(counts[_INDEX[k]]) for k in _COLUMN_KINDS),
                          _text(task))
        return table
