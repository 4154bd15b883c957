"""What the commands share (provisioner/commands/common.py): the option parsers, the consoles,
and the --container check of `smoke` and `up`."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from provisioner import cli
from tests.unit.commands.cli_support import FakeRun


@pytest.mark.parametrize("text", ["abc", "0", "-5", ""])
def test_seconds_refuses_what_is_not_a_positive_number(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError) as err:
        cli._seconds(text)
    assert str(err.value) == f"{text!r} is not a number of seconds above 0"


@pytest.mark.parametrize("text", ["abc", "0", "-1", " ", "1.5"])
def test_count_refuses_what_is_not_a_whole_number_above_0(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError) as err:
        cli._count(text)
    assert str(err.value) == f"{text!r} is not a whole number above 0"
    assert cli._count(" 3 ") == 3 and cli._seconds("45") == 45


def test_consoles_are_wide_unless_their_own_stream_is_a_terminal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("COLUMNS", raising=False)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("sys.stdout", Terminal())
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert cli._console(stderr=True).width == 160  # stderr is a log even if stdout is a terminal
    monkeypatch.setenv("COLUMNS", "97")
    assert cli._console(stderr=True).width == 97


def test_console_output_is_not_highlighted_even_in_colour(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """rich's highlighter colours the numbers inside host names and addresses ("sim-gpu-1",
    "10.88.0.2") wherever the output is coloured (FORCE_COLOR in CI): the CLI's consoles turn
    it off."""
    from rich.console import Console

    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    text = "sim-gpu-1 10.88.0.2 took 8.5 s [True]"
    plain = Console()
    with plain.capture() as cap:
        plain.print(text)
    assert "\x1b[" in cap.get()  # what rich does by default, in colour
    for stderr in (False, True):
        ours = cli._console(stderr=stderr)
        assert ours.color_system is not None
        with ours.capture() as cap:
            ours.print(text)
        assert cap.get() == text + "\n"


@pytest.mark.parametrize(("bundle", "why"), [
    ("/opt/bundle", "runs in a container only through Slurm (srun --container); this "
                    "inventory's launcher is direct"),
    ("opt/bundle", "the bundle must be an absolute path on the nodes"),
])
def test_smoke_and_up_refuse_a_container_srun_cannot_run(
        inventory: Path, fake_run: FakeRun, capsys: pytest.CaptureFixture[str],
        bundle: str, why: str) -> None:
    for command in (["smoke"], ["up", "--yes"]):
        assert cli.main(["-q", *command, "-i", str(inventory), "--container", bundle]) == 2
        err = capsys.readouterr().err
        assert f"--container {bundle}: " in err and why in " ".join(err.split()), err
    assert fake_run.calls == []
