"""Parse the table ``dcgmi diag -r 1|2|3`` prints into per-test results.

Rows look like ``| GPU Memory | Pass - GPUs: 1, 2, 3 |``; a row with an empty first cell
continues the row above (another result line, or the wrapped text of a ``Warning``/``Info``
note, which DCGM splits mid-word). Section rows (``|-----  Deployment  ---+``) name the group a
test belongs to; the ``Metadata`` section (DCGM and driver version) is kept apart. A table
printed twice (``srun`` on two tasks) or a fragment without header or footer parses too.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re
from typing import Any

from .values import ParseError

_SECTION = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z][\w /]*?)\s+-+[+|]")
_BORDER = re.compile(r"^\+[-=+]+\+?$")
_RESULT = re.compile(
    r"^(?P<result>pass|passed|fail|failed|skip|skipped|warn|warning)\b"
    r"(?:\s*-\s*(?P<scope>.*))?$",
    re.IGNORECASE,
)
_PER_GPU = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<result>\w+)", re.IGNORECASE)
_NOTE_ROWS = {"warning": "warnings", "info": "info"}
_SEVERITY = {"Fail": 3, "Warn": 2, "Pass": 1, "Skip": 0}


def _normalise(word: str) -> str:
    lowered = word.lower()
    if lowered.startswith("pass"):
        return "Pass"
    if lowered.startswith("fail"):
        return "Fail"
    if lowered.startswith("warn"):
        return "Warn"
    return "Skip"


def _gpu_ids(scope: str) -> list[str] | None:
    """``"GPUs: 1, 2, 3"`` -> ["1", "2", "3"]; ``"GPU: 0-2"`` -> ["0", "1", "2"]."""
    listed = scope.partition(":")[2]
    ids: list[str] = []
    for part in re.split(r"[,\s]+", listed.strip()):
        if "-" in part:
            low, _sep, high = part.partition("-")
            if low.isdigit() and high.isdigit():
                ids.extend(str(n) for n in range(int(low), int(high) + 1))
        elif part.isdigit():
            ids.append(part)
    return ids or None


def _snake(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def _cells(line: str) -> tuple[str, str] | None:
    """(name, value) of a ``| name | value |`` row; the value keeps its inner spacing because
    DCGM wraps long text mid-word and a leading space may be meaningful."""
    parts = line.split("|")
    if len(parts) < 3:
        return None
    value = parts[2]
    if value.startswith(" "):
        value = value[1:]
    return parts[1].strip(), value.rstrip()


class _Table:
    def __init__(self) -> None:
        self.tests: dict[str, dict[str, Any]] = {}
        self.metadata: dict[str, str] = {}
        self.section: str | None = None
        self.test: dict[str, Any] | None = None
        self.note: str | None = None  # "warnings" / "info" while a note is being continued
        self.runs = 0

    def row(self, name: str, value: str) -> None:
        if name == "Diagnostic" and value.strip() == "Result":
            self.runs += 1
            self.section = None
            return
        if self.section == "Metadata" and name:
            self.metadata[_snake(name)] = value.strip()
            return
        if name.lower() in _NOTE_ROWS and self.test is not None:
            self.note = _NOTE_ROWS[name.lower()]
            self.test[self.note].append(value.strip())
            return
        if name:
            self.note = None
            self.test = self.tests.setdefault(
                name,
                {
                    "section": self.section,
                    "result": None,
                    "gpus": {},
                    "details": [],
                    "warnings": [],
                    "info": [],
                },
            )
            _add_result(self.test, value.strip())
            return
        if self.test is None:
            return
        if self.note is not None:
            notes = self.test[self.note]
            notes[-1] = notes[-1] + value  # DCGM wraps at a fixed width, mid-word
            return
        _add_result(self.test, value.strip())


def _add_result(test: dict[str, Any], text: str) -> None:
    """Fold one result line (``Pass``, ``Fail - GPU: 0``, ``GPU3: Warn``) into ``test``; the
    test's result is the worst line seen."""
    if not text:
        return
    test["details"].append(text)
    match = _RESULT.match(text)
    per_gpu = _PER_GPU.match(text)
    if match:
        result = _normalise(match.group("result"))
        scope = (match.group("scope") or "").strip()
        for gpu in ["all"] if scope.lower() == "all" else _gpu_ids(scope) or []:
            test["gpus"][gpu] = result
    elif per_gpu:
        result = _normalise(per_gpu.group("result"))
        test["gpus"][per_gpu.group("gpu")] = result
    else:
        return
    current = test["result"]
    if current is None or _SEVERITY[result] > _SEVERITY[current]:
        test["result"] = result


def parse_dcgmi_diag(text: str) -> dict[str, Any]:
    """Facts from ``dcgmi diag``.

    ``tests`` maps each test name to ``{"section", "result" ("Pass" | "Fail" | "Skip" | "Warn"
    | None), "gpus" ({"0": "Fail", ...} where DCGM lists GPUs, {"all": "Skip"} for
    "Skip - All"), "details" (result lines as printed), "warnings", "info"}``; ``results`` maps
    each test name to its result alone. ``passed`` is False when a test failed, True when at
    least one test ran and none failed, None when no test ran (all skipped). ``runs`` counts the
    table headers seen (``srun`` may print the table once per task).
    Raises ``ParseError`` when the text has no diag table rows at all.
    """
    table = _Table()
    messages: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        section = _SECTION.match(line)
        if section:
            table.section = section.group("name").strip()
            table.note = None
            continue
        if _BORDER.match(line):
            continue
        if line.startswith("|"):
            cells = _cells(line)
            if cells is not None:
                table.row(*cells)
            continue
        messages.append(line)
    if not table.tests and not table.metadata:
        raise ParseError("no 'dcgmi diag' result rows ('| Test | Result |') found")
    results = {name: test["result"] for name, test in table.tests.items()}
    failed = [name for name, result in results.items() if result == "Fail"]
    ran = [name for name, result in results.items() if result in ("Pass", "Warn", "Fail")]
    return {
        "metadata": table.metadata,
        "tests": table.tests,
        "results": results,
        "failed_tests": failed,
        "warned_tests": [
            name
            for name, test in table.tests.items()
            if name not in failed and (test["result"] == "Warn" or test["warnings"])
        ],
        "skipped_tests": [name for name, result in results.items() if result == "Skip"],
        "passed": (not failed) if ran else None,
        "runs": table.runs,
        "messages": messages,
    }
