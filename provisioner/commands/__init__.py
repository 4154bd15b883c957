"""The commands, one module each: ``NAME``, ``add_parser(sub)`` (its options) and ``run(args)``
(its handler, the exit code). ``COMMANDS`` is the order ``provisioner --help`` lists them in;
provisioner/cli.py builds the parser from it and dispatches through it.

A command module imports only argparse, rich and provisioner.commands at load time: the parser
of every command is built for every run (and for ``--help``), so what a handler needs is
imported when it runs."""

from __future__ import annotations

import argparse
from typing import Protocol

from provisioner.commands import (
    certify,
    export,
    health,
    history,
    inspect,
    plan,
    profiles,
    remediate,
    report,
    sim,
    smoke,
    stacks,
    up,
    upgrade,
    validate,
)
from provisioner.commands.common import _Parser


class Command(Protocol):
    NAME: str

    def add_parser(self, sub: argparse._SubParsersAction[_Parser]) -> argparse.ArgumentParser:
        ...

    def run(self, args: argparse.Namespace) -> int:
        ...


COMMANDS: tuple[Command, ...] = (up, upgrade, stacks, profiles, inspect, smoke, validate, health,
                                 certify, remediate, history, plan, export, report, sim)
