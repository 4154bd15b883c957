"""The entry point in-process (provisioner/cli.py): an internal error and an interrupt are one
line with their exit code, --version, -v with -q, and the completers of the arguments."""

from __future__ import annotations

import signal
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from provisioner import cli
from tests.unit.commands.cli_support import INTERNAL, lines


def test_an_unexpected_exception_is_one_internal_error_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import matrix

    monkeypatch.delenv("PROVISIONER_DEBUG", raising=False)
    message = "the matrix broke " + "x" * 600 + "\n  on a second line"

    def broken() -> None:
        raise RuntimeError(message)

    monkeypatch.setattr(matrix, "load_matrix", broken)
    assert cli.main(["stacks"]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert lines(out.err) == [f"internal error: RuntimeError: the matrix broke {'x' * 600} on "
                              f"a second line{INTERNAL}"]
    monkeypatch.setenv("PROVISIONER_DEBUG", "1")
    with pytest.raises(RuntimeError, match="the matrix broke"):
        cli.main(["stacks"])


@pytest.mark.parametrize(("signum", "path", "code", "line"), [
    (None, None, 130, "error: interrupted by SIGINT"),
    # Longer than any console is wide: still one line.
    (signal.SIGTERM, "/runs/" + "r" * 600 + "/report.json", 143,
     "error: interrupted by SIGTERM; report saved: /runs/" + "r" * 600 + "/report.json"),
])
def test_an_interrupt_is_one_line_and_128_plus_the_signal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        signum: int | None, path: str | None, code: int, line: str) -> None:
    from provisioner import matrix

    def interrupted() -> None:
        exc = KeyboardInterrupt()
        if signum is not None:
            vars(exc).update(signum=signum, report_path=path)
        raise exc

    monkeypatch.setattr(matrix, "load_matrix", interrupted)
    assert cli.main(["stacks"]) == code
    assert lines(capsys.readouterr().err) == [line]


def test_versions_names_the_three_parts() -> None:
    from provisioner.paths import COLLECTION_FQCN

    got = cli.versions()
    assert list(got) == ["provisioner", COLLECTION_FQCN, "ansible-core"]
    assert got["provisioner"] == metadata.version("gpu-cluster-provisioner")
    assert got["ansible-core"] == metadata.version("ansible-core")


def test_an_unreadable_collection_version_is_bad_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import paths

    monkeypatch.setattr(paths, "collection_root", lambda: tmp_path)
    assert cli.main(["--version"]) == 2
    [line] = lines(capsys.readouterr().err)
    assert line.startswith(f"error: {tmp_path / 'galaxy.yml'}: no readable collection version (")


def test_dispatch_refuses_verbose_with_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["-v", "stacks", "-q"]) == 2
    assert lines(capsys.readouterr().err) == [
        "error: -v/--verbose and -q/--quiet exclude each other: give one of them"]


def test_shell_completion_is_attached_by_destination() -> None:
    from argcomplete.completers import FilesCompleter

    parser = cli.build_parser()
    commands = {p.prog: p for p in cli._subparsers(parser)}

    def completer(prog: str, dest: str) -> Any:
        [action] = [a for a in commands[prog]._actions if a.dest == dest]
        return vars(action).get("completer")

    assert isinstance(completer("provisioner up", "inventory"), FilesCompleter)
    assert isinstance(completer("provisioner plan", "output"), FilesCompleter)
    assert completer("provisioner stacks", "name") is cli.stack_names
    assert completer("provisioner upgrade", "stack") is cli.stack_names
    assert completer("provisioner inspect", "profile") is cli.profile_names
    assert completer("provisioner sim up", "profile") is cli.profile_names
    assert completer("provisioner up", "limit") is None


def test_stacks_completes_stack_names_for_its_name_only() -> None:
    """`provisioner stacks <TAB>` offers list/show/verify (the choices of its first argument);
    only the NAME after them, and verify's --stack NAME, complete to the stacks."""
    parser = cli.build_parser()
    for command in cli._subparsers(parser):
        with_stacks = [a.dest for a in command._actions
                       if vars(a).get("completer") is cli.stack_names]
        expected = {"provisioner stacks": ["name", "only_stack"], "provisioner upgrade": ["stack"]}
        assert with_stacks == expected.get(command.prog, []), command.prog
