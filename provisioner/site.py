"""Site data: a site's own hardware profiles and stacks, beside the built-in ones.

A site directory holds ``profiles.yml`` and/or ``stacks.yml`` in the schema of the built-in
files (provisioner/data/). It is ``--site DIR``, else ``site/`` beside the inventory (the
inventory file's directory, or the directory an inventory directory sits in: Ansible reads
every file inside an inventory directory). Site entries add to the built-in ones; a name that
is already built in is refused unless the entry says ``override: true``. Everything is
validated exactly as the built-in data is, and every rule the plan applies (per-GPU minimum
driver, CUDA and driver, Volta, open modules, lifecycle) applies to site entries too.

The command line activates the site once per command; ``profiles.load_profiles()`` and
``matrix.load_matrix()`` without a path then read it. Pure: nothing here contacts a host.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provisioner.errors import InputError

DIR_NAME = "site"
PROFILES = "profiles.yml"
STACKS = "stacks.yml"
BUILT_IN = "built-in"
OVERRIDE = "override"



class _Active:
    """The site directory the loaders read (None: the built-in data alone)."""

    directory: Path | None = None


def resolve(given: str | Path | None, inventory: str | Path | None) -> Path | None:
    """The site directory of a command: ``given`` (which must be a directory holding at least
    one of the two files), else ``site/`` beside the inventory when it holds one, else None."""
    if given is not None:
        path = Path(given)
        if not path.is_dir():
            raise InputError(f"--site {given}: not a directory")
        if not ((path / PROFILES).is_file() or (path / STACKS).is_file()):
            raise InputError(f"--site {given}: holds neither {PROFILES} nor {STACKS}")
        return path
    if inventory is None:
        return None
    beside = Path(inventory).absolute().parent / DIR_NAME
    if (beside / PROFILES).is_file() or (beside / STACKS).is_file():
        return beside
    return None


def activate(directory: Path | None) -> None:
    """The site the loaders read from now on (None: the built-in data alone)."""
    _Active.directory = directory


def active() -> Path | None:
    return _Active.directory


def file(name: str) -> Path | None:
    """The active site's ``name`` (profiles.yml or stacks.yml), when there is one."""
    if _Active.directory is None:
        return None
    path = _Active.directory / name
    return path if path.is_file() else None


def merge_entries(section: str, built_in: Mapping[str, Any], site: Any, site_path: Path,
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """``built_in`` and the site's entries of ``section`` (profiles, stacks, ...): the merged
    mapping and where each entry came from (BUILT_IN or the site file). A site entry whose
    name is built in needs ``override: true``; ``override`` is the site file's word, not the
    schema's, and is taken out."""
    if not isinstance(site, Mapping):
        raise InputError(f"{site_path}: {section}: expected a mapping of name to entry")
    merged = {str(key): body for key, body in built_in.items()}
    origin = dict.fromkeys(merged, BUILT_IN)
    for name, body in site.items():
        key = str(name)
        if not isinstance(body, Mapping):
            raise InputError(f"{site_path}: {section}.{key}: expected a mapping of fields")
        entry = dict(body)
        override = entry.pop(OVERRIDE, False)
        if not isinstance(override, bool):
            raise InputError(f"{site_path}: {section}.{key}.{OVERRIDE}: expected true or false")
        if key in merged and not override:
            raise InputError(f"{site_path}: {section}.{key}: a built-in entry has this name; "
                             f"rename it or set {OVERRIDE}: true to replace the built-in one")
        if override and key not in merged:
            raise InputError(f"{site_path}: {section}.{key}.{OVERRIDE}: there is no built-in "
                             "entry of this name to replace")
        merged[key] = entry
        origin[key] = str(site_path)
    return merged, origin


def error_file(loc: tuple[Any, ...], message: str, origin: Mapping[str, Mapping[str, str]],
               built_in: Path) -> Path:
    """The file to name in a validation error at ``loc`` (section, name, ...), or, for a rule
    across the file (no location), the stack its message names: the site file when that entry
    came from it."""
    section, name = (str(loc[0]), str(loc[1])) if len(loc) >= 2 else ("stacks", "")
    if not loc:
        found = re.search(r"\bstack (\S+):", message)
        name = found.group(1) if found else ""
    source = origin.get(section, {}).get(name, BUILT_IN)
    return built_in if source == BUILT_IN else Path(source)
