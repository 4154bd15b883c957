"""`provisioner profiles detect` on the command line: saved outputs of the real H200 host in the
project's fixtures give its profile on stdout or in a file (0600), what the outputs do not show
on stderr, one line each; misuse is one line and exit 2. The live path (--inventory) is in the
e2e tier (tests/e2e/test_profiles_detect_e2e.py); its one-host rule is here, and what a node's
silent tools show (no NVLink, no RDMA device) over a stand-in for the playbook."""

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


def _node_answers(nvlink: dict[str, object], ib: dict[str, object]) -> dict[str, object]:
    """What playbooks/detect.yml publishes for the real H200 host: its saved XML and topology,
    and the given answers of nvlink -s and of find over the InfiniBand sysfs directory."""
    return {"nvidia_smi_xml": {"rc": 0, "stdout": (H200 / "nvidia-smi-q-x.xml").read_text()},
            "nvidia_smi_topo": {"rc": 0, "stdout": (H200 / "nvidia-smi-topo-m.txt").read_text()},
            "nvidia_smi_nvlink": nvlink, "ib_sysfs": ib}


def _live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
          outputs: dict[str, object]) -> tuple[int, str, str]:
    from provisioner import detect_node
    from provisioner.results import PlaybookResult

    def playbook(*_a: object, **_k: object) -> PlaybookResult:
        return PlaybookResult(playbook="detect.yml", status="successful", rc=0, duration_s=0.1,
                              artifact_dir=tmp_path, reports={"h200": {"detect": {"outputs": outputs}}})

    monkeypatch.setattr(detect_node, "run_playbook", playbook)
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "h200": {"ansible_connection": "local"}}}}}}))
    return run(["profiles", "detect", "--inventory", str(hosts), "--limit", "h200",
                "--name", "cloud-h200-1gpu"], capsys)


def test_a_live_node_without_nvlink_or_rdma_gives_a_whole_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The lent H200 host: nvlink -s exits 0 and prints nothing; /sys/class/infiniband is absent.
    code, out, err = _live(tmp_path, monkeypatch, capsys, _node_answers(
        {"rc": 0, "stdout": "", "stderr": ""},
        {"rc": 1, "stdout": "", "stderr": "find: '/sys/class/infiniband': No such file or "
                                           "directory"}))
    assert code == 0, err
    profile = yaml.safe_load(out)["profiles"]["cloud-h200-1gpu"]
    assert (profile["nvlink_links_per_gpu"], profile["nvlink_link_speed_gbps"],
            profile["ib_hcas"], profile["ib_rate_gbps"], profile["fabric"]) == (
                0, 0.0, 0, 0, "ethernet")
    assert "not detected" not in err
    assert "h200: nvidia_smi_nvlink printed nothing (rc 0): read as nvidia-smi nvlink -s " \
           "exited 0 and printed nothing" in err
    assert profile["sources"][-2:] == [
        "h200 (nvidia-smi nvlink -s exited 0 and printed nothing): nvlink_links_per_gpu, "
        "nvlink_link_speed_gbps",
        "h200 (no RDMA device under the InfiniBand sysfs directory): ib_hcas, ib_rate_gbps, "
        "fabric"]
    from provisioner.profiles import Profile
    Profile.model_validate({"name": "cloud-h200-1gpu", **profile})


@pytest.mark.parametrize(("nvlink", "ib", "missing"), [
    # nvlink -s failing says nothing of the links; find failing otherwise (permissions) says
    # nothing of the adapters.
    ({"rc": 3, "stdout": "", "stderr": "Unable to determine the device handle"},
     {"rc": 0, "stdout": ""}, ["nvlink_links_per_gpu", "nvlink_link_speed_gbps"]),
    ({"rc": 0, "stdout": ""},
     {"rc": 1, "stdout": "", "stderr": "find: '/sys/class/infiniband/mlx5_0': Permission denied"},
     ["ib_hcas", "ib_rate_gbps", "fabric"]),
])
def test_a_failed_tool_shows_no_absence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        nvlink: dict[str, object], ib: dict[str, object], missing: list[str]) -> None:
    code, out, err = _live(tmp_path, monkeypatch, capsys, _node_answers(nvlink, ib))
    assert code == 0, err
    profile = yaml.safe_load(out)["profiles"]["cloud-h200-1gpu"]
    assert [key for key in missing if key in profile] == []
    assert [line.split(":")[0] for line in err.splitlines() if line.startswith("not detected")] \
        == ["not detected"] * len(missing)


def test_an_empty_saved_output_is_not_used_and_stops_nothing(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The real H200's `nvidia-smi nvlink -s` printed nothing: saved with the others, it is
    # passed over (what printed an empty file cannot be told), not a reason to refuse them all.
    empty = str(H200 / "nvidia-smi-nvlink-s.txt")
    code, out, err = run(["profiles", "detect", *FILES, empty, "--name", "h200"], capsys)
    assert code == 0, err
    assert yaml.safe_load(out)["profiles"]["h200"]["gpu_count"] == 1
    assert "not used: nvidia-smi-nvlink-s.txt (empty file)" in err
    code, _out, err = run(["profiles", "detect", empty], capsys)
    assert code == 2 and "nvidia-smi-nvlink-s.txt (empty file) show(s) nothing" in err
