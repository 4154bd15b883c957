"""The CLI reference, docs/cli.md: ``provisioner --help`` and every command's ``--help``,
rendered from the argument parser at a fixed width (the terminal's does not matter).

    python -m provisioner.clidoc           # rewrite docs/cli.md
    python -m provisioner.clidoc --check   # exit 1 when docs/cli.md differs from the parser

The committed file is this module's output; tests/unit/test_cli_reference.py compares them, so
a changed option or help text changes the document in the same commit.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
WIDTH = 100
REGENERATE = "python -m provisioner.clidoc"


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parser and every command's parser below it, in the order they were added (the
    walk cli.py gives every command its options and completers with)."""
    from provisioner.cli import _subparsers

    yield parser
    yield from _subparsers(parser)


def _help(parser: argparse.ArgumentParser) -> str:
    # Each parser keeps its own formatter class (`sim up` shows its epilog as written); only
    # the width is fixed. argparse otherwise reads it from the terminal (COLUMNS).
    formatter_class = parser.formatter_class
    parser.formatter_class = functools.partial(cast(Any, formatter_class), width=WIDTH)
    try:
        return parser.format_help().rstrip() + "\n"
    finally:
        parser.formatter_class = formatter_class


def render() -> str:
    """docs/cli.md as the parser of this checkout describes the CLI."""
    from provisioner.cli import build_parser

    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    parts = [
        "# CLI reference\n",
        "Every command's `--help`, as `provisioner` prints it. Generated from the argument "
        f"parser by `{REGENERATE}` (argparse of Python {version}, {WIDTH} columns): do not "
        "edit it by hand; a unit test fails when it differs from the parser.\n",
    ]
    for parser in _commands(build_parser()):
        parts.append(f"## `{parser.prog}`\n\n```text\n{_help(parser)}```\n")
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m provisioner.clidoc",
                                 description="Write docs/cli.md from the CLI's parser.")
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 when docs/cli.md is not the parser's output")
    args = ap.parse_args(argv)
    text = render()
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.is_file() else None
    if args.check:
        if current != text:
            print(f"{OUTPUT} is out of date: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    if current != text:
        OUTPUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
