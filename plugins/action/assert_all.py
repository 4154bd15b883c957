"""Judge several checks in one task and report every one that fails (the documentation is
plugins/modules/assert_all.py).

``ansible.builtin.assert`` is one task per message: a role that checks five things measured by
one probe pays five tasks (on the controller, a forked worker each: ~25 ms apiece on a small
controller, ~150 tasks in a converged stack rerun) and stops at the first failure, so a node
with two problems shows one per run. Here each check keeps its own message and its own
condition; the messages are rendered only for the checks that fail, so a message may name
values that exist only then (a dnf reading on a dnf node)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

CHECK_KEYS = frozenset(("that", "fail_msg", "when"))


def _conditions(value: Any, where: str) -> list[Any]:
    """``that`` / ``when`` as a list of conditionals (a string, a bool, or a list of them)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, (str, bool)):
            raise AnsibleError(f"assert_all: {where} must be a conditional or a list of them, "
                               f"not {type(item).__name__}")
    return items


class ActionModule(ActionBase):
    _requires_connection = False
    _VALID_ARGS = frozenset(("checks",))

    @classmethod
    def finalize_task_arg(cls, name: str, value: Any, templar: Any, context: Any) -> Any:
        # The checks stay as written: their conditions are evaluated (not templated) and each
        # message is rendered only when its check fails. A whole-template value
        # ("{{ my_checks }}") is resolved to its list.
        if name != "checks":
            return super().finalize_task_arg(name, value, templar, context)
        if isinstance(value, str):
            return templar.resolve_to_container(value)
        return value

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        checks = self._task.args.get("checks")
        if not isinstance(checks, list) or not checks:
            return {**result, "failed": True,
                    "msg": "assert_all: checks must be a non-empty list of {that, fail_msg, when}"}
        failures: list[dict[str, Any]] = []
        judged = 0
        for index, check in enumerate(checks):
            where = f"checks[{index}]"
            if not isinstance(check, dict) or "that" not in check or "fail_msg" not in check:
                return {**result, "failed": True,
                        "msg": f"assert_all: {where} must be a mapping with 'that' and 'fail_msg'"}
            unknown = sorted(set(check) - CHECK_KEYS)
            if unknown:
                return {**result, "failed": True,
                        "msg": f"assert_all: {where} has unknown key(s) {', '.join(unknown)}"}
            if "when" in check and not all(
                    self._templar.evaluate_conditional(c)
                    for c in _conditions(check["when"], where + ".when")):
                continue
            judged += 1
            failed = next((c for c in _conditions(check["that"], where + ".that")
                           if not self._templar.evaluate_conditional(c)), None)
            if failed is None:
                continue
            msg = self._templar.template(check["fail_msg"])
            failures.append({"check": index, "assertion": failed, "msg": str(msg)})
        result.update(changed=False, judged=judged, failures=failures)
        if failures:
            result.update(failed=True, msg="; ".join(f["msg"] for f in failures))
        else:
            result["msg"] = f"all {judged} checks passed"
        return result
