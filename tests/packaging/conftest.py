"""Packaging: the wheel and the collection tarball, built from the working tree and used from
outside it. Each test module builds its artifact once (a few seconds)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NAMESPACE, NAME = "gpucluster", "provisioner"
COLLECTION_DIRS = ("meta", "plugins", "roles", "playbooks")
EXAMPLE_INVENTORY = ROOT / "inventories" / "examples" / "hgx-h100-ib" / "hosts.yml"


def run(cmd: list[str | Path], *, cwd: Path, env: Mapping[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=dict(env or outside_env()),
                          capture_output=True, text=True, timeout=timeout, check=False)


def outside_env(**extra: str) -> dict[str, str]:
    """The environment of a user who has no checkout: nothing points at this one."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "PROVISIONER_HOME", "ANSIBLE_CONFIG",
                        "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_COLLECTIONS_PATHS",
                        "VIRTUAL_ENV"}}
    return {**env, "COLUMNS": "200", **extra}


def worktree_files() -> list[str]:
    """The files of the working tree that git would ship: tracked plus new, not ignored."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.split("\0") if f and (ROOT / f).exists()]


def collection_files(files: list[str]) -> set[str]:
    """Of the working tree's files, those under the collection's directories."""
    return {f for f in files if f.split("/", 1)[0] in COLLECTION_DIRS
            and "__pycache__" not in f and not f.endswith((".pyc", ".pyo"))}
