"""The run's page: ``index.html`` beside ``report.json``, one self-contained file.

Built from the saved report (the same dict as ``report.json``, already redacted) by string
building: every value from the report goes through :func:`esc` (hostnames, task messages and
check details are the nodes' text). The page carries its style inline and draws its charts as
inline SVG: no script, no link, nothing fetched, so it reads the same offline, from a CI
artifact or a mail attachment. A Content-Security-Policy in the page forbids scripts and
fetches as well, so markup that slipped through escaping would still run nothing.

Sections: the header (command, run, times, outcome, the SIMULATED banner), the phases, the
upgrade batches, lost nodes, each host's checks, busbw against message size for each smoke
pass, and certify's node-pair heatmap with the suspects marked and each node's trend from
the certify history (provisioner.history). A section the report lacks is left out; one the
page cannot draw (a value of the wrong type) says so and the rest of the page stands.
"""

from __future__ import annotations

import contextlib
import html
import math
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from provisioner.busbw import human_size
from provisioner.errors import ProvisionerError
from provisioner.history import Point, series
from provisioner.report import SIMULATED_BANNER, write_private
from provisioner.untrusted import printable

PAGE = "index.html"
# Beyond this many nodes the certify heatmap (hosts x hosts, mostly empty: each node is in
# two ring pairs) would be unreadable: a strip of nodes coloured by their best pair instead.
GRID_MAX = 48
# A host's checks start folded when the fleet is larger than this and the host has no failure.
OPEN_HOSTS_MAX = 8
TAG = '<b class="tag">SUSPECT</b>'
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SCREENSHOT_TIMEOUT_S = 60


class PageNotWritten(ProvisionerError):
    """index.html could not be rendered or written (report.json is not affected). Exit 1."""


# -- values ------------------------------------------------------------------------------------


def esc(value: Any) -> str:
    """Any report value as HTML text (or an attribute's value): control sequences dropped,
    ``<>&"'`` escaped. None is empty."""
    return html.escape(printable("" if value is None else str(value)), quote=True)


def _num(value: Any) -> float | None:
    """A finite number (not a bool), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _fmt(value: Any, digits: int = 3) -> str:
    """A measured value for a cell: numbers to ``digits`` significant figures, the rest as
    text, escaped."""
    number = _num(value)
    if number is None:
        return esc(value)
    return esc(f"{number:.{digits}g}" if not float(number).is_integer() else f"{number:g}")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _table(head: Sequence[str], rows: Sequence[str], cls: str = "") -> str:
    """A table of already escaped ``rows`` (each a ``<tr>``) under the column names ``head``."""
    if not rows:
        return ""
    ths = "".join(f"<th>{esc(h)}</th>" for h in head)
    return (f'<table class="{esc(cls)}"><thead><tr>{ths}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _row(cells: Sequence[str], cls: str = "", attrs: str = "") -> str:
    """A ``<tr>`` of already escaped cells."""
    klass = f' class="{esc(cls)}"' if cls else ""
    return f"<tr{klass}{attrs}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _records(title: str, items: Any, cls: str = "records") -> str:
    """A list of mappings (outliers, drift, driver lifecycle...) as a table: one column per
    key, in the order they first appear; lists joined with commas."""
    entries = [e for e in _list(items) if isinstance(e, Mapping)]
    if not entries:
        return ""
    keys: list[str] = []
    for entry in entries:
        keys += [str(k) for k in entry if str(k) not in keys]
    rows = [_row([esc(", ".join(map(str, v)) if isinstance(v, list) else _fmt(v))
                  for v in (e.get(k) for k in keys)]) for e in entries]
    return f"<h3>{esc(title)}</h3>" + _table(keys, rows, cls)


# -- the page ----------------------------------------------------------------------------------


def render(data: Mapping[str, Any], history: Sequence[Point] = ()) -> str:
    """The page for a saved report (``report.json``'s dict) and the certify history points
    (provisioner.history.load()), as one HTML document."""
    sections: list[tuple[str, Callable[[], str]]] = [
        ("header", lambda: _header(data)),
        ("phases", lambda: _phases(data)),
        ("upgrade batches", lambda: _batches(data)),
        ("lost nodes", lambda: _lost(data)),
        ("checks", lambda: _checks(data)),
        ("smoke", lambda: _smoke(data)),
        ("certify", lambda: _certify(data, history)),
        ("notes", lambda: _notes(data)),
    ]
    parts = []
    for name, draw in sections:
        try:
            parts.append(draw())
        except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
            parts.append(f'<section class="broken"><h2>{esc(name)}</h2><p>this section could '
                         f"not be drawn from report.json ({esc(type(exc).__name__)}: "
                         f"{esc(exc)}); the file has it as saved</p></section>")
    simulated = "SIMULATED " if data.get("simulated") else ""
    title = f"{simulated}provisioner {data.get('command', '?')} {data.get('run_id', '?')}"
    return _document(title, "\n".join(p for p in parts if p))


def _document(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n"
            '<footer>Written from report.json by provisioner. This page is self-contained: '
            "no scripts, nothing fetched.</footer>\n</body></html>\n")


def _header(data: Mapping[str, Any]) -> str:
    banner = (f'<div class="simulated" role="alert">{esc(SIMULATED_BANNER)}</div>'
              if data.get("simulated") else "")
    outcome = str(data.get("outcome", "?"))
    mood = "ok" if outcome == "passed" else "neutral" if outcome == "running" else "bad"
    facts = [("run", data.get("run_id")), ("inventory", data.get("inventory")),
             ("started", data.get("started_at")), ("finished", data.get("finished_at")),
             ("duration", f"{_num(data.get('duration_s')) or 0.0:.1f} s"),
             ("exit code", data.get("exit_code")), ("resumes run", data.get("resumes")),
             ("retried hosts", ", ".join(map(str, _list(data.get("retried_hosts"))))),
             ("host key checking off", ", ".join(
                 map(str, _list(data.get("host_key_checking_off")))))]
    executors = _dict(data.get("executors"))
    if executors:
        facts.append(("executors", "; ".join(f"{name}: {len(_list(hosts))} hosts"
                                             for name, hosts in executors.items())))
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts if v not in
                    (None, ""))
    return (f"{banner}<header class=\"{mood}\"><h1>provisioner {esc(data.get('command'))} "
            f'<span class="outcome {mood}">{esc(outcome)}</span></h1><dl>{items}</dl></header>')


def _phases(data: Mapping[str, Any]) -> str:
    phases = [p for p in _list(data.get("phases")) if isinstance(p, Mapping)]
    if not phases:
        return ""
    rows, failures = [], []
    for ph in phases:
        hosts = _dict(ph.get("hosts"))
        bad = [h for h, s in hosts.items()
               if _dict(s).get("failed") or _dict(s).get("unreachable")]
        ok = bool(ph.get("ok"))
        rows.append(_row([esc(ph.get("name")), esc(ph.get("playbook")),
                          '<span class="pass">ok</span>' if ok else
                          '<span class="fail">FAILED</span>',
                          esc(ph.get("status")), esc(ph.get("rc")), esc(len(hosts)),
                          _fmt(ph.get("changed")), esc(", ".join(map(str, bad))),
                          f"{_num(ph.get('duration_s')) or 0.0:.1f}"], "" if ok else "bad"))
        failures += [f for f in _list(ph.get("failures")) if isinstance(f, Mapping)]
    shown = "".join(
        f'<li><span class="fail">{"unreachable" if f.get("unreachable") else "failed"}</span> '
        f'{esc(f.get("host"))}: {esc(f.get("task"))}: {esc(f.get("message"))}</li>'
        for f in failures[:200])
    more = (f"<li>... {len(failures) - 200} more in report.json</li>"
            if len(failures) > 200 else "")
    return ('<section id="phases"><h2>Phases</h2>'
            + _table(["phase", "playbook", "result", "status", "rc", "hosts", "changed",
                      "failed or unreachable hosts", "time (s)"], rows, "phases")
            + (f'<ul class="failures">{shown}{more}</ul>' if shown else "") + "</section>")


def _batches(data: Mapping[str, Any]) -> str:
    batches = [b for b in _list(data.get("batches")) if isinstance(b, Mapping)]
    if not batches:
        return ""
    rows = []
    for b in batches:
        outcome = str(b.get("outcome", "?"))
        phases = _dict(b.get("phases"))
        kept = _dict(b.get("kept_drained"))
        rows.append(_row([esc(b.get("number")), esc(", ".join(map(str, _list(b.get("nodes"))))),
                          *(esc(phases.get(p, "-")) for p in ("stack", "validate", "monitoring")),
                          esc("; ".join(f"{n}: {why}" for n, why in kept.items())),
                          esc(outcome), esc(b.get("detail"))],
                         "" if outcome in ("passed", "not run") else "bad"))
    return ('<section id="batches"><h2>Upgrade batches</h2>'
            + _table(["batch", "nodes", "stack", "validate", "monitoring", "kept drained",
                      "outcome", "detail"], rows, "batches") + "</section>")


def _lost(data: Mapping[str, Any]) -> str:
    lost = _dict(data.get("lost_hosts"))
    rows = [_row([esc(host), esc(_dict(why).get("phase")), esc(_dict(why).get("reason")),
                  esc(_dict(why).get("task")), esc(_dict(why).get("message"))], "bad")
            for host, why in sorted(lost.items())]
    if not rows:
        return ""
    return ('<section id="lost"><h2>Lost nodes</h2>'
            + _table(["host", "phase", "reason", "task", "message"], rows, "lost")
            + "</section>")


def _checks(data: Mapping[str, Any]) -> str:
    """One table per host (name order): section, check, status, measured, expected, detail;
    a failed check is marked red. Hosts with a failure come unfolded."""
    by_host: dict[str, list[Mapping[str, Any]]] = {}
    for check in _list(data.get("checks")):
        if isinstance(check, Mapping):
            by_host.setdefault(str(check.get("host", "?")), []).append(check)
    if not by_host:
        return ""
    parts = []
    for host, checks in sorted(by_host.items()):
        statuses = [str(c.get("status", "?")) for c in checks]
        failed = statuses.count("fail")
        counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
        rows = [_row([esc(c.get("phase")), esc(c.get("name")),
                      f'<span class="{_status_class(s)}">{esc(s)}</span>',
                      _fmt(c.get("measured")), _fmt(c.get("expected")), esc(c.get("detail"))],
                     f"status-{_status_class(s)}") for c, s in zip(checks, statuses, strict=True)]
        unfold = " open" if failed or len(by_host) <= OPEN_HOSTS_MAX else ""
        parts.append(f'<details class="host{" bad" if failed else ""}" data-host="{esc(host)}"'
                     f"{unfold}><summary>{esc(host)} <small>{esc(counts)}</small></summary>"
                     + _table(["section", "check", "status", "measured", "expected", "detail"],
                              rows, "checks") + "</details>")
    return '<section id="checks"><h2>Checks by host</h2>' + "".join(parts) + "</section>"


def _status_class(status: str) -> str:
    return status if status in ("pass", "fail", "warn", "skip") else "other"


def _notes(data: Mapping[str, Any]) -> str:
    notes = "".join(f"<li>{esc(n)}</li>" for n in _list(data.get("notes")))
    lifecycle = _records("driver branches near or past their end of life",
                         data.get("driver_lifecycle"))
    if not notes and not lifecycle:
        return ""
    return ('<section id="notes"><h2>Notes</h2>' + (f"<ul>{notes}</ul>" if notes else "")
            + lifecycle + "</section>")


# -- smoke: busbw against message size ---------------------------------------------------------


def _smoke(data: Mapping[str, Any]) -> str:
    smoke = _dict(data.get("smoke"))
    runs = [r for r in _list(smoke.get("runs")) if isinstance(r, Mapping)]
    if not smoke:
        return ""
    about = ", ".join(f"{k} {smoke[k]}" for k in ("launcher", "framework", "container")
                      if smoke.get(k))
    parts = [f'<section id="smoke"><h2>Smoke job</h2><p>{esc(about)}</p>']
    if not runs:
        parts.append("<p>the smoke job produced no results (see the notes)</p>")
    for run in runs:
        verdict = _dict(run.get("verdict"))
        passed = bool(verdict.get("passed"))
        facts = ", ".join(f"{k} {run[k]}" for k in ("backend", "world_size", "nnodes")
                          if run.get(k) not in (None, ""))
        parts.append(f'<article class="smoke-run" data-host="{esc(run.get("host"))}">'
                     f'<h3>{esc(run.get("label"))} <span class="{"pass" if passed else "fail"}">'
                     f'{"passed" if passed else "FAILED"}</span></h3>'
                     f"<p>{esc(facts)}</p><p>{esc(verdict.get('summary'))}</p>"
                     + _busbw_chart(_list(run.get("allreduce")), _num(verdict.get("floor_gbps")))
                     + "</article>")
    return "".join(parts) + "</section>"


def _busbw_chart(rows: Sequence[Any], floor: float | None) -> str:
    """busbw (GB/s) against message size (log2 axis) as an inline SVG line chart, the floor
    as a dashed line; a size with wrong results is a red point."""
    points = sorted((int(b), float(bw), bool(r.get("correct", True)))
                    for r in rows if isinstance(r, Mapping)
                    for b, bw in [(_num(r.get("bytes")), _num(r.get("busbw_gbps")))]
                    if b is not None and b > 0 and bw is not None)
    if not points:
        return "<p>no per-size results in the report</p>"
    width, height, left, right, top, bottom = 640, 280, 60, 20, 16, 44
    lo, hi = math.log2(points[0][0]), math.log2(points[-1][0])
    if hi - lo < 1:
        lo, hi = lo - 1, hi + 1
    ymax = max([p[1] for p in points] + [floor or 0.0]) * 1.1 or 1.0

    def x(size: float) -> float:
        return left + (math.log2(size) - lo) / (hi - lo) * (width - left - right)

    def y(value: float) -> float:
        return top + (1 - value / ymax) * (height - top - bottom)

    svg = [f'<svg class="chart busbw" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="busbw against message size">',
           *_axes(x, y, lo, hi, ymax, (left, top, width - right, height - bottom))]
    line = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v, _ in points)
    svg.append(f'<polyline class="series" points="{line}"/>')
    if floor is not None:
        svg.append(f'<line class="floor" x1="{left}" x2="{width - right}" y1="{y(floor):.1f}" '
                   f'y2="{y(floor):.1f}"/><text class="floor" x="{width - right - 4}" '
                   f'y="{y(floor) - 4:.1f}" text-anchor="end">floor {_fmt(floor)} GB/s</text>')
    for size, value, correct in points:
        svg.append(f'<circle class="{"point" if correct else "point wrong"}" cx="{x(size):.1f}" '
                   f'cy="{y(value):.1f}" r="3.5"><title>{esc(human_size(size))}: '
                   f'{_fmt(value, 4)} GB/s{"" if correct else " (wrong results)"}</title>'
                   "</circle>")
    return "".join(svg) + "</svg>"


def _axes(x: Callable[[float], float], y: Callable[[float], float], lo: float, hi: float,
          ymax: float, box: tuple[float, float, float, float]) -> list[str]:
    """The chart's frame, ticks and axis titles."""
    left, top, right, bottom = box
    out = [f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
           f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/>']
    first, last = math.ceil(lo), math.floor(hi)
    step = max(1, math.ceil((last - first + 1) / 9))
    for k in range(first, last + 1, step):
        px = x(2.0 ** k)
        out.append(f'<line class="tick" x1="{px:.1f}" y1="{bottom}" x2="{px:.1f}" '
                   f'y2="{bottom + 4}"/><text x="{px:.1f}" y="{bottom + 16}" '
                   f'text-anchor="middle">{esc(human_size(2 ** k))}</text>')
    ystep = _nice_step(ymax / 5)
    value = 0.0
    while value <= ymax:
        py = y(value)
        out.append(f'<line class="grid" x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}"/>'
                   f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">'
                   f"{_fmt(value)}</text>")
        value += ystep
    out.append(f'<text class="title" x="{(left + right) / 2:.1f}" y="{bottom + 34}" '
               'text-anchor="middle">message size (log2 scale)</text>'
               f'<text class="title" x="14" y="{(top + bottom) / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(top + bottom) / 2:.1f})">busbw GB/s</text>')
    return out


def _nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``raw``."""
    if raw <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


# -- certify: the node-pair heatmap and each node's trend --------------------------------------


def _certify(data: Mapping[str, Any], history: Sequence[Point]) -> str:
    cert = _dict(data.get("certify"))
    if not cert:
        return ""
    pairs = [p for p in _list(cert.get("pairs")) if isinstance(p, Mapping)]
    suspects = [s for s in _list(cert.get("suspects")) if isinstance(s, Mapping)]
    node_gbps = _dict(cert.get("node_gbps"))
    hosts = sorted({str(h) for h in node_gbps}
                   | {str(p.get(k)) for p in pairs for k in ("a", "b") if p.get(k) is not None})
    reference, margin = _num(cert.get("reference_gbps")), _num(cert.get("margin"))
    outlier = _num(cert.get("outlier_margin"))
    facts = [("check", cert.get("check")), ("reference (median best pair)",
                                            f"{_fmt(reference)} Gbit/s" if reference else None),
             ("margin", f"{margin * 100:g}%" if margin is not None else None),
             ("outlier margin", f"{outlier * 100:g}%" if outlier is not None else None),
             ("slow below", f"{_fmt(reference * (1 - margin))} Gbit/s"
              if reference and margin is not None else None),
             ("seconds per pair", cert.get("seconds"))]
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts if v is not None)
    grid = Grid(hosts, pairs, suspects, node_gbps, reference, margin)
    grid.flags = {str(e.get("host")): name.upper() for name in ("drift", "outlier")
                  for e in _list(cert.get(f"{name}s" if name == "outlier" else name))
                  if isinstance(e, Mapping)}
    heat = grid.html() if len(hosts) <= GRID_MAX else grid.strip()
    drained = _dict(cert.get("drained"))
    return ('<section id="certify"><h2>Certify: node-pair bandwidth</h2>'
            f"<dl>{items}</dl>{heat}{_legend()}"
            + _suspects(suspects, grid.marked)
            + _records("outliers", cert.get("outliers")) + _records("drift", cert.get("drift"))
            + (("<h3>drained in Slurm</h3><ul>" + "".join(
                f"<li>{esc(n)}: {esc(why)}</li>" for n, why in drained.items()) + "</ul>")
               if drained else "")
            + _trends(data, cert, hosts, history) + _pairs(pairs) + "</section>")


class Grid:
    """The hosts x hosts heatmap: each measured pair's cell coloured by its figure relative to
    the reference (red below the slow line, green at the reference), each suspect marked: a
    node's row header, a link's cell (class ``suspect``, ``data-host`` the suspect's host)."""

    def __init__(self, hosts: list[str], pairs: list[Mapping[str, Any]],
                 suspects: list[Mapping[str, Any]], node_gbps: Mapping[str, Any],
                 reference: float | None, margin: float | None) -> None:
        self.hosts, self.node_gbps = hosts, node_gbps
        self.reference, self.margin = reference, margin if margin is not None else 0.25
        self.cells: dict[tuple[str, str], Mapping[str, Any]] = {}
        for p in pairs:
            a, b = str(p.get("a")), str(p.get("b"))
            self.cells[(a, b)] = self.cells[(b, a)] = p
        names = [str(s.get("host")) for s in suspects]
        self.node_suspects = {n for n, s in zip(names, suspects, strict=True)
                              if n in hosts and s.get("component", "node") == "node"}
        self.link_suspects = {}
        for p in pairs:
            name = f"{p.get('a')}-{p.get('b')}"
            if name in names and name not in self.node_suspects:
                self.link_suspects[(str(p.get("a")), str(p.get("b")))] = name
        # The suspects this grid marks (the list below marks the others itself).
        self.marked = self.node_suspects | set(self.link_suspects.values())
        # Host -> OUTLIER or DRIFT (warnings, not suspects): a grey tag on its row.
        self.flags: dict[str, str] = {}

    def html(self) -> str:
        head = "".join(f'<th class="col{" suspect-col" if h in self.node_suspects else ""}">'
                       f"<span>{esc(h)}</span></th>" for h in self.hosts)
        rows = [f'<tr><th></th>{head}<th class="best">best pair</th></tr>']
        for a in self.hosts:
            cells = "".join(self._cell(a, b) for b in self.hosts)
            best = f'<td class="best">{_fmt(self.node_gbps.get(a))}</td>'
            klass = ' class="suspect-row"' if a in self.node_suspects else ""
            rows.append(f"<tr{klass}>{self._row_head(a)}{cells}{best}</tr>")
        return ('<table class="heatmap" aria-label="pair bandwidth, Gbit/s">'
                + "".join(rows) + "</table>")

    def strip(self) -> str:
        """Too many nodes for a grid: one cell per node, coloured by its best pair."""
        cells = []
        for h in self.hosts:
            mark = h in self.node_suspects
            colour = self._colour(_num(self.node_gbps.get(h)))
            cells.append(f'<div class="node{" suspect" if mark else ""}"'
                         + (f' data-host="{esc(h)}"' if mark else "")
                         + f' style="background:{colour}">{esc(h)}<br>'
                         f"{_fmt(self.node_gbps.get(h))}" + (TAG if mark else "") + "</div>")
        return '<div class="strip">' + "".join(cells) + "</div>"

    def _row_head(self, host: str) -> str:
        flag = (f'<b class="tag flag">{esc(self.flags[host])}</b>' if host in self.flags
                else "")
        if host not in self.node_suspects:
            return f'<th class="row">{esc(host)}{flag}</th>'
        return (f'<th class="row suspect" data-host="{esc(host)}">{esc(host)} '
                f"{TAG}{flag}</th>")

    def _cell(self, a: str, b: str) -> str:
        if a == b:
            return '<td class="self"></td>'
        pair = self.cells.get((a, b))
        if pair is None:
            return '<td class="none"></td>'
        gbps = _num(pair.get("gbps"))
        link = self.link_suspects.get((a, b))
        mirror = self.link_suspects.get((b, a))
        ratio = (f" ({gbps / self.reference * 100:.0f}% of the reference)"
                 if gbps is not None and self.reference else "")
        tip = (f"{a} - {b}: {gbps:.3g} Gbit/s{ratio}" if gbps is not None
               else f"{a} - {b}: nothing measured: {pair.get('error') or '?'}")
        cls = "pair" + (" suspect" if link else " suspect-link" if mirror else "")
        attrs = f' data-host="{esc(link)}"' if link else ""
        label = TAG if link else ""
        return (f'<td class="{cls}"{attrs} style="background:{self._colour(gbps)}" '
                f'title="{esc(tip)}">{_fmt(gbps) if gbps is not None else "none"}{label}</td>')

    def _colour(self, gbps: float | None) -> str:
        """Red at or below the slow line's distance under it, yellow at the slow line, green
        at the reference and above; grey: nothing measured or no reference."""
        if gbps is None:
            return "#d9d9d9"
        if not self.reference:
            return "#e8eef7"
        low = max(0.0, 1 - 2 * self.margin)
        share = min(1.0, max(0.0, (gbps / self.reference - low) / (1 - low)))
        return f"hsl({share * 120:.0f}, 70%, 78%)"


def _legend() -> str:
    return ('<p class="legend"><span class="swatch" style="background:hsl(0,70%,78%)"></span>'
            'far below the slow line <span class="swatch" style="background:hsl(60,70%,78%)">'
            '</span>at the slow line <span class="swatch" style="background:hsl(120,70%,78%)">'
            '</span>at the reference <span class="swatch" style="background:#d9d9d9"></span>'
            "nothing measured; figures in Gbit/s, a pair's slower direction</p>")


def _suspects(suspects: list[Mapping[str, Any]], marked: set[str]) -> str:
    """The suspects as a table; one the heatmap could not mark carries the mark here."""
    rows = []
    for s in suspects:
        host = str(s.get("host"))
        evidence = "".join(f"<li>{esc(e)}</li>" for e in _list(s.get("evidence")))
        attrs = "" if host in marked else f' data-host="{esc(host)}"'
        rows.append(_row([f"{esc(host)} {TAG}", esc(s.get("component")),
                          esc(s.get("check")), _fmt(s.get("measured")), _fmt(s.get("expected")),
                          f"<ul>{evidence}</ul>" if evidence else ""],
                         "bad" if host in marked else "bad suspect", attrs))
    if not rows:
        return '<p class="pass">no suspect: every node and link within the margin</p>'
    # Burn-in suspects (certify --level burn-in) measure GB/s, TFLOPS or counts: the unit is
    # in each one's evidence; the pairs' are Gbit/s.
    return "<h3>Suspects</h3>" + _table(["host", "component", "check", "measured",
                                          "expected", "evidence"], rows, "suspects")


def _pairs(pairs: list[Mapping[str, Any]]) -> str:
    rows = [_row([esc(p.get("a")), esc(p.get("b")), esc(p.get("round")),
                  _fmt(p.get("a_rx_gbps")), _fmt(p.get("b_rx_gbps")), _fmt(p.get("gbps")),
                  _fmt(p.get("first_gbps")) if p.get("retested") else "", esc(p.get("error"))],
                 "" if _num(p.get("gbps")) is not None else "bad") for p in pairs]
    if not rows:
        return ""
    return ("<details><summary>every pair</summary>"
            + _table(["a", "b", "round", "a received", "b received", "figure",
                      "first figure (measured again)", "error"], rows, "pairs") + "</details>")


def _trends(data: Mapping[str, Any], cert: Mapping[str, Any], hosts: list[str],
            history: Sequence[Point]) -> str:
    """Each node's figure over the certify runs of the history (same check, simulated with
    simulated), this run's point marked; this run's own figure is added when the history does
    not have it yet."""
    check = str(cert.get("check") or "")
    simulated = bool(data.get("simulated"))
    run_id = str(data.get("run_id", ""))
    mine = [p for p in history if (not check or p.check == check) and p.simulated == simulated]
    node_gbps = _dict(cert.get("node_gbps"))
    recorded = {p.host for p in mine if p.run_id == run_id}
    for host in hosts:
        if host not in recorded:
            mine.append(Point(run_id, str(data.get("started_at", "")), host, check,
                              _num(node_gbps.get(host)), "Gbit/s", simulated))
    by_host = series(mine)
    rows = []
    for host in hosts:
        points = by_host.get(host, [])
        values = [p.value for p in points if p.value is not None]
        spread = f"{_fmt(min(values))} to {_fmt(max(values))}" if values else "nothing measured"
        rows.append(_row([esc(host), _sparkline(points, run_id), esc(len(points)),
                          esc(spread)]))
    return ("<h3>Each node's best pair over its certify runs</h3>"
            + _table(["host", "trend (this run marked)", "runs", "range (Gbit/s)"], rows,
                     "trends"))


def _sparkline(points: Sequence[Point], run_id: str) -> str:
    """A small SVG trend of ``points`` (oldest first); this run's point a larger dot, a run
    that measured nothing a cross at the bottom."""
    width, height, pad = 180, 36, 5
    values = [p.value for p in points if p.value is not None]
    top = max(values) if values else 1.0
    bottom = min(values) if values else 0.0
    span = (top - bottom) or max(top, 1.0)
    step = (width - 2 * pad) / max(1, len(points) - 1)

    def xy(index: int, value: float) -> tuple[float, float]:
        return (pad + index * step if len(points) > 1 else width / 2,
                height - pad - (value - bottom) / span * (height - 2 * pad))

    line = " ".join("{:.1f},{:.1f}".format(*xy(i, p.value))
                    for i, p in enumerate(points) if p.value is not None)
    marks = []
    for i, p in enumerate(points):
        this = p.run_id == run_id
        tip = f"{p.run_id} {p.at}: {_fmt(p.value) if p.value is not None else 'nothing'}"
        if p.value is None:
            px = xy(i, bottom)[0]
            marks.append(f'<text class="missing" x="{px:.1f}" y="{height - 1}" '
                         f'text-anchor="middle">x<title>{esc(tip)}</title></text>')
            continue
        px, py = xy(i, p.value)
        marks.append(f'<circle class="{"this-run" if this else "dot"}" cx="{px:.1f}" '
                     f'cy="{py:.1f}" r="{4 if this else 2}"><title>{esc(tip)}'
                     f'{" (this run)" if this else ""}</title></circle>')
    return (f'<svg class="sparkline" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="trend">'
            f'<polyline class="series" points="{line}"/>' + "".join(marks) + "</svg>")


# -- the file and its screenshot ---------------------------------------------------------------


def write_page(run_dir: Path, data: Mapping[str, Any]) -> Path:
    """Render ``data`` (the run's report.json) with the certify history of the runs directory
    above ``run_dir`` into ``run_dir/index.html`` (atomically, 0600). PageNotWritten (one
    line) when it cannot: report.json is left as it is."""
    from provisioner import history

    points: list[Point] = []
    if data.get("certify"):
        try:
            points = history.load(root=run_dir.parent)
        except ProvisionerError:
            points = []  # an unreadable ledger: the page shows this run's figures alone
    try:
        text = render(data, points)
    except Exception as exc:  # a bug of ours: one line, never a traceback (the run is saved)
        raise PageNotWritten(" ".join(f"cannot draw the page of run {data.get('run_id')}: "
                                      f"{type(exc).__name__}: {exc}".split())) from exc
    path = run_dir / PAGE
    try:
        write_private(path, text)
    except OSError as exc:
        raise PageNotWritten(f"cannot write {path}: {exc.strerror or exc}") from exc
    return path


def write_page_or_say_why(run_dir: Path, data: Mapping[str, Any]) -> str | None:
    """For Report.save: the page, or in its place a page with the one line saying why it could
    not be drawn (that line is returned too); nothing raised, report.json stays the record."""
    try:
        write_page(run_dir, data)
    except PageNotWritten as exc:
        why = " ".join(str(exc).split())
        try:
            write_private(run_dir / PAGE, _document(
                f"provisioner run {data.get('run_id', '?')}",
                f'<section class="broken"><h1>No page for this run</h1><p>{esc(why)}</p><p>'
                "report.json has the run; <code>provisioner report RUN --html</code> draws the "
                "page again.</p></section>"))
        except OSError:
            with contextlib.suppress(OSError):  # no stale page of an earlier save
                (run_dir / PAGE).unlink(missing_ok=True)
        return why
    return None


def chromium() -> str | None:
    """The headless browser that can draw a page (None: none installed)."""
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def _headless(args: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str] | None:
    browser = chromium()
    if browser is None:
        return None
    with tempfile.TemporaryDirectory(prefix="gpuc-chromium-") as profile:
        try:
            return subprocess.run(
                [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            return None


def screenshot(html_path: Path, png_path: Path, *, width: int = 1400, height: int = 2000,
               timeout_s: float = SCREENSHOT_TIMEOUT_S) -> bool:
    """A PNG of the page drawn by headless Chromium. False (never an exception) when no
    Chromium is installed, it fails or runs past ``timeout_s``, or leaves no image."""
    png = Path(png_path).resolve()
    png.unlink(missing_ok=True)
    done = _headless([f"--screenshot={png}", f"--window-size={width},{height}",
                      Path(html_path).resolve().as_uri()], timeout_s)
    return done is not None and png.is_file() and png.stat().st_size > 0


def dump_dom(html_path: Path, timeout_s: float = SCREENSHOT_TIMEOUT_S) -> str | None:
    """The page's DOM as headless Chromium parsed it (None: no Chromium, or it failed)."""
    done = _headless(["--dump-dom", Path(html_path).resolve().as_uri()], timeout_s)
    return done.stdout if done is not None and done.returncode == 0 else None


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
margin:0 auto;padding:16px 24px;max-width:1400px;color:#1b1f24;background:#fff}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccd}
h3{font-size:15px;margin:18px 0 6px}
.simulated{background:#ffd400;color:#000;font-weight:700;font-size:17px;padding:12px 16px;
border:3px solid #000;margin-bottom:12px}
header dl,section dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:0}
dt{color:#57606a}dd{margin:0;overflow-wrap:anywhere}
.outcome{padding:2px 10px;border-radius:10px;font-size:15px;vertical-align:middle}
.outcome.ok{background:#1a7f37;color:#fff}.outcome.bad{background:#cf222e;color:#fff}
.outcome.neutral{background:#57606a;color:#fff}
table{border-collapse:collapse;margin:6px 0 12px}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
thead th{background:#f3f4f6}td{overflow-wrap:anywhere;max-width:60ch}
tr.bad td,tr.status-fail td{background:#ffebe9}
.fail{color:#cf222e;font-weight:700}.pass{color:#1a7f37}.warn{color:#9a6700;font-weight:700}
.skip,.other{color:#57606a}
details.host{margin:4px 0;border:1px solid #d0d7de;border-radius:4px;padding:2px 8px}
details.host.bad{border-color:#cf222e;border-width:2px}
summary{cursor:pointer;font-weight:600}summary small{font-weight:400;color:#57606a}
ul.failures{padding-left:20px}
svg text{font-size:11px;fill:#1b1f24}svg text.title{font-size:12px}
svg .axis{stroke:#1b1f24}svg .tick{stroke:#1b1f24}svg .grid{stroke:#e5e7eb}
svg .series{fill:none;stroke:#0969da;stroke-width:2}
svg .point{fill:#0969da}svg .point.wrong{fill:#cf222e}
svg line.floor{stroke:#cf222e;stroke-dasharray:6 4;stroke-width:1.5}svg text.floor{fill:#cf222e}
svg .dot{fill:#0969da}svg .this-run{fill:#cf222e;stroke:#000;stroke-width:1}
svg text.missing{fill:#cf222e;font-weight:700}
table.heatmap td,table.heatmap th{text-align:center;min-width:52px;padding:4px}
table.heatmap th.row{text-align:right;white-space:nowrap}
table.heatmap td.self{background:#f6f8fa}table.heatmap td.none{background:#fff}
table.heatmap td.best{background:#f3f4f6;font-weight:600}
.suspect,.suspect-link{outline:3px solid #cf222e;outline-offset:-3px}
th.suspect,th.suspect-col,.suspect-row th.row{color:#cf222e}
.tag{display:inline-block;margin-left:4px;padding:0 4px;background:#cf222e;color:#fff;
font-size:10px;border-radius:3px;letter-spacing:.04em}
.tag.flag{background:#6e7781}
.strip{display:flex;flex-wrap:wrap;gap:4px}
.strip .node{padding:4px 6px;border:1px solid #d0d7de;font-size:12px;min-width:80px}
.legend .swatch{display:inline-block;width:14px;height:14px;border:1px solid #999;
vertical-align:middle;margin:0 4px 0 10px}
.broken{border:2px dashed #cf222e;padding:4px 12px}
footer{margin-top:32px;color:#57606a;font-size:12px}
"""
