"""The file_set module through ansible-playbook on localhost: writes only what differs, fixes a
mode, reports no change on a rerun, changes nothing in check mode, refuses a path as a name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def run(tmp_path: Path, files: dict[str, str], *extra: str, mode: str = "0644") -> dict[str, Any]:
    """One play running file_set; the registered result as JSON (from a debug task)."""
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "write", "gpucluster.provisioner.file_set": {
            "dir": str(tmp_path / "lib" / "pkg"), "files": files, "mode": mode},
         "register": "out", "ignore_errors": True},
        {"name": "show", "ansible.builtin.copy": {
            "content": "{{ out | to_json }}", "dest": str(tmp_path / "result.json")},
         "check_mode": False, "diff": False}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    proc = subprocess.run([str(PLAYBOOK), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           str(tmp_path / "play.yml"), *extra],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
                          env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((tmp_path / "result.json").read_text())


def test_writes_what_differs_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    files = {"__init__.py": "", "a.py": "A = 1\n", "b.py": "B = 2\n"}
    out = run(tmp_path, files)
    assert out["changed"] and out["changed_files"] == ["__init__.py", "a.py", "b.py"]
    pkg = tmp_path / "lib" / "pkg"
    assert {p.name: p.read_text() for p in pkg.iterdir()} == files
    assert oct(pkg.stat().st_mode & 0o777) == "0o755"
    assert all(oct(p.stat().st_mode & 0o777) == "0o644" for p in pkg.iterdir())
    assert run(tmp_path, files) == {**out, "changed": False, "changed_files": []}

    # One file edited on the node, another's mode changed, a stray file beside them.
    (pkg / "a.py").write_text("A = 'tampered'\n")
    (pkg / "b.py").chmod(0o600)
    (pkg / "stray.py").write_text("x\n")
    out = run(tmp_path, files)
    assert out["changed_files"] == ["a.py", "b.py"]
    assert (pkg / "a.py").read_text() == "A = 1\n"
    assert oct((pkg / "b.py").stat().st_mode & 0o777) == "0o644"
    assert (pkg / "stray.py").read_text() == "x\n"  # not named: left alone
    assert not [p for p in pkg.iterdir() if p.name.startswith(".")]  # no temp file left


def test_check_mode_reports_and_changes_nothing(tmp_path: Path) -> None:
    out = run(tmp_path, {"a.py": "A = 1\n"}, "--check", "--diff")
    assert out["changed"] and out["changed_files"] == ["a.py"]
    assert out["diff"][0]["after"] == "A = 1\n" and out["diff"][0]["before"] == ""
    assert not (tmp_path / "lib").exists()


def test_a_path_as_a_name_is_refused(tmp_path: Path) -> None:
    out = run(tmp_path, {"../escape.py": "x"})
    assert out["failed"] and "'../escape.py' is not a plain file name" in out["msg"]
    assert not (tmp_path / "lib" / "escape.py").exists()
