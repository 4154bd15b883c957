"""`provisioner profiles detect` on the command line: saved outputs of the real H200 host in the
project's fixtures give its profile on stdout or in a file (0600), what the outputs do not show
on stderr, one line each; misuse is one line and exit 2. The live path (--inventory) is in the
e2e tier (tests/e2e/test_profiles_detect_e2e.py); its one-host rule is here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provisioner import cli

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "device-h200"
FILES = [str(H200 / "nvidia-smi-q-x.xml"), str(H200 / "nvidia-smi-topo-m.txt")]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_saved_outputs_give_the_profile_and_say_what_they_do_not_show(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["profiles", "detect", *FILES, "--name", "cloud-h200-1gpu"], capsys)
    assert code == 0, err
    profile = yaml.safe_load(out)["profiles"]["cloud-h200-1gpu"]
    assert (profile["gpu_model"], profile["gpu_count"], profile["pci_device_ids"],
            profile["memory_mib"], profile["nvswitch"]) == ("NVIDIA H200", 1, ["10de:2335"],
                                                            143771, False)
    assert "busbw_floor_intra_gbps" not in profile
    assert "not detected: nvlink_links_per_gpu: " in err and "not detected: fabric: " in err
    target = tmp_path / "profiles.yml"
    code, out, err = run(["profiles", "detect", *FILES, "-o", str(target)], capsys)
    assert code == 0 and out == ""
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert "site-profile" in yaml.safe_load(target.read_text())["profiles"]
    assert f"profile site-profile written to {target}" in err


@pytest.mark.parametrize(("args", "line"), [
    (["profiles", "detect"], "give saved output FILEs or --inventory X --limit HOST, one of"),
    (["profiles", "detect", *FILES, "--inventory", "hosts.yml"], "one of the two"),
    (["profiles", "list", *FILES], "belong to `provisioner profiles detect`"),
    (["profiles", *FILES], "argument action: invalid choice"),
    (["profiles", "--name", "x"], "belong to `provisioner profiles detect`"),
])
def test_misuse_is_one_line(args: list[str], line: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(args, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and line in err, err


def test_the_live_path_needs_exactly_one_node(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "gpu-01": {"ansible_host": "192.0.2.10"}, "gpu-02": {"ansible_host": "192.0.2.11"}}}}}}))
    for limit, line in ((None, "name the node with --limit HOST"),
                        ("gpu_nodes", "--limit gpu_nodes matches 2 host(s)"),
                        ("nothing", "--limit nothing matches 0 host(s)")):
        extra = ["--limit", limit] if limit else []
        code, _out, err = run(["profiles", "detect", "--inventory", str(hosts), *extra], capsys)
        assert code == 2 and line in err, err


def test_a_bad_name_is_refused_before_any_node_is_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import detect_node

    def no_playbook(*_a: object, **_k: object) -> None:
        raise AssertionError("a node was contacted")

    monkeypatch.setattr(detect_node, "run_playbook", no_playbook)
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": {"hosts": {"gpu-01": {"ansible_host": "192.0.2.10"}}}}))
    code, _out, err = run(["profiles", "detect", "--inventory", str(hosts), "--limit", "gpu-01",
                           "--name", "  "], capsys)
    assert code == 2 and "detect: the profile needs a name" in err, err
