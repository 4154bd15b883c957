"""Every change to a run's report goes through the builder in provisioner/report.py: no other
module of provisioner/ assigns a report's fields, writes into its lists and mappings, or changes
its parts (batches, phases, checks). An AST scan of the package says where one does; it follows
what is typed or named as a report (or a part of one) within each function, and what is taken
from it there. And the builder's own steps, each as the report shows it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from provisioner.report import Batch, Check, Report
from provisioner.results import HostStats, PlaybookResult

PACKAGE = Path(__file__).resolve().parents[2] / "provisioner"
BUILDER = PACKAGE / "report.py"
# An annotation naming one of these makes the name a report or a part of one.
REPORT_TYPES = re.compile(r"\b(Report|Batch|Phase|Check)\b")
REPORT_NAMES = frozenset({"report"})
# Methods that change the list, mapping or set they are called on.
MUTATORS = frozenset({"append", "extend", "insert", "remove", "pop", "popitem", "clear",
                      "update", "setdefault", "add", "discard", "sort", "reverse"})
# A report's methods that return a new value, not a part of the report.
COPIES = frozenset({"to_dict", "junit", "save", "copy"})
# Builtins that hand back the report's own parts (an element, or the same elements).
PASSES_PARTS = frozenset({"sorted", "reversed", "next", "list", "tuple", "iter", "filter",
                          "max", "min"})


class _Scan(ast.NodeVisitor):
    """The mutations of a report in one module: (line, source text) each."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self.scopes: list[set[str]] = [set(REPORT_NAMES)]

    # What is a report or a part of one -------------------------------------------------------
    def _names(self) -> set[str]:
        return set().union(*self.scopes)

    def tracked(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self._names()
        if isinstance(node, ast.Attribute):
            return node.attr in REPORT_NAMES or self.tracked(node.value)
        if isinstance(node, ast.Subscript):
            return self.tracked(node.value)
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                return node.func.attr not in COPIES and self.tracked(node.func.value)
            return (isinstance(node.func, ast.Name) and node.func.id in PASSES_PARTS
                    and any(self.tracked(arg) for arg in node.args))
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            return isinstance(node.elt, ast.Name) and any(self.tracked(g.iter)
                                                          for g in node.generators)
        if isinstance(node, ast.IfExp):
            return self.tracked(node.body) or self.tracked(node.orelse)
        if isinstance(node, ast.BoolOp):
            return any(self.tracked(v) for v in node.values)
        return False

    def _bind(self, target: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.scopes[-1].add(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._bind(element)

    def _collect(self, body: list[ast.stmt]) -> None:
        """The names bound in ``body`` to a report's parts, to a fixpoint (an alias of an
        alias counts)."""
        bindings = [b for stmt in body for node in _own_nodes(stmt) for b in _bindings(node)]
        while True:
            before = set(self.scopes[-1])
            for target, value in bindings:
                if self.tracked(value):
                    self._bind(target)
            if self.scopes[-1] == before:
                return

    # Scopes -------------------------------------------------------------------------------
    def visit_Module(self, node: ast.Module) -> None:
        self._collect(node.body)
        self.generic_visit(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        typed = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                 *filter(None, [args.vararg, args.kwarg])]
                 if a.annotation is not None and REPORT_TYPES.search(ast.unparse(a.annotation))}
        self.scopes.append(typed)
        self._collect(node.body)
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    # What changes one ---------------------------------------------------------------------
    def _store(self, target: ast.expr) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._store(element)
        elif isinstance(target, ast.Starred):
            self._store(target.value)
        elif isinstance(target, ast.Attribute | ast.Subscript) and self.tracked(target.value):
            self.found.append((target.lineno, ast.unparse(target)))

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._store(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._store(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._store(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._store(target)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS and self.tracked(func.value):
            self.found.append((node.lineno, ast.unparse(func)))
        elif (isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args
              and self.tracked(node.args[0])):
            self.found.append((node.lineno, ast.unparse(node)))
        self.generic_visit(node)


def _bindings(node: ast.AST) -> list[tuple[ast.expr, ast.expr]]:
    """(target, value) of each name ``node`` binds to a value."""
    if isinstance(node, ast.Assign):
        return [(target, node.value) for target in node.targets]
    if isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
        return [(node.target, node.value)]
    if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        return [(node.target, node.iter)]
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [(node.optional_vars, node.context_expr)]
    return []


def _own_nodes(stmt: ast.stmt) -> Iterator[ast.AST]:
    """The nodes of ``stmt`` outside any function or class defined in it (their names are
    their own)."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node)
                     if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef
                                       | ast.Lambda | ast.ClassDef))


def report_mutations(source: str) -> list[tuple[int, str]]:
    """Where ``source`` changes a report directly: (line, what), in line order."""
    scan = _Scan()
    scan.visit(ast.parse(source))
    return sorted(set(scan.found))


def outside_the_builder() -> dict[str, list[tuple[int, str]]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == BUILDER:
            continue
        found = report_mutations(path.read_text(encoding="utf-8"))
        if found:
            out[str(path.relative_to(PACKAGE))] = found
    return out


def test_no_module_but_the_builder_changes_a_report() -> None:
    assert outside_the_builder() == {}


# Each of these changes a report without its builder: the scan must name every one.
MUTATING = [
    ("def f(report: Report) -> None:\n    report.outcome = 'passed'\n", "report.outcome"),
    ("def f(r: Report) -> None:\n    r.notes.append('x')\n", "r.notes.append"),
    ("def f(r: Report) -> None:\n    r.checks += []\n", "r.checks"),
    ("def f(report) -> None:\n    report.hosts['a'] = {}\n", "report.hosts['a']"),
    ("def f(report) -> None:\n    report.hosts['a']['executor'] = 'e'\n",
     "report.hosts['a']['executor']"),
    ("def f(ctx) -> None:\n    ctx.report.lost_hosts.setdefault('a', {})\n",
     "ctx.report.lost_hosts.setdefault"),
    ("def f(ctx) -> None:\n    ctx.report.notes[:] = []\n", "ctx.report.notes[:]"),
    ("def f(report) -> None:\n    lost = report.lost_hosts\n    lost.update({})\n",
     "lost.update"),
    ("def f(report) -> None:\n    report.resumes, report.retried_hosts = 'r', []\n",
     "report.resumes"),
    ("def f(report) -> None:\n    for b in report.batches:\n        b.detail = 'x'\n",
     "b.detail"),
    ("def f(report) -> None:\n    skipped = [b for b in report.batches if b.outcome]\n"
     "    for b in skipped:\n        b.detail = 'x'\n", "b.detail"),
    ("def f(batch: Batch) -> None:\n    batch.kept_drained['a'] = 'why'\n",
     "batch.kept_drained['a']"),
    ("def f(report) -> None:\n    phase = report.add_phase('x', None)\n    phase.name = 'y'\n",
     "phase.name"),
    ("def f(report) -> None:\n    def inner() -> None:\n        report.smoke = {}\n",
     "report.smoke"),
    ("def f(report) -> None:\n    setattr(report, 'outcome', 'failed')\n",
     "setattr(report, 'outcome', 'failed')"),
    ("def f(report) -> None:\n    del report.notes[0]\n", "report.notes[0]"),
]


@pytest.mark.parametrize(("source", "what"), MUTATING)
def test_the_scan_names_each_kind_of_direct_change(source: str, what: str) -> None:
    assert what in [found for _line, found in report_mutations(source)]


# Reading a report, or changing what was copied out of it, is not a change to it.
READING = [
    "def f(report: Report) -> int:\n    return len(report.checks)\n",
    "def f(report) -> None:\n    data = report.to_dict()\n    data['report_path'] = 'p'\n",
    "def f(report) -> None:\n    mine = dict(report.lost_hosts)\n    mine.update({})\n",
    "def f(report) -> None:\n    notes = [n.upper() for n in report.notes]\n    notes.append('x')\n",
    "def f(report) -> None:\n    report.add_note('x')\n    report.finish(0)\n",
    "def f(result) -> None:\n    result.reports.update({})\n",
]


@pytest.mark.parametrize("source", READING)
def test_the_scan_lets_reading_and_copies_be(source: str) -> None:
    assert report_mutations(source) == []


# The builder's steps ---------------------------------------------------------------------------

def started(**kw: Any) -> Report:
    return Report.start("r1", "up", "inv/hosts.yml", False, **kw)


def test_a_report_starts_with_the_host_key_note_first_and_its_secrets_masked() -> None:
    report = started(inventory_secrets={"hunter2"}, host_key_checking_off=["gpu-a", "gpu-b"],
                     connection={"connect_timeout": 10}, notes=["plan says hunter2"],
                     hosts={"gpu-a": {"kind": "gpu"}},
                     driver_lifecycle=[{"stack": "s", "branch": "550", "kind": "ending"}])
    assert report.notes == ["SSH host key checking is OFF for 2 host(s) (gpu-a, gpu-b): the "
                            "inventory turns it off", "plan says hunter2"]
    assert report.started_at and report.outcome == "running"
    data = report.to_dict()
    assert data["notes"][1] == "plan says ***"
    assert data["hosts"] == {"gpu-a": {"kind": "gpu"}}
    assert data["connection"] == {"connect_timeout": 10}
    assert data["driver_lifecycle"] == [{"stack": "s", "branch": "550", "kind": "ending"}]


def test_a_started_report_saves_as_one_built_by_hand(tmp_path: Path) -> None:
    report = started(notes=["n"], hosts={"gpu-a": {"kind": "gpu"}})
    by_hand = Report(run_id="r1", command="up", inventory="inv/hosts.yml", simulated=False,
                     started_at=report.started_at, notes=["n"], hosts={"gpu-a": {"kind": "gpu"}})
    for r in (report, by_hand):
        r.finish(0)
        r.duration_s = 0.0  # the one field that differs between two runs of this test
    assert report.to_dict() | {"finished_at": ""} == by_hand.to_dict() | {"finished_at": ""}
    assert report.junit() == by_hand.junit()


def test_reboots_keep_one_summing_note_the_latest() -> None:
    report = started(notes=["first"])
    report.record_reboots([{"host": "a"}], "1 reboot(s): 1 rebooted")
    report.add_note("between")
    report.record_reboots([{"host": "a"}, {"host": "b"}], "2 reboot(s): 2 rebooted")
    assert report.notes == ["first", "between", "2 reboot(s): 2 rebooted"]
    assert [r["host"] for r in report.reboots] == ["a", "b"]


def test_repeated_notes_are_kept_once_where_they_first_appeared() -> None:
    report = started(notes=["a", "b", "a", "c", "b"])
    report.drop_repeated_notes()
    assert report.notes == ["a", "b", "c"]


def test_a_lost_node_is_recorded_as_a_copy() -> None:
    report = started()
    why: dict[str, Any] = {"phase": "stack", "reason": "failed"}
    report.record_lost({"gpu-a": why})
    why["checks"] = ["driver"]
    assert report.lost_hosts == {"gpu-a": {"phase": "stack", "reason": "failed"}}


def test_executors_are_named_in_the_hosts_they_run() -> None:
    report = started(hosts={"gpu-a": {"kind": "gpu"}, "gpu-b": {"kind": "gpu"}})
    report.record_executors({"ex-1": ["gpu-a"], "ex-2": ["gpu-b", "gpu-z"]})
    assert report.executors == {"ex-1": ["gpu-a"], "ex-2": ["gpu-b", "gpu-z"]}
    assert report.hosts == {"gpu-a": {"kind": "gpu", "executor": "ex-1"},
                            "gpu-b": {"kind": "gpu", "executor": "ex-2"}}


def test_a_batch_changes_only_through_its_report() -> None:
    report = started()
    first, second = report.plan_batches([["gpu-a", "gpu-b"], ["gpu-c"]])
    assert (first.number, second.number, first.outcome) == (1, 2, "not run")
    report.update_batch(first, kept_drained={"gpu-a": "one"}, phases={"stack": "passed"})
    report.update_batch(first, outcome="failed", detail="gpu-b: x",
                        kept_drained={"gpu-b": "two"}, phases={"validate": "failed on gpu-b"})
    report.update_batch(first, detail=None, resumed=["gpu-a"])
    assert first.outcome == "failed" and first.detail == "gpu-b: x"
    assert first.kept_drained == {"gpu-a": "one", "gpu-b": "two"}
    assert first.phases == {"stack": "passed", "validate": "failed on gpu-b"}
    assert first.resumed == ["gpu-a"] and second == Batch(2, ["gpu-c"])
    with pytest.raises(ValueError, match="batch 1 is not one of run r1's"):
        report.update_batch(Batch(1, ["gpu-a", "gpu-b"]), outcome="passed")


def test_a_batchs_phases_get_its_prefix_and_the_earlier_ones_keep_their_names() -> None:
    report = started()
    played = PlaybookResult(playbook="stack.yml", status="successful", rc=0, duration_s=1.0,
                            artifact_dir=Path("/nonexistent"), stats={"gpu-a": HostStats(ok=1)})
    for name in ("drain", "stack", "validate"):
        report.add_phase(name, played)
    renamed = report.prefix_phases(1, "batch 1 ")
    assert [p.name for p in report.phases] == ["drain", "batch 1 stack", "batch 1 validate"]
    assert renamed == report.phases[1:]


def test_checks_are_added_in_order() -> None:
    report = started()
    one = Check("gpu-a", "smoke", "intra_node", "pass", 1.0, None, "")
    two = Check("gpu-b", "smoke", "intra_node", "fail", 0.1, None, "")
    report.add_check(one)
    report.add_checks(iter([two]))
    assert report.checks == [one, two]


# The smoke phase: prepared in one call into smoke_launch ---------------------------------------

def test_bringup_prepares_the_smoke_job_in_one_call() -> None:
    """bringup takes from smoke_launch the preparation (one context manager), what facts.yml
    hands it, and the folding of the results: nothing of the steps in between."""
    tree = ast.parse((PACKAGE / "bringup.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "provisioner.smoke_launch"
                for alias in node.names}
    assert imported == {"prepared", "FactsGathered", "fold_results"}
