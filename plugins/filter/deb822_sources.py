"""apt's deb822 sources files for the NVIDIA repositories, as text to write in one call."""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

DOCUMENTATION = r"""
name: deb822_sources
short_description: The deb822 .sources files of flat, signed apt repositories
description:
  - Maps each repository to its file under O(directory) (C(<name>.sources)) and the file's text,
    one C(deb) stanza for a flat repository (suite C(/)) signed by C(<keyring_dir>/<name>.asc).
  - The text is what C(ansible.builtin.deb822_repository) wrote for the same arguments (the
    repository name first, then the fields in alphabetical order), so a node it configured
    does not change.
  - A name that is not a plain file name, or a URI with white space (which could add fields
    to the stanza), is refused.
positional: _input, keyring_dir
options:
  _input:
    description: Repositories, each a dict with C(name) and C(uri).
    type: list
    elements: dict
    required: true
  keyring_dir:
    description: Directory of the repositories' signing keys.
    type: str
    required: true
  directory:
    description: Directory of the sources files.
    type: str
    default: /etc/apt/sources.list.d
"""

EXAMPLES = r"""
- name: The sources files
  ansible.builtin.debug:
    msg: "{{ [{'name': 'nvidia-cuda', 'uri': 'http://mirror.example/cuda/'}]
             | gpucluster.provisioner.deb822_sources('/etc/apt/keyrings') }}"
"""

RETURN = r"""
_value:
  description: Path of each sources file to its text.
  type: dict
"""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def deb822_sources(repositories: Any, keyring_dir: Any,
                   directory: str = "/etc/apt/sources.list.d") -> dict[str, str]:
    files: dict[str, str] = {}
    for repo in repositories or []:
        if not isinstance(repo, dict):
            raise AnsibleFilterError(f"deb822_sources: {repo!r} is not a dict with name and uri")
        name = str(repo.get("name", ""))
        uri = str(repo.get("uri", "")).strip()
        if not _NAME.fullmatch(name):
            raise AnsibleFilterError(f"deb822_sources: {name!r} is not a plain repository name")
        if not uri or any(ch.isspace() for ch in uri):
            raise AnsibleFilterError(
                f"deb822_sources: the URI of {name} is empty or has white space")
        files[f"{directory}/{name}.sources"] = (
            f"X-Repolib-Name: {name}\n"
            f"Signed-By: {keyring_dir}/{name}.asc\n"
            "Suites: /\n"
            "Types: deb\n"
            f"URIs: {uri}\n")
    return files


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"deb822_sources": deb822_sources}
