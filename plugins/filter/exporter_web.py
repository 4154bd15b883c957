"""The Prometheus exporter toolkit's web configuration and the files it names, one rule for
every role whose services read it (monitoring: Prometheus, Alertmanager, dcgm-exporter;
node_health: node_exporter), and the Go architecture names of release tarballs."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

DOCUMENTATION = r"""
name: exporter_web_files
short_description: The exporter toolkit's web configuration and the files it names
description:
  - "C(dir | exporter_web_files(cert, key, ca, users, client_user, client_password)): every
    file of the web directory C(dir), as C(file_set) takes them: C(web-config.yml) (JSON, which
    YAML reads as it is: C(tls_server_config) with C(dir)/tls.crt and C(dir)/tls.key when a
    certificate is given, C(basic_auth_users) when users are), C(tls.crt), C(tls.key),
    C(ca.crt) and, when a C(client_user) argument is passed, C(client-password) (absent when it
    is empty). A file whose setting is
    off is C({state: absent}), so switching a setting off leaves no secret behind. The
    configuration, the key and the password are mode 0640."
  - "C(architecture | go_arch) (this file): the Go name of a machine architecture, as release
    tarballs are named (x86_64 -> amd64, aarch64 -> arm64; any other as it is)."
positional: _input, cert, key, ca, users, client_user, client_password
options:
  _input:
    description: The directory the files go in.
    type: str
    required: true
  cert:
    description: The server's TLS certificate (PEM); empty for plain HTTP.
    type: str
  key:
    description: Its private key (PEM).
    type: str
  ca:
    description: The CA certificate clients trust; empty for none.
    type: str
  users:
    description: Basic-auth users and their bcrypt hashes; empty for none.
    type: dict
  client_user:
    description: The user the role's own clients log in as; empty for none.
    type: str
  client_password:
    description: That user's password (written to C(client-password)).
    type: str
"""

EXAMPLES = r"""
- name: node_exporter's web configuration
  gpucluster.provisioner.file_set:
    root: /etc/gpucluster-web/node_exporter
    files: >-
      {{ '/etc/gpucluster-web/node_exporter' | gpucluster.provisioner.exporter_web_files(
           cert, key, ca, users) }}
"""

RETURN = r"""
_value:
  description: "C({file name: {content, mode} | {state: absent}})."
  type: dict
"""

_ABSENT = {"state": "absent"}
_GO_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def exporter_web_files(directory: Any, cert: Any = "", key: Any = "", ca: Any = "",
                       users: Any = None, client_user: Any = None,
                       client_password: Any = "") -> dict[str, dict[str, str]]:
    cert, key, ca = str(cert or ""), str(key or ""), str(ca or "")
    users = dict(users) if isinstance(users, Mapping) else {}
    tls = bool(cert)
    settings: dict[str, Any] = {}
    if tls:
        settings["tls_server_config"] = {"cert_file": f"{directory}/tls.crt",
                                         "key_file": f"{directory}/tls.key"}
    if users:
        settings["basic_auth_users"] = users
    files: dict[str, dict[str, str]] = {
        # Ansible's to_nice_json(sort_keys=true): the same bytes the roles wrote before.
        "web-config.yml": ({"content": json.dumps(settings, indent=4, sort_keys=True,
                                                  ensure_ascii=False, separators=(",", ": ")),
                            "mode": "0640"} if tls or users else dict(_ABSENT)),
        "tls.crt": {"content": cert} if tls else dict(_ABSENT),
        "tls.key": {"content": key, "mode": "0640"} if tls else dict(_ABSENT),
        "ca.crt": {"content": ca} if ca else dict(_ABSENT),
    }
    if client_user is not None:
        files["client-password"] = ({"content": str(client_password or ""), "mode": "0640"}
                                    if client_user else dict(_ABSENT))
    return files


def go_arch(architecture: Any) -> str:
    return _GO_ARCH.get(str(architecture), str(architecture))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"exporter_web_files": exporter_web_files, "go_arch": go_arch}
