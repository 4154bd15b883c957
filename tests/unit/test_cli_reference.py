"""docs/cli.md is the CLI's own `--help` output (provisioner/clidoc.py renders it): a changed
option, default or help text changes the document in the same commit."""

from __future__ import annotations

import sys

import pytest

from provisioner import clidoc

GENERATED_WITH = (3, 11)  # argparse's layout changes between Python releases (3.13: "-i, --x X")


@pytest.mark.skipif(sys.version_info[:2] != GENERATED_WITH,
                    reason=f"docs/cli.md is argparse's output on Python "
                    f"{'.'.join(map(str, GENERATED_WITH))}")
def test_cli_reference_is_the_parsers_help() -> None:
    committed = clidoc.OUTPUT.read_text(encoding="utf-8")
    assert committed == clidoc.render(), (
        f"docs/cli.md differs from the CLI's --help: run `{clidoc.REGENERATE}` and commit it")


def test_cli_reference_has_every_command_once() -> None:
    text = clidoc.render()
    headings = [ln for ln in text.splitlines() if ln.startswith("## ")]
    assert headings == [f"## `provisioner{c}`" for c in (
        "", " up", " upgrade", " stacks", " profiles", " inspect", " smoke", " validate",
        " health", " certify", " remediate", " history", " plan", " export", " export k8s",
        " report", " sim", " sim up", " sim down", " sim executors")]
    # The sim faults' epilog (computed only when help is shown) is part of `sim up`.
    assert "gpuN-nvlink-down" in text.split("## `provisioner sim up`")[1]


def test_cli_reference_does_not_depend_on_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    narrow = clidoc.render()
    monkeypatch.setenv("COLUMNS", "250")
    assert clidoc.render() == narrow
    assert max(len(ln) for ln in narrow.splitlines() if not ln.startswith(
        ("Every command", "    ", "  {"))) <= clidoc.WIDTH


def test_check_says_how_to_regenerate(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n")
    monkeypatch.setattr(clidoc, "OUTPUT", stale)
    assert clidoc.main(["--check"]) == 1
    assert capsys.readouterr().err == (f"{stale} is out of date: run "
                                       "`python -m provisioner.clidoc`\n")
    assert stale.read_text() == "# old\n"
    assert clidoc.main([]) == 0 and stale.read_text() == clidoc.render()
    assert clidoc.main(["--check"]) == 0
