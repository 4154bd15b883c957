"""Plays through ansible-playbook on localhost: one module task the way a role calls it (the
tests of our modules read what it registered), or a play of a test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def run_play(tmp_path: Path, play: list[dict[str, Any]], *extra: str) -> None:
    """``play`` through ansible-playbook on localhost with the project's ansible.cfg; it must
    exit 0. ``extra`` goes to ansible-playbook (``--check``, ``--diff``)."""
    (tmp_path / "play.yml").write_text(json.dumps(play))
    proc = subprocess.run([str(PLAYBOOK), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           str(tmp_path / "play.yml"), *extra],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
                          env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def run_module(tmp_path: Path, module: str, args: dict[str, Any], *extra: str) -> dict[str, Any]:
    """One play running ``module`` with ``args`` (failures kept: ``ignore_errors``); the
    registered result as JSON (written by a copy task)."""
    run_play(tmp_path, [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "run", module: args, "register": "out", "ignore_errors": True},
        {"name": "show", "ansible.builtin.copy": {
            "content": "{{ out | to_json }}", "dest": str(tmp_path / "result.json")},
         "check_mode": False, "diff": False}]}], *extra)
    return json.loads((tmp_path / "result.json").read_text())
