"""The live progress and the report tables at fleet size: counters right past 12 and 30 hosts,
nothing redrawn per event, memory bounded per host (timings are bench/'s job, not these)."""

from __future__ import annotations

import io
import time
from typing import Any

from rich.console import Console

from provisioner import render
from provisioner.progress import MAX_FAILED_ROWS, MAX_ROWS, ProgressDisplay, ProgressModel
from provisioner.results import ProgressEvent


def text_console(terminal: bool = False) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=250, force_terminal=terminal, color_system=None), out


def synthetic_run(hosts: int, tasks: int, failing: set[int]) -> list[ProgressEvent]:
    """A play over ``hosts`` hosts: per task a start event, then one result per host (the
    hosts in ``failing`` fail the last task, the second host is unreachable at the first)."""
    events = [ProgressEvent("play", task="Stack")]
    for t in range(tasks):
        events.append(ProgressEvent("task", task=f"Task {t}"))
        for h in range(hosts):
            name = f"gpu-{h:04d}"
            if h == 1 and t == 0:
                kind = "unreachable"
            elif h == 1:
                continue
            elif t == tasks - 1 and h in failing:
                kind = "failed"
            else:
                kind = "changed" if t % 2 else "ok"
            events.append(ProgressEvent(kind, name, f"Task {t}"))
    return events


def test_model_counts_every_host_past_twelve_and_thirty() -> None:
    model = ProgressModel()
    for ev in synthetic_run(hosts=40, tasks=5, failing={3, 7}):
        model.update(ev)
    assert len(model.hosts) == 40
    # 39 reachable hosts x 5 tasks: tasks 0, 2, 4 ok, tasks 1, 3 changed, minus two failures.
    assert model.totals[:4] == [39 * 3 - 2, 39 * 2, 2, 1]
    assert model.failing_hosts == 3
    assert model.first_failing == ["gpu-0001", "gpu-0003", "gpu-0007"]
    assert model.hosts["gpu-0025"].counts[:4] == [3, 2, 0, 0]
    assert model.hosts["gpu-0007"].task == "Task 4"
    assert model.task == "Task 4"


def test_twenty_hosts_get_a_row_each_with_their_own_counts() -> None:
    console, out = text_console()
    display = ProgressDisplay(console, "stack (stack.yml)")
    for ev in synthetic_run(hosts=20, tasks=3, failing={19}):
        display.model.update(ev)
    console.print(display.render())
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:6]]
            for line in out.getvalue().splitlines() if "gpu-" in line}
    assert len(rows) == 20
    assert rows["gpu-0000"] == ["2", "1", "0", "0"]
    assert rows["gpu-0019"] == ["1", "1", "1", "0"]
    assert rows["gpu-0001"] == ["0", "0", "0", "1"]


def test_a_large_run_shows_totals_and_the_first_failing_hosts_only() -> None:
    console, out = text_console()
    display = ProgressDisplay(console, "stack (stack.yml)")
    failing = set(range(100, 100 + 2 * MAX_FAILED_ROWS))
    for ev in synthetic_run(hosts=2000, tasks=2, failing=failing):
        display.model.update(ev)
    console.print(display.render())
    text = out.getvalue()
    assert f"2000 hosts ({len(failing) + 1} with failures)" in text
    assert "gpu-0001" in text and "gpu-0100" in text
    assert "gpu-0119" not in text  # past the first MAX_FAILED_ROWS failing hosts
    assert f"... {len(failing) + 1 - MAX_FAILED_ROWS} more with failures" in text
    assert "gpu-0500" not in text
    assert len(text.splitlines()) < MAX_ROWS + 10


class CountingDisplay(ProgressDisplay):
    draws = 0

    def render(self) -> Any:
        self.draws += 1
        return super().render()


def test_the_terminal_table_is_drawn_at_a_fixed_rate_not_per_event() -> None:
    console, _out = text_console(terminal=True)
    events = synthetic_run(hosts=500, tasks=40, failing=set())
    with CountingDisplay(console, "stack (stack.yml)") as display:
        assert display.live is not None
        started = time.monotonic()
        for ev in events:
            display(ev)
        elapsed = time.monotonic() - started
    assert display.model.events == len(events) == 1 + 40 + 40 * 499 + 1
    # At 4 redraws a second (plus the first and the last), never once per event.
    assert display.draws <= 4 * elapsed + 3 < len(events) / 10


def test_model_memory_is_per_host_not_per_event() -> None:
    model = ProgressModel()
    for ev in synthetic_run(hosts=50, tasks=2, failing=set(range(50))):
        model.update(ev)
    sizes = (len(model.hosts), len(model.first_failing))
    for ev in synthetic_run(hosts=50, tasks=30, failing=set(range(50))):
        model.update(ev)
    assert (len(model.hosts), len(model.first_failing)) == sizes == (50, MAX_FAILED_ROWS)


def test_log_mode_prints_plays_and_failures_only() -> None:
    console, out = text_console()
    with ProgressDisplay(console, "stack (stack.yml)") as display:
        for ev in synthetic_run(hosts=40, tasks=3, failing={5}):
            display(ev)
    lines = out.getvalue().splitlines()
    assert lines == ["stack (stack.yml)", "  play: Stack", "  unreachable gpu-0001: Task 0",
                     "  failed gpu-0005: Task 2"]


def gpu_checks(hosts: int, bad: dict[str, int]) -> list[dict[str, Any]]:
    """Per host: a driver check and one memory check per GPU (8); ``bad`` host -> failing GPU."""
    checks: list[dict[str, Any]] = []
    for h in range(hosts):
        host = f"gpu-{h:02d}"
        checks.append({"host": host, "phase": "validate", "name": "driver_version",
                       "status": "pass", "measured": "580.95.05", "expected": "580.95.05",
                       "detail": ""})
        for g in range(8):
            status = "fail" if bad.get(host) == g else "pass"
            checks.append({"host": host, "phase": "validate", "name": f"gpu{g}_memory",
                           "status": status, "measured": 81559, "expected": 81559,
                           "detail": "ECC errors" if status == "fail" else ""})
    return checks


def report_text(checks: list[dict[str, Any]]) -> str:
    console, out = text_console()
    render.report(console, {"run_id": "r1", "command": "validate", "inventory": "hosts.yml",
                            "phases": [], "checks": checks, "outcome": "failed",
                            "duration_s": 1.0})
    return out.getvalue()


def cells(text: str, row: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if f" {row} " in ln)
    return [c.strip() for c in line.split("│")[1:-1]]


def test_per_gpu_rows_are_counted_past_twelve_hosts() -> None:
    text = report_text(gpu_checks(20, {"gpu-04": 3, "gpu-17": 0}))
    assert "checks over 20 hosts" in text
    assert cells(text, "validate:gpu#_memory") == ["validate:gpu#_memory", "158", "0", "2",
                                                   "0", "2"]
    assert cells(text, "validate:driver_version") == ["validate:driver_version", "20", "0",
                                                      "0", "0", "0"]
    assert "fail gpu-04 gpu3_memory" in text and "fail gpu-17 gpu0_memory" in text


def test_twelve_hosts_keep_the_host_by_check_matrix() -> None:
    text = report_text(gpu_checks(12, {"gpu-04": 3}))
    assert "host x check" in text
    assert "fail 1/8" in text


def test_failure_lines_of_a_large_cluster_are_capped() -> None:
    text = report_text(gpu_checks(100, {f"gpu-{h:02d}": 1 for h in range(100)}))
    assert len([ln for ln in text.splitlines() if ln.startswith("fail gpu-")]) == \
        render.MAX_CHECK_LINES
    assert f"... {100 - render.MAX_CHECK_LINES} more fail/warn checks in report.json" in text


def plan_row(host: str, stack: str) -> dict[str, str]:
    return {"host": host, "kind": "gpu", "profile": "hgx-h100-8gpu", "stack": stack}


def test_a_large_plan_is_one_row_per_distinct_resolution() -> None:
    rows = [plan_row(f"gpu-{i:04d}", "cuda-12.8" if i % 10 else "cuda-13.0")
            for i in range(2000)]
    grouped = render.group_rows(rows, "host")
    assert grouped == [
        {"hosts": "200: gpu-0000, gpu-0010, gpu-0020, ...", "kind": "gpu",
         "profile": "hgx-h100-8gpu", "stack": "cuda-13.0"},
        {"hosts": "1800: gpu-0001, gpu-0002, gpu-0003, ...", "kind": "gpu",
         "profile": "hgx-h100-8gpu", "stack": "cuda-12.8"},
    ]
    console, out = text_console()
    render.plan(console, rows, simulated=False)
    assert "plan for 2000 hosts" in out.getvalue()
    assert "gpu-0004" not in out.getvalue()


def test_a_small_plan_keeps_a_row_per_host() -> None:
    console, out = text_console()
    render.plan(console, [plan_row(f"gpu-{i}", "cuda-12.8") for i in range(render.MAX_PLAN_ROWS)],
                simulated=False)
    assert all(f"gpu-{i} " in out.getvalue() for i in range(render.MAX_PLAN_ROWS))
