"""Untrusted text: control sequences stripped before printing, credentials masked."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from provisioner import render
from provisioner.progress import ProgressDisplay
from provisioner.results import ProgressEvent
from provisioner.untrusted import printable, redact, redact_data, secrets_in

OSC = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"


@pytest.mark.parametrize(("raw", "clean"), [
    (f"gpu-01{OSC}", "gpu-01"),
    (f"a{CLEAR}b", "ab"),
    ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),  # OSC 8 hyperlink, ST-terminated
    ("bell\x07 bs\x08 cr\r del\x7f c1\x9b31m", "bell bs cr del c1"),
    ("keep\ttabs\nand newlines", "keep\ttabs\nand newlines"),
    ("\x1bPdcs payload\x1b\\after", "after"),
    ("unterminated \x1b]0;title", "unterminated "),
    ("plain ünïcode", "plain ünïcode"),
])
def test_printable_strips_control_sequences(raw: str, clean: str) -> None:
    assert printable(raw) == clean


def test_printable_is_linear() -> None:
    import time

    started = time.perf_counter()
    printable("\x1b]" * 500_000 + "\x1b[" * 500_000)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(("raw", "masked"), [
    ("https://alice:pw1234@mirror/x", "https://***@mirror/x"),
    ("see http://tok3n@host/ and ftp://u:p@h/", "see http://***@host/ and ftp://***@h/"),
    ("https://m/x?token=abc123&arch=amd64", "https://m/x?token=***&arch=amd64"),
    ("access_token=zzz password=hunter2", "access_token=*** password=***"),
    ("https://mirror.example/debian/", "https://mirror.example/debian/"),
])
def test_redact_masks_credentials(raw: str, masked: str) -> None:
    assert redact(raw) == masked


def test_secrets_in_finds_the_literal_passwords_and_redact_masks_them_anywhere() -> None:
    found = secrets_in([{"gpu_package_source": "https://alice:Sup3rSecret@m/?token=T0ken99"},
                        ["not a url"], 3])
    assert {"alice:Sup3rSecret", "Sup3rSecret", "T0ken99"} <= found
    assert redact("401 for user alice password Sup3rSecret", found) == (
        "401 for user alice password ***")
    assert redact_data({"k": ["x T0ken99", ("Sup3rSecret",)]}, found) == {
        "k": ["x ***", ["***"]]}


def test_a_webhook_url_is_a_secret_as_a_whole() -> None:
    # A Slack or PagerDuty webhook's secret is its path: no userinfo, no token parameter.
    hook = "https://hooks.slack.example/services/T000/B000/XXXXsecretXXXX"
    found = secrets_in([{"monitoring_alert_webhook_url": hook, "other_url": "https://m/x"}])
    assert hook in found and "https://m/x" not in found
    assert redact_data({"note": f"posting to {hook} failed"}, found) == {
        "note": "posting to *** failed"}


def hostile_report() -> dict[str, object]:
    host = f"gpu-01{OSC}"
    return {
        "run_id": "r1", "command": "up", "inventory": f"inv{CLEAR}", "simulated": False,
        "outcome": "failed", "exit_code": 1, "duration_s": 1.0, "report_path": "p",
        "phases": [{"name": "stack", "ok": False, "changed": 0, "duration_s": 1.0,
                    "hosts": {host: {"failed": 1, "unreachable": 0}},
                    "failures": [{"host": host, "task": f"T{CLEAR}",
                                  "message": f"nvidia-smi said {OSC}{CLEAR}", "unreachable": False}]}],
        "checks": [{"host": host, "phase": "validate", "name": "gpu_count", "status": "fail",
                    "measured": f"7{CLEAR}", "expected": 8, "detail": f"d{OSC}"}],
        "notes": [f"note {OSC}"],
    }


@pytest.mark.parametrize("terminal", [True, False])
def test_report_never_prints_a_node_s_control_sequences(terminal: bool) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200)
    render.report(console, hostile_report(), verbose=True)
    text = out.getvalue()
    assert "gpu-01" in text and "nvidia-smi said" in text
    assert "\x1b]" not in text and CLEAR not in text and "\x07" not in text


def test_progress_never_prints_a_node_s_control_sequences() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with ProgressDisplay(console, "stack") as display:
        display(ProgressEvent("play", task=f"play{OSC}"))
        display(ProgressEvent("failed", f"gpu-01{OSC}", f"task{CLEAR}"))
    text = out.getvalue()
    assert "failed gpu-01: task" in text and "play: play" in text
    assert "\x1b" not in text and "\x07" not in text
