"""Imported at start-up by the Python processes a test starts while `make mutation` runs
(tests/conftest.py puts this directory on their PYTHONPATH, nowhere else).

mutmut records which functions each test reaches, and switches a mutant on, inside the pytest
process only. Tests that run the `provisioner` console script in a subprocess (most CLI tests)
import mutmut's copy of the package through PYTHONPATH and inherit MUTANT_UNDER_TEST, so a
mutant is switched on there too; while mutmut collects its statistics ("stats"), this hook
appends each function reached to the file GPUC_MUTMUT_HITS names, and conftest adds them to
the test's record. Without those, mutmut would never run the CLI tests against cli.py."""

from __future__ import annotations

import atexit
import os


def _install() -> None:
    hits_file = os.environ.get("GPUC_MUTMUT_HITS")
    if os.environ.get("MUTANT_UNDER_TEST") != "stats" or not hits_file:
        return
    try:
        from mutmut.mutation import trampoline
    except ImportError:  # a Python without mutmut (an Ansible module's interpreter)
        return
    hits: set[str] = set()

    def record(name: str, caller: str | None = None) -> None:
        del caller
        hits.add(name)

    def flush() -> None:
        if hits:
            with open(hits_file, "a", encoding="utf-8") as handle:
                handle.write("".join(f"{name}\n" for name in sorted(hits)))

    trampoline.record_trampoline_hit = record  # type: ignore[assignment]
    atexit.register(flush)


_install()
