"""Console rendering of reports, plans and views (the only place besides cli.py that prints),
and the JSON text ``--json`` prints instead."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from provisioner.report import SIMULATED_BANNER
from provisioner.untrusted import printable


def _clean(data: Any) -> Any:
    """Text from nodes (hostnames, task output, tool text) without terminal control
    sequences, in nested mappings and lists: nothing a node says reaches the terminal raw."""
    if isinstance(data, str):
        return printable(data)
    if isinstance(data, Mapping):
        return {_clean(k): _clean(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_clean(v) for v in data]
    return data

_STYLE = {"pass": "green", "fail": "bold red", "warn": "yellow", "skip": "dim"}


def simulated_banner(console: Console) -> None:
    console.print(Panel(f"[bold yellow]{SIMULATED_BANNER}[/bold yellow]",
                        title="[bold yellow]SIMULATED[/bold yellow]", border_style="yellow"))


def as_json(data: Any) -> str:
    """What ``--json`` prints: one JSON document, keys in the order the library built them;
    values JSON has no type for (paths, dates) as their text."""
    return json.dumps(data, indent=2, default=str)


def report(console: Console, data: Mapping[str, Any], *, verbose: bool = False) -> None:
    """A saved or fresh report (``report.json`` data): phases, checks, failures, smoke results,
    notes, then the verdict line. ``verbose`` also lists every passed and skipped check."""
    data = _clean(data)
    simulated = bool(data.get("simulated"))
    if simulated:
        simulated_banner(console)
    console.print(f"[bold]run {data['run_id']}[/bold]  {escape(str(data.get('command')))}  "
                  f"inventory {escape(str(data.get('inventory')))}")
    phases = Table(title="phases")
    for col in ("phase", "result", "hosts", "changed", "failed hosts", "time (s)"):
        phases.add_column(col)
    for ph in data.get("phases", []):
        bad = [h for h, s in ph["hosts"].items() if s["failed"] or s["unreachable"]]
        phases.add_row(ph["name"], "[green]ok[/green]" if ph["ok"] else "[bold red]FAILED[/]",
                       str(len(ph["hosts"])), str(ph["changed"]),
                       ", ".join(bad[:8]) + (" ..." if len(bad) > 8 else ""),
                       f"{ph['duration_s']:.1f}")
    console.print(phases)
    if data.get("executors"):
        console.print(escape(executors_line(data["executors"])))
    if data.get("batches"):
        batches_table(console, data["batches"])
    checks = data.get("checks", [])
    if checks:
        _checks_table(console, checks)
        if verbose:
            _check_lines(console, checks, ("pass", "skip"))
    failures = [f for ph in data.get("phases", []) for f in ph["failures"]]
    for f in failures[:20]:
        what = "unreachable" if f.get("unreachable") else "failed"
        console.print(f"[red]{what}[/red] " + escape(f"{f['host']}: {f['task']}: {f['message']}"))
    if len(failures) > 20:
        console.print(f"... {len(failures) - 20} more failures in report.json")
    for host, why in sorted((data.get("lost_hosts") or {}).items()):
        # "lost": the run could not reach the node or finish with it; a node that answered and
        # failed its checks (or a task) failed, and is said so.
        word = "lost" if why.get("reason") == "unreachable" else "failed"
        console.print(f"[bold red]{word}[/] " + escape(
            f"{host}: {why.get('reason')} in {why.get('phase')}"
            + (f" ({why.get('task')}: {why.get('message')})" if why.get("task") else "")))
    # A node lost with its executor (`up --executors`) was never tried over ssh from here:
    # ssh's timeouts are no explanation for it (its line above names the executor's reason).
    if any(why.get("reason") == "unreachable"
           and not str(why.get("task") or "").startswith("executor ")
           for why in (data.get("lost_hosts") or {}).values()):
        console.print(escape(gave_up_line(data.get("connection") or {})))
    smoke = data.get("smoke")
    if smoke:
        smoke_table(console, smoke)
    for note in data.get("notes", []):
        console.print(escape(f"note: {note}"))
    verdict(console, data)


def executors_line(executors: Mapping[str, Sequence[str]]) -> str:
    """`up --executors`: which executor ran how many hosts (the report has the hosts)."""
    parts = [f"{name} ({len(hosts)} host{'s' if len(hosts) != 1 else ''})"
             for name, hosts in executors.items()]
    return (f"executors: {', '.join(parts)}; the scheduler phase and the smoke job run from the "
            "controller")


def gave_up_line(conn: Mapping[str, Any]) -> str:
    """How long ssh tried an unreachable node, and which knob changes it."""
    timeout, retries = conn.get("connect_timeout_s"), conn.get("ssh_retries")
    if timeout is None or retries is None:
        return "unreachable: ssh's connect timeout is not known (see ansible.cfg)"
    line = (f"unreachable: ssh gave up after {retries + 1} attempt(s) with a {timeout} s connect "
            f"timeout ({conn.get('connect_timeout_from')}); on a slow network or through a "
            "bastion raise it: ANSIBLE_TIMEOUT=15")
    if conn.get("overridden_on"):
        line += f"; {len(conn['overridden_on'])} host(s) set their own in the inventory"
    return line


def batches_table(console: Console, batches: Sequence[Mapping[str, Any]]) -> None:
    """`upgrade`: one row per batch (drain and job wait, each phase, what Slurm was told),
    then one line per node the upgrade left drained, with the reason it left on it."""
    table = Table(title="upgrade batches")
    for col in ("batch", "nodes", "drain", "stack", "validate", "monitoring", "slurm",
                "outcome"):
        table.add_column(col)
    for b in batches:
        phases = b.get("phases") or {}
        if b.get("drained_at"):
            jobs = len(b.get("jobs_waited_for") or [])
            drain = f"waited {b.get('drain_wait_s') or 0:.0f}s for {jobs} job(s)"
            if b.get("jobs_cancelled"):
                drain += f", cancelled {len(b['jobs_cancelled'])}"
        else:
            drain = "-"
        kept = b.get("kept_drained") or {}
        slurm = "; ".join(part for part in (
            f"resumed {', '.join(b['resumed'])}" if b.get("resumed") else "",
            f"kept drained {', '.join(kept)}" if kept else "") if part) or "-"
        outcome = str(b.get("outcome", "?"))
        style = "green" if outcome == "passed" else "dim" if outcome == "not run" else "bold red"
        table.add_row(str(b.get("number")), escape(", ".join(b.get("nodes") or [])),
                      escape(drain), *(escape(str(phases.get(name, "-")))
                                       for name in ("stack", "validate", "monitoring")),
                      escape(slurm), f"[{style}]{escape(outcome)}[/{style}]")
    console.print(table)
    for b in batches:
        for node, why in (b.get("kept_drained") or {}).items():
            console.print("[yellow]drained[/yellow] " + escape(f"{node}: {why}"))
        if b.get("outcome") not in ("passed", "not run") and b.get("detail"):
            console.print(f"[bold red]batch {b.get('number')}[/] " + escape(str(b["detail"])))


def verdict(console: Console, data: Mapping[str, Any]) -> None:
    """The report's last line, the one ``-q`` keeps: outcome, SIMULATED tag, time, file."""
    data = _clean(data)
    simulated = bool(data.get("simulated"))
    outcome = str(data.get("outcome", "?"))
    color = "green" if outcome == "passed" else "bold red"
    tag = " (SIMULATED)" if simulated else ""
    console.print(f"[{color}]cluster {outcome.upper()}{tag}[/{color}] in "
                  f"{data.get('duration_s', 0):.1f}s - report: "
                  + escape(str(data.get('report_path', ''))))


_RANK = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}


@lru_cache(maxsize=4096)
def _family(name: str) -> str:
    """gpu3_memory -> gpu#_memory, ib_mlx5_2_port1 -> ib_mlx5_#_port#: one row per kind."""
    return re.sub(r"\d+", "#", name) if re.search(r"(gpu|mlx\d_|port)\d", name) else name


def _checks_table(console: Console, checks: list[Mapping[str, Any]]) -> None:
    """Host x check-kind matrix for small clusters (per-GPU/per-port checks folded into one
    row each, worst status shown); per-check counts for large ones. Failures listed after."""
    hosts = sorted({c["host"] for c in checks})
    names = list(dict.fromkeys(f"{c['phase']}:{_family(c['name'])}" for c in checks))
    if len(hosts) <= 12:
        table = Table(title="checks (host x check; # = every GPU/port, worst shown)")
        table.add_column("check")
        for h in hosts:
            table.add_column(h)
        cells: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for c in checks:
            cells.setdefault((f"{c['phase']}:{_family(c['name'])}", c["host"]), []).append(c)
        for n in names:
            row = []
            for h in hosts:
                group = cells.get((n, h), [])
                if not group:
                    row.append("-")
                    continue
                worst = max(group, key=lambda c: _RANK.get(str(c["status"]), 0))
                style = _STYLE.get(worst["status"], "")
                bad = sum(1 for c in group if c["status"] == worst["status"])
                count = f" {bad}/{len(group)}" if len(group) > 1 else ""
                measured = "" if len(group) > 1 else " " + escape(_short(worst.get("measured")))
                row.append(f"[{style}]{worst['status']}[/{style}]{count}{measured}")
            table.add_row(escape(n), *row)
        console.print(table)
    else:
        table = Table(title=f"checks over {len(hosts)} hosts (# = every GPU/port: counts are "
                            "checks; hosts = hosts with a fail or warn)")
        for col in ("check", "pass", "warn", "fail", "skip", "hosts"):
            table.add_column(col)
        for n, (counts, bad_hosts) in _check_counts(checks).items():
            table.add_row(escape(n), *[str(counts.get(s, 0)) for s in _STATUSES],
                          str(len(bad_hosts)))
        console.print(table)
    _check_lines(console, checks, ("fail", "warn"),
                 limit=None if len(hosts) <= 12 else MAX_CHECK_LINES)


_STATUSES = ("pass", "warn", "fail", "skip")


def _check_counts(checks: list[Mapping[str, Any]]) -> dict[str, tuple[Counter[str], set[str]]]:
    """Per check row (``phase:family``, in first-seen order): how many checks had each status,
    and which hosts had a fail or warn. One pass over the checks, whatever the host count."""
    rows: dict[str, tuple[Counter[str], set[str]]] = {}
    for c in checks:
        row = rows.get(key := f"{c['phase']}:{_family(c['name'])}")
        if row is None:
            row = rows[key] = (Counter(), set())
        row[0][str(c["status"])] += 1
        if c["status"] in ("fail", "warn"):
            row[1].add(str(c["host"]))
    return rows


# Failed/warned checks listed one per line under a large cluster's table; the table counts
# them all and report.json holds every one.
MAX_CHECK_LINES = 40


def _check_lines(console: Console, checks: list[Mapping[str, Any]],
                 statuses: Sequence[str], limit: int | None = None) -> None:
    shown = 0
    for c in checks:
        if c["status"] in statuses:
            if limit is not None and shown >= limit:
                rest = sum(1 for c in checks if c["status"] in statuses) - shown
                console.print(f"... {rest} more {'/'.join(statuses)} checks in report.json")
                return
            shown += 1
            style = _STYLE.get(str(c["status"]), "")
            console.print(f"[{style}]{c['status']}[/{style}] " + escape(
                f"{c['host']} {c['name']}: measured {readable(c.get('measured'))}, expected "
                f"{readable(c.get('expected'))}: {c.get('detail')}"))


def readable(value: Any) -> str:
    """A measured or expected value as a person reads it: a mapping as its non-zero entries
    ("aggregate uncorrectable 2"; "all 0" when every entry is zero or unknown), a list joined
    with commas, a float to 4 significant digits, a bool as yes/no."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        parts = [f"{str(k).replace('_', ' ')} {readable(v)}" for k, v in value.items()
                 if v not in (None, 0, 0.0, False, "", [], {})]
        return ", ".join(parts) if parts else "all 0"
    if isinstance(value, (list, tuple)):
        return ", ".join(readable(v) for v in value)
    return str(value)


def _short(value: Any) -> str:
    text = readable(value)
    return text if len(text) <= 18 else text[:17] + "…"


def smoke_table(console: Console, smoke: Mapping[str, Any]) -> None:
    smoke = _clean(smoke)
    for run in smoke.get("runs", []):
        sim = "SIMULATED " if smoke.get("simulated") else ""
        via = f", launched by {smoke['launcher']}" if smoke.get("launcher") else ""
        if smoke.get("container"):
            via += f" in container {smoke['container']}"
        # The framework of the job's own passes (nccl-tests have none); reports from before
        # the second framework have no `framework`: PyTorch ran them.
        framework = ("" if str(run.get("label", "")).startswith("nccl-tests")
                     else f"{smoke.get('framework') or 'pytorch'}, ")
        verdict = run.get("verdict", {})
        if not run.get("allreduce"):
            # Nothing measured (nccl-tests not built, a launch that never started): no empty
            # table and no "None ranks", the verdict says why.
            console.print(escape(f"{sim}smoke: {run.get('label')}: {verdict.get('summary', '')}"))
            continue
        title = (f"{sim}smoke: {run.get('label')} all-reduce ({framework}{run.get('backend')}, "
                 f"{run.get('world_size')} ranks on {run.get('nnodes')} node(s){via})")
        table = Table(title=escape(title))
        for col in ("size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "correct"):
            table.add_column(col, justify="right")
        for row in run.get("allreduce", []):
            table.add_row(_size(int(row["bytes"])), f"{row['time_us']:.1f}",
                          f"{row['algbw_gbps']:.3f}", f"{row['busbw_gbps']:.3f}",
                          "yes" if row["correct"] else "[bold red]NO[/]")
        console.print(table)
        console.print(escape(f"  {run.get('label')}: {verdict.get('summary', '')}"))


def _size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


def rows_table(console: Console, title: str, rows: list[dict[str, str]]) -> None:
    """A table whose columns are the keys of the first row (cells escaped: data, not markup)."""
    if not rows:
        return
    rows = _clean(rows)
    table = Table(title=printable(title))
    for col in rows[0]:
        table.add_column(col)
    for row in rows:
        table.add_row(*[escape(str(v)) for v in row.values()])
    console.print(table)


# Above this many hosts the plan is shown per distinct resolution (every column but the
# host's name), with its host count: 2,000 identical rows say less and take seconds to draw.
MAX_PLAN_ROWS = 30


def plan(console: Console, rows: list[dict[str, str]], simulated: bool) -> None:
    if simulated:
        simulated_banner(console)
    if len(rows) <= MAX_PLAN_ROWS:
        rows_table(console, "plan (resolved per host, no host contacted)", rows)
        return
    rows_table(console, f"plan for {len(rows)} hosts, one row per distinct resolution "
                        "(no host contacted; -v lists every host)", group_rows(rows, "host"))


def group_rows(rows: list[dict[str, str]], key: str) -> list[dict[str, str]]:
    """Rows that agree on every column but ``key`` folded into one (first-seen order), with
    ``key`` replaced by a count and the first names (``2000 hosts: gpu-0000, gpu-0001, ...``)."""
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for row in rows:
        rest = tuple((col, value) for col, value in row.items() if col != key)
        groups.setdefault(rest, []).append(row[key])
    out = []
    for rest, names in groups.items():
        listed = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        out.append({f"{key}s": f"{len(names)}: {listed}", **dict(rest)})
    return out


def flatten(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Nested mappings and lists as (dotted.key, text) pairs: lists of scalars joined with
    commas, lists of mappings indexed (``gpus.0.name``)."""
    if isinstance(data, Mapping):
        pairs: list[tuple[str, str]] = []
        for key, value in data.items():
            pairs.extend(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return pairs or [(prefix, "{}")]
    if isinstance(data, list | tuple):
        if any(isinstance(v, Mapping | list | tuple) for v in data):
            return [p for i, v in enumerate(data) for p in flatten(v, f"{prefix}.{i}")]
        return [(prefix, ", ".join(str(v) for v in data))]
    return [(prefix, "-" if data is None else str(data))]


def mapping(console: Console, title: str, data: Mapping[str, Any]) -> None:
    """A two-column table of a nested mapping (see ``flatten``), cells escaped."""
    table = Table(title=escape(printable(title)))
    table.add_column("key")
    table.add_column("value")
    for key, value in flatten(_clean(data)):
        table.add_row(escape(key), escape(value))
    console.print(table)
