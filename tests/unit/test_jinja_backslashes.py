"""A Jinja string literal in the roles' and playbooks' YAML holds no doubled backslash.

ansible-core 2.19 unescapes a string literal inside a conditional (`when`, `that`, `until`) but
keeps it as written inside a template (`{{ }}` in a value): there `match('^[0-9]+(\\\\.[0-9]+)*$')`
asks for a literal backslash, so "2.53.4" does not match, and `regex_findall('State=(\\\\S+)')`
finds nothing (measured with ansible-core 2.19.14). The same expression thus meant one thing in
an assert and another in its fail_msg. Regular expressions here say it without a backslash
(`[.]`, `[^ ]`) or with a single one, which both contexts read alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


class _Loader(yaml.SafeLoader):
    """Ansible's YAML tags (!unsafe, !vault) read as plain strings."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: loader.construct_scalar(node)
                              if isinstance(node, yaml.ScalarNode) else None)


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def _files() -> list[Path]:
    roles = [p for part in ("tasks", "handlers", "vars", "defaults", "meta")
             for p in ROOT.glob(f"roles/*/{part}/**/*.yml")]
    return sorted(roles + list(ROOT.glob("playbooks/**/*.yml")))


def doubled(text: str) -> list[str]:
    """The lines of ``text`` (a value or a conditional, as YAML parsed it) with a doubled
    backslash."""
    return [line.strip() for line in text.splitlines() if "\\\\" in line]


def test_the_rule_finds_a_doubled_backslash() -> None:
    parsed = yaml.load("that:\n  - v is match('^[0-9]+(\\\\.[0-9]+)*$')\n"
                       "argv: \"{{ ['rpm', '--qf', '%{NAME}\\\\n'] }}\"\n", Loader=_Loader)
    found = {where: doubled(text) for where, text in _strings(parsed, "x") if doubled(text)}
    # The plain scalar keeps two backslashes; YAML's double quotes make "\\n" one.
    assert list(found) == ["x.that[0]"], found


def test_no_jinja_literal_in_the_roles_and_playbooks_doubles_a_backslash() -> None:
    files = _files()
    assert len(files) > 50, files
    found = [f"{path.relative_to(ROOT)} {where}: {line}"
             for path in files
             for where, text in _strings(yaml.load(path.read_text(), Loader=_Loader), "")
             for line in doubled(text)]
    assert not found, "\n".join(found)
