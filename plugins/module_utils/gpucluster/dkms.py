"""``dkms status`` as data: which kernels have a module at a version.

dkms 3 prints ``nvidia/580.95.05, 6.1.0-18-amd64, x86_64: installed``; dkms 2
``nvidia, 535.104.05, 5.15.0-91-generic, x86_64: installed``; a module added but built for no
kernel ``nvidia/580.95.05: added``. The state may carry a note after it (``installed (WARNING!
Diff between built and installed module!)``). The module's name is not assumed: NVIDIA's
packages name it ``nvidia`` or ``nvidia-open`` depending on packaging, so any name starting
with ``nvidia`` counts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_LINE = re.compile(
    r"^(?P<module>[^\s,/]+)(?:/|,\s*)(?P<version>[^\s,:]+)"
    r"(?:,\s*(?P<kernel>[^\s,]+),\s*(?P<arch>[^\s,:]+))?:\s*(?P<state>[A-Za-z-]+)")


def parse_status(text: str) -> list[dict[str, str]]:
    """One dict per line of ``dkms status`` (module, version, kernel, arch, state); lines of
    another shape (warnings dkms prints) are left out."""
    rows = []
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match:
            rows.append({k: v or "" for k, v in match.groupdict().items()})
    return rows


def kernel_states(text: str, version: str, kernels: Iterable[str]) -> dict[str, str]:
    """{kernel: installed | built | missing} of the NVIDIA module at ``version`` for each of
    ``kernels`` (``built``: compiled but another module file is in place)."""
    best: dict[str, str] = {}
    rank = {"installed": 2, "built": 1}
    for row in parse_status(text):
        if not row["module"].startswith("nvidia") or row["version"] != version:
            continue
        state = row["state"].lower()
        if row["kernel"] and rank.get(state, 0) > rank.get(best.get(row["kernel"], ""), 0):
            best[row["kernel"]] = state
    return {kernel: best.get(kernel, "missing") for kernel in kernels}


def release_key(release: str) -> tuple[int, ...]:
    """A kernel release's numbers in order, for comparing releases of one distribution
    (6.1.0-18-amd64 -> (6, 1, 0, 18, 64); 5.14.0-427.13.1.el9_4.x86_64 -> (5, 14, 0, 427, 13,
    1, 9, 4, 86, 64))."""
    return tuple(int(n) for n in re.findall(r"\d+", release))


def boot_candidates(kernels: Iterable[str], running: str) -> list[str]:
    """The kernels a reboot may bring up by default: the running one and every newer one.
    An older kernel stays a manual fallback (its headers may be gone from the mirror)."""
    floor = release_key(running)
    return [k for k in kernels if k == running or release_key(k) >= floor]
