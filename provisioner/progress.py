"""Live per-host progress for a playbook run (rich), fed by results.ProgressEvent callbacks.

On a terminal it redraws a compact table (one row per host up to 30 hosts, aggregate counts
beyond); elsewhere (CI logs) it prints one line per play and per failure, so a 2,000-host run
does not print 2,000 lines per task.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from provisioner.results import ProgressEvent
from provisioner.untrusted import printable

MAX_ROWS = 30


@dataclass
class _HostState:
    task: str = ""
    counts: Counter[str] = field(default_factory=Counter)


class ProgressDisplay:
    def __init__(self, console: Console, title: str) -> None:
        self.console = console
        self.title = title
        self.hosts: dict[str, _HostState] = {}
        self.task = ""
        self.live: Live | None = None

    def __enter__(self) -> ProgressDisplay:
        if self.console.is_terminal:
            self.live = Live(self._render(), console=self.console, refresh_per_second=4,
                             transient=True)
            self.live.__enter__()
        else:
            self.console.print(f"[bold]{self.title}[/bold]")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.live is not None:
            self.live.__exit__(exc_type, exc, tb)

    def __call__(self, ev: ProgressEvent) -> None:
        # Host names and task names come from the inventory and the playbooks' templating of
        # node data: no terminal control sequence reaches the console.
        ev = ProgressEvent(ev.kind, None if ev.host is None else printable(ev.host),
                           None if ev.task is None else printable(ev.task))
        if ev.kind == "play":
            if self.live is None:
                self.console.print(escape(f"  play: {ev.task}"))
            return
        if ev.kind == "task":
            self.task = ev.task or ""
            return
        if ev.host is None:
            return
        state = self.hosts.setdefault(ev.host, _HostState())
        state.task = ev.task or ""
        state.counts[ev.kind] += 1
        if ev.kind in ("failed", "unreachable") and self.live is None:
            self.console.print(f"  [red]{ev.kind}[/red] " + escape(f"{ev.host}: {ev.task}"))
        if self.live is not None:
            self.live.update(self._render())

    def _render(self) -> Table:
        table = Table(title=escape(f"{self.title} - {self.task}"), expand=False)
        for col in ("host", "ok", "changed", "failed", "unreachable", "last task"):
            table.add_column(col)
        if len(self.hosts) > MAX_ROWS:
            total: Counter[str] = Counter()
            for st in self.hosts.values():
                total.update(st.counts)
            bad = sum(1 for st in self.hosts.values()
                      if st.counts["failed"] or st.counts["unreachable"])
            table.add_row(f"{len(self.hosts)} hosts ({bad} with failures)",
                          str(total["ok"]), str(total["changed"]), str(total["failed"]),
                          str(total["unreachable"]), self.task)
            return table
        for host, st in sorted(self.hosts.items()):
            table.add_row(escape(host), str(st.counts["ok"]), str(st.counts["changed"]),
                          str(st.counts["failed"]), str(st.counts["unreachable"]),
                          escape(st.task))
        return table
