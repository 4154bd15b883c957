# PYTHON_ARGCOMPLETE_OK  (argcomplete: this entry point completes itself)
"""Command line: argument parsing, printing, and the one place exceptions become exit codes.

Where lines go: results on stdout; progress and banners on stdout too, on stderr under
``--json`` (stdout then carries one JSON document and nothing else), nowhere under ``-q``;
errors always on stderr, one line.

Exit codes: 0 passed, 1 failed, 2 bad input (nothing touched); a run stopped by a signal exits
128 + the signal's number (SIGINT 130, SIGTERM 143, SIGHUP 129) after saving its report and
killing ansible-playbook's process group.

Each command is a module of provisioner/commands (its options and its handler); this module
assembles the parser from them, in the order of ``commands.COMMANDS``, and dispatches to them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import argcomplete
from argcomplete.completers import FilesCompleter
from rich.markup import escape

from provisioner.commands import COMMANDS, Command
from provisioner.commands.common import (
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_OK,
    _console,
    _count,
    _global_options,
    _Parser,
    _seconds,
    console,
    errconsole,
)
from provisioner.commands.plan import _plan_rows
from provisioner.commands.running import show_report
from provisioner.errors import InputError, ProvisionerError

# Names of what moved to provisioner.commands that callers and tests use from here.
__all__ = ["EXIT_FAILED", "EXIT_INPUT", "EXIT_OK", "SITE_COMMANDS", "_console", "_count",
           "_plan_rows", "_seconds", "_subparsers", "build_parser", "console", "errconsole",
           "main", "profile_names", "show_report", "stack_names", "versions"]

# The commands by name: _dispatch runs the one the arguments name.
REGISTRY: dict[str, Command] = {command.NAME: command for command in COMMANDS}


class _VersionAction(argparse.Action):
    """``--version``: computed only when asked (it reads galaxy.yml and imports ansible)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        print("\n".join(f"{name} {version}" for name, version in versions().items()))
        parser.exit(EXIT_OK)


def versions() -> dict[str, str]:
    """This package, the collection it runs (galaxy.yml of ``collection_root()``), and the
    ansible-core it drives."""
    from importlib import metadata

    import yaml

    from provisioner.paths import COLLECTION_FQCN, collection_root

    def dist(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    galaxy = collection_root() / "galaxy.yml"
    try:
        collection = str(yaml.safe_load(galaxy.read_text())["version"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise InputError(f"{galaxy}: no readable collection version ({exc})") from exc
    return {"provisioner": dist("gpu-cluster-provisioner"),
            COLLECTION_FQCN: f"{collection} ({galaxy.parent})",
            "ansible-core": dist("ansible-core")}


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="provisioner", description="Bring up a multi-node GPU cluster and prove "
                "it works (Ansible, driven by ansible-runner).")
    p.add_argument("--version", action=_VersionAction,
                   help="print the versions of provisioner, its Ansible collection and "
                   "ansible-core, then exit")
    _global_options(p, command=False)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    _finish(p)
    return p


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield child
                yield from _subparsers(child)


# The commands that read profiles or stacks, and so take --site (provisioner/site.py).
SITE_COMMANDS = frozenset(("up", "upgrade", "stacks", "profiles", "inspect", "smoke", "validate",
                           "health", "certify", "remediate", "plan", "export k8s", "sim up"))

# Completers by destination, so a new command's --inventory or --profile completes too.
_COMPLETERS: dict[str, Callable[..., Any]] = {
    "inventory": FilesCompleter(),
    "inventory_dir": FilesCompleter(directories=True),
    "site": FilesCompleter(directories=True),
    "output": FilesCompleter(),
    "files": FilesCompleter(),
}


def _finish(parser: argparse.ArgumentParser) -> None:
    """Give every command -v/-q and the completers of its arguments."""
    completers = {**_COMPLETERS, "profile": profile_names, "stack": stack_names,
                  "only_stack": stack_names}
    for child in _subparsers(parser):
        if not any("--verbose" in a.option_strings for a in child._actions):
            _global_options(child, command=True)
        if child.prog.split(" ", 1)[-1] in SITE_COMMANDS:
            child.add_argument("--site", metavar="DIR", default=None,
                               help="the site's own profiles.yml and stacks.yml, added to the "
                               "built-in ones (default: site/ beside the inventory, when it "
                               "has either)")
        for action in child._actions:
            completer = stack_names if (child.prog.endswith(" stacks")
                                        and action.dest == "name") else completers.get(
                                            action.dest)
            if completer is not None:
                # argcomplete reads a `completer` attribute off the argparse action.
                vars(action)["completer"] = completer


def stack_names(**_: Any) -> list[str]:
    """Completer for ``stacks show NAME``."""
    from provisioner import matrix as stacks

    return [s.name for s in stacks.load_matrix().stacks_by_cuda()]


def profile_names(**_: Any) -> list[str]:
    """Completer for ``--profile``."""
    from provisioner.profiles import load_profiles

    return sorted(load_profiles())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        # Options are offered once a `-` is typed, as bash completes other tools.
        argcomplete.autocomplete(parser, always_complete_options=False)
        args = parser.parse_args(argv)
        return _dispatch(args)
    except ProvisionerError as exc:
        errconsole.print(f"[bold red]error:[/bold red] {escape(_one_line(str(exc)))}",
                         soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        signum = int(getattr(exc, "signum", signal.SIGINT))
        saved = getattr(exc, "report_path", None)
        where = f"; report saved: {saved}" if saved else ""
        errconsole.print(escape(f"error: interrupted by {signal.Signals(signum).name}{where}"),
                         soft_wrap=True)
        return 128 + signum
    except Exception as exc:  # a bug of ours: say so in one line, details on request
        if os.environ.get("PROVISIONER_DEBUG"):
            raise
        what = escape(_one_line(f"{type(exc).__name__}: {exc}"))
        errconsole.print(f"[bold red]internal error:[/bold red] {what} "
                         "(rerun with PROVISIONER_DEBUG=1 for the traceback)", soft_wrap=True)
        return EXIT_FAILED


def _one_line(text: str) -> str:
    """An error line: no terminal control sequences (it may quote a host's text), no
    credentials, one line."""
    from provisioner.untrusted import printable, redact

    return " ".join(redact(printable(text)).split())


def _dispatch(args: argparse.Namespace) -> int:
    if args.verbose and args.quiet:
        raise InputError("-v/--verbose and -q/--quiet exclude each other: give one of them")
    from provisioner import site

    site.activate(site.resolve(getattr(args, "site", None),
                               getattr(args, "inventory", None)
                               or getattr(args, "inventory_dir", None)))
    command = REGISTRY.get(args.command)
    if command is None:
        raise InputError(f"unknown command {args.command}")
    return command.run(args)


if __name__ == "__main__":
    sys.exit(main())
