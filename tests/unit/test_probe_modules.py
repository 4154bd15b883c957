"""The fat-task modules the stack roles verify and converge with: node_probe (files, globs,
read-only commands and pinned packages in one round trip), signed_keys (fetch, fingerprint
check and trust in one), and pinned_packages' `replaced` (remove and install in one).

Each module runs its real ``main()`` under ansible-core's own argument patching, against real
files (and, for signed_keys, a real gpg and key files served over file://)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.unit.collection_module import load_module, load_plugin

node_probe: Any = load_module("node_probe")
signed_keys: Any = load_module("signed_keys")
pinned: Any = load_module("pinned_packages")
pkgstate: Any = load_plugin("module_utils/gpucluster", "pkgstate")
# The code node_probe runs (module_utils/gpucluster/probe.py), as node_probe imported it.
probe_utils: Any = sys.modules[node_probe.read_node.__module__]


def run_main(module: Any, args: dict[str, Any],
             capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The module's JSON result (exit_json or fail_json) for ``args``."""
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


# --- node_probe -------------------------------------------------------------------------------

def test_files_are_described_and_read_as_asked(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    header = tmp_path / "nccl.h"
    header.write_text("#define NCCL_MAJOR 2\n")
    (tmp_path / "libnccl.so.2.28.3").write_text("elf")
    (tmp_path / "libnccl.so.2").symlink_to("libnccl.so.2.28.3")
    (tmp_path / "dangling").symlink_to("nowhere")
    big = tmp_path / "big"
    big.write_text("x" * 100)
    out = run_main(node_probe, {"files": {
        "header": {"path": str(header), "read": True, "checksum": True},
        "lib": {"path": str(tmp_path / "libnccl.so.2"), "follow": False},
        "lib_followed": {"path": str(tmp_path / "libnccl.so.2")},
        "dangling": {"path": str(tmp_path / "dangling")},
        "missing": {"path": str(tmp_path / "missing"), "read": True},
        "dir": {"path": str(tmp_path)},
        "big": {"path": str(big), "read": True},
    }, "max_bytes": 50}, capsys)
    files = out["files"]
    assert out["changed"] is False
    assert files["header"]["content"] == "#define NCCL_MAJOR 2\n"
    assert files["header"]["checksum"] == hashlib.sha256(header.read_bytes()).hexdigest()
    assert (files["lib"]["islnk"], files["lib"]["lnk_target"], files["lib"]["isreg"]) == (
        True, "libnccl.so.2.28.3", False)
    assert files["lib_followed"]["isreg"] is True and files["lib_followed"]["size"] == 3
    assert files["dangling"]["exists"] is True and files["dangling"]["islnk"] is True
    assert files["missing"] == {"path": str(tmp_path / "missing"), "exists": False,
                                "isreg": False, "isdir": False, "islnk": False,
                                "lnk_target": "", "size": 0}
    assert files["dir"]["isdir"] is True and "content" not in files["dir"]
    assert "content" not in files["big"]  # larger than max_bytes: described, not read


def test_globs_list_matches_sorted_links_included(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for release in ("6.1.0-28-amd64", "6.1.0-9-amd64"):
        (tmp_path / release).mkdir()
        (tmp_path / release / "build").symlink_to(tmp_path / "gone" / release)  # dangling
    (tmp_path / "vmlinuz-6.1.0-28-amd64").write_text("")
    out = run_main(node_probe, {"globs": {
        "builds": f"{tmp_path}/*/build",
        "images": [f"{tmp_path}/vmlinuz-*", f"{tmp_path}/vmlinuz-*", f"{tmp_path}/none-*"],
    }}, capsys)
    assert out["globs"]["builds"] == [f"{tmp_path}/6.1.0-28-amd64/build",
                                      f"{tmp_path}/6.1.0-9-amd64/build"]
    assert out["globs"]["images"] == [f"{tmp_path}/vmlinuz-6.1.0-28-amd64"]


def test_commands_answer_with_rc_and_output_and_a_missing_program_is_127(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tool = tmp_path / "nvcc"
    tool.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n"
                    "echo oops >&2\nexit 3\n")
    tool.chmod(0o755)
    out = run_main(node_probe, {"commands": {
        "nvcc": [str(tool), "--version"],
        "absent": ["no-such-program-gpuc", "--version"],
        "absent_path": [str(tmp_path / "nope")],
    }}, capsys)
    nvcc = out["commands"]["nvcc"]
    assert (nvcc["rc"], nvcc["stdout_lines"], nvcc["stderr"]) == (
        3, ["Cuda compilation tools, release 13.0, V13.0.88"], "oops\n")
    assert out["commands"]["absent"]["rc"] == 127
    assert "no-such-program-gpuc: command not found" in out["commands"]["absent"]["stderr"]
    assert out["commands"]["absent_path"]["rc"] == 127


@pytest.mark.parametrize("args, message", [
    ({"files": {"x": {"read": True}}}, "files.x needs a path"),
    ({"commands": {"x": []}}, "commands.x needs an argument list"),
    ({"packages": [{"name": "libnccl2"}]}, "every package needs a name and a version"),
])
def test_bad_probe_arguments_fail_with_one_line(args: dict[str, Any], message: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = run_main(node_probe, args, capsys)
    assert out["failed"] is True and message in out["msg"]


class FakeDb:
    """What pkgstate reads, scripted: dpkg-query's and rpm's answers, dnf's versionlock list."""

    def __init__(self, dpkg: str = "", rpm: dict[str, str] | None = None,
                 locks: str = "") -> None:
        self.dpkg, self.rpm, self.locks = dpkg, rpm or {}, locks
        self.check_mode = True
        self.params: dict[str, Any] = {}

    def get_bin_path(self, name: str, required: bool = False) -> str:
        return f"/usr/bin/{name}"

    def run_command(self, cmd: list[str], **_: Any) -> tuple[int, str, str]:
        tool = Path(cmd[0]).name
        if tool == "dpkg-query":
            return 0, self.dpkg, ""
        if tool == "rpm":
            version = self.rpm.get(cmd[-1])
            return (0, version, "") if version else (1, "", "not installed")
        return 0, self.locks, ""

    def fail_json(self, **kw: Any) -> None:
        raise AssertionError(kw)


PINS = [{"name": "libnccl2", "version": "2.28.3-1+cuda13.0"},
        {"name": "libnccl-dev", "version": "2.28.3-1+cuda13.0"},
        {"name": "cuda-toolkit-13-0", "version": "13.0.2-1"}]


def test_apt_pins_off_their_version_or_unheld_are_mismatched() -> None:
    db = FakeDb(dpkg="libnccl2\t2.28.3-1+cuda13.0\thold ok installed\n"
                     "libnccl-dev\t2.28.3-1+cuda13.0\tinstall ok installed\n"
                     "cuda-toolkit-13-0\t13.0.1-1\thold ok installed\n")
    off, state = pkgstate.mismatched(db, PINS, apt=True)
    assert off == ["libnccl-dev", "cuda-toolkit-13-0"]  # not held; another version
    assert state["libnccl2"] == ("2.28.3-1+cuda13.0", True, True)


def test_dnf_pins_need_the_version_and_the_lock() -> None:
    pins = [{"name": "nvidia-driver", "version": "3:580.95.05-1.el9"},
            {"name": "libnccl", "version": "2.28.3-1+cuda13.0"},
            {"name": "cuda-toolkit-13-0", "version": "13.0.2-1"}]
    db = FakeDb(rpm={"nvidia-driver": "3:580.95.05-1.el9", "libnccl": "2.28.3-1+cuda13.0",
                     "cuda-toolkit-13-0": "13.0.2-1"},
                locks="nvidia-driver-3:580.95.05-1.el9.*\nlibnccl-0:2.28.3-1+cuda13.0.*\n")
    off, _state = pkgstate.mismatched(db, pins, apt=False)
    assert off == ["cuda-toolkit-13-0"]  # installed at its pin but not locked
    db.rpm["libnccl"] = "2.27.7-1+cuda13.0"
    assert pkgstate.mismatched(db, pins, apt=False)[0] == ["libnccl", "cuda-toolkit-13-0"]
    # rpm prints no epoch when it is 0: a pin with epoch 0 still matches.
    assert pkgstate.rpm_at_pin("580.95.05-1.el9", "0:580.95.05-1.el9")
    assert not pkgstate.rpm_at_pin("580.95.05-1.el9", "3:580.95.06-1.el9")


def test_installed_names_map_to_their_version_or_empty(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    db = FakeDb(dpkg="rdma-core\t48.0-1\tinstall ok installed\n"
                     "ibverbs-utils\t48.0-1\tdeinstall ok config-files\n")
    monkeypatch.setattr(probe_utils, "dpkg_state", lambda module, names: pkgstate.dpkg_state(
        db, names))
    monkeypatch.setattr(probe_utils.os.path, "exists", lambda p: p == "/usr/bin/dpkg-query")
    out = run_main(node_probe, {"installed": ["rdma-core", "ibverbs-utils", "perftest"]}, capsys)
    # removed with its config files kept is not installed; unknown to dpkg is not either
    assert out["installed"] == {"rdma-core": "48.0-1", "ibverbs-utils": "", "perftest": ""}


# --- pinned_packages: replaced ----------------------------------------------------------------

class AptNode:
    """A scripted apt node: dpkg's database as a dict, apt-get/apt-mark changing it."""

    def __init__(self, db: dict[str, tuple[str, bool]], check_mode: bool = False) -> None:
        self.db = dict(db)
        self.check_mode = check_mode
        self.params = {"lock_timeout": 300, "retries": 0, "retry_delay": 0.0,
                       "state": "present", "replaced": [], "files": {}, "files_mode": "0644",
                       "files_owner": None, "files_group": None}
        self.commands: list[list[str]] = []

    def get_bin_path(self, name: str, required: bool = False) -> str:
        return f"/usr/bin/{name}"

    def run_command(self, cmd: list[str], **_: Any) -> tuple[int, str, str]:
        self.commands.append(cmd)
        tool, words, rest = Path(cmd[0]).name, [], iter(cmd[1:])
        for arg in rest:
            if arg == "-o":
                next(rest)  # -o NAME=VALUE
            elif not arg.startswith("-"):
                words.append(arg)
        if tool == "dpkg-query":
            names = cmd[3:]
            return 0, "".join(f"{n}\t{self.db[n][0]}\t{'hold' if self.db[n][1] else 'install'}"
                              " ok installed\n" for n in names if n in self.db), ""
        if tool == "dpkg":
            return 0, "", ""
        if tool == "apt-mark":
            verb, names = words[0], words[1:]
            for n in names:
                self.db[n] = (self.db[n][0], verb == "hold")
        elif tool == "apt-get" and words[0] == "remove":
            for n in words[1:]:
                self.db.pop(n, None)
        elif tool == "apt-get" and words[0] == "install":
            for spec in words[1:]:
                name, version = spec.split("=", 1)
                self.db[name] = (version, self.db.get(name, ("", False))[1])
        return 0, "", ""

    def fail_json(self, **kw: Any) -> None:
        raise AssertionError(kw)

    def exit_json(self, **kw: Any) -> None:
        self.result = kw
        raise SystemExit(0)


def run_pinned(node: AptNode, packages: list[dict[str, str]], replaced: list[Any],
               monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    node.params.update(packages=packages, replaced=replaced)
    monkeypatch.setattr(pinned, "AnsibleModule", lambda **_: node)
    monkeypatch.setattr(os.path, "exists", lambda p: p == "/usr/bin/dpkg-query")
    monkeypatch.setattr(pinned, "apt_recover", lambda module: False)
    with pytest.raises(SystemExit):
        pinned.main()
    return node.result


DRIVER = [{"name": "cuda-drivers-580", "version": "580.95.05-1"}]


def test_replaced_packages_go_first_in_the_same_call(monkeypatch: pytest.MonkeyPatch) -> None:
    node = AptNode({"cuda-drivers-575": ("575.57.08-1", True)})
    result = run_pinned(node, DRIVER, [{"name": "cuda-drivers-575"}, "cuda-drivers-580"],
                        monkeypatch)
    assert node.db == {"cuda-drivers-580": ("580.95.05-1", True)}
    assert result["changed"] is True
    assert result["changed_packages"] == ["cuda-drivers-575", "cuda-drivers-580"]
    assert result["packages"] == [{"name": "cuda-drivers-580", "version": "580.95.05-1",
                                   "held": True, "installed": True}]
    removed = [c for c in node.commands if Path(c[0]).name == "apt-get" and "remove" in c]
    installed = [c for c in node.commands if Path(c[0]).name == "apt-get" and "install" in c]
    assert node.commands.index(removed[0]) < node.commands.index(installed[0])


def test_a_converged_node_with_nothing_to_replace_changes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node = AptNode({"cuda-drivers-580": ("580.95.05-1", True)})
    result = run_pinned(node, DRIVER, ["cuda-drivers-575"], monkeypatch)
    assert (result["changed"], result["changed_packages"]) == (False, [])
    assert {Path(c[0]).name for c in node.commands} == {"dpkg-query"}  # reads, no change


def test_replaced_in_check_mode_reports_and_changes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node = AptNode({"cuda-drivers-575": ("575.57.08-1", True)}, check_mode=True)
    result = run_pinned(node, DRIVER, ["cuda-drivers-575"], monkeypatch)
    assert result["changed_packages"] == ["cuda-drivers-575", "cuda-drivers-580"]
    assert node.db == {"cuda-drivers-575": ("575.57.08-1", True)}


def test_pinned_packages_reads_its_probe_after_the_install(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """The role's verify reads come back from the install call: the header as it is after the
    install, the pins' state read again (installed at the pin and held)."""
    header = tmp_path / "cudnn_version.h"
    node = AptNode({"cuda-drivers-575": ("575.57.08-1", True)})
    real_run = node.run_command

    def run(cmd: list[str], **kw: Any) -> tuple[int, str, str]:
        if Path(cmd[0]).name == "apt-get":
            header.write_text("#define CUDNN_MAJOR 9\n")  # what the install put there
        return real_run(cmd, **kw)

    node.run_command = run  # type: ignore[method-assign]
    node.params["probe"] = {"files": {"header": {"path": str(header), "read": True}},
                            "packages": DRIVER}
    result = run_pinned(node, DRIVER, ["cuda-drivers-575"], monkeypatch)
    assert result["changed_packages"] == ["cuda-drivers-575", "cuda-drivers-580"]
    assert result["probe"]["files"]["header"]["content"] == "#define CUDNN_MAJOR 9\n"
    assert result["probe"]["packages"]["mismatched"] == []
    assert result["probe"]["packages"]["packages"][0]["version"] == "580.95.05-1"


def test_pinned_packages_refuses_a_probe_option_it_does_not_know(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node = AptNode({})
    node.params["probe"] = {"file": {"x": {"path": "/etc/hostname"}}}
    with pytest.raises(AssertionError, match=r"probe takes files, commands.*not file"):
        run_pinned(node, DRIVER, [], monkeypatch)
    assert node.commands == []  # refused before the node is read or changed


# --- signed_keys ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def keys() -> Iterator[dict[str, Any]]:
    """Two real keys (gpg, no passphrase) exported as armoured files, and one file with both."""
    if shutil.which("gpg") is None:
        pytest.skip("needs gpg")
    home = Path(tempfile.mkdtemp(prefix="gpuc-k-"))  # short: gpg-agent's socket path
    out: dict[str, Any] = {"home": home}
    env = {**os.environ, "GNUPGHOME": str(home)}
    home.chmod(0o700)
    for name in ("one", "two"):
        subprocess.run(["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "",
                        "--quick-generate-key", f"gpuc test {name} <{name}@example.invalid>",
                        "ed25519", "sign", "never"], env=env, check=True, capture_output=True)
        listing = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys",
                                  f"{name}@example.invalid"], env=env, check=True,
                                 capture_output=True, text=True).stdout
        fpr = next(line.split(":")[9] for line in listing.splitlines()
                   if line.startswith("fpr:"))
        armoured = subprocess.run(["gpg", "--batch", "--armor", "--export", fpr], env=env,
                                  check=True, capture_output=True).stdout
        path = home / f"{name}.asc"
        path.write_bytes(armoured)
        out[name] = (path, fpr)
    (home / "both.asc").write_bytes(out["one"][0].read_bytes() + out["two"][0].read_bytes())
    yield out
    subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


def key_args(dest: Path, *entries: tuple[str, Path, str]) -> dict[str, Any]:
    return {"dir": str(dest), "retries": 0, "delay": 0,
            "keys": [{"name": n, "key_url": f"file://{p}", "fingerprint": f, "uri": "x"}
                     for n, p, f in entries]}


def test_keys_at_their_pinned_fingerprints_are_trusted_once(
        keys: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "keyrings"
    (one, fpr1), (two, fpr2) = keys["one"], keys["two"]
    args = key_args(dest, ("nvidia-cuda", one, fpr1.lower()), ("nvidia-ctk", two, fpr2))
    first = run_main(signed_keys, args, capsys)
    assert (first["changed"], sorted(first["changed_keys"])) == (True, ["nvidia-ctk",
                                                                        "nvidia-cuda"])
    assert (dest / "nvidia-cuda.asc").read_bytes() == one.read_bytes()
    assert oct(dest.stat().st_mode & 0o777) == "0o755"
    assert oct((dest / "nvidia-ctk.asc").stat().st_mode & 0o777) == "0o644"
    assert first["fingerprints"] == {"nvidia-cuda": fpr1, "nvidia-ctk": fpr2}
    again = run_main(signed_keys, args, capsys)
    assert (again["changed"], again["changed_keys"]) == (False, [])
    assert sorted(p.name for p in dest.iterdir()) == ["nvidia-ctk.asc", "nvidia-cuda.asc"]


@pytest.mark.parametrize("case", ["wrong fingerprint", "two primary keys"])
def test_a_refused_key_leaves_every_trusted_file_as_it_was(
        case: str, keys: dict[str, Any], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "keyrings"
    dest.mkdir()
    (dest / "nvidia-cuda.asc").write_text("the old key\n")
    two, fpr2 = keys["two"]
    bad = (("nvidia-ctk", two, "0" * 40) if case == "wrong fingerprint"
           else ("nvidia-ctk", keys["home"] / "both.asc", fpr2))
    out = run_main(signed_keys, key_args(dest, ("nvidia-cuda", two, fpr2), bad), capsys)
    assert out["failed"] is True
    pinned_fpr = bad[2]
    count = "1 primary key(s), fingerprint " + fpr2 if case == "wrong fingerprint" \
        else "2 primary key(s)"
    assert out["msg"] == (f"the key file at file://{bad[1]} is not exactly the pinned key "
                          f"{pinned_fpr} ({count}): refusing to trust it")
    assert (dest / "nvidia-cuda.asc").read_text() == "the old key\n"  # the good one not written
    assert sorted(p.name for p in dest.iterdir()) == ["nvidia-cuda.asc"]


def test_check_mode_checks_and_writes_nothing(keys: dict[str, Any], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "keyrings"
    one, fpr1 = keys["one"]
    out = run_main(signed_keys, {**key_args(dest, ("nvidia-cuda", one, fpr1)),
                                 "_ansible_check_mode": True}, capsys)
    assert (out["changed"], out["changed_keys"]) == (True, ["nvidia-cuda"])
    assert not dest.exists()


def test_gnupg_is_installed_first_where_it_is_missing_and_not_asked_for_where_present(
        keys: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    distro = sys.modules[signed_keys.ensure.__module__]
    dest = tmp_path / "keyrings"
    one, fpr1 = keys["one"]
    events: list[str] = []
    db = {"ca-certificates": "20230311"}
    seen_params: list[dict[str, Any]] = []

    def versions(module: Any, names: list[str], apt: bool) -> dict[str, str]:
        events.append("query " + ",".join(names))
        return {n: db.get(n, "") for n in names}

    def install(module: Any, missing: list[str], cache_valid_time: int) -> bool:
        events.append("install " + ",".join(missing))
        seen_params.append(dict(module.params))
        db.update(dict.fromkeys(missing, "2.2.40-1.1"))
        return True

    real_primary_keys = signed_keys.primary_keys

    def primary_keys(module: Any, path: str) -> Any:
        events.append("gpg")
        return real_primary_keys(module, path)

    monkeypatch.setattr(distro, "uses_apt", lambda: True)
    monkeypatch.setattr(distro, "versions", versions)
    monkeypatch.setattr(distro, "apt_install", install)
    monkeypatch.setattr(signed_keys, "primary_keys", primary_keys)
    args = {**key_args(dest, ("nvidia-cuda", one, fpr1)), "delay": 2, "retries": 4,
            "packages": ["gnupg", "ca-certificates"]}
    first = run_main(signed_keys, args, capsys)
    assert first["installed"] == ["gnupg"] and first["changed"]
    assert events == ["query gnupg,ca-certificates", "install gnupg",
                      "query gnupg,ca-certificates", "gpg"]
    # The package runner's retries are this module's: its retries, its delay the first wait.
    assert {k: seen_params[0][k] for k in ("retries", "retry_delay", "lock_timeout")} == {
        "retries": 4, "retry_delay": 2, "lock_timeout": 300}
    events.clear()
    again = run_main(signed_keys, args, capsys)
    assert (again["changed"], again["installed"]) == (False, [])
    assert events == ["query gnupg,ca-certificates", "gpg"]
    bad = run_main(signed_keys, {**args, "packages": ["gnupg=2.2"]}, capsys)
    assert bad["failed"] and bad["msg"].startswith("packages must be package names")


def test_a_key_that_cannot_be_fetched_is_named_and_the_password_is_not_echoed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = {"dir": str(tmp_path / "keyrings"), "retries": 1, "delay": 0,
            "url_username": "ops", "url_password": "s3cret",
            "keys": [{"name": "k", "key_url": f"file://{tmp_path}/absent.asc",
                      "fingerprint": "0" * 40}]}
    out = run_main(signed_keys, args, capsys)
    assert out["failed"] is True
    assert out["msg"].startswith(f"cannot download the signing key file://{tmp_path}/absent.asc"
                                 " (after 2 tries): ")
    assert "s3cret" not in json.dumps(out)
    assert not (tmp_path / "keyrings").exists()
    assert signed_keys._redact("http://ops:s3cret@mirror:8080/k.asc") == "http://mirror:8080/k.asc"
