"""The event sink: ansible-runner's event stream folded into a PlaybookResult.

Events are consumed as a stream: per-host counters, the last task per host, a bounded list of
failures and the ``<role>_report`` facts roles publish. Nothing grows with the number of
events, and the sink tells ansible-runner not to keep ok/changed/skipped events on disk either
(failed and unreachable ones stay in the artifacts for debugging). A local phase
(provisioner.runner) and a sharded one (provisioner.executors) feed the same sink.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provisioner.results import (
    HostStats,
    PlaybookResult,
    ProgressCallback,
    ProgressEvent,
    TaskFailure,
)
from provisioner.untrusted import redact

# Roles publish report data as a fact named <role>_report (a dict); the section is <role>.
REPORT_SUFFIX = "_report"
MAX_FAILURES = 200
MAX_MESSAGE = 600


class EventSink:
    """Folds the event stream into a PlaybookResult; constant memory per host."""

    def __init__(self, result: PlaybookResult, on_progress: ProgressCallback | None) -> None:
        self.result = result
        self.on_progress = on_progress

    def __call__(self, event: Mapping[str, Any]) -> bool:
        self.result.events_seen += 1
        kind = str(event.get("event", ""))
        data: Mapping[str, Any] = event.get("event_data") or {}
        host = data.get("host")
        task = data.get("task")
        keep = False
        if kind == "playbook_on_play_start":
            self._emit(ProgressEvent("play", task=str(data.get("play", ""))))
        elif kind == "playbook_on_task_start":
            self._emit(ProgressEvent("task", task=str(task)))
        elif kind == "runner_on_ok":
            res = data.get("res") or {}
            self._collect_reports(str(host), res)
            self._emit(ProgressEvent("changed" if res.get("changed") else "ok", str(host),
                                     str(task)))
        elif kind == "runner_on_skipped":
            self._emit(ProgressEvent("skipped", str(host), str(task)))
        elif kind in ("runner_on_failed", "runner_on_unreachable"):
            res = data.get("res") or {}
            unreachable = kind == "runner_on_unreachable"
            if kind == "runner_on_failed" and data.get("ignore_errors"):
                return False
            self._collect_reports(str(host), res)
            self._record_failure(str(host), str(task), res, unreachable)
            self._emit(ProgressEvent("unreachable" if unreachable else "failed", str(host),
                                     str(task)))
            keep = True
        elif kind == "playbook_on_stats":
            self._collect_stats(data)
        return keep

    def _emit(self, ev: ProgressEvent) -> None:
        if self.on_progress is not None:
            self.on_progress(ev)

    def _collect_reports(self, host: str, res: Mapping[str, Any]) -> None:
        facts = res.get("ansible_facts") or {}
        for key, value in facts.items():
            if key.endswith(REPORT_SUFFIX) and isinstance(value, Mapping):
                section = key[: -len(REPORT_SUFFIX)]
                self.result.reports.setdefault(host, {})[section] = dict(value)

    def _record_failure(self, host: str, task: str, res: Mapping[str, Any],
                        unreachable: bool) -> None:
        if len(self.result.failures) >= MAX_FAILURES:
            self.result.dropped_failures += 1
            return
        msg = str(res.get("msg") or res.get("stderr") or res.get("reason") or "failed")
        detail = str(res.get("stderr") or res.get("stdout") or "").strip()
        if detail and detail not in msg:
            msg = f"{msg}: {detail.splitlines()[-1]}"
        msg = redact(" ".join(msg.split()))
        if len(msg) > MAX_MESSAGE:
            msg = msg[: MAX_MESSAGE - 3] + "..."
        self.result.failures.append(TaskFailure(host, task, msg, unreachable))

    def _collect_stats(self, data: Mapping[str, Any]) -> None:
        fields = {"ok": "ok", "changed": "changed", "failures": "failed",
                  "dark": "unreachable", "skipped": "skipped", "rescued": "rescued",
                  "ignored": "ignored"}
        for src, dst in fields.items():
            for host, count in (data.get(src) or {}).items():
                stats = self.result.stats.setdefault(str(host), HostStats())
                setattr(stats, dst, int(count))
