"""munge's verify: a credential made on the key host authenticates as root on every host until it
expires, so no task that carries it logs it (Ansible's output and ansible-runner's event files
keep whatever a task returns), and a failure is still told in one line without it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

VERIFY = Path(__file__).resolve().parents[2] / "roles" / "munge" / "tasks" / "verify.yml"
# A task's arguments holding the credential: the key host's registered stdout.
_CREDENTIAL = re.compile(r"__munge_credential(?:'\]\['stdout'\]|\.stdout)")


def _tasks() -> list[dict[str, Any]]:
    return list(yaml.safe_load(VERIFY.read_text()))


def _makes_it(task: dict[str, Any]) -> bool:
    return (task.get("ansible.builtin.command") or {}).get("argv", [None])[0] == "munge"


def test_every_task_that_carries_the_credential_is_no_log() -> None:
    carriers = [t for t in _tasks() if _makes_it(t) or _CREDENTIAL.search(json.dumps(t))]
    assert [t["name"] for t in carriers] == ["Munge | Make a credential on the key host",
                                             "Munge | Decode it on every host"]
    for task in carriers:
        assert task.get("no_log") is True, task["name"]


def test_a_failed_decode_is_reported_by_a_task_that_logs_no_credential() -> None:
    checks = [t for t in _tasks() if "ansible.builtin.assert" in t]
    assert len(checks) == 1 and "no_log" not in checks[0]
    dumped = json.dumps(checks[0])
    assert "__munge_decoded.rc == 0" in dumped
    assert "stdout" not in dumped and "stdin" not in dumped
