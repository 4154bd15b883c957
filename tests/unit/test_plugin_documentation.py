"""Every plugin's documentation parses as YAML, and every module documents exactly the options
its argument_spec takes: ansible-doc and ansible-test's validate-modules refuse a plugin whose
DOCUMENTATION does not parse (a ": " inside a sentence makes a mapping), which `make sanity`
only finds minutes later."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = sorted(p for kind in ("modules", "filter", "action")
                 for p in (ROOT / "plugins" / kind).glob("*.py") if p.name != "__init__.py")
DOC_NAMES = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def doc_strings(source: str) -> dict[str, str]:
    """The module-level DOCUMENTATION, EXAMPLES and RETURN strings of a plugin's source."""
    out: dict[str, str] = {}
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in DOC_NAMES
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            out[node.targets[0].id] = node.value.value
    return out


def spec_options(source: str) -> set[str] | None:
    """The option names of the ``argument_spec=dict(...)`` a module passes to AnsibleModule;
    None where it builds its spec otherwise."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec":
            call = node.value
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id == "dict" and not call.args):
                return {kw.arg for kw in call.keywords if kw.arg is not None}
            return None
    return None


def problems(source: str) -> list[str]:
    """What ansible-doc would refuse in a plugin's source (empty when nothing)."""
    found: list[str] = []
    docs = doc_strings(source)
    parsed: dict[str, Any] = {}
    for name, text in docs.items():
        try:
            parsed[name] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = text.splitlines()[mark.line] if mark is not None else ""
            found.append(f"{name} does not parse ({getattr(exc, 'problem', exc)}): {line.strip()}")
    doc = parsed.get("DOCUMENTATION")
    if isinstance(doc, dict):
        texts: list[tuple[str, Any]] = [("the description", doc.get("description"))] + [
            (f"option {name}'s description", (opt or {}).get("description"))
            for name, opt in (doc.get("options") or {}).items()]
        for where, described in texts:
            lines = described if isinstance(described, list) else [described]
            if described is not None and not all(isinstance(line, str) for line in lines):
                found.append(f"{where} is not text (a ': ' made a mapping)")
    spec = spec_options(source)
    if spec is not None and isinstance(doc, dict):
        documented = set((doc.get("options") or {}).keys())
        if documented != spec:
            found.append(f"options documented {sorted(documented - spec)} but not in the spec, "
                         f"in the spec {sorted(spec - documented)} but not documented")
    return found


@pytest.mark.parametrize("path", PLUGINS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_plugin_documentation_parses_and_names_the_options(path: Path) -> None:
    source = path.read_text()
    if "DOCUMENTATION" not in source:
        pytest.skip("no documentation in this file (an action plugin's module documents it)")
    assert problems(source) == []


def test_the_check_finds_a_colon_inside_a_sentence_and_an_undocumented_option() -> None:
    source = '''
DOCUMENTATION = r"""
module: demo
description:
  - Installs them first (as distro_packages does: one query on a
    node that has them).
options:
  names:
    type: list
"""

def main():
    AnsibleModule(argument_spec=dict(names=dict(type="list"), retries=dict(type="int")))
'''
    found = problems(source)
    assert len(found) == 1 and found[0].startswith("DOCUMENTATION does not parse")
    one_line = source.replace(" on a\n    node that has them)", ")")
    assert problems(one_line)[0] == "the description is not text (a ': ' made a mapping)"
    fixed = source.replace("does: one", "does, one")
    assert problems(fixed) == [
        "options documented [] but not in the spec, in the spec ['retries'] but not documented"]
    assert problems(fixed.replace("    type: list\n", "    type: list\n  retries:\n"
                                  "    type: int\n")) == []
