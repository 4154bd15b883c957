"""Every playbook checks the plan first, or says at its top why it runs without it.

- a playbook checks the plan when one of its plays starts its ``pre_tasks`` with the import of
  ``tasks/require_plan.yml`` (``provisioner_plan_applied``), or when it only imports playbooks
  that do (site.yml);
- any other playbook opens with one comment line ``# Without the plan: <why>``, and neither it
  nor a role it applies names a variable the plan writes;
- the provisioner passes the plan inventory to every playbook that checks it, and a playbook it
  runs with the user's inventory alone does not check it (the check would refuse that run).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import bringup, burnin, certify, cluster_health, detect_node, remediate, slurm
from provisioner import plan as plan_mod

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
EXAMPLES = ROOT / "inventories" / "examples"
CHECK = "tasks/require_plan.yml"
IMPORT_TASKS = ("ansible.builtin.import_tasks", "import_tasks")
IMPORT_PLAYBOOK = ("ansible.builtin.import_playbook", "import_playbook")
APPLY_ROLE = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role",
              "import_role")
COLLECTION = "gpucluster.provisioner."
# The first comment line of a playbook that runs without the plan: the words, then a reason.
WITHOUT_PLAN = re.compile(r"# Without the plan: \S.{19,}")
# Where a role reads its variables.
ROLE_PARTS = ("tasks", "defaults", "vars", "handlers", "templates")

# Run by `up`, `validate`, `upgrade` and `remediate` through bringup.run_phases, which passes the
# plan inventory (runs/<id>/plan.yml) beside the user's.
RUN_WITH_PLAN = {playbook for _name, playbook in (*bringup.UP_PHASES, *bringup.VALIDATE_PHASES,
                                                  slurm.SCHEDULER_PHASE, bringup.SMOKE_PHASE,
                                                  bringup.FACTS_PHASE)}
# Run with the user's inventory alone (their run_playbook calls pass plan.inventory.source).
RUN_WITHOUT_PLAN = {certify.PLAYBOOK, certify.DRAIN_PLAYBOOK, burnin.PLAYBOOK,
                    cluster_health.PLAYBOOK, detect_node.PLAYBOOK, remediate.SURVEY_PLAYBOOK,
                    remediate.RESET_PLAYBOOK, remediate.RESUME_PLAYBOOK}


def playbook_names() -> list[str]:
    return sorted(p.name for p in PLAYBOOKS.glob("*.yml"))


def plays(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    assert isinstance(data, list), f"{path}: a playbook is a list of plays"
    return data


def first_pre_task_is_the_check(play: dict[str, Any]) -> bool:
    pre_tasks = play.get("pre_tasks") or []
    return bool(pre_tasks) and any(pre_tasks[0].get(key) == CHECK for key in IMPORT_TASKS)


def imported_playbooks(path: Path) -> list[Path] | None:
    """The playbooks ``path`` imports when it does nothing else, else None."""
    targets = [next((play[key] for key in IMPORT_PLAYBOOK if key in play), None)
               for play in plays(path)]
    if not targets or None in targets:
        return None
    return [path.parent / str(target) for target in targets]


def checks_the_plan(path: Path) -> bool:
    imported = imported_playbooks(path)
    if imported is not None:
        return all(checks_the_plan(target) for target in imported)
    return any(first_pre_task_is_the_check(play) for play in plays(path))


def reason_without_plan(path: Path) -> str | None:
    """The playbook's first comment line when it says why the playbook runs without the plan."""
    comments = [line for line in path.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")]
    return comments[0] if comments and WITHOUT_PLAN.fullmatch(comments[0]) else None


def applied_roles(path: Path) -> set[str]:
    """The collection's roles ``path`` applies (``roles:``, include_role, import_role)."""
    names: set[str] = set()
    for play in plays(path):
        for entry in play.get("roles") or []:
            names.add(entry if isinstance(entry, str) else entry["role"])
        for section in ("pre_tasks", "tasks", "post_tasks"):
            for task in play.get(section) or []:
                for key in APPLY_ROLE:
                    if key in task:
                        names.add(task[key]["name"])
    return {name.removeprefix(COLLECTION) for name in names}


def plan_variable_names() -> set[str]:
    """Every variable the plans of the example inventories write, on any host."""
    names: set[str] = set()
    for inventory in sorted(EXAMPLES.glob("*/hosts.yml")):
        for host in plan_mod.build(inventory).hosts.values():
            names |= set(host.variables())
    return names


def uncommented_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if not line.lstrip().startswith("#")]


@pytest.mark.parametrize("name", playbook_names())
def test_every_playbook_checks_the_plan_or_says_why_not(name: str) -> None:
    path = PLAYBOOKS / name
    assert checks_the_plan(path) or reason_without_plan(path), (
        f"playbooks/{name} neither starts a play's pre_tasks with the import of {CHECK} nor "
        "opens with '# Without the plan: <why it needs none>'")


def test_a_playbook_without_the_check_or_a_reason_is_refused(tmp_path: Path) -> None:
    """The rule above is not vacuous: each way of meeting it is told from its absence."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / CHECK).write_text((PLAYBOOKS / CHECK).read_text())
    play = "- name: Test | A play\n  hosts: all\n  gather_facts: false\n"
    pre_tasks = f"  pre_tasks:\n    - name: Test | Require the plan\n      ansible.builtin.import_tasks: {CHECK}\n"
    later = ("  pre_tasks:\n    - name: Test | Something first\n      ansible.builtin.debug:\n"
             f"        msg: first\n    - name: Test | Require the plan\n"
             f"      ansible.builtin.import_tasks: {CHECK}\n")
    books = {
        "bare.yml": f"---\n# A play.\n{play}",
        "checked.yml": f"---\n{play}{pre_tasks}",
        "checked_late.yml": f"---\n{play}{later}",
        "explained.yml": f"---\n# Without the plan: it reads only what the node says of itself.\n{play}",
        "no_reason.yml": f"---\n# Without the plan:\n{play}",
        "reason_not_first.yml": f"---\n# A play.\n# Without the plan: it reads only the node itself.\n{play}",
        "site.yml": "---\n- name: Site | Checked\n  ansible.builtin.import_playbook: checked.yml\n",
        "site_bare.yml": ("---\n- name: Site | Checked\n  ansible.builtin.import_playbook: checked.yml\n"
                          "- name: Site | Bare\n  ansible.builtin.import_playbook: bare.yml\n"),
    }
    for name, text in books.items():
        (tmp_path / name).write_text(text)
    verdicts = {name: checks_the_plan(tmp_path / name) or reason_without_plan(tmp_path / name)
                is not None for name in books}
    assert verdicts == {"bare.yml": False, "checked.yml": True, "checked_late.yml": False,
                        "explained.yml": True, "no_reason.yml": False,
                        "reason_not_first.yml": False, "site.yml": True, "site_bare.yml": False}


def test_a_playbook_that_runs_without_the_plan_reads_no_plan_variable() -> None:
    names = plan_variable_names()
    assert {"provisioner_plan_applied", "gpu_expected", "nvidia_driver_version",
            "nvidia_repo_stack_packages", "fabric"} <= names
    word = re.compile(r"\b(" + "|".join(sorted(names)) + r")\b(?!\.yml)")
    hits: list[str] = []
    for name in playbook_names():
        path = PLAYBOOKS / name
        if checks_the_plan(path):
            continue
        roles = applied_roles(path)
        assert all((ROOT / "roles" / role).is_dir() for role in roles), roles
        files = [path, *sorted(f for role in roles for part in ROLE_PARTS
                               for f in (ROOT / "roles" / role / part).rglob("*") if f.is_file())]
        hits += [f"{f.relative_to(ROOT)} ({name}): {line.strip()}"
                 for f in files for line in uncommented_lines(f) if word.search(line)]
    assert hits == [], ("these run without the plan but read its variables: check the plan "
                        "there instead\n" + "\n".join(hits))


def test_the_provisioner_passes_the_plan_to_every_playbook_that_checks_it() -> None:
    checking = {name for name in playbook_names() if checks_the_plan(PLAYBOOKS / name)}
    not_given = checking - {"site.yml"} - RUN_WITH_PLAN
    assert not_given == set(), f"the provisioner does not pass these the plan: {not_given}"
    # resume.yml runs with the plan in `upgrade` and without it in `remediate`.
    refused = checking & RUN_WITHOUT_PLAN
    assert refused == set(), f"the provisioner runs these with the inventory alone: {refused}"
    assert set(playbook_names()) >= RUN_WITH_PLAN | RUN_WITHOUT_PLAN
