"""The file_set module through ansible-playbook on localhost: writes only what differs, fixes a
mode, reports no change on a rerun, changes nothing in check mode, refuses a path as a name; without
`dir`, absolute paths in several directories, a mode per file and files made absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.localplay import run_module


def run(tmp_path: Path, files: dict[str, Any], *extra: str, mode: str = "0644",
        in_dir: bool = True, probe: dict[str, Any] | None = None) -> dict[str, Any]:
    """One play running file_set (into tmp_path/lib/pkg, or paths without `dir`); what it
    registered."""
    args: dict[str, Any] = {"files": files, "mode": mode}
    if probe is not None:
        args["probe"] = probe
    if in_dir:
        args["dir"] = str(tmp_path / "lib" / "pkg")
    return run_module(tmp_path, "gpucluster.provisioner.file_set", args, *extra)


def test_writes_what_differs_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    files = {"__init__.py": "", "a.py": "A = 1\n", "b.py": "B = 2\n"}
    out = run(tmp_path, files)
    assert out["changed"] and out["changed_files"] == ["__init__.py", "a.py", "b.py"]
    pkg = tmp_path / "lib" / "pkg"
    assert {p.name: p.read_text() for p in pkg.iterdir()} == files
    assert oct(pkg.stat().st_mode & 0o777) == "0o755"
    assert all(oct(p.stat().st_mode & 0o777) == "0o644" for p in pkg.iterdir())
    assert run(tmp_path, files) == {**out, "changed": False, "changed_files": []}

    # One file edited on the node, another's mode changed, a stray file beside them.
    (pkg / "a.py").write_text("A = 'tampered'\n")
    (pkg / "b.py").chmod(0o600)
    (pkg / "stray.py").write_text("x\n")
    out = run(tmp_path, files)
    assert out["changed_files"] == ["a.py", "b.py"]
    assert (pkg / "a.py").read_text() == "A = 1\n"
    assert oct((pkg / "b.py").stat().st_mode & 0o777) == "0o644"
    assert (pkg / "stray.py").read_text() == "x\n"  # not named: left alone
    assert not [p for p in pkg.iterdir() if p.name.startswith(".")]  # no temp file left


def test_check_mode_reports_and_changes_nothing(tmp_path: Path) -> None:
    out = run(tmp_path, {"a.py": "A = 1\n"}, "--check", "--diff")
    assert out["changed"] and out["changed_files"] == ["a.py"]
    assert out["diff"][0]["after"] == "A = 1\n" and out["diff"][0]["before"] == ""
    assert not (tmp_path / "lib").exists()


def test_a_path_as_a_name_is_refused(tmp_path: Path) -> None:
    out = run(tmp_path, {"../escape.py": "x"})
    assert out["failed"] and "'../escape.py' is not a plain file name" in out["msg"]
    assert not (tmp_path / "lib" / "escape.py").exists()


def test_paths_in_several_directories_with_their_own_modes_and_absent_files(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    (etc / "old").mkdir(parents=True)
    (etc / "old" / "gone.conf").write_text("remove me\n")
    (etc / "old" / "kept.conf").write_text("not named\n")
    files = {
        str(etc / "a" / "one.conf"): "one\n",
        str(etc / "b" / "secret.conf"): {"content": "token\n", "mode": "0600"},
        str(etc / "old" / "gone.conf"): {"state": "absent"},
        str(etc / "old" / "never.conf"): {"state": "absent"},
    }
    out = run(tmp_path, files, in_dir=False)
    assert out["changed_files"] == sorted([str(etc / "a" / "one.conf"),
                                           str(etc / "b" / "secret.conf"),
                                           str(etc / "old" / "gone.conf")])
    assert (etc / "a" / "one.conf").read_text() == "one\n"
    assert oct((etc / "a" / "one.conf").stat().st_mode & 0o777) == "0o644"
    assert oct((etc / "b").stat().st_mode & 0o777) == "0o755"
    assert oct((etc / "b" / "secret.conf").stat().st_mode & 0o777) == "0o600"
    assert not (etc / "old" / "gone.conf").exists() and not (etc / "old" / "never.conf").exists()
    assert (etc / "old" / "kept.conf").read_text() == "not named\n"
    assert run(tmp_path, files, in_dir=False) == {**out, "changed": False, "changed_files": []}

    # The secret's mode loosened by hand: put back; a file to remove came back: removed again.
    (etc / "b" / "secret.conf").chmod(0o644)
    (etc / "old" / "gone.conf").write_text("back\n")
    out = run(tmp_path, files, "--check", "--diff", in_dir=False)
    assert out["changed_files"] == [str(etc / "b" / "secret.conf"), str(etc / "old" / "gone.conf")]
    assert (etc / "old" / "gone.conf").exists()  # check mode: nothing removed
    assert [d["before"] for d in out["diff"]] == ["back\n"]  # only the removal is a content diff
    out = run(tmp_path, files, in_dir=False)
    assert not (etc / "old" / "gone.conf").exists()
    assert oct((etc / "b" / "secret.conf").stat().st_mode & 0o777) == "0o600"


def test_check_mode_creates_no_parent_directory(tmp_path: Path) -> None:
    out = run(tmp_path, {str(tmp_path / "new" / "x.conf"): "x\n"}, "--check", in_dir=False)
    assert out["changed_files"] == [str(tmp_path / "new" / "x.conf")]
    assert not (tmp_path / "new").exists()


def test_bad_entries_are_refused_before_anything_changes(tmp_path: Path) -> None:
    first = str(tmp_path / "a.conf")
    cases = [
        ({first: "x\n", "relative.conf": "y\n"}, "'relative.conf' is not a normalised absolute"),
        ({first: "x\n", str(tmp_path) + "/../b.conf": "y\n"}, "is not a normalised absolute"),
        ({first: "x\n", str(tmp_path / "b.conf"): {"state": "absent", "content": "y"}},
         "state=absent takes no content, mode or validate"),
        ({first: "x\n", str(tmp_path / "b.conf"): {"mode": "0600"}}, "needs text content"),
        ({first: "x\n", str(tmp_path / "b.conf"): {"content": "y", "owner": "nobody"}},
         "must be text or a dict of content, mode, state, validate"),
        ({first: "x\n", str(tmp_path / "b.conf"): 3}, "must be text or a dict"),
    ]
    for files, message in cases:
        out = run(tmp_path, files, in_dir=False)
        assert out["failed"] and message in out["msg"], (files, out["msg"])
        assert not (tmp_path / "a.conf").exists()


def test_a_directory_is_not_removed(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    out = run(tmp_path, {str(tmp_path / "d"): {"state": "absent"}}, in_dir=False)
    assert out["failed"] and "is a directory, not a file to remove" in out["msg"]
    assert (tmp_path / "d").is_dir()


def test_an_invalid_content_changes_no_file(tmp_path: Path) -> None:
    good, bad = tmp_path / "a" / "good.conf", tmp_path / "b" / "bad.conf"
    bad.parent.mkdir()
    bad.write_text("old\n")
    # grep -q exits 1 when the pattern is missing: "valid" means the content says ok.
    files = {str(good): {"content": "ok\n", "validate": "grep -q ok %s"},
             str(bad): {"content": "wrong\n", "validate": "grep -q ok %s"}}
    out = run(tmp_path, files, in_dir=False)
    assert out["failed"] and f"{bad} failed validation (grep, exit 1)" in out["msg"]
    assert not good.exists() and bad.read_text() == "old\n"  # neither file written
    assert not list(bad.parent.glob(".*"))
    files[str(bad)]["content"] = "ok too\n"
    out = run(tmp_path, files, in_dir=False)
    assert out["changed_files"] == [str(good), str(bad)] and bad.read_text() == "ok too\n"
    out = run(tmp_path, {str(good): {"content": "x\n", "validate": "grep -q ok"}}, in_dir=False)
    assert out["failed"] and "must contain %s" in out["msg"]


def test_the_probe_reads_the_node_after_the_files_are_written(tmp_path: Path) -> None:
    """What a role reads after its files (apt's candidates after its pins) comes back from the
    same call, read after the write; in check mode it reads the node as it is."""
    conf = tmp_path / "etc" / "a.conf"
    probe = {"files": {"conf": {"path": str(conf), "read": True}},
             "commands": {"wc": ["wc", "-l", str(conf)], "missing": ["no-such-tool-gpuc"]}}
    out = run(tmp_path, {str(conf): "one\ntwo\n"}, in_dir=False, probe=probe)
    assert out["changed_files"] == [str(conf)]
    assert out["probe"]["files"]["conf"]["content"] == "one\ntwo\n"
    assert out["probe"]["commands"]["wc"]["rc"] == 0
    assert out["probe"]["commands"]["wc"]["stdout"].split()[0] == "2"
    assert out["probe"]["commands"]["missing"]["rc"] == 127

    out = run(tmp_path, {str(conf): "three\n"}, "--check", in_dir=False, probe=probe)
    assert out["changed"] and out["changed_files"] == [str(conf)]
    assert out["probe"]["files"]["conf"]["content"] == "one\ntwo\n"  # not written: as it is
    assert run(tmp_path, {str(conf): "one\ntwo\n"}, in_dir=False)["probe"] == {}


def test_a_bad_probe_is_refused_before_any_file_is_written(tmp_path: Path) -> None:
    conf = tmp_path / "b.conf"
    out = run(tmp_path, {str(conf): "x\n"}, in_dir=False,
              probe={"file": {"conf": {"path": str(conf)}}})
    assert out["failed"] and "probe takes files, commands" in out["msg"]
    assert "not file" in out["msg"]
    out = run(tmp_path, {str(conf): "x\n"}, in_dir=False, probe={"commands": {"c": []}})
    assert out["failed"] and out["msg"] == "commands.c needs an argument list"
    assert not conf.exists()
