"""How a planned package version compares with what the software itself reports: the one
policy the controller's judge (provisioner/judge.py) and the roles' checks (the
upstream_version and version_first_three filters) share.

Stdlib only, Python 3.9 syntax: this file also runs inside Ansible on the controller's filters.
"""

from __future__ import annotations


def upstream(version: str) -> str:
    """A package version without epoch and packaging revision, as the software itself reports
    it: '2.21.5-1+cuda12.4' -> '2.21.5', '1:3.3.6-1' -> '3.3.6', '550.54.15' unchanged. As
    Debian policy (deb-version(7)) and rpm split them: the epoch ends at the first colon, the
    revision starts at the last hyphen ('1:2.3-rc1-1' -> '2.3-rc1')."""
    bare = version.split(":", 1)[-1]
    return bare.rsplit("-", 1)[0]


def first_three(version: str) -> str:
    """'9.1.0.70' -> '9.1.0': the cuDNN header carries MAJOR.MINOR.PATCHLEVEL, not the build."""
    return ".".join(upstream(version).split(".")[:3])
