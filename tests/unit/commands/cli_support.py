"""What the CLI tests of tests/unit/commands share: an inventory written for a test, the
recorded tables, the stand-in for bringup.run_phases, the saved report and a terminal
stdin. Their fixtures are in conftest.py beside this file."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner import bringup, render

REAL_ROWS_TABLE = render.rows_table
INTERNAL = " (rerun with PROVISIONER_DEBUG=1 for the traceback)"


def write_inventory(path: Path, gpu: dict[str, str] | None = None, cpu: bool = True,
                    **gpu_vars: Any) -> Path:
    hosts = {name: {"gpu_profile": profile, "ansible_host": f"{name}.invalid", **gpu_vars}
             for name, profile in (gpu or {"gpu-01": "hgx-h100-8gpu"}).items()}
    children: dict[str, Any] = {"gpu_nodes": {"hosts": hosts}}
    if cpu:
        children["cpu_nodes"] = {"hosts": {"login-01": {"ansible_host": "login-01.invalid"}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"all": {"children": children}}))
    return path


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def unwrapped(text: str) -> str:
    """Text without its white space: what a console of any width shows (lines it does not
    soft-wrap break at its width, which is 80 in a pytest-xdist worker)."""
    return "".join(text.split())


@dataclass
class Tables:
    """render.rows_table, recorded (and still drawn)."""

    calls: list[tuple[str, list[dict[str, str]]]] = field(default_factory=list)

    def __call__(self, console: Any, title: str, rows: list[dict[str, str]]) -> None:
        self.calls.append((title, rows))
        REAL_ROWS_TABLE(console, title, rows)


@dataclass
class FakeRun:
    """bringup.run_phases: what `_run` hands it, and the verdict it returns."""

    ok: bool = True
    error: BaseException | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, cp: Any, report: Any, run_dir: Path, phases: Any, options: Any,
                 display: Any) -> bool:
        self.calls.append({"plan": cp, "report": report, "run_dir": run_dir,
                           "phases": tuple(phases), "options": options})
        if self.error is not None:
            raise self.error
        return self.ok

    @property
    def options(self) -> bringup.RunOptions:
        [call] = self.calls
        return call["options"]  # type: ignore[no-any-return]

    @property
    def phases(self) -> tuple[tuple[str, str], ...]:
        [call] = self.calls
        return call["phases"]  # type: ignore[no-any-return]


def saved_report(runs: Path) -> dict[str, Any]:
    [path] = runs.glob("*/report.json")
    return json.loads(path.read_text())  # type: ignore[no-any-return]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True
