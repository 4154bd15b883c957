"""Text that came from a node or from the inventory, made safe to print and to keep.

Two concerns, both pure functions:

- ``printable``: terminal control sequences (CSI such as ``ESC[2J``, OSC such as
  ``ESC]0;title BEL``, any other C0/C1 control character) are removed before a hostname, a
  task's output or a tool's text reaches the console. Newlines and tabs are kept.
- ``redact``: credentials in URLs (``https://user:password@mirror/``) and token-like query
  parameters (``?token=...``) become ``***`` in everything the report, the console or the run
  directory holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# ESC [ ... final byte (CSI), ESC ] ... BEL or ESC \ (OSC), ESC P/X/^/_ ... ESC \ (DCS, SOS, PM,
# APC), a single-character ESC sequence, the 8-bit CSI/OSC introducers, then any other control
# character but \t and \n. Each alternative is linear: no nested or overlapping repetition.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)

# scheme://user:password@host or scheme://token@host: the userinfo goes.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,20}://)[^/\s@'\"]{1,512}@")
# ?token=... &access_token=... &password=... in a URL's query, or KEY=value pairs of the same.
_TOKEN_PARAM = re.compile(
    r"(?i)\b((?:access_|auth_|api_|private_)?(?:token|password|passwd|secret|key|apikey|"
    r"signature|sig)=)[^&\s'\"]{1,4096}")
MASK = "***"


def printable(text: str) -> str:
    """``text`` without terminal control sequences (newline and tab kept)."""
    return _CONTROL.sub("", text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with URL credentials, token parameters and the given literal secrets masked."""
    out = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    out = _TOKEN_PARAM.sub(lambda m: m.group(1) + MASK, out)
    for secret in secrets:
        if secret:
            out = out.replace(secret, MASK)
    return out


def redact_data(data: Any, secrets: Iterable[str] = ()) -> Any:
    """``redact`` applied to every string (keys too) in nested dicts, lists and tuples."""
    found = tuple(secrets)
    if isinstance(data, str):
        return redact(data, found)
    if isinstance(data, dict):
        return {redact_data(k, found): redact_data(v, found) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [redact_data(v, found) for v in data]
    return data


SECRET_VARIABLES = ("monitoring_alert_webhook_url",)


def secrets_in(values: Iterable[Any]) -> set[str]:
    """The literal secrets inside values (inventory variables): each URL's userinfo and each
    token parameter's value, so that they are masked even where they appear without their URL
    (an error line quoting only the password)."""
    found: set[str] = set()
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
            # Variables whose whole value is a credential (a Slack or PagerDuty webhook URL
            # carries its secret in the path, not as userinfo or a token parameter).
            found.update(str(value[name]) for name in SECRET_VARIABLES
                         if isinstance(value.get(name), str) and value[name])
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, str):
            for m in _URL_USERINFO.finditer(value):
                userinfo = m.group(0)[len(m.group(1)):-1]
                found.add(userinfo)
                found.update(part for part in userinfo.split(":")[1:] if len(part) >= 4)
            for m in _TOKEN_PARAM.finditer(value):
                found.add(m.group(0)[len(m.group(1)):])
    return {s for s in found if len(s) >= 4}
