"""The dnf repository files holding a mirror's login: yum_repository creates a new file with the
umask's mode (0644) and narrows it only after the password is written, so the role makes each
file root-only (0600) before the task that writes the login into it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

INSTALL_DNF = Path(__file__).resolve().parents[2] / "roles/nvidia_repo/tasks/install-dnf.yml"


def _tasks() -> list[dict[str, Any]]:
    return list(yaml.safe_load(INSTALL_DNF.read_text()))


def test_each_repository_file_is_made_0600_before_it_holds_the_password() -> None:
    tasks = _tasks()
    repo_at = next(i for i, t in enumerate(tasks) if "ansible.builtin.yum_repository" in t)
    repo = tasks[repo_at]
    assert "password" in repo["ansible.builtin.yum_repository"]
    assert repo["ansible.builtin.yum_repository"]["mode"].startswith("{{ '0600' if ")
    first = tasks[repo_at - 1]
    made = first.get("ansible.builtin.file") or {}
    # The same files the yum_repository task writes (reposdir default, file = name).
    assert made.get("path") == "/etc/yum.repos.d/{{ item.name }}.repo"
    assert made.get("state") == "touch" and made.get("mode") == "0600"
    assert made.get("owner") == "root" and made.get("group") == "root"
    # A converged host: touching an existing file changes nothing.
    assert made.get("modification_time") == made.get("access_time") == "preserve"
    assert first["loop"] == repo["loop"]
    assert "__nvidia_repo_mirror_login" in first["when"]
    assert not any("reposdir" in t.get("ansible.builtin.yum_repository", {}) for t in tasks)
