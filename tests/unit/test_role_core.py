"""One copy of the steps the roles share: the internal role ``role_core``.

- no role but role_core loads per-OS vars files itself (``include_vars`` of
  ``<os_family>``/``<distribution>_<major>`` files), gathers facts (``setup``), says the check-mode
  "this run would ... first" line itself, or asserts by itself that nvidia_repo resolved its
  packages: each imports role_core's task file instead;
- every use is a static ``import_role`` (``include_role`` is a task of its own per host) of a task
  file role_core has, passing exactly that file's parameters, ``role_core_role`` naming the
  calling role; the check-mode note is imported under the caller's ``__<role>_unapplied``;
- role_core's task files read only their own parameters, and its argument spec documents them
  all, as its only entry point ``main`` (an entry point named after a task file would add an
  argument validation task to every import);
- role_core is marked internal (README, meta, argument spec) and its main.yml only fails.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES_DIR = ROOT / "roles"
CORE_DIR = ROLES_DIR / "role_core"
CORE = "gpucluster.provisioner.role_core"
# Each task file of role_core and the parameters a caller passes to it.
PARAMETERS = {
    "set_vars": {"role_core_role", "role_core_required_facts"},
    "check_mode_note": {"role_core_role", "role_core_change", "role_core_unverified"},
    "packages_resolved": {"role_core_role", "role_core_packages", "role_core_packages_name"},
}
# The words of the shared steps, which a role's own copy would carry.
CHECK_MODE_LINE = "check mode, and this run would"
RESOLVED_LINE = "packages resolved; run the nvidia_repo role first"
OS_FILE = re.compile(r"ansible_facts\[\s*['\"](os_family|distribution)['\"]\s*\]")
IMPORT, INCLUDE = "ansible.builtin.import_role", "ansible.builtin.include_role"


def load(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def walk(tasks: list[dict[str, Any]] | None) -> Iterator[dict[str, Any]]:
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from walk(task.get(key))


def task_files(role_dir: Path) -> list[Path]:
    return sorted((role_dir / "tasks").rglob("*.yml")) + sorted(
        (role_dir / "handlers").rglob("*.yml"))


def copies_in(role_dir: Path) -> list[str]:
    """Where a role carries its own copy of a step role_core holds (empty: nowhere)."""
    out = []
    for path in task_files(role_dir):
        where = path.relative_to(role_dir.parent)
        for task in walk(load(path)):
            name = task.get("name")
            loader = task.get("ansible.builtin.include_vars", task.get("include_vars"))
            if loader is not None and OS_FILE.search(f"{loader} {task.get('loop')}"):
                out.append(f"{where}: {name}: loads the per-OS vars files (role_core set_vars)")
            if "ansible.builtin.setup" in task or "setup" in task:
                out.append(f"{where}: {name}: gathers facts (role_core set_vars)")
            message = (task.get("ansible.builtin.debug") or task.get("debug") or {})
            if CHECK_MODE_LINE in " ".join(str(message.get("msg", "")).split()):
                out.append(f"{where}: {name}: the check-mode note (role_core check_mode_note)")
            asserted = task.get("ansible.builtin.assert") or task.get("assert") or {}
            if RESOLVED_LINE in " ".join(str(asserted.get("fail_msg", "")).split()):
                out.append(f"{where}: {name}: the resolved packages (role_core packages_resolved)")
    return out


def core_uses() -> list[tuple[str, str, dict[str, Any]]]:
    """(calling role, where, task) for every task of a role that names role_core."""
    found = []
    for role_dir in sorted(p for p in ROLES_DIR.iterdir() if p != CORE_DIR):
        for path in task_files(role_dir):
            for task in walk(load(path)):
                args = task.get(IMPORT) or task.get(INCLUDE) or {}
                if isinstance(args, dict) and args.get("name") in (CORE, "role_core"):
                    found.append((role_dir.name,
                                  f"{path.relative_to(ROLES_DIR)}: {task.get('name')}", task))
    return found


OTHER_ROLES = sorted(p.name for p in ROLES_DIR.iterdir()
                     if (p / "tasks").is_dir() and p != CORE_DIR)
USES = core_uses()


@pytest.mark.parametrize("role", OTHER_ROLES)
def test_no_role_keeps_its_own_copy_of_a_shared_step(role: str) -> None:
    assert copies_in(ROLES_DIR / role) == []


def test_a_copy_is_found(tmp_path: Path) -> None:
    """The check above is not vacuous: each kind of copy is reported."""
    role = tmp_path / "demo"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text((CORE_DIR / "tasks" / "set_vars.yml").read_text())
    (role / "tasks" / "note.yml").write_text(
        (CORE_DIR / "tasks" / "check_mode_note.yml").read_text()
        + (CORE_DIR / "tasks" / "packages_resolved.yml").read_text().replace("---\n", ""))
    found = copies_in(role)
    assert len(found) == 4, found
    for step in ("set_vars", "check_mode_note", "packages_resolved"):
        assert any(f"role_core {step}" in line for line in found), (step, found)


def test_the_roles_use_the_core() -> None:
    files = {task.get(IMPORT, {}).get("tasks_from") for _, _, task in USES}
    assert files == set(PARAMETERS)
    # Every role with per-OS vars files, and every role that says why check mode stops short.
    assert len([u for u in USES if u[2][IMPORT].get("tasks_from") == "set_vars"]) >= 10
    assert len([u for u in USES if u[2][IMPORT].get("tasks_from") == "check_mode_note"]) >= 13


@pytest.mark.parametrize(("role", "where", "task"), USES, ids=[u[1] for u in USES])
def test_a_use_is_a_static_import_with_that_files_parameters(
        role: str, where: str, task: dict[str, Any]) -> None:
    assert INCLUDE not in task, f"{where}: import_role, not include_role (a task per host)"
    args = task[IMPORT]
    assert args.get("name") == CORE, f"{where}: name it {CORE}"
    tasks_from = args.get("tasks_from")
    assert tasks_from in PARAMETERS, f"{where}: role_core has no task file {tasks_from!r}"
    assert (CORE_DIR / "tasks" / f"{tasks_from}.yml").is_file()
    given = task.get("vars") or {}
    assert set(given) == PARAMETERS[tasks_from], f"{where}: passes {sorted(given)}"
    assert given["role_core_role"] == role, f"{where}: role_core_role should be {role}"
    if tasks_from == "check_mode_note":
        assert f"__{role}_unapplied" in str(task.get("when")), (
            f"{where}: the note is for check mode only (when: __{role}_unapplied)")


@pytest.mark.parametrize("tasks_from", sorted(PARAMETERS))
def test_a_core_task_file_reads_only_its_parameters(tasks_from: str) -> None:
    text = (CORE_DIR / "tasks" / f"{tasks_from}.yml").read_text(encoding="utf-8")
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    read = set(re.findall(r"(?<![\w_])role_core_\w+", code))
    assert read == PARAMETERS[tasks_from]


def test_the_argument_spec_documents_every_parameter_under_main_only() -> None:
    specs = load(CORE_DIR / "meta" / "argument_specs.yml")["argument_specs"]
    assert list(specs) == ["main"], "an entry point per task file adds a task to every import"
    options = specs["main"]["options"]
    assert set(options) == set().union(*PARAMETERS.values())
    assert all(option.get("required") is True for option in options.values())
    assert specs["main"]["short_description"].startswith("Internal")


def test_the_core_is_marked_internal_and_not_applied_by_itself() -> None:
    assert "**Internal.**" in (CORE_DIR / "README.md").read_text(encoding="utf-8")
    assert load(CORE_DIR / "meta" / "main.yml")["galaxy_info"]["description"].startswith(
        "Internal")
    main = load(CORE_DIR / "tasks" / "main.yml")
    assert [next(iter(set(task) - {"name"})) for task in main] == ["ansible.builtin.fail"]
    assert not (CORE_DIR / "defaults").exists() and not (CORE_DIR / "vars").exists(), (
        "an imported role's defaults and vars reach the whole play")
    for path in (ROOT / "playbooks").glob("*.yml"):
        assert "role_core" not in path.read_text(encoding="utf-8"), path
