"""file_set writing a secret: at no moment can anyone but its owner read it. This process polls
the directory while a child process creates, rewrites and removes a 0600 file through the real
module, many times over; every mode seen, of the file or of a temporary file beside it, must
stay within 0600."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The module's main() called in a loop in one process (a playbook per call would take minutes).
DRIVER = textwrap.dedent("""
    import sys
    from ansible.module_utils.testing import patch_module_args
    from tests.unit.collection_module import load_module

    file_set = load_module("file_set")
    path, rounds = sys.argv[1], int(sys.argv[2])
    for i in range(rounds):
        for entry in ({"content": "password %d\\n" % i, "mode": "0600"},
                      {"content": "password %d, rotated\\n" % i, "mode": "0600"},
                      {"state": "absent"}):
            with patch_module_args({"files": {path: entry}, "owner": "0", "group": "0"}):
                try:
                    file_set.main()
                except SystemExit as exc:
                    if exc.code:
                        sys.exit(exc.code)
""")


def test_a_secret_is_never_readable_by_others_while_it_is_written(tmp_path: Path) -> None:
    secrets = tmp_path / "auth.conf.d"
    secrets.mkdir()
    target = secrets / "mirror.conf"
    writer = subprocess.Popen([sys.executable, "-c", DRIVER, str(target), "300"], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    seen = 0
    wider: set[tuple[str, str]] = set()
    while writer.poll() is None:
        for entry in os.scandir(secrets):
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue  # renamed or removed between the listing and the stat
            seen += 1
            if stat.S_IMODE(mode) & 0o077:
                wider.add((entry.name, oct(stat.S_IMODE(mode))))
    _, err = writer.communicate()
    assert writer.returncode == 0, err[-2000:]
    assert seen > 100  # the reader really watched the writes
    assert not wider, sorted(wider)
    assert not target.exists() and not list(secrets.iterdir())  # no temporary file left
