"""`provisioner stacks`: the matrix of known-good stacks (list, show, verify)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from provisioner.commands import common
from provisioner.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    _data_title,
    _json_option,
    _Parser,
    _shown,
    _with_source,
)
from provisioner.errors import InputError

NAME = "stacks"


def add_parser(sub: argparse._SubParsersAction[_Parser]) -> _Parser:
    stacks = sub.add_parser("stacks", help="the matrix of known-good stacks; `stacks verify` "
                            "checks its pins against a repository's own index")
    stacks.add_argument("action", nargs="?", choices=["list", "show", "verify"], default="list")
    stacks.add_argument("name", nargs="?", help="the stack to show")
    stacks.add_argument("--index", metavar="DIR|URL",
                        help="verify: an apt repository's directory (Packages[.gz]) or a dnf "
                             "repository's (repodata/)")
    stacks.add_argument("--os", dest="os_dir", metavar="OS",
                        help="verify: the OS whose pins to check (debian12, ubuntu2404, rhel9, "
                             "...); default: the OS directory the index path names")
    stacks.add_argument("--stack", dest="only_stack", metavar="NAME",
                        help="verify: this stack only")
    _json_option(stacks, "the list, the stack or the verification")
    return stacks


def run(args: argparse.Namespace) -> int:
    from provisioner import matrix as stacks
    from provisioner import render

    matrix = stacks.load_matrix()
    if args.action == "verify":
        return _stacks_verify(args, matrix)
    if args.index or args.os_dir or args.only_stack:
        raise InputError("--index, --os and --stack belong to `provisioner stacks verify`")
    if args.action == "show":
        if not args.name:
            raise InputError("stacks show: name a stack, e.g. `provisioner stacks show "
                             f"{matrix.default_stack}`")
        from provisioner.profiles import load_profiles

        detail = stacks.stack_detail(matrix, args.name, load_profiles())
        if args.json:
            print(render.as_json(detail))
        else:
            render.mapping(common.console, f"stack {args.name}", detail)
        return EXIT_OK
    if args.name:
        raise InputError(f"stacks list takes no name (got {args.name!r}); to see one stack: "
                         f"`provisioner stacks show {args.name}`")
    rows = _with_source(stacks.stack_rows(matrix), "stack", stacks.stack_sources())
    if args.json:
        print(render.as_json(rows))
    else:
        render.rows_table(common.console, f"known-good stacks ({_data_title('stacks.yml')})",
                                 _shown(rows))
    return EXIT_OK


def _stacks_verify(args: argparse.Namespace, matrix: Any) -> int:
    """Every pin of the matrix for one OS against a repository's index: one line per problem,
    a summary table (or --json); exit 1 when a pin is missing."""
    from provisioner import render
    from provisioner.matrix import index as index_mod
    from provisioner.matrix import verify as verify_mod

    if args.name:
        raise InputError(f"stacks verify takes no name (got {args.name!r}); to check one stack: "
                         f"--stack {args.name}")
    if not args.index:
        raise InputError("stacks verify: give --index DIR|URL, the repository whose index the "
                         "pins are checked against")
    os_dir = args.os_dir or verify_mod.infer_os(matrix, args.index)
    if os_dir is None:
        raise InputError(f"stacks verify: the index path {args.index} names no OS of stacks.yml; "
                         f"give --os (one of {', '.join(sorted(matrix.repositories.cuda))})")
    result = verify_mod.verify(matrix, index_mod.load_index(args.index), os_dir,
                               args.only_stack)
    if args.json:
        print(render.as_json(result.as_dict()))
    else:
        for check in result.checks:
            if check.status != "present":
                common.console.print(escape(check.line(os_dir)), soft_wrap=True)
        render.rows_table(common.console, f"pins of {os_dir} against {args.index}",
                          result.summary())
        if result.not_carried:
            common.console.print(escape(f"not in this repository (check them against its own): "
                                        f"{', '.join(result.not_carried)}"), soft_wrap=True)
    missing = len(result.missing)
    verdict = (f"{missing} pin(s) missing from the index" if missing
               else f"every pin of {os_dir} is in the index")
    (common.errconsole if args.json else common.console).print(escape(verdict))
    return EXIT_FAILED if missing else EXIT_OK
