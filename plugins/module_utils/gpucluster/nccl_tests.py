"""Parse nccl-tests (``all_reduce_perf``, ``all_gather_perf``...) output into result rows.

Text output: the table is located by its ``#  size  count  type ...`` header, and its columns are
taken from that header, so tables with or without ``redop``/``root`` columns, with ``error`` or
``#wrong``, with per-iteration or timestamp columns all map by name. Interleaved lines
(``NCCL INFO``, MPI, warnings, the ``Func/Proto/Algo`` matrix), markdown indentation, ragged column
alignment and OpenMPI ``--tag-output`` prefixes are tolerated; a line that starts like a data row
but does not fit the header is counted in ``skipped_rows``.

JSON output (``-J FILE``, nccl-tests 2.17+, ``"version": 2``) is accepted too; the format is the
one written by ``src/util.cu`` in NVIDIA/nccl-tests.

Bandwidths are in GB/s (gigaBYTES per second) and times in microseconds, as nccl-tests prints.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .values import ParseError, clean, to_float, to_int, to_number

_MPI_TAG = re.compile(r"^\[\d+,\d+\]<\w+>:")
_RANK = re.compile(
    r"Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*)$"
)
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<value>\S+)\s*(?P<check>OK|FAILED)?", re.I)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<value>\d+)\s*(?P<check>OK|FAILED)?", re.I)
_COLLECTIVE = re.compile(r"^#\s*Collective test starting:\s*(?P<name>\S+)")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(?P<version>\S+)")
_CONFIG_FIELDS = (
    ("nthread", re.compile(r"\bnThread\s+(\d+)")),
    ("ngpus", re.compile(r"\bnGpus\s+(\d+)")),
    ("min_bytes", re.compile(r"\bminBytes\s+(\d+)")),
    ("max_bytes", re.compile(r"\bmaxBytes\s+(\d+)")),
    ("warmup_iters", re.compile(r"\bwarmup iters:\s*(\d+)")),
    ("iters", re.compile(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)")),
    ("agg_iters", re.compile(r"\bagg iters:\s*(\d+)")),
    ("validation", re.compile(r"\bvalidation:\s*(\d+)")),
    ("graph", re.compile(r"\bgraph:\s*(\d+)")),
)
_STEP = re.compile(r"\bstep:\s*(\S+)")
_TIME_NAMES = ("time", "cputime")
_WRONG_NAMES = ("#wrong", "error", "wrong")


def _header(line: str) -> list[str] | None:
    """Column names when ``line`` is the ``# size count type ...`` header, else ``None``."""
    tokens = line.lstrip("#").split()
    if len(tokens) >= 6 and tokens[0] == "size" and tokens[1] == "count":
        return tokens
    return None


class _Layout:
    """Where each value sits in a row, derived from the header's column names."""

    def __init__(self, names: list[str]) -> None:
        self.timestamp = bool(names) and names[-1] == "timestamp"
        columns = names[:-1] if self.timestamp else names
        starts = [i for i, name in enumerate(columns) if name in _TIME_NAMES]
        if not starts:
            raise ParseError("nccl-tests header has no time column")
        self.prefix = columns[: starts[0]]
        self.width = len(columns)
        self.halves: list[dict[str, int]] = []
        bounds = [*starts, len(columns)]
        for position in range(len(starts)):
            half = {}
            for index in range(bounds[position], bounds[position + 1]):
                half[columns[index]] = index
            self.halves.append(half)
        self.half_width = bounds[1] - bounds[0]
        self.error_column = next((name for name in columns if name in _WRONG_NAMES), None)


_FULL_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")


class _NotARow(Exception):
    """A token that should be a number is something else: the line is not a result row."""


def _cell(token: str | None) -> int | float | None:
    """A numeric table cell: the number, ``None`` for ``N/A``; anything else is not a row."""
    if token is None or clean(token) is None:
        return None
    if not _FULL_NUMBER.match(token):
        raise _NotARow(token)
    if token.lstrip("+-").isdigit():
        return int(token)  # exact, even beyond float precision
    return to_number(token)


def _measure(tokens: list[str], half: dict[str, int], offset: int) -> dict[str, Any] | None:
    def pick(*names: str) -> int | float | None:
        for name in names:
            if name in half:
                index = half[name] - offset
                return _cell(tokens[index] if 0 <= index < len(tokens) else None)
        return None

    time_us = pick(*_TIME_NAMES)
    algbw = pick("algbw")
    busbw = pick("busbw")
    wrong = pick(*_WRONG_NAMES)
    if time_us is None and algbw is None and busbw is None:
        return None
    return {
        "time_us": None if time_us is None else float(time_us),
        "algbw_gbps": None if algbw is None else float(algbw),
        "busbw_gbps": None if busbw is None else float(busbw),
        "wrong": wrong,
    }


def _row(tokens: list[str], layout: _Layout) -> dict[str, Any] | None:
    """One result row, or ``None`` when ``tokens`` do not fit the header."""
    count = len(tokens) - (2 if layout.timestamp else 0)
    prefix_width = len(layout.prefix)
    trace_replay = count == prefix_width + layout.half_width and len(layout.halves) == 2
    if count != layout.width and not trace_replay:
        return None
    prefix = {name: tokens[index] for index, name in enumerate(layout.prefix)}
    try:
        size, elements = _cell(prefix.get("size")), _cell(prefix.get("count"))
        root = _cell(prefix.get("root"))
        if trace_replay:
            # nccl-tests leaves the out-of-place half blank when it only measures in place.
            out_of_place = None
            in_place = _measure(tokens, layout.halves[1], layout.half_width)
        else:
            out_of_place = _measure(tokens, layout.halves[0], 0)
            in_place = _measure(tokens, layout.halves[1], 0) if len(layout.halves) > 1 else None
    except _NotARow:
        return None
    if not isinstance(size, int) or not isinstance(elements, int) or size < 0:
        return None
    if out_of_place is None and in_place is None:
        return None
    return {
        "size_bytes": size,
        "count": elements,
        "type": prefix.get("type"),
        "redop": prefix.get("redop"),
        "root": root if isinstance(root, int) else None,
        "out_of_place": out_of_place,
        "in_place": in_place,
    }


def _empty_result(source: str) -> dict[str, Any]:
    return {
        "source": source,
        "collective": None,
        "nccl_tests_version": None,
        "config": {},
        "ranks": [],
        "columns": [],
        "has_redop": None,
        "error_column": None,
        "rows": [],
        "avg_busbw_gbps": None,
        "avg_busbw_check": None,
        "out_of_bounds": None,
        "out_of_bounds_ok": None,
        "skipped_rows": 0,
        "errors": [],
    }


def _config(line: str) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for key, pattern in _CONFIG_FIELDS:
        match = pattern.search(line)
        if match:
            config[key] = int(match.group(1))
    step = _STEP.search(line)
    if step:
        config["step"] = step.group(1)
    return config


def _rank(match: re.Match[str]) -> dict[str, Any]:
    group = match.group("group")
    return {
        "rank": int(match.group("rank")),
        "group": int(group) if group is not None else None,
        "pid": int(match.group("pid")),
        "host": match.group("host"),
        "device": int(match.group("device")),
        "bus": match.group("bus"),
        "device_name": match.group("name").strip() or None,
    }


def _parse_text(text: str) -> dict[str, Any]:
    result = _empty_result("text")
    layout: _Layout | None = None
    for raw in text.splitlines():
        line = _MPI_TAG.sub("", raw.strip()).strip()
        if not line:
            continue
        if line.startswith("#"):
            _comment(line, result)
            names = _header(line)
            if names is not None:
                layout = _Layout(names)
                result["columns"] = names
                result["has_redop"] = "redop" in names
                result["error_column"] = layout.error_column
            continue
        if layout is None:
            continue
        tokens = line.split()
        row = _row(tokens, layout)
        if row is not None:
            result["rows"].append(row)
        elif tokens[0].isdigit():
            result["skipped_rows"] += 1
    if layout is None:
        raise ParseError("no nccl-tests result table header ('#  size  count  type ...') found")
    return result


def _comment(line: str, result: dict[str, Any]) -> None:
    """Fold one ``#`` line (header info, rank, footer) into ``result``."""
    match: re.Match[str] | None
    if "nThread" in line:
        result["config"].update(_config(line))
    elif (match := _RANK.search(line)) is not None:
        result["ranks"].append(_rank(match))
    elif (match := _AVG.match(line)) is not None:
        result["avg_busbw_gbps"] = to_float(match.group("value"))
        result["avg_busbw_check"] = match.group("check")
    elif (match := _OOB.match(line)) is not None:
        result["out_of_bounds"] = int(match.group("value"))
        result["out_of_bounds_ok"] = result["out_of_bounds"] == 0
    elif (match := _COLLECTIVE.match(line)) is not None:
        result["collective"] = match.group("name")
    elif (match := _VERSION.match(line)) is not None:
        result["nccl_tests_version"] = match.group("version")
    elif line.lower().startswith("# error:"):
        result["errors"].append(line[1:].strip())


def _json_number(value: Any) -> int | float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    return to_number(str(value))


def _json_measure(block: Any) -> dict[str, Any] | None:
    if not isinstance(block, dict):
        return None
    time_us = block.get("time", block.get("cpu_time"))
    return {
        "time_us": _json_number(time_us),
        "algbw_gbps": _json_number(block.get("alg_bw")),
        "busbw_gbps": _json_number(block.get("bus_bw")),
        "wrong": _json_number(block.get("nwrong")),
    }


def _parse_json(document: dict[str, Any]) -> dict[str, Any]:
    result = _empty_result("json")
    args = document.get("args") or []
    if args and isinstance(args[0], str):
        result["collective"] = args[0].rsplit("/", 1)[-1] or None
    config = document.get("config") or {}
    result["config"] = {
        "nthread": config.get("nthreads"),
        "ngpus": config.get("ngpus"),
        "min_bytes": config.get("minimum_bytes"),
        "max_bytes": config.get("maximum_bytes"),
        "warmup_iters": config.get("warmup_iters"),
        "iters": config.get("iterations"),
        "agg_iters": config.get("aggregated_iterations"),
        "validation": config.get("validation"),
        "graph": config.get("graph"),
    }
    for device in config.get("devices") or []:
        result["ranks"].append(
            {
                "rank": device.get("rank"),
                "group": device.get("group"),
                "pid": device.get("pid"),
                "host": device.get("hostname"),
                "device": device.get("device"),
                "bus": device.get("device_hex"),
                "device_name": device.get("device_info"),
            }
        )
    for entry in document.get("results") or []:
        root = clean(str(entry.get("root", "")))
        result["rows"].append(
            {
                "size_bytes": entry.get("size"),
                "count": entry.get("count"),
                "type": entry.get("type"),
                "redop": entry.get("redop"),
                "root": to_int(root),
                "out_of_place": _json_measure(entry.get("out_of_place")),
                "in_place": _json_measure(entry.get("in_place")),
            }
        )
    result["has_redop"] = True
    result["error_column"] = "nwrong"
    average = document.get("average_bus_bandwidth") or {}
    result["avg_busbw_gbps"] = _json_number(average.get("bandwidth"))
    okay = average.get("okay")
    result["avg_busbw_check"] = {"true": "OK", "false": "FAILED"}.get(str(okay).lower())
    bounds = document.get("out_of_bounds") or {}
    result["out_of_bounds"] = bounds.get("count")
    if result["out_of_bounds"] is not None:
        result["out_of_bounds_ok"] = result["out_of_bounds"] == 0
    result["errors"] = [str(error) for error in document.get("errors") or []]
    return result


def _summarise(result: dict[str, Any]) -> dict[str, Any]:
    busbw = [
        half["busbw_gbps"]
        for row in result["rows"]
        for half in (row["out_of_place"], row["in_place"])
        if half is not None and half["busbw_gbps"] is not None
    ]
    result["max_busbw_gbps"] = max(busbw) if busbw else None
    result["row_count"] = len(result["rows"])
    return result


def parse_nccl_tests(text: str) -> dict[str, Any]:
    """Facts from one nccl-tests run (text log or ``-J`` JSON).

    Rows: ``{"size_bytes", "count", "type", "redop" (None without a redop column), "root"
    (None without a root column), "out_of_place": {"time_us", "algbw_gbps", "busbw_gbps",
    "wrong"}, "in_place": {...}}``; ``wrong`` is the ``#wrong`` count or, in older tables, the
    ``error`` value (None for ``N/A``). Also ``avg_busbw_gbps`` ("# Avg bus bandwidth"),
    ``out_of_bounds``, ``max_busbw_gbps``, ``config`` (nThread, nGpus...), ``ranks``.
    Raises ``ParseError`` when no result table is found.
    """
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            document = json.loads(stripped)
        except ValueError:
            document = None
        if isinstance(document, dict) and "results" in document:
            return _summarise(_parse_json(document))
    return _summarise(_parse_text(text))
