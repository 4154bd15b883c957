"""Registered task results read as ansible-core's own tests and filters read them, for the filters
that derive a role's state from those results (plugins/filter/*.py): a derivation that moved out
of a role's Jinja gives the same answer in Python.

``changed`` and ``skipped`` are ansible-core's tests of those names (``result is changed``);
``unique`` is its ``unique`` filter, which keeps the first of each and compares strings ignoring
case (Jinja's ``unique``, case_sensitive off).

Stdlib only, Python 3.9 syntax, like the rest of module_utils/gpucluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def _result(result: Any, test: str) -> Mapping[str, Any]:
    if not isinstance(result, Mapping):
        raise TypeError("The '%s' test expects a dictionary, got %r" % (test, result))
    return result


def changed(result: Any) -> bool:
    """``result is changed``: its ``changed``; without one (some modules), whether any of its
    ``results`` (a loop's) changed."""
    result = _result(result, "changed")
    if "changed" in result:
        return bool(result.get("changed"))
    items = result.get("results")
    if isinstance(items, list) and items and isinstance(items[0], Mapping):
        return any(isinstance(item, Mapping) and bool(item.get("changed")) for item in items)
    return False


def skipped(result: Any) -> bool:
    """``result is skipped``."""
    return bool(_result(result, "skipped").get("skipped"))


def unique(items: Iterable[Any]) -> list[Any]:
    """``items | unique``: the first of each, in order; strings equal ignoring case are one."""
    seen: set[Any] = set()
    kept = []
    for item in items:
        key = item.lower() if isinstance(item, str) else item
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept
