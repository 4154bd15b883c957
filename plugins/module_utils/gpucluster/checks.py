# -*- coding: utf-8 -*-
"""The check record every policy here returns: preflight, validation, the error counters, the
NVLink fabric and IMEX, and the node health policy build their checks with :func:`check_result`,
so the modules, gpuc-health and the controller read one shape.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules and
gpuc-health.
"""

from __future__ import annotations

# A check's status, the same words in every policy.
PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"


def check_result(name, status, measured, expected, detail):
    """One check: its name, status (pass, fail, warn, skip), what was measured, what was
    expected and why."""
    return {"name": name, "status": status, "measured": measured, "expected": expected,
            "detail": detail}
