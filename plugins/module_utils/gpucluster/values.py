"""Value normalisation shared by the gpucluster parsers.

NVIDIA and RDMA tools print placeholders instead of values when a field does not apply
(``N/A``, ``[Not Supported]``, ``Unknown Error``...). Every parser turns those into ``None``
through these helpers, so a missing value never raises.

Stdlib only, Python 3.9 syntax: this file also runs on managed nodes inside Ansible modules.
"""

from __future__ import annotations

import re

# Placeholders nvidia-smi, ibstat and DCGM print instead of a value (compared case-insensitively,
# with surrounding brackets removed).
_ABSENT = frozenset(
    {
        "",
        "n/a",
        "na",
        "none",
        "-",
        "not supported",
        "not available",
        "unknown",
        "unknown error",
        "insufficient permissions",
        "gpu requires reset",
        "gpu is lost",
        "err!",
        "requested functionality has been deprecated",
    }
)

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


class ParseError(ValueError):
    """The text is not the tool output a parser expects (one-line message)."""


def clean(value: str | None) -> str | None:
    """Strip ``value``; return ``None`` for placeholders such as ``N/A`` or ``[Not Supported]``."""
    if value is None:
        return None
    text = value.strip()
    bare = text.strip("[]").strip().lower()
    if bare in _ABSENT or bare.startswith("n/a"):
        return None
    return text


def to_float(value: str | None) -> float | None:
    """First number in ``value`` (``"500.00 W"`` -> 500.0), or ``None``."""
    text = clean(value)
    if text is None:
        return None
    match = _NUMBER.search(text)
    return float(match.group(0)) if match else None


def to_int(value: str | None) -> int | None:
    """First integer in ``value`` (``"81920 MiB"`` -> 81920, ``"16x"`` -> 16), or ``None``.

    Hexadecimal values (``0x1a``) are decoded; a decimal fraction is truncated only when it is
    integral (``"3.0"`` -> 3), otherwise ``None``.
    """
    text = clean(value)
    if text is None:
        return None
    if text.lower().startswith("0x"):
        try:
            return int(text.split()[0], 16)
        except ValueError:
            return None
    number = to_float(text)
    if number is None or number != int(number):
        return None
    return int(number)


def to_number(value: str | None) -> int | float | None:
    """``int`` when the number is integral (``"400"`` -> 400), ``float`` otherwise (``"2.5"``)."""
    number = to_float(value)
    if number is None:
        return None
    return int(number) if number == int(number) else number


_TRUE = frozenset({"enabled", "enable", "yes", "true", "on", "active"})
_FALSE = frozenset({"disabled", "disable", "no", "false", "off", "not active", "inactive"})


def to_bool(value: str | None) -> bool | None:
    """``Enabled``/``Yes`` -> True, ``Disabled``/``No`` -> False, anything else -> None."""
    text = clean(value)
    if text is None:
        return None
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    return None


# The OSC body stops at the next ESC: with "[^\x07]*" a line of many unterminated "ESC ]" made
# each match attempt scan to the end of the text (quadratic; 20,000 of them took a second).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def strip_ansi(text: str) -> str:
    """Remove terminal colour/underline escape sequences (``ESC[4m`` ... ``ESC[0m``)."""
    return _ANSI.sub("", text)
