"""Every `include_tasks` in a role applies the role's tag to the tasks it includes.

Tags on an `include_tasks` task select the include itself, not what it includes: without
`apply`, `ansible-playbook playbooks/stack.yml --tags nvidia_driver` ran the include and skipped
every task in it (the driver's install, its kernel hold, the repositories), silently. Imports
pass their tags on; includes pass on only what `apply` names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
INCLUDE = "ansible.builtin.include_tasks"


def _tasks(items: list[dict[str, Any]] | None) -> Iterator[dict[str, Any]]:
    for task in items or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def includes() -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        role = path.parent.parent.name
        for task in _tasks(yaml.safe_load(path.read_text())):
            if INCLUDE in task or "include_tasks" in task:
                found.append((role, f"{path.relative_to(ROLES)}: {task.get('name')}", task))
    return found


def test_the_roles_have_includes_to_check() -> None:
    assert len(includes()) >= 10


@pytest.mark.parametrize(("role", "where", "task"), includes(), ids=[i[1] for i in includes()])
def test_an_include_applies_the_roles_tag(role: str, where: str, task: dict[str, Any]) -> None:
    args = task.get(INCLUDE, task.get("include_tasks"))
    assert isinstance(args, dict), f"{where}: free-form include; use file: and apply: tags"
    tags = (args.get("apply") or {}).get("tags") or []
    assert role in tags, f"{where}: apply.tags {tags} lacks the role's tag {role}"
    # The include task itself is selected by the same tags when it carries any.
    assert set(task.get("tags") or []) <= set(tags), where
