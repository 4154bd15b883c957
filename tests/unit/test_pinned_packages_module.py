"""The pinned_packages module's apt and dnf paths against a scripted package manager: waiting
for the lock, retrying transient mirror errors with backoff, and failing with the line that
says what went wrong (not apt's last line)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.unit.collection_module import load_module

pp: Any = load_module("pinned_packages")
# The apt/dnf runner it shares with distro_packages (module_utils/gpucluster/pkgrun.py).
runner: Any = sys.modules[pp.run_retrying.__module__]


Reply = tuple[int, str, str]


class Failed(Exception):
    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["msg"])
        self.result = result


class FakeModule:
    """What the module's functions use of AnsibleModule; ``script`` answers each command."""

    def __init__(self, script: Callable[[list[str]], Reply], **params: Any) -> None:
        self.params = {"lock_timeout": 300, "retries": 3, "retry_delay": 5.0, **params}
        self.check_mode = False
        self.script = script
        self.commands: list[list[str]] = []

    def get_bin_path(self, name: str, required: bool = False) -> str:
        return f"/usr/bin/{name}"

    def run_command(self, cmd: list[str], environ_update: dict[str, str] | None = None) -> Reply:
        self.commands.append(list(cmd))
        return self.script(list(cmd))

    def fail_json(self, **result: Any) -> None:
        raise Failed(result)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    out: list[float] = []
    monkeypatch.setattr(time, "sleep", out.append)
    return out


WANTED = [{"name": "cuda-toolkit-12-4", "version": "12.4.1-1"}]
FETCH_503 = ("", "E: Failed to fetch http://mirror/pool/cuda-toolkit-12-4_12.4.1-1_amd64.deb  "
                 "503  Service Unavailable [IP: 10.88.0.2 8080]\n"
                 "E: Unable to fetch some archives, maybe run apt-get update or try with "
                 "--fix-missing?\n")


def apt_node(install_replies: list[Reply]) -> Callable[[list[str]], Reply]:
    """A node where dpkg-query says what is installed after each successful install."""
    node = {"installed": False, "held": False}

    def script(cmd: list[str]) -> Reply:
        tool = Path(cmd[0]).name
        if tool == "dpkg-query":
            if node["installed"]:
                want = "hold" if node["held"] else "install"
                return 0, f"cuda-toolkit-12-4\t12.4.1-1\t{want} ok installed\n", ""
            return 1, "", ""
        if tool == "apt-get":
            reply = install_replies.pop(0)
            node["installed"] = reply[0] == 0
            return reply
        node["held"] = True  # apt-mark hold
        return 0, "", ""
    return script


def test_apt_waits_for_the_lock_and_keeps_config_files_without_asking(
        sleeps: list[float]) -> None:
    module = FakeModule(apt_node([(0, "", "")]), lock_timeout=120)
    assert pp.apt_apply(module, WANTED, {}) == ["cuda-toolkit-12-4"]
    install = next(c for c in module.commands if c[0].endswith("apt-get"))
    pairs = {install[i + 1] for i, word in enumerate(install) if word == "-o"}
    assert {"DPkg::Lock::Timeout=120", "Acquire::Retries=3", "Dpkg::Options::=--force-confdef",
            "Dpkg::Options::=--force-confold"} <= pairs
    assert "cuda-toolkit-12-4=12.4.1-1" in install
    hold = next(c for c in module.commands if c[0].endswith("apt-mark"))
    assert hold[-2:] == ["hold", "cuda-toolkit-12-4"] and "DPkg::Lock::Timeout=120" in hold
    assert sleeps == []


def test_a_mirror_that_answers_503_twice_is_retried_with_backoff(sleeps: list[float]) -> None:
    module = FakeModule(apt_node([(100, *FETCH_503), (100, *FETCH_503), (0, "", "")]))
    assert pp.apt_apply(module, WANTED, {}) == ["cuda-toolkit-12-4"]
    assert sleeps == [5.0, 10.0]
    assert sum(c[0].endswith("apt-get") for c in module.commands) == 3


def test_a_mirror_that_stays_down_fails_after_the_retries_with_apts_first_error(
        sleeps: list[float]) -> None:
    module = FakeModule(apt_node([(100, *FETCH_503)] * 4), retries=3, retry_delay=1)
    with pytest.raises(Failed) as failed:
        pp.apt_apply(module, WANTED, {})
    msg = failed.value.result["msg"]
    assert msg.startswith("apt-get install of the pinned versions failed (after 4 tries): "
                          "E: Failed to fetch http://mirror/pool/cuda-toolkit-12-4")
    assert "Unable to fetch some archives" not in msg
    assert sleeps == [1.0, 2.0, 4.0]


def test_a_pin_that_matches_no_package_is_not_retried_and_names_the_version(
        sleeps: list[float]) -> None:
    err = ("E: Version '580.95.05-1' for 'cuda-drivers-580' was not found\n"
           "E: Unable to correct problems, you have held broken packages.\n")
    module = FakeModule(apt_node([(100, "Reading package lists...\n", err)]))
    with pytest.raises(Failed) as failed:
        pp.apt_apply(module, [{"name": "cuda-drivers-580", "version": "580.95.05-1"}], {})
    assert failed.value.result["msg"] == ("apt-get install of the pinned versions failed: "
                                          "E: Version '580.95.05-1' for 'cuda-drivers-580' was "
                                          "not found")
    assert sleeps == [] and len(failed.value.result["attempts"]) == 1


def test_a_lock_held_past_the_timeout_says_so(sleeps: list[float]) -> None:
    err = ("E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 812 "
           "(unattended-upgr)\nE: Unable to acquire the dpkg frontend lock "
           "(/var/lib/dpkg/lock-frontend), is another process using it?\n")
    module = FakeModule(apt_node([(100, "", err)]), lock_timeout=30)
    with pytest.raises(Failed) as failed:
        pp.apt_apply(module, WANTED, {})
    msg = failed.value.result["msg"]
    assert "lock is held by another process" in msg and "lock_timeout=30s" in msg
    assert "held by process 812 (unattended-upgr)" in msg
    assert sleeps == []


def test_dpkg_errors_beat_apts_summary_line() -> None:
    out = ("Setting up nvidia-kernel-dkms (580.95.05-1) ...\n"
           "dpkg: error processing package nvidia-kernel-dkms (--configure):\n"
           " installed nvidia-kernel-dkms package post-installation script subprocess returned "
           "error exit status 10\n")
    err = "E: Sub-process /usr/bin/dpkg returned an error code (1)\n"
    assert runner.error_line(out, err) == ("dpkg: error processing package nvidia-kernel-dkms "
                                       "(--configure):")
    assert runner.error_line("", "") == "no output"
    assert runner.error_line("last words\n", "") == "last words"


def test_dnf_retries_a_503_and_locks_the_versions(sleeps: list[float]) -> None:
    replies: list[Reply] = [
        (1, "", "Error: Failed to download metadata for repo 'cuda': Cannot download "
                "repomd.xml: Status code: 503 for http://mirror/repodata/repomd.xml\n"),
        (0, "Complete!\n", "")]

    def script(cmd: list[str]) -> Reply:
        if cmd[1] == "install":
            return replies.pop(0)
        return 0, "", ""
    module = FakeModule(script)
    wanted = [{"name": "nvidia-driver", "version": "3:580.95.05-1.el9"}]
    assert pp.dnf_apply(module, wanted, {"nvidia-driver": ("", None, False)}) == ["nvidia-driver"]
    assert sleeps == [5.0]
    assert module.commands[-1] == ["/usr/bin/dnf", "versionlock", "add",
                                   "nvidia-driver-580.95.05-1.el9"]


# A node killed or rebooted in the middle of an install leaves dpkg interrupted: apt refuses
# everything until `dpkg --configure -a` has finished the half-done packages.

def dpkg_node(audit: str, configure: Reply = (0, "", "")) -> Callable[[list[str]], Reply]:
    def script(cmd: list[str]) -> Reply:
        if cmd[1:] == ["--audit"]:
            return (1 if audit else 0), audit, ""
        if "--configure" in cmd:
            return configure
        raise AssertionError(f"unexpected command {cmd}")
    return script


@pytest.fixture
def updates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "updates"
    path.mkdir()
    monkeypatch.setattr(runner, "DPKG_UPDATES", str(path))
    return path


def test_a_clean_dpkg_is_left_alone(updates: Path) -> None:
    module = FakeModule(dpkg_node(""))
    assert pp.apt_recover(module) is False
    assert module.commands == [["/usr/bin/dpkg", "--audit"]]


@pytest.mark.parametrize("how", ["updates", "audit"])
def test_an_interrupted_dpkg_is_finished_first(updates: Path, how: str) -> None:
    audit = ""
    if how == "updates":
        (updates / "0001").write_text("half written\n")
    else:
        audit = ("The following packages are only half configured, probably due to problems\n"
                 " libnccl2            NVIDIA Collective Communication Library runtime\n")
    module = FakeModule(dpkg_node(audit))
    assert pp.apt_recover(module) is True
    assert module.commands[-1] == ["/usr/bin/dpkg", "--force-confdef", "--force-confold",
                                   "--configure", "-a"]


def test_check_mode_reports_without_configuring(updates: Path) -> None:
    (updates / "0001").write_text("x")
    module = FakeModule(dpkg_node(""))
    module.check_mode = True
    assert pp.apt_recover(module) is True
    assert len(module.commands) == 1


def test_a_failing_configure_says_which_package(updates: Path, sleeps: list[float]) -> None:
    (updates / "0001").write_text("x")
    module = FakeModule(dpkg_node("", configure=(
        1, "", "Setting up nvidia-dkms-575 ...\ndpkg: error processing package nvidia-dkms-575 "
               "(--configure):\n installed post-installation script returned exit status 10\n"
               "Errors were encountered while processing:\n nvidia-dkms-575\n")))
    with pytest.raises(Failed) as failed:
        pp.apt_recover(module)
    assert failed.value.result["msg"] == (
        "dpkg --configure -a (dpkg was interrupted) failed: dpkg: error processing package "
        "nvidia-dkms-575 (--configure):")
    assert sleeps == []  # not a mirror error: no retry


def test_dnf_removes_only_installed_names_and_unlocks_them_first(sleeps: list[float]) -> None:
    module = FakeModule(lambda cmd: (0, "", ""))
    state = {"kmod-nvidia-latest-dkms": ("3:575.57.08-1.el9", None, True),
             "libnvidia-nscq-575": ("", None, False)}
    assert pp.dnf_remove(module, list(state), state) == ["kmod-nvidia-latest-dkms"]
    assert module.commands == [
        ["/usr/bin/dnf", "versionlock", "delete", "kmod-nvidia-latest-dkms"],
        ["/usr/bin/dnf", "remove", "-y", "kmod-nvidia-latest-dkms"]]
    # Nothing installed: no command at all (a converged node).
    module = FakeModule(lambda cmd: (0, "", ""))
    assert pp.dnf_remove(module, ["libnvidia-nscq-575"], state) == []
    assert module.commands == []


def test_apt_unholds_then_removes_an_other_branch() -> None:
    module = FakeModule(lambda cmd: (0, "", ""))
    state = {"cuda-drivers-580": ("580.95.05-1", True, True), "cuda-drivers-570": ("", False,
                                                                                   False)}
    assert pp.apt_remove(module, ["cuda-drivers-570", "cuda-drivers-580"], state) == [
        "cuda-drivers-580"]
    assert [c[:2] + c[-1:] for c in module.commands] == [
        ["/usr/bin/apt-mark", "-o", "cuda-drivers-580"],
        ["/usr/bin/apt-get", "remove", "cuda-drivers-580"]]


def test_service_states_come_from_one_systemctl_show_in_the_order_asked() -> None:
    shown = ("Id=nvidia-dcgm.service\nActiveState=active\nUnitFileState=enabled\n\n"
             "Id=nvidia-fabricmanager.service\nActiveState=inactive\nUnitFileState=disabled\n\n"
             "Id=nope.service\nActiveState=inactive\nUnitFileState=\n")
    module = FakeModule(lambda cmd: (0, shown, ""))
    states = pp.service_states(module, ["nvidia-dcgm", "nvidia-fabricmanager", "nope"])
    assert states == {"nvidia-dcgm": {"active": "active", "enabled": "enabled"},
                      "nvidia-fabricmanager": {"active": "inactive", "enabled": "disabled"},
                      "nope": {"active": "inactive", "enabled": ""}}
    assert module.commands == [["/usr/bin/systemctl", "show",
                                "--property=Id,ActiveState,UnitFileState", "--",
                                "nvidia-dcgm", "nvidia-fabricmanager", "nope"]]


def test_no_service_asked_runs_no_systemctl() -> None:
    module = FakeModule(lambda cmd: pytest.fail(f"ran {cmd}"))
    assert pp.service_states(module, []) == {}


def test_a_failing_systemctl_show_fails_with_its_line() -> None:
    module = FakeModule(lambda cmd: (1, "", "System has not been booted with systemd\n"))
    with pytest.raises(Failed, match="systemctl show failed: System has not been booted"):
        pp.service_states(module, ["nvidia-dcgm"])


# --- files beside the packages (main(), the package manager scripted) ----------------------

def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             args: dict[str, Any], events: list[str],
             held: dict[str, bool] | None = None) -> dict[str, Any]:
    """pinned_packages' main() on one package at its pin, held where `held` says (not held by
    default): apt-mark hold is the only package change; `events` records it, and which files
    existed then."""
    import json

    from ansible.module_utils.testing import patch_module_args

    held = {"cuda-toolkit-12-4": False} if held is None else held

    def state(module: Any, names: list[str]) -> dict[str, tuple[str, bool, bool]]:
        return {n: ("12.4.1-1", held.get(n, False), True) for n in names}

    def apply(module: Any, wanted: list[dict[str, str]], now: Any) -> list[str]:
        names = [p["name"] for p in wanted if not held[p["name"]]]
        if not module.check_mode:
            paths = sorted(args.get("files", {}))
            events.append("hold, files then: " + ",".join(
                Path(p).name for p in paths if Path(p).exists()))
            held.update(dict.fromkeys(names, True))
        return names

    monkeypatch.setattr(pp, "uses_apt", lambda: True)
    monkeypatch.setattr(pp, "dpkg_state", state)
    monkeypatch.setattr(pp, "apt_recover", lambda module: False)
    monkeypatch.setattr(pp, "apt_apply", apply)
    with patch_module_args({"packages": WANTED, **args}), pytest.raises(SystemExit):
        pp.main()
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_files_are_written_after_the_packages_in_the_same_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    profile, ld = tmp_path / "profile.d" / "cuda.sh", tmp_path / "ld.so.conf.d" / "cuda.conf"
    files = {str(profile): "export PATH=/usr/local/cuda-12.4/bin:$PATH\n",
             str(ld): {"content": "/usr/local/cuda-12.4/lib64\n", "mode": "0600"}}
    events: list[str] = []
    held = {"cuda-toolkit-12-4": False}
    out = run_main(monkeypatch, capsys, {"files": files}, events, held)
    assert events == ["hold, files then: "]  # the hold ran before any file existed
    assert out["changed"] and out["changed_packages"] == ["cuda-toolkit-12-4"]
    assert out["changed_files"] == sorted(files)
    assert profile.read_text() == files[str(profile)]
    assert oct(profile.stat().st_mode & 0o777) == "0o644"
    assert oct(ld.stat().st_mode & 0o777) == "0o600"

    # Packages held and files as given: nothing changes. One file edited: only it is written.
    out = run_main(monkeypatch, capsys, {"files": files}, events, held)
    assert not out["changed"] and out["changed_files"] == [], out
    ld.write_text("tampered\n")
    out = run_main(monkeypatch, capsys, {"files": files}, events, held)
    assert out["changed"] and out["changed_packages"] == [] and out["changed_files"] == [str(ld)]
    assert ld.read_text() == "/usr/local/cuda-12.4/lib64\n"


def test_check_mode_names_the_files_it_would_write_and_writes_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cuda.sh"
    events: list[str] = []
    out = run_main(monkeypatch, capsys, {"files": {str(target): "x\n"},
                                         "_ansible_check_mode": True}, events)
    assert out["changed"] and out["changed_files"] == [str(target)]
    assert not target.exists() and events == []


@pytest.mark.parametrize(("entry", "words"), [
    ({"relative/cuda.sh": "x\n"}, "is not a normalised absolute file path"),
    ({"/etc/profile.d/cuda.sh": {"content": 1}}, "needs text content"),
])
def test_a_bad_file_entry_fails_before_any_package_changes(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        entry: dict[str, Any], words: str) -> None:
    events: list[str] = []
    out = run_main(monkeypatch, capsys, {"files": entry}, events)
    assert out["failed"] and words in out["msg"] and out["msg"].startswith("pinned_packages: ")
    assert events == []  # no hold ran
