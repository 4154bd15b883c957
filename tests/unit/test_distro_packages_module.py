"""distro_packages: the OS's own packages installed at any version, in one cheap call on a node
that has them. Its real ``main()`` runs against a scripted package manager (dpkg's or rpm's
database as a dict, apt-get/dnf changing it) and a real lists directory for apt's freshness."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.collection_module import load_module

dp: Any = load_module("distro_packages")
# The install logic it shares with signed_keys (module_utils/gpucluster/distro.py).
distro: Any = sys.modules[dp.ensure.__module__]

FETCH_503 = ("", "E: Failed to fetch http://mirror/pool/main/m/munge/munge_0.5.15-2_amd64.deb  "
                 "503  Service Unavailable [IP: 10.88.0.2 8080]\n")


class Failed(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["msg"])
        self.result = result


class Node:
    """A scripted node: ``db`` maps installed names to versions; ``repo`` is what the package
    manager can install (a name missing from ``db`` after its install plays a virtual package).
    ``fail_installs`` answers the first installs with a 503 from the mirror."""

    def __init__(self, db: dict[str, str], *, apt: bool = True, check_mode: bool = False,
                 repo: dict[str, str] | None = None, fail_installs: int = 0,
                 **params: Any) -> None:
        self.db = dict(db)
        self.apt = apt
        self.repo = repo if repo is not None else {}
        self.fail_installs = fail_installs
        self.check_mode = check_mode
        self.params = {"cache_valid_time": 86400, "lock_timeout": 300, "retries": 3,
                       "retry_delay": 5.0, **params}
        self.commands: list[list[str]] = []
        self.result: dict[str, Any] = {}

    def get_bin_path(self, name: str, required: bool = False) -> str:
        return f"/usr/bin/{name}"

    def run_command(self, cmd: list[str], **_: Any) -> tuple[int, str, str]:
        self.commands.append(list(cmd))
        tool = Path(cmd[0]).name
        words = [a for i, a in enumerate(cmd[1:], 1)
                 if not a.startswith("-") and cmd[i - 1] != "-o"]
        if tool == "dpkg-query":
            return 0, "".join(f"{n}\t{self.db[n]}\tinstall ok installed\n"
                              for n in cmd[3:] if n in self.db), ""
        if tool == "rpm":
            name = cmd[-1]
            return (0, self.db[name], "") if name in self.db else (1, "", "not installed")
        if tool == "dpkg":
            return 0, "", ""
        if tool == "systemctl":  # show: units of the packages are running once installed
            return 0, "\n".join(
                f"Id={u}.service\nActiveState={'active' if u in self.db else 'inactive'}\n"
                f"UnitFileState={'enabled' if u in self.db else ''}\n"
                for u in cmd[4:]), ""
        if words[:1] == ["install"]:
            if self.fail_installs:
                self.fail_installs -= 1
                return 100, *FETCH_503
            for name in words[1:]:
                if name in self.repo:
                    self.db[name] = self.repo[name]
        return 0, "", ""

    def fail_json(self, **result: Any) -> None:
        raise Failed(result)

    def exit_json(self, **result: Any) -> None:
        self.result = result
        raise SystemExit(0)


@pytest.fixture
def lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """apt's lists directory with one package index, refreshed just now."""
    path = tmp_path / "lists"
    path.mkdir()
    (path / "deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages").write_text("x")
    monkeypatch.setattr(distro, "APT_LISTS", str(path))
    return path


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    out: list[float] = []
    monkeypatch.setattr(time, "sleep", out.append)
    return out


def run(node: Node, names: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    node.params["names"] = names
    monkeypatch.setattr(dp, "AnsibleModule", lambda **_: node)
    monkeypatch.setattr(os.path, "exists",
                        lambda p, _real=os.path.exists: node.apt if p == "/usr/bin/dpkg-query"
                        else _real(p))
    with pytest.raises(SystemExit):
        dp.main()
    return node.result


def tools(node: Node) -> list[str]:
    return [" ".join([Path(c[0]).name, *c[1:2]]) for c in node.commands]


def test_a_node_that_has_them_all_costs_one_query(lists: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node({"munge": "0.5.15-2", "slurmd": "22.05.8-4"})
    result = run(node, ["munge", "slurmd"], monkeypatch)
    assert result == {"changed": False, "installed": [], "cache_updated": False,
                      "packages": {"munge": "0.5.15-2", "slurmd": "22.05.8-4"}, "services": {}}
    assert tools(node) == ["dpkg-query -W"]


def test_only_the_missing_package_is_installed_without_a_refresh_of_fresh_lists(
        lists: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node({"munge": "0.5.15-2"}, repo={"slurmd": "22.05.8-4"})
    result = run(node, ["munge", "slurmd"], monkeypatch)
    assert (result["changed"], result["installed"], result["cache_updated"]) == (
        True, ["slurmd"], False)
    assert result["packages"] == {"munge": "0.5.15-2", "slurmd": "22.05.8-4"}
    [install] = [c for c in node.commands if Path(c[0]).name == "apt-get"]
    assert install[-1:] == ["slurmd"] and "munge" not in install
    # apt waits for the lock and keeps changed configuration files, as pinned_packages does.
    assert "DPkg::Lock::Timeout=300" in install and "Dpkg::Options::=--force-confold" in install


@pytest.mark.parametrize("stale", ["old", "no index"])
def test_stale_or_empty_lists_are_refreshed_before_the_install(
        stale: str, lists: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if stale == "old":
        old = time.time() - 2 * 86400
        os.utime(lists, (old, old))
    else:
        for index in lists.iterdir():
            index.unlink()  # a fresh image: the directory is new, no index in it
    node = Node({}, repo={"munge": "0.5.15-2"})
    result = run(node, ["munge"], monkeypatch)
    assert result["cache_updated"] is True
    apt = [c[1:] for c in node.commands if Path(c[0]).name == "apt-get"]
    assert [c[0] for c in apt] == ["update", "install"]
    # The refresh is marked (apt-get update leaves the mtime alone when nothing changed
    # upstream): within cache_valid_time, the next install does not refresh again.
    assert time.time() - lists.stat().st_mtime < 60


def test_check_mode_reports_the_missing_and_runs_no_apt(lists: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    os.utime(lists, (0, 0))  # even with lists that would be refreshed
    node = Node({"python3": "3.11.2-1"}, check_mode=True, repo={"iputils-ping": "3:20221126-1"})
    result = run(node, ["python3", "iputils-ping"], monkeypatch)
    assert (result["changed"], result["installed"]) == (True, ["iputils-ping"])
    assert node.db == {"python3": "3.11.2-1"}
    assert tools(node) == ["dpkg-query -W"]


def test_a_name_still_missing_after_a_clean_install_fails_naming_it(
        lists: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node({}, repo={})  # apt-get "succeeds" but installs no package of that name
    with pytest.raises(Failed) as failed:
        run(node, ["mail-transport-agent"], monkeypatch)
    assert "not installed: mail-transport-agent" in failed.value.result["msg"]


def test_a_mirror_503_is_retried_with_backoff(lists: Path, sleeps: list[float],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node({}, repo={"munge": "0.5.15-2"}, fail_installs=2)
    result = run(node, ["munge"], monkeypatch)
    assert result["installed"] == ["munge"] and sleeps == [5.0, 10.0]


def test_the_dnf_path_installs_the_missing_with_dnf(monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node({"munge": "0.5.13-13.el9"}, apt=False, repo={"slurm-slurmd": "22.05.9-1.el9"})
    result = run(node, ["munge", "slurm-slurmd"], monkeypatch)
    assert result["installed"] == ["slurm-slurmd"]
    assert result["packages"]["slurm-slurmd"] == "22.05.9-1.el9"
    [dnf] = [c for c in node.commands if Path(c[0]).name == "dnf"]
    assert dnf[1:] == ["install", "-y", "slurm-slurmd"]


@pytest.mark.parametrize("names", [["munge=0.5.15-2"], ["libc6:amd64"], ["--reinstall"], [" munge"], [""]])
def test_a_bad_name_fails_in_one_line_before_reading_the_node(
        names: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node({})
    with pytest.raises(Failed) as failed:
        run(node, names, monkeypatch)
    assert failed.value.result["msg"].startswith("names must be package names")
    assert "\n" not in failed.value.result["msg"] and node.commands == []


def test_the_units_state_is_read_after_the_install_in_the_same_call(
        lists: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = Node({"munge": "0.5.15-2"}, repo={"slurmd": "22.05.8-4"}, services=["munge", "slurmd"])
    result = run(node, ["munge", "slurmd"], monkeypatch)
    assert result["installed"] == ["slurmd"]
    assert result["services"] == {"munge": {"active": "active", "enabled": "enabled"},
                                  "slurmd": {"active": "active", "enabled": "enabled"}}
    assert tools(node)[-1] == "systemctl show"  # read after apt-get install, once

    node = Node({"munge": "0.5.15-2"}, services=["munge", "slurmd"])
    result = run(node, ["munge"], monkeypatch)
    assert result["services"]["slurmd"] == {"active": "inactive", "enabled": ""}
    assert tools(node) == ["dpkg-query -W", "systemctl show"]
