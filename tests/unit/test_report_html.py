"""The run's page (provisioner/report_html.py): every section from a report that has it and
none from one that lacks it, the nodes' text escaped, nothing fetched, certify's suspects
marked where a test (and a person) finds them, the page beside report.json on every save and
from `provisioner report RUN --html`, and the page as headless Chromium draws it."""

from __future__ import annotations

import json
import re
import shutil
import stat
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from provisioner import cli, history, report_html
from provisioner.history import Point
from provisioner.report import SIMULATED_BANNER, Batch, Check, Phase, Report

HOSTILE = '<script>alert("x")</script>'
HOSTILE_DETAIL = '"><img src=x onerror=alert(1)> & </td></table>'
CHECK = "pair_tcp_bw"


def pair(a: str, b: str, gbps: float | None, rnd: int = 1, error: str = "") -> dict[str, Any]:
    return {"a": a, "b": b, "round": rnd, "a_rx_gbps": gbps, "b_rx_gbps": gbps,
            "error": error, "first_gbps": None, "retested": False, "gbps": gbps}


def certify_section(slow: str = "gpu-3") -> dict[str, Any]:
    """Four nodes in a ring; ``slow`` is slow with both its partners (as certify.run saves)."""
    hosts = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    ring = [(hosts[i], hosts[(i + 1) % 4]) for i in range(4)]
    pairs = [pair(a, b, 0.19 if slow in (a, b) else 12.5 + i, rnd=i % 2 + 1)
             for i, (a, b) in enumerate(ring)]
    node = {h: max(p["gbps"] for p in pairs if h in (p["a"], p["b"])) for h in hosts}
    return {"check": CHECK, "margin": 0.25, "seconds": 4, "reference_gbps": 13.0,
            "node_gbps": node, "pairs": pairs, "drained": {},
            "suspects": [{"host": slow, "component": "node", "check": CHECK,
                          "measured": 0.19, "expected": 9.75,
                          "evidence": [f"{p['a']}<->{p['b']}: 0.19 Gbit/s" for p in pairs
                                       if slow in (p["a"], p["b"])]}]}


def allreduce(sizes: range, wrong_at: int | None = None) -> list[dict[str, Any]]:
    return [{"bytes": 2 ** k, "size": f"2^{k}", "time_us": 10.0 * k, "algbw_gbps": k * 1.5,
             "busbw_gbps": k * 2.0, "correct": k != wrong_at, "counts_for_floor": False}
            for k in sizes]


def full_report(simulated: bool = True) -> Report:
    """A report with every section the page draws."""
    r = Report("20261127-101010-beef", "up", "inventories/sim/hosts.yml", simulated=simulated,
               started_at="2026-11-27T10:10:10+00:00")
    r.phases = [
        Phase("stack", "site.yml", "successful", 0, 61.2, 14, True,
              hosts={"gpu-1": {"failed": 0, "unreachable": 0}}, failures=[]),
        Phase("validate", "validate.yml", "failed", 2, 9.5, 0, False,
              hosts={"gpu-2": {"failed": 1, "unreachable": 0}},
              failures=[{"host": "gpu-2", "task": "Validate | GPUs", "message": "7 of 8 GPUs",
                         "unreachable": False}]),
    ]
    r.checks = [Check("gpu-1", "gpu_validate", "gpu_count", "pass", 8, 8, "ok"),
                Check("gpu-2", "gpu_validate", "gpu_count", "fail", 7, 8, "one GPU missing"),
                Check("gpu-2", "gpu_validate", "ecc", "warn", 3, 0, "volatile ECC errors")]
    r.smoke = {"simulated": simulated, "launcher": "direct", "framework": "pytorch", "runs": [
        {"label": "intra-node gpu-1", "host": "gpu-1", "backend": "nccl", "world_size": 8,
         "nnodes": 1, "allreduce": allreduce(range(10, 31), wrong_at=12),
         "verdict": {"passed": True, "summary": "PASS: busbw 60 GB/s", "best_busbw_gbps": 60.0,
                     "floor_gbps": 45.0, "floor_skipped": None}},
        {"label": "inter-node", "host": "gpu-1", "allreduce": [],
         "verdict": {"passed": False, "best_busbw_gbps": None, "summary": "no result"}}]}
    r.certify = certify_section()
    r.batches = [Batch(1, ["gpu-1"], outcome="passed"),
                 Batch(2, ["gpu-2"], outcome="failed", detail="validate failed on gpu-2",
                       kept_drained={"gpu-2": "gpuc: upgrade failed"})]
    r.lost_hosts = {"gpu-9": {"phase": "stack", "reason": "unreachable", "task": "Gathering",
                              "message": "no route"}}
    r.notes = ["the smoke job ran on 2 nodes"]
    r.finish(1)
    return r


def page(data: dict[str, Any], points: list[Point] | None = None) -> str:
    return report_html.render(data, points or [])


class Elements(HTMLParser):
    """Every start tag with its attributes, in document order."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def with_class(self, name: str) -> list[tuple[str, dict[str, str]]]:
        return [(t, a) for t, a in self.tags if name in a.get("class", "").split()]


def suspects_marked(text: str) -> list[str]:
    return [a.get("data-host", "") for _, a in Elements(text).with_class("suspect")]


# -- sections ----------------------------------------------------------------------------------


def test_a_full_report_has_every_section() -> None:
    text = page(full_report().to_dict())
    for section in ("phases", "batches", "lost", "checks", "smoke", "certify", "notes"):
        assert f'id="{section}"' in text, section
    assert "provisioner up" in text and "20261127-101010-beef" in text
    assert "FAILED" in text and "7 of 8 GPUs" in text and "no route" in text
    assert 'class="broken"' not in text


def test_a_minimal_report_is_a_header_only() -> None:
    data = {"run_id": "r1", "command": "validate", "outcome": "passed", "exit_code": 0,
            "phases": [], "checks": []}
    text = page(data)
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert "provisioner validate" in text and "passed" in text
    assert not re.search(r'<section id="', text)
    assert SIMULATED_BANNER not in text


def test_the_simulated_banner_tops_a_simulated_report_only() -> None:
    sim = page(full_report(simulated=True).to_dict())
    assert sim.index(SIMULATED_BANNER) < sim.index("<header")
    assert "<title>SIMULATED " in sim
    assert [a for _, a in Elements(sim).with_class("simulated")]
    real = page(full_report(simulated=False).to_dict())
    assert SIMULATED_BANNER not in real and 'class="simulated"' not in real


def test_checks_are_one_table_per_host_with_failures_marked() -> None:
    text = page(full_report().to_dict())
    hosts = [a["data-host"] for t, a in Elements(text).tags if t == "details"
             and "host" in a.get("class", "").split()]
    assert hosts == ["gpu-1", "gpu-2"]
    bad = Elements(text).with_class("status-fail")
    assert len(bad) == 1
    assert 'class="host bad" data-host="gpu-2"' in text


def test_a_section_that_cannot_be_drawn_leaves_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(data: Any) -> str:
        raise ValueError("bad figure")

    monkeypatch.setattr(report_html, "_smoke", broken)
    text = page(full_report().to_dict())
    assert 'class="broken"' in text and "ValueError: bad figure" in text
    assert 'id="certify"' in text and 'id="checks"' in text


def test_values_of_the_wrong_type_do_not_break_the_page() -> None:
    data = full_report().to_dict()
    data["phases"] = [{"name": 3, "hosts": "x", "failures": None}, "junk"]
    data["checks"] = [{"host": None}, 7]
    data["smoke"] = {"runs": [{"allreduce": [{"bytes": "big", "busbw_gbps": None}, 5]}]}
    data["certify"] = {"pairs": [{"a": "x"}], "suspects": [{"host": "x"}], "node_gbps": [],
                       "margin": "wide", "reference_gbps": True}
    text = page(data)
    assert 'class="broken"' not in text
    assert "no per-size results" in text
    assert "x" in suspects_marked(text)


# -- untrusted text ----------------------------------------------------------------------------


def hostile_report() -> dict[str, Any]:
    r = full_report()
    r.checks.append(Check(HOSTILE, "gpu_validate", HOSTILE, "fail", HOSTILE, 8, HOSTILE_DETAIL))
    r.phases[1].failures.append({"host": HOSTILE, "task": HOSTILE_DETAIL,
                                 "message": "see https://evil.example/x.js", "unreachable": True})
    r.notes.append(f"{HOSTILE} \x1b[31mred\x1b[0m")
    r.certify = certify_section(slow=HOSTILE.replace("gpu", "x"))
    r.certify["pairs"].append(pair(HOSTILE, "gpu-1", 1.0, error=HOSTILE_DETAIL))
    r.certify["suspects"].append({"host": HOSTILE, "evidence": [HOSTILE_DETAIL]})
    r.smoke["runs"][0]["label"] = HOSTILE  # type: ignore[index]
    return r.to_dict()


def test_hostile_hostnames_and_details_are_text() -> None:
    text = page(hostile_report())
    assert "<script" not in text.lower()
    assert "<img" not in text.lower() and "onerror=" not in text.replace("onerror=alert", "")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt; &amp; &lt;/td&gt;&lt;/table&gt;" in text
    assert "\x1b" not in text
    tags = {t for t, _ in Elements(text).tags}
    assert tags <= {"html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "h3",
                    "dl", "dt", "dd", "span", "section", "table", "thead", "tbody", "tr", "th",
                    "td", "ul", "li", "details", "summary", "small", "p", "article", "svg",
                    "line", "text", "polyline", "circle", "b", "div", "footer", "br",
                    "code"}
    assert HOSTILE in suspects_marked(text)


def test_nothing_is_fetched_and_nothing_runs() -> None:
    text = page(hostile_report())
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*https?://""", text, re.IGNORECASE)
    attributes = {name for _, attrs in Elements(text).tags for name in attrs}
    assert not attributes & {"src", "href", "xlink:href", "action", "srcset", "poster"}
    assert not [name for name in attributes if name.startswith("on")]
    assert not re.search(r"""(https?:)?//[^"'\s<]*\.(js|css|woff2?|png|svg)\b""",
                         text.replace("https://evil.example/x.js", ""))
    assert "<link" not in text and "@import" not in text and "url(" not in text
    assert "<script" not in text and " on" + "load=" not in text
    assert "Content-Security-Policy" in text and "default-src 'none'" in text


# -- smoke -------------------------------------------------------------------------------------


def test_each_smoke_pass_with_sizes_has_its_busbw_chart_and_floor() -> None:
    text = page(full_report().to_dict())
    charts = re.findall(r'<svg class="chart busbw".*?</svg>', text, re.S)
    assert len(charts) == 1  # the inter-node pass has no sizes: a line says so
    chart = charts[0]
    assert chart.count("<circle") == 21 and chart.count('class="point wrong"') == 1
    assert 'class="floor"' in chart and "floor 45 GB/s" in chart
    assert "1 KiB" in chart and "1 GiB" in chart and "busbw GB/s" in chart
    assert "no per-size results in the report" in text


def test_a_chart_without_a_floor_has_no_floor_line() -> None:
    data = full_report().to_dict()
    data["smoke"]["runs"][0]["verdict"]["floor_gbps"] = None
    chart = re.findall(r'<svg class="chart busbw".*?</svg>', page(data), re.S)[0]
    assert 'class="floor"' not in chart
    data["smoke"]["runs"][0]["allreduce"] = allreduce(range(20, 21))  # one size
    assert page(data).count('<svg class="chart busbw"') == 1


# -- certify -----------------------------------------------------------------------------------


def test_the_suspect_node_is_marked_in_the_heatmap() -> None:
    text = page(full_report().to_dict())
    assert suspects_marked(text) == ["gpu-3"]
    [(tag, attrs)] = Elements(text).with_class("suspect")
    assert tag == "th" and "row" in attrs["class"].split()
    heatmap = re.findall(r'<table class="heatmap".*?</table>', text, re.S)[0]
    assert heatmap.count('<td class="pair') == 8  # four ring pairs, both halves of the grid
    assert "SUSPECT" in heatmap and "hsl(0," in heatmap and "hsl(120," in heatmap


def test_a_suspect_link_is_marked_on_its_cell() -> None:
    data = full_report().to_dict()
    data["certify"]["suspects"] = [{"host": "gpu-1-gpu-2", "component": "link:gpu-1-gpu-2",
                                    "check": CHECK, "measured": 2.0, "expected": 9.75,
                                    "evidence": ["gpu-1<->gpu-2: 2 Gbit/s"]}]
    text = page(data)
    [(tag, attrs)] = Elements(text).with_class("suspect")
    assert (tag, attrs["data-host"]) == ("td", "gpu-1-gpu-2")
    assert len(Elements(text).with_class("suspect-link")) == 1


def test_a_suspect_without_pairs_is_marked_in_the_list() -> None:
    data = {"run_id": "r", "command": "certify", "outcome": "failed", "exit_code": 1,
            "phases": [], "checks": [], "certify": {"suspects": [{"host": "sim-gpu-1"}]}}
    text = page(data)
    assert suspects_marked(text) == ["sim-gpu-1"]
    assert "every pair" not in text


def test_no_suspect_says_so_and_outliers_and_drift_are_listed() -> None:
    data = full_report().to_dict()
    data["certify"]["suspects"] = []
    data["certify"]["outliers"] = [{"host": "gpu-2", "measured": 11.0, "expected": 12.4}]
    data["certify"]["drift"] = [{"host": "gpu-4", "measured": 9.0, "reference": 12.9,
                                 "runs": ["r1", "r2", "r3"]}]
    data["certify"]["outlier_margin"] = 0.1
    text = page(data)
    assert suspects_marked(text) == []
    assert "no suspect" in text and "<h3>outliers</h3>" in text and "<h3>drift</h3>" in text
    assert "r1, r2, r3" in text and "<dd>10%</dd>" in text
    flags = re.findall(r'<th class="row">(gpu-\d)<b class="tag flag">(\w+)</b></th>', text)
    assert flags == [("gpu-2", "OUTLIER"), ("gpu-4", "DRIFT")]


def test_a_fleet_too_large_for_a_grid_is_a_strip() -> None:
    hosts = [f"n{i:03d}" for i in range(report_html.GRID_MAX + 2)]
    pairs = [pair(hosts[i], hosts[(i + 1) % len(hosts)], 10.0) for i in range(len(hosts))]
    data = {"run_id": "r", "command": "certify", "outcome": "failed", "exit_code": 1,
            "phases": [], "checks": [],
            "certify": {"pairs": pairs, "node_gbps": dict.fromkeys(hosts, 10.0),
                        "reference_gbps": 10.0, "margin": 0.25,
                        "suspects": [{"host": "n007", "component": "node"}]}}
    text = page(data)
    assert 'class="heatmap"' not in text and 'class="strip"' in text
    assert suspects_marked(text) == ["n007"]


def point(run: str, host: str, value: float | None, simulated: bool = True) -> Point:
    return Point(run, f"2026-11-{run[-2:]}T00:00:00+00:00", host, CHECK, value, "Gbit/s",
                 simulated)


def test_each_node_has_its_trend_with_this_run_marked() -> None:
    data = full_report().to_dict()
    earlier = [point(f"run-{d:02d}", h, 12.0 + d / 10, simulated=True)
               for d in range(20, 25) for h in ("gpu-1", "gpu-2", "gpu-3")]
    earlier += [point("run-25", "gpu-1", None), point("run-26", "gpu-1", 99.0, simulated=False),
                Point("run-26", "x", "gpu-1", "other_check", 1.0, "", True)]
    earlier.append(point(data["run_id"], "gpu-1", 12.5))  # the ledger already has this run
    text = page(data, earlier)
    rows = re.findall(r"<tr><td>(gpu-\d)</td><td>(<svg class=\"sparkline\".*?</svg>)</td>"
                      r"<td>(\d+)</td>", text, re.S)
    assert [(h, n) for h, _, n in rows] == [("gpu-1", "7"), ("gpu-2", "6"), ("gpu-3", "6"),
                                            ("gpu-4", "1")]
    for _, svg, _ in rows:
        assert svg.count('class="this-run"') == 1
    assert rows[0][1].count('class="missing"') == 1  # run-25 measured nothing
    assert "99" not in rows[0][1]  # a real cluster's figure is not in a simulated trend


# -- the file ----------------------------------------------------------------------------------


def test_every_save_writes_the_page_beside_report_json(tmp_path: Path) -> None:
    r = full_report()
    r._secrets = {"hunter2"}
    r.notes.append("mirror password hunter2 refused")
    run_dir = tmp_path / "runs" / r.run_id
    history.record([point("run-01", "gpu-3", 12.9)], root=tmp_path / "runs")
    r.save(run_dir)
    page_path = run_dir / "index.html"
    assert stat.S_IMODE(page_path.stat().st_mode) == 0o600
    text = page_path.read_text()
    assert "hunter2" not in text and "mirror password *** refused" in text
    assert "run-01" in text  # the history beside the run is read
    assert suspects_marked(text) == ["gpu-3"]


def test_a_page_that_cannot_be_drawn_never_costs_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(data: Any, history: Any = ()) -> str:
        raise RuntimeError("renderer\nbug")

    monkeypatch.setattr(report_html, "render", boom)
    r = full_report()
    path = r.save(tmp_path / "r")
    assert json.loads(path.read_text())["run_id"] == r.run_id
    text = (tmp_path / "r" / "index.html").read_text()
    assert "cannot draw the page of run 20261127-101010-beef: RuntimeError: renderer bug" in text
    with pytest.raises(report_html.PageNotWritten, match=r"RuntimeError: renderer bug$"):
        report_html.write_page(tmp_path / "r", r.to_dict())


def test_a_page_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "index.html").mkdir()  # a directory where the page goes
    with pytest.raises(report_html.PageNotWritten, match=r"^cannot write .*index\.html: "):
        report_html.write_page(tmp_path / "r", full_report().to_dict())


# -- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    return tmp_path / "runs"


def test_report_html_writes_the_page_and_prints_its_path(
        runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = full_report()
    run_dir = runs / r.run_id
    run_dir.mkdir(parents=True)
    (run_dir / "report.json").write_text(json.dumps(r.to_dict()))
    assert cli.main(["report", r.run_id, "--html"]) == 0
    assert capsys.readouterr().out == f"{run_dir / 'index.html'}\n"
    assert suspects_marked((run_dir / "index.html").read_text()) == ["gpu-3"]
    (run_dir / "index.html").unlink()
    assert cli.main(["report", "--html", "--json"]) == 0  # the newest run
    assert json.loads(capsys.readouterr().out) == {"run_id": r.run_id,
                                                   "html": str(run_dir / "index.html")}
    assert (run_dir / "index.html").is_file()


def test_report_html_of_an_unknown_run_is_one_line(
        runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs.mkdir()
    assert cli.main(["report", "20990101-000000-dead", "--html"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err
    assert "no report for run '20990101-000000-dead'" in out.err


def test_report_html_refuses_a_run_id_that_leaves_the_runs_directory(
        runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = full_report()
    data = {**r.to_dict(), "run_id": "../elsewhere"}
    (runs / "20261127-101010-beef").mkdir(parents=True)
    (runs / "20261127-101010-beef" / "report.json").write_text(json.dumps(data))
    assert cli.main(["report", "--html"]) == 2
    assert "run '../elsewhere': no report.json under" in capsys.readouterr().err
    assert not (runs.parent / "elsewhere").exists()


# -- headless Chromium -------------------------------------------------------------------------


def png_pixels(path: Path, rows: int) -> tuple[int, int, set[tuple[int, ...]]]:
    """Width, height and the distinct colours of the first ``rows`` rows of an 8-bit RGB or
    RGBA PNG (enough of a decoder to tell a drawn page from a blank one)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw, stride, prev = zlib.decompress(idat), width * bpp, bytearray(width * bpp)
    colours: set[tuple[int, ...]] = set()
    for y in range(min(rows, height)):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                nearest = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + nearest) & 0xFF
        colours.update(tuple(line[i:i + 3]) for i in range(0, stride, bpp))
        prev = line
    return width, height, colours


@pytest.mark.skipif(report_html.chromium() is None, reason="needs chromium (headless) on PATH")
def test_chromium_draws_the_page_with_the_suspect_marked(tmp_path: Path) -> None:
    r = full_report()
    run_dir = tmp_path / "runs" / r.run_id
    r.save(run_dir)
    dom = report_html.dump_dom(run_dir / "index.html")
    assert dom is not None
    assert suspects_marked(dom) == ["gpu-3"]
    assert "SUSPECT" in dom and SIMULATED_BANNER in dom
    png = run_dir / "index.png"
    assert report_html.screenshot(run_dir / "index.html", png, width=1000, height=1400)
    width, height, colours = png_pixels(png, rows=160)
    assert (width, height) == (1000, 1400)
    assert len(colours) > 8  # drawn, not blank
    assert (255, 212, 0) in colours  # the SIMULATED banner's yellow, at the top


def test_screenshot_is_false_without_chromium_or_past_its_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    html_path = tmp_path / "index.html"
    html_path.write_text("<p>x</p>")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert report_html.screenshot(html_path, tmp_path / "x.png") is False
    assert report_html.dump_dom(html_path) is None
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        raise subprocess.TimeoutExpired("chromium", 1)

    monkeypatch.setattr(subprocess, "run", slow)
    assert report_html.screenshot(html_path, tmp_path / "x.png", timeout_s=1) is False
    assert not (tmp_path / "x.png").exists()
