"""The assert_all action through ansible-playbook on localhost: every check is judged, every
failing check's message is reported (only those are rendered), a check's `when` skips it, a
malformed check is refused with one line, and check mode judges the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.localplay import run_module

MODULE = "gpucluster.provisioner.assert_all"


def run(tmp_path: Path, checks: Any, *extra: str) -> dict[str, Any]:
    return run_module(tmp_path, MODULE, {"checks": checks}, *extra)


def test_all_pass(tmp_path: Path) -> None:
    out = run(tmp_path, [{"that": "1 + 1 == 2", "fail_msg": "arithmetic"},
                         {"that": ["'a' in 'abc'", "[1, 2] | length == 2"], "fail_msg": "lists"}])
    assert not out.get("failed") and not out["changed"]
    assert out["judged"] == 2 and out["failures"] == []
    assert out["msg"] == "all 2 checks passed"


def test_every_failure_is_reported_with_its_own_message(tmp_path: Path) -> None:
    out = run(tmp_path, [
        {"that": "2 == 3", "fail_msg": "host {{ inventory_hostname }}: two is not {{ 1 + 2 }}"},
        {"that": "true", "fail_msg": "never"},
        {"that": ["true", "'x' == 'y'"], "fail_msg": "x is not y"},
    ])
    assert out["failed"]
    assert out["msg"] == "host localhost: two is not 3; x is not y"
    assert [(f["check"], f["assertion"]) for f in out["failures"]] == [(0, "2 == 3"),
                                                                        (2, "'x' == 'y'")]
    assert out["judged"] == 3


def test_when_skips_a_check_and_its_message_is_never_rendered(tmp_path: Path) -> None:
    # The skipped check's message names a variable that does not exist: rendering it would fail.
    out = run(tmp_path, [
        {"that": "false", "when": "1 == 2", "fail_msg": "{{ no_such_variable.at_all }}"},
        {"that": "false", "when": ["true", "1 == 2"], "fail_msg": "{{ no_such_variable }}"},
        {"that": "true", "when": "true", "fail_msg": "never"},
    ])
    assert not out.get("failed")
    assert out["judged"] == 1


def test_a_passing_checks_message_is_never_rendered(tmp_path: Path) -> None:
    out = run(tmp_path, [{"that": "true", "fail_msg": "{{ no_such_variable }}"}])
    assert not out.get("failed") and out["judged"] == 1


def test_check_mode_judges_the_same(tmp_path: Path) -> None:
    out = run(tmp_path, [{"that": "1 == 2", "fail_msg": "one is not two"}], "--check")
    assert out["failed"] and out["msg"] == "one is not two"


def test_a_malformed_check_is_refused_in_one_line(tmp_path: Path) -> None:
    cases = [
        ([], "assert_all: checks must be a non-empty list of {that, fail_msg, when}"),
        ([{"that": "true"}], "assert_all: checks[0] must be a mapping with 'that' and 'fail_msg'"),
        ([{"that": "true", "fail_msg": "m"}, {"that": "true", "fail_msg": "m", "msg": "x"}],
         "assert_all: checks[1] has unknown key(s) msg"),
    ]
    for checks, line in cases:
        out = run(tmp_path, checks)
        assert out["failed"] and out["msg"] == line, out


def test_an_undefined_condition_fails_the_task(tmp_path: Path) -> None:
    # As ansible.builtin.assert does: a check that cannot be judged is not a pass.
    out = run(tmp_path, [{"that": "no_such_variable == 1", "fail_msg": "m"}])
    assert out["failed"] and "no_such_variable" in out["msg"]
