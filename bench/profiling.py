"""The Ansible profiling mode of the bench: ansible.posix's profile_tasks and profile_roles
callbacks (shipped in the `ansible` package the venv installs) enabled through the
environment, which the provisioner passes to every run; their recaps are read back from the
runs' artifacts (ansible-runner keeps each playbook's stdout there)."""

from __future__ import annotations

import re
from pathlib import Path

# Enables both callbacks for one `provisioner up`: all tasks in the recap, slowest first.
PROFILE_ENV = {
    "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks,ansible.posix.profile_roles",
    "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all",
    "PROFILE_TASKS_SORT_ORDER": "descending",
}

# profile_tasks/profile_roles recap lines: "<name> ---------- 12.34s" (the name padded with
# dashes to the terminal width).
_RECAP_LINE = re.compile(r"^(?P<name>.*?) -+ +(?P<seconds>\d+\.\d+)s\s*$")
_BANNERS = {"TASKS RECAP": "tasks", "ROLES RECAP": "roles"}


def parse_recaps(stdout: str) -> dict[str, list[tuple[str, float]]]:
    """The task and role recaps of one playbook's output: name -> seconds, in output order."""
    out: dict[str, list[tuple[str, float]]] = {"tasks": [], "roles": []}
    section: str | None = None
    for line in stdout.splitlines():
        banner = next((k for b, k in _BANNERS.items() if line.startswith(b)), None)
        if banner is not None:
            section = banner
            continue
        if line.startswith(("PLAY RECAP", "PLAY [", "TASK [")):
            section = None
            continue
        match = _RECAP_LINE.match(line)
        if section is not None and match and not (section == "roles"
                                                  and match["name"].strip() == "total"):
            out[section].append((match["name"].strip(), float(match["seconds"])))
    return out


def top(run_dir: Path, n: int = 10) -> dict[str, list[dict[str, object]]]:
    """The ``n`` slowest tasks and roles over every playbook of one run (a task name seen in
    several playbooks keeps each, labelled by playbook)."""
    tasks: list[tuple[float, str, str]] = []
    roles: dict[str, float] = {}
    for stdout in sorted(run_dir.glob("ansible/artifacts/*/stdout")):
        recaps = parse_recaps(stdout.read_text(errors="replace"))
        phase = stdout.parent.name
        tasks += [(seconds, name, phase) for name, seconds in recaps["tasks"]]
        for name, seconds in recaps["roles"]:
            roles[name] = roles.get(name, 0.0) + seconds
    tasks.sort(reverse=True)
    return {
        "tasks": [{"task": name, "run": phase, "seconds": s} for s, name, phase in tasks[:n]],
        "roles": [{"role": name, "seconds": round(s, 2)}
                  for name, s in sorted(roles.items(), key=lambda kv: -kv[1])[:n]],
    }
