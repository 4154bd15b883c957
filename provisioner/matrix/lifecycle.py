"""Driver branch lifecycle: where each stack's branch stands in NVIDIA's data-center lifecycle
on a given day (stacks.yml ``driver_branches`` [LIFE]), and what a plan does about it: a warning
within ``WARN_DAYS`` of the end, a refusal past it unless the host allows an end-of-life driver.
Pure: the day is an argument (``today()`` reads the clock, or ``PROVISIONER_TODAY`` for tests)."""

from __future__ import annotations

import calendar
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date

from provisioner.errors import InputError
from provisioner.matrix.schema import DriverBranch, Stack, StackMatrix

WARN_DAYS = 90
TODAY_ENV = "PROVISIONER_TODAY"


def today() -> date:
    """The clock's date, or ``PROVISIONER_TODAY`` (YYYY-MM-DD) where it is set."""
    text = os.environ.get(TODAY_ENV, "").strip()
    if not text:
        return date.today()
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise InputError(f"{TODAY_ENV}={text!r} is not a date like 2026-11-27; unset it to "
                         "use the clock") from exc


def end_date(branch: DriverBranch) -> date | None:
    """The last supported day: the date given, or the last day of the month given."""
    if branch.end_of_life is None:
        return None
    parts = [int(p) for p in branch.end_of_life.split("-")]
    if len(parts) == 3:
        return date(parts[0], parts[1], parts[2])
    return date(parts[0], parts[1], calendar.monthrange(parts[0], parts[1])[1])


@dataclass(frozen=True)
class BranchStatus:
    branch: int
    designation: str
    end: date | None
    days_left: int | None  # None: no end published; negative: past its end

    @property
    def ended(self) -> bool:
        return self.days_left is not None and self.days_left < 0

    @property
    def ending(self) -> bool:
        return self.days_left is not None and 0 <= self.days_left <= WARN_DAYS

    @property
    def end_text(self) -> str:
        return self.end.isoformat() if self.end else "not published"


def branch_status(matrix: StackMatrix, branch: int, on: date) -> BranchStatus:
    spec = matrix.driver_branches.get(branch)
    if spec is None:  # an override to a branch the table does not list
        return BranchStatus(branch, "unknown", None, None)
    end = end_date(spec)
    return BranchStatus(branch, spec.designation, end,
                        None if end is None else (end - on).days)


def supported_stacks(matrix: StackMatrix, on: date) -> list[Stack]:
    """The stacks whose branch has not ended, oldest CUDA first."""
    return [s for s in matrix.stacks_by_cuda()
            if not branch_status(matrix, s.driver.branch, on).ended]


@dataclass(frozen=True)
class LifecycleNote:
    """One line a plan prints (a warning), and what the report records of it."""

    hosts: tuple[str, ...]
    stack: str
    branch: int
    end: str
    kind: str  # "ending" | "ended-allowed"
    text: str


def judge(matrix: StackMatrix, on: date,
          hosts: Iterable[tuple[str, int, str, bool]]) -> list[LifecycleNote]:
    """``hosts``: (host, driver branch, stack, allow_eol_driver). Refuses (one line) the first
    host whose branch is past its end and that does not allow it; else one warning per stack
    and branch ending within WARN_DAYS or past its end where allowed."""
    groups: dict[tuple[str, int, bool], list[str]] = {}
    for host, branch, stack, allowed in hosts:
        groups.setdefault((stack, branch, allowed), []).append(host)
    notes: list[LifecycleNote] = []
    for (stack, branch, allowed), names in sorted(groups.items()):
        status = branch_status(matrix, branch, on)
        if status.ended and not allowed:
            replacements = ", ".join(s.name for s in supported_stacks(matrix, on)) or "none"
            raise InputError(
                f"host {names[0]}: driver branch R{branch} (gpu_stack {stack}) reached its end "
                f"of life on {status.end_text} [NVIDIA's lifecycle, stacks.yml driver_branches]; "
                f"pick a supported stack ({replacements}) or set allow_eol_driver: true")
        if status.ended:
            notes.append(LifecycleNote(
                tuple(names), stack, branch, status.end_text, "ended-allowed",
                f"warning: {len(names)} host(s) on driver branch R{branch} (gpu_stack {stack}), "
                f"end of life since {status.end_text}: allowed by allow_eol_driver"))
        elif status.ending:
            notes.append(LifecycleNote(
                tuple(names), stack, branch, status.end_text, "ending",
                f"warning: driver branch R{branch} (gpu_stack {stack}, {len(names)} host(s)) "
                f"reaches its end of life on {status.end_text}, in {status.days_left} day(s)"))
    return notes
