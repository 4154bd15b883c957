"""The SHA-256 the monitoring and node_health roles check a release tarball against is the one
they pin (per version and architecture) or the site's own, never the server's sha256sums.txt: a
tarball swapped on the mirror together with its sums file is refused, and a version neither
pins is refused at preflight in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.localplay import ROOT, run_play
from tests.integration.test_release_archive_module import (  # noqa: F401  (fixture)
    NAME,
    TOP,
    Server,
    publish,
    release,
    run,
    server,
)

ROLES = ROOT / "roles"
HEX64 = r"^[0-9a-f]{64}$"


def role_sums(tmp_path: Path, *extra: str) -> dict[str, Any]:
    """The sums the two roles would check, as their variables compute them on this host (or
    with ``extra`` -e settings)."""
    files = [ROLES / "monitoring/defaults/main.yml", ROLES / "monitoring/vars/main.yml",
             ROLES / "node_health/defaults/main.yml", ROLES / "node_health/vars/main.yml"]
    out = tmp_path / "sums.json"
    run_play(tmp_path, [{"hosts": "localhost", "gather_facts": True,
                         "tasks": [{"name": "load", "ansible.builtin.include_vars": str(f)}
                                   for f in files] + [
                             {"name": "show", "ansible.builtin.copy": {
                                 "dest": str(out), "content": "{{ {"
                                 "'prometheus': __monitoring_releases.prometheus.sha256, "
                                 "'alertmanager': __monitoring_releases.alertmanager.sha256, "
                                 "'node_exporter': __node_health_node_exporter_sha256} | to_json }}"}}]}],
             *extra)
    return json.loads(out.read_text())


def table() -> dict[str, dict[str, dict[str, str]]]:
    mon = yaml.safe_load((ROLES / "monitoring/vars/main.yml").read_text())
    nh = yaml.safe_load((ROLES / "node_health/vars/main.yml").read_text())
    return {**mon["__monitoring_release_sha256"], **nh["__node_health_release_sha256"]}


def test_the_default_versions_are_pinned_for_both_architectures() -> None:
    import re

    pins = table()
    defaults = {**yaml.safe_load((ROLES / "monitoring/defaults/main.yml").read_text()),
                **yaml.safe_load((ROLES / "node_health/defaults/main.yml").read_text())}
    for project, key in [("prometheus", "monitoring_prometheus_version"),
                         ("alertmanager", "monitoring_alertmanager_version"),
                         ("node_exporter", "node_health_node_exporter_version")]:
        arches = pins[project][defaults[key]]
        assert set(arches) == {"amd64", "arm64"}, (project, arches)
        assert all(re.match(HEX64, s) for s in arches.values()), arches


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_the_roles_check_their_pins_and_the_site_sum_wins(tmp_path: Path, arch: str) -> None:
    pins = table()
    got = role_sums(tmp_path, "-e", f"__monitoring_release_arch={arch}",
                    "-e", f"__node_health_release_arch={arch}")
    assert got == {"prometheus": pins["prometheus"]["2.53.4"][arch],
                   "alertmanager": pins["alertmanager"]["0.27.0"][arch],
                   "node_exporter": pins["node_exporter"]["1.8.2"][arch]}
    site = "ab" * 32
    got = role_sums(tmp_path, "-e", f"monitoring_prometheus_sha256={site}",
                    "-e", "node_health_node_exporter_version=1.9.9")
    # The site's sum wins; a version the role does not pin has none (preflight refuses it).
    assert got["prometheus"] == site and got["node_exporter"] == ""


def test_a_tarball_swapped_with_its_sums_file_is_refused(tmp_path: Path, server: Server) -> None:  # noqa: F811
    # The mirror serves another tarball under the real name, and a sums file that matches it:
    # the server's word would pass it; the role's pin does not.
    served = publish(server, NAME, release(TOP))
    pinned = role_sums(tmp_path, "-e", "__monitoring_release_arch=amd64")["prometheus"]
    assert served != pinned
    dest = tmp_path / "opt"
    dest.mkdir()
    out = run(tmp_path, {"url": f"{server.url}/{NAME}", "sha256": pinned, "dest": str(dest),
                         "links": {}})
    assert out.get("failed"), out
    assert f"checksum mismatch for {NAME}" in out["msg"] or "checksum mismatch" in out["msg"], out
    assert not list(dest.iterdir())


@pytest.mark.parametrize(("version", "sha256", "says"), [
    ("2.53.4", "", "no SHA-256 is pinned for this release (the role pins 2.53.4); set "
                   "monitoring_prometheus_sha256 to the sum you checked"),
    ("2.53", "0" * 63, "monitoring_prometheus_sha256 is not 64 lowercase hex digits"),
    ("v2.53.4", "0" * 64, "the version is not a release number such as 2.53.4"),
])
def test_the_preflight_names_what_is_wrong_with_a_release(tmp_path: Path, version: str,
                                                          sha256: str, says: str) -> None:
    """monitoring's own preflight task, with one release: the message names the fault it has
    (the version's test in the assert and in its message must read the version alike)."""
    tasks = yaml.safe_load((ROLES / "monitoring/tasks/preflight.yml").read_text())
    task = next(t for t in tasks if t["name"].endswith("Check the release versions and pinned sums"))
    task["ignore_errors"] = True
    task["register"] = "checked"
    out = tmp_path / "checked.json"
    run_play(tmp_path, [{"hosts": "localhost", "gather_facts": False, "vars": {
        "monitoring_server": True, "__monitoring_release_install": True,
        "__monitoring_release_arch": "amd64",
        "__monitoring_releases": {"prometheus": {"version": version, "sha256": sha256}},
        "__monitoring_release_sha256": {"prometheus": {"2.53.4": "0" * 64}}},
        "tasks": [task, {"name": "show", "ansible.builtin.copy": {
            "content": "{{ checked.results | map(attribute='msg', default='') | list | to_json }}",
            "dest": str(out)}}]}])
    messages = json.loads(out.read_text())
    assert len(messages) == 1 and says in messages[0], messages
