"""Load one of the collection's plugins (plugins/<kind>/<name>.py) for unit tests: its
``ansible_collections.gpucluster.provisioner`` imports resolve through a temporary collection
link to this checkout, removed at exit."""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def load_module(name: str) -> Any:
    """plugins/modules/<name>.py"""
    return load_plugin("modules", name)


def load_plugin(kind: str, name: str) -> Any:
    base = Path(tempfile.mkdtemp(prefix="gpuc-collection-"))
    atexit.register(shutil.rmtree, base, ignore_errors=True)
    link = base / "ansible_collections" / "gpucluster" / "provisioner"
    link.parent.mkdir(parents=True)
    link.symlink_to(ROOT, target_is_directory=True)
    sys.path.insert(0, str(base))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "plugins" / kind / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(base))
    return module
