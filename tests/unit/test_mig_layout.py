"""MIG layouts: the plan resolves a host's gpu_mig_layout against its profile's instance
profiles and refuses, in one line naming the host, a layout no GPU could hold; the node side
reads nvidia-smi's tables, works out what to change per GPU and judges the layout; Slurm gets
the MIG devices as typed GPUs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import mig
from provisioner import plan as plan_mod
from provisioner.errors import InputError
from provisioner.profiles import MigProfile, load_profiles

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "filter"))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

from gpucluster import mig as node_mig  # noqa: E402
from gpucluster.validate import evaluate  # noqa: E402
from slurm_gres import slurm_gres  # noqa: E402

H100 = load_profiles()["hgx-h100-8gpu"]
CAPTURE_LAYOUT = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def build(tmp_path: Path, hostvars: dict[str, Any]) -> plan_mod.ClusterPlan:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "g1": {"gpu_profile": "hgx-h100-8gpu", **hostvars}}}}}}))
    return plan_mod.build(path)


def test_named_layouts() -> None:
    assert mig.resolve("all-1g.10gb", H100) == (("1g.10gb",) * 7,) * 8
    assert mig.resolve("disabled", H100) == (None,) * 8
    assert mig.resolve(None, H100) is None


def test_a_mapping_orders_each_gpu_largest_first_and_an_index_overrides_all() -> None:
    layout = mig.resolve({"all": ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"], 7: "disabled",
                          "3": ["7g.80gb"]}, H100)
    assert layout is not None
    assert layout[0] == ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
    assert layout[3] == ("7g.80gb",) and layout[7] is None


def test_a_gpu_the_mapping_does_not_name_keeps_mig_off() -> None:
    assert mig.resolve({0: ["7g.80gb"]}, H100) == (("7g.80gb",),) + (None,) * 7


@pytest.mark.parametrize(("raw", "words"), [
    ({"all": ["3g.40gb"] * 3}, "3 x 3g.40gb, but one GPU holds at most 2"),
    ({"all": ["4g.40gb", "3g.40gb", "1g.10gb"]}, "need 9 memory slices"),
    ({"all": ["1g.5gb"]}, "'1g.5gb' is not an instance profile of this GPU"),
    ({8: ["7g.80gb"]}, "is neither 'all' nor a GPU index 0-7"),
    ("all-2g.10gb", "unknown layout 'all-2g.10gb'"),
    (["1g.10gb"], "expected 'disabled', 'all-<profile>' or a mapping"),
])
def test_a_layout_no_gpu_could_hold_is_refused_in_one_line(tmp_path: Path, raw: Any,
                                                           words: str) -> None:
    with pytest.raises(InputError) as err:
        build(tmp_path, {"gpu_mig_layout": raw})
    line = str(err.value)
    assert "host g1: gpu_mig_layout:" in line and words in line and "\n" not in line


def test_slices_that_add_up_but_cannot_be_placed_are_refused() -> None:
    # A GPU whose two profiles may both start only at slot 0: 2 + 2 memory slices of 8 add up,
    # the placements do not.
    profile = H100.model_copy(update={"mig_profiles": (
        MigProfile(name="2g.20gb", id=14, slices=2, memory_slices=2, memory_mib=20096,
                   instances=2, placements=(0,)),
        MigProfile(name="1g.20gb", id=15, slices=1, memory_slices=2, memory_mib=20096,
                   instances=1, placements=(0, 2)))})
    assert mig.resolve({"all": ["2g.20gb", "1g.20gb"]}, profile) == (("2g.20gb", "1g.20gb"),) * 8
    with pytest.raises(ValueError, match="cannot be placed together on one GPU"):
        mig.resolve({"all": ["2g.20gb", "2g.20gb"]}, profile)


def test_a_profile_without_mig_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {
        "l": {"gpu_profile": "pcie-l40s-4gpu", "gpu_mig_layout": "disabled"}}}}}}))
    with pytest.raises(InputError, match="profile pcie-l40s-4gpu lists no MIG instance profiles"):
        plan_mod.build(path)


def test_the_plan_hands_the_layout_to_the_roles_and_to_validate(tmp_path: Path) -> None:
    plan = build(tmp_path, {"gpu_mig_layout": {0: CAPTURE_LAYOUT}})
    host = plan.hosts["g1"]
    assert host.variables()["gpu_mig_layout_planned"] == [CAPTURE_LAYOUT] + [None] * 7
    assert host.expected()["mig_layout"] == [CAPTURE_LAYOUT] + [None] * 7
    unmanaged = build(tmp_path, {}).hosts["g1"]
    assert "gpu_mig_layout_planned" not in unmanaged.variables()
    assert "mig_layout" not in unmanaged.expected()


def test_every_mig_table_packs_each_profile_alone_at_its_instance_count() -> None:
    for profile in load_profiles().values():
        for entry in profile.mig_profiles:
            assert mig.pack([entry] * entry.instances) is not None, (profile.name, entry.name)
            assert mig.pack([entry] * (entry.instances + 1)) is None, (profile.name, entry.name)


LGI = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 3g.40gb          9        2          4:4     |
+-------------------------------------------------------+
|   0  MIG 1g.10gb         19        9          2:1     |
+-------------------------------------------------------+
|   1  MIG 7g.80gb          0        0          0:8     |
+-------------------------------------------------------+
"""


def test_parse_lgi_and_what_changes_per_gpu() -> None:
    found = node_mig.parse_lgi(LGI)
    assert [i["name"] for i in found[0]] == ["3g.40gb", "1g.10gb"]
    assert found[0][0] == {"name": "3g.40gb", "profile_id": 9, "gi": 2, "start": 4, "size": 4}
    modes = {0: True, 1: True, 2: False, 3: True}
    planned = [["1g.10gb", "3g.40gb"], ["3g.40gb", "3g.40gb"], ["7g.80gb"], None]
    assert node_mig.changes(modes, found, planned) == [
        (1, None, ["3g.40gb", "3g.40gb"]), (2, "enable", ["7g.80gb"]), (3, "disable", None)]


class FakeSmi:
    """nvidia-smi as the gpu_mig module drives it: records every call."""

    def __init__(self, modes: dict[int, bool], lgi: str) -> None:
        self.modes, self.lgi, self.calls = modes, lgi, []

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.calls.append(argv[1:])
        if argv[1].startswith("--query-gpu"):
            return 0, "".join(f"{i}, {'Enabled' if on else 'Disabled'}\n"
                              for i, on in self.modes.items()), ""
        if argv[1:] == ["mig", "-lgi"]:
            return (0, self.lgi, "") if self.lgi else (6, "No GPU instances found: Not Found\n", "")
        return 0, "ok\n", ""


def test_apply_leaves_a_matching_gpu_alone_and_rebuilds_another() -> None:
    smi = FakeSmi({0: True, 1: True}, LGI)
    result = node_mig.apply(smi, [["1g.10gb", "3g.40gb"], ["3g.40gb"]], "nvidia-smi")
    assert result["gpus"] == [1]
    changing = [c for c in smi.calls if "-i" in c]
    assert changing == [["mig", "-i", "1", "-dci"], ["mig", "-i", "1", "-dgi"],
                        ["mig", "-i", "1", "-cgi", "3g.40gb", "-C"]]


def test_apply_in_check_mode_changes_nothing_and_a_rerun_is_quiet() -> None:
    smi = FakeSmi({0: False}, "")
    assert node_mig.apply(smi, [["7g.80gb"]], "nvidia-smi", check=True)["changed"] is True
    assert not [c for c in smi.calls if "-i" in c]
    smi = FakeSmi({0: True, 1: True}, LGI)
    assert node_mig.apply(smi, [["1g.10gb", "3g.40gb"], ["7g.80gb"]], "nvidia-smi") == {
        "changed": False, "gpus": [], "instances": node_mig.parse_lgi(LGI)}


def test_apply_names_the_gpu_and_nvidia_smis_words_on_failure() -> None:
    def smi(argv: list[str]) -> tuple[int, str, str]:
        if argv[1].startswith("--query-gpu"):
            return 0, "0, Enabled\n", ""
        if argv[1:] == ["mig", "-lgi"]:
            return 6, "No GPU instances found: Not Found\n", ""
        return 2, "", "Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources\n"

    with pytest.raises(RuntimeError, match=r"GPU 0: nvidia-smi mig -i 0 -cgi 3g.40gb -C failed "
                                           r"\(exit 2\): Unable to create .*Insufficient"):
        node_mig.apply(smi, [["3g.40gb"]], "nvidia-smi")


def test_a_plan_for_more_gpus_than_the_node_has_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="the plan has 2 GPUs, nvidia-smi lists 1"):
        node_mig.apply(FakeSmi({0: False}, ""), [None, None], "nvidia-smi")


MINORS = "config 1\nmonitor 2\n" + "".join(
    f"gpu0/gi{gi}/access {3 + gi * 9}\n" + "".join(
        f"gpu0/gi{gi}/ci{ci}/access {4 + gi * 9 + ci}\n" for ci in range(8)) for gi in range(15))


def test_device_files_and_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    instances = node_mig.parse_lgi(LGI)
    devices = node_mig.device_files({0: instances[0]}, {(0, 2): [0], (0, 9): [0]},
                                    node_mig.parse_mig_minors(MINORS))
    assert devices[0] == {"gpu": 0, "gi": 2, "ci": 0, "name": "3g.40gb", "files": [
        "/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22"]}
    assert node_mig.caps_major("195 nvidia\n235 nvidia-caps\n") == 235
    made: list[tuple[str, int, int]] = []
    monkeypatch.setattr(node_mig.os, "mknod", lambda path, mode, dev: made.append(
        (path, mode, dev)) or Path(path).write_text(""))
    monkeypatch.setattr(node_mig.os, "chmod", lambda path, mode: None)
    assert node_mig.make_device_nodes(devices, 235, str(tmp_path)) == [
        "/dev/nvidia-caps/nvidia-cap21", "/dev/nvidia-caps/nvidia-cap22",
        "/dev/nvidia-caps/nvidia-cap84", "/dev/nvidia-caps/nvidia-cap85"]
    assert made[0][2] == node_mig.os.makedev(235, 21)
    with pytest.raises(RuntimeError, match="mig-minors lists no gpu0/gi2/access"):
        node_mig.device_files({0: instances[0]}, {(0, 2): [0]}, {})


def gpu_facts(modes: list[bool]) -> dict[str, Any]:
    return {"gpus": [{"index": i, "mig_mode": on} for i, on in enumerate(modes)]}


def test_validate_judges_each_gpu_against_the_plan() -> None:
    expected = {"mig_layout": [["1g.10gb", "3g.40gb"], ["7g.80gb"], None, None]}
    mig_facts = {"modes": {0: True, 1: True, 2: False, 3: True},
                 "instances": node_mig.parse_lgi(LGI)}
    checks = {c["name"]: c for c in evaluate({"mig": mig_facts}, expected)}
    assert [checks[f"gpu{i}_mig"]["status"] for i in range(4)] == ["pass", "pass", "pass", "fail"]
    assert checks["gpu3_mig"]["detail"] == "MIG is on, the plan has it off"
    wrong = dict(mig_facts, instances={0: node_mig.parse_lgi(LGI)[0][:1]})
    checks = {c["name"]: c for c in evaluate({"mig": wrong}, expected)}
    assert checks["gpu0_mig"]["status"] == "fail"
    assert checks["gpu0_mig"]["detail"] == "MIG instances 3g.40gb, the plan has 1g.10gb, 3g.40gb"
    assert checks["gpu1_mig"]["detail"] == "MIG instances none, the plan has 7g.80gb"
    assert evaluate({"mig": {"error": "x"}}, {})[:1] == []
    assert evaluate({"mig": {"error": "boom"}}, expected)[0]["status"] == "fail"


def test_dcgm_diag_is_skipped_with_its_reason() -> None:
    checks = evaluate({"dcgm": {"skipped": "MIG is on (GPU 0): dcgmi diag does not run on "
                                           "MIG GPUs"}}, {"dcgm_required": True})
    assert checks[0]["status"] == "skip" and "MIG is on (GPU 0)" in checks[0]["detail"]


def test_slurm_gres_counts_whole_gpus_then_each_instance_profile() -> None:
    assert slurm_gres([CAPTURE_LAYOUT, None, None], "h100") == \
        "gpu:h100:2,gpu:3g.40gb:1,gpu:2g.20gb:1,gpu:1g.10gb:2"
    assert slurm_gres([["7g.80gb"]], "h100") == "gpu:7g.80gb:1"
    assert slurm_gres(None, "h100", 8) == "gpu:h100:8"


def test_a_mig_gpus_nvlink_is_not_judged_but_said(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
    from gpucluster.nvlink import parse_nvlink_status

    capture = Path(ROOT.parent / "shared" / "captures" / "nvidia-smi-nvlink" /
                   "h200-mig-unsupported.txt")
    text = capture.read_text() if capture.exists() else (
        "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
        "Nvlink queries are not supported for Devices in MIG mode\n")
    checks = evaluate({"nvlink": parse_nvlink_status(text)},
                      {"nvlink_links_per_gpu": 18, "nvlink_link_speed_gbps": 26.562})
    assert [(c["name"], c["status"]) for c in checks] == [("gpu0_nvlink", "skip")]
    assert "MIG mode" in checks[0]["detail"]


def test_a_mode_left_pending_stops_with_what_to_do() -> None:
    class Pending(FakeSmi):
        def __call__(self, argv: list[str]) -> tuple[int, str, str]:
            if argv[1:] == ["-i", "0", "-mig", "1"]:
                self.calls.append(argv[1:])
                return 0, ("Warning: MIG mode is in pending enable state for GPU "
                           "00000000:07:00.0:In use by another client\n00000000:07:00.0 is "
                           "currently being used by one or more other processes\nAll done.\n"), ""
            return super().__call__(argv)

    smi = Pending({0: False}, "")
    with pytest.raises(RuntimeError, match=r"GPU 0: MIG mode is pending, not set: Warning: MIG "
                                           r"mode is in pending enable state .* reset it "
                                           r"\(nvidia-smi -r -i 0\) or reboot"):
        node_mig.apply(smi, [["7g.80gb"]], "nvidia-smi")
    assert not [c for c in smi.calls if "-cgi" in c]
