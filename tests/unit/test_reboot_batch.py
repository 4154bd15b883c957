"""How many nodes the driver role reboots at once (plugins/filter/batch.py, the reboot task's
throttle), and what `up --reboot` hands the role."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from provisioner import bringup
from tests.unit.collection_module import load_plugin

ROOT = Path(__file__).resolve().parents[2]
batch = load_plugin("filter", "batch")


@pytest.mark.parametrize(("size", "total", "count"), [
    ("10%", 100, 10), ("10%", 2000, 200), ("10%", 3, 1), ("10%", 11, 2),  # rounded up
    ("100%", 7, 7), ("1%", 1, 1), ("1", 50, 1), ("4", 50, 4), ("80", 50, 50),  # at most all
    (" 25% ", 8, 2), (3, 10, 3), ("5", 0, 1),  # no play hosts: still a valid throttle
])
def test_batch_count(size: Any, total: int, count: int) -> None:
    assert batch.batch_count(size, total) == count


@pytest.mark.parametrize("size", ["0", "0%", "101%", "-1", "1.5", "ten", "", "%", "10 %"])
def test_a_bad_batch_size_names_itself(size: str) -> None:
    with pytest.raises(AnsibleFilterError, match="is not a number of nodes"):
        batch.batch_count(size, 10)


def test_the_filter_is_registered_under_its_name() -> None:
    assert batch.FilterModule().filters()["batch_count"] is batch.batch_count


def test_the_role_throttles_its_reboot_with_the_filter_and_rescues_a_lost_node() -> None:
    service = yaml.safe_load((ROOT / "roles/nvidia_driver/tasks/service.yml").read_text())
    [include] = [t for t in service if "ansible.builtin.include_tasks" in t]
    assert include["ansible.builtin.include_tasks"]["file"] == "reboot.yml"
    assert include["when"] == "nvidia_driver_reboot_required and nvidia_driver_reboot_ok"
    tasks = yaml.safe_load((ROOT / "roles/nvidia_driver/tasks/reboot.yml").read_text())
    [block] = [t for t in tasks if "block" in t]
    [reboot] = [t for t in block["block"] if "gpucluster.provisioner.rolling_reboot" in t]
    assert "batch_count(ansible_play_hosts_all | length)" in reboot["throttle"]
    assert "nvidia_driver_reboot_batch" in reboot["throttle"]
    args = reboot["gpucluster.provisioner.rolling_reboot"]
    assert args["reboot_timeout"] == "{{ nvidia_driver_reboot_timeout }}"
    assert args["max_lost"] == "{{ nvidia_driver_reboot_max_lost }}"
    [rescue] = block["rescue"]
    assert "did not come back" in rescue["ansible.builtin.fail"]["msg"]
    assert "ansible_failed_result.withheld" in rescue["ansible.builtin.fail"]["msg"]
    defaults = yaml.safe_load((ROOT / "roles/nvidia_driver/defaults/main.yml").read_text())
    assert defaults["nvidia_driver_reboot_batch"] == "10%"
    assert batch.batch_count(defaults["nvidia_driver_reboot_batch"], 2000) == 200


def _extravars(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
               options: bringup.RunOptions) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def fake_run(*_args: Any, extravars: dict[str, Any], **_kw: Any) -> Any:
        seen.update(extravars)
        raise Stop

    class Plan:
        inventory = type("Inv", (), {"source": tmp_path / "hosts.yml"})()
        hosts: ClassVar[dict[str, None]] = {f"gpu-{i:02d}": None for i in range(40)}

        def write_inventory(self, path: Path) -> Path:
            path.write_text("{}\n")
            return path

    monkeypatch.setattr(bringup, "run_playbook", fake_run)
    report = type("R", (), {"lost_hosts": {}})()
    with pytest.raises(Stop):
        bringup.run_phases(Plan(), report, tmp_path, [("stack", "stack.yml")],  # type: ignore[arg-type]
                           options, lambda _name: nullcontext(None))  # type: ignore[arg-type]
    return seen


def test_up_hands_the_batch_and_timeout_to_the_role_only_when_given(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    given = _extravars(monkeypatch, tmp_path, bringup.RunOptions(
        reboot_ok=True, reboot_batch="2", reboot_timeout_s=90))
    assert given["nvidia_driver_reboot_ok"] is True
    assert (given["nvidia_driver_reboot_batch"], given["nvidia_driver_reboot_timeout"]) == ("2", 90)
    assert given["nvidia_driver_reboot_max_lost"] == 2  # 40 nodes, default policy: 5%
    assert given["nvidia_driver_reboot_record"] == str(tmp_path / "reboots.jsonl")
    default = _extravars(monkeypatch, tmp_path, bringup.RunOptions(reboot_ok=True))
    assert "nvidia_driver_reboot_batch" not in default  # the role's 10%
    assert "nvidia_driver_reboot_timeout" not in default
    strict = _extravars(monkeypatch, tmp_path, bringup.RunOptions(reboot_ok=True, max_fail="0"))
    assert strict["nvidia_driver_reboot_max_lost"] == 0
    quarter = _extravars(monkeypatch, tmp_path, bringup.RunOptions(reboot_ok=True,
                                                                    max_fail="25%"))
    assert quarter["nvidia_driver_reboot_max_lost"] == 10
    off = _extravars(monkeypatch, tmp_path, bringup.RunOptions())
    assert off["nvidia_driver_reboot_ok"] is False and "nvidia_driver_reboot_max_lost" not in off
    assert "nvidia_driver_reboot_record" not in off


# --- the rolling_reboot action: ansible.builtin.reboot with a circuit breaker ---------------

_aspec = importlib.util.spec_from_file_location("gpuc_rolling_reboot",
                                                ROOT / "plugins/action/rolling_reboot.py")
assert _aspec and _aspec.loader
rolling = importlib.util.module_from_spec(_aspec)
_aspec.loader.exec_module(rolling)


class _Play:
    def __init__(self, uuid: str) -> None:
        self._uuid = uuid


class _Task:
    def __init__(self, args: dict[str, Any], play: _Play, check_mode: bool = False) -> None:
        self.args = args
        self.check_mode = check_mode
        self._parent = type("Block", (), {"_play": play, "_parent": None})()


def _action(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, outcomes: dict[str, dict[str, Any]],
            calls: list[str]) -> Callable[..., dict[str, Any]]:
    """Run the action for a host; the base reboot (the boundary) answers from ``outcomes``."""
    monkeypatch.setattr(rolling.tempfile, "gettempdir", lambda: str(tmp_path))

    def base_run(self: Any, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> Any:
        host = (task_vars or {})["inventory_hostname"]
        # ansible.builtin.reboot never sees the arguments of its own
        assert "max_lost" not in self._task.args and "record" not in self._task.args
        calls.append(host)
        # It reads the boot id before the reboot, then until it changes (when the node is back).
        self.get_system_boot_time(None)
        if outcomes[host].get("rebooted"):
            self.get_system_boot_time(None)
            if not outcomes[host].get("failed"):
                self.get_system_boot_time(None)
        return dict(outcomes[host])

    def boot_id(self: Any, _distribution: Any) -> str:
        self.fake_reads = getattr(self, "fake_reads", 0) + 1
        return "old" if self.fake_reads < 3 else "new"  # the second read: not back yet

    monkeypatch.setattr(rolling.RebootAction, "run", base_run)
    monkeypatch.setattr(rolling.RebootAction, "get_system_boot_time", boot_id)

    def run(host: str, play: _Play, check_mode: bool = False, **args: Any) -> dict[str, Any]:
        action = object.__new__(rolling.ActionModule)
        action._task = _Task(dict(args), play, check_mode)
        return action.run(task_vars={"inventory_hostname": host})  # type: ignore[no-any-return]

    return run


BACK = {"changed": True, "rebooted": True, "failed": False}
NEVER = {"changed": False, "rebooted": True, "failed": True,
         "msg": "Timed out waiting for last boot time check (timeout=30)"}
NOT_STARTED = {"changed": False, "rebooted": False, "failed": True, "msg": "no shutdown command"}


def test_reboots_are_withheld_once_more_nodes_than_allowed_did_not_come_back(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[str] = []
    run = _action(monkeypatch, tmp_path, {"a": NEVER, "b": BACK, "c": NEVER, "d": BACK,
                                          "e": NOT_STARTED, "f": BACK}, calls)
    play = _Play("play-1")
    assert run("a", play, max_lost=1)["failed"] is True       # 1 lost: still within the limit
    assert run("b", play, max_lost=1) == BACK
    assert run("c", play, max_lost="1")["failed"] is True     # 2 lost: more than 1
    held = run("d", play, max_lost=1)
    assert held["withheld"] is True and held["failed"] is True and held["rebooted"] is False
    assert held["lost_in_this_run"] == ["a", "c"]
    assert "2 node(s) of this run did not come back from theirs (a, c)" in held["msg"]
    assert calls == ["a", "b", "c"]                           # d was never rebooted
    # Another run (another play id) starts with an empty ledger; -1 never withholds.
    assert run("d", _Play("play-2"), max_lost=0) == BACK
    assert run("f", play, max_lost=-1) == BACK
    assert run("f", play) == BACK                              # default: -1


def test_a_reboot_that_never_started_is_not_a_lost_node(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[str] = []
    run = _action(monkeypatch, tmp_path, {"e": NOT_STARTED, "b": BACK}, calls)
    play = _Play("play-3")
    assert run("e", play, max_lost=0)["failed"] is True
    assert run("b", play, max_lost=0) == BACK                 # the node went nowhere: no loss
    assert rolling.lost_nodes(rolling.ledger_path("play-3", str(tmp_path))) == []


def test_check_mode_and_bad_input(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[str] = []
    run = _action(monkeypatch, tmp_path, {"a": NEVER, "b": {"changed": True, "rebooted": True}},
                  calls)
    play = _Play("play-4")
    run("a", play, max_lost=0)
    # Check mode never withholds (nothing reboots); the base action reports the would-be reboot.
    assert run("b", play, check_mode=True, max_lost=0)["rebooted"] is True
    bad = run("b", play, max_lost="some")
    assert bad["failed"] is True and "max_lost must be a whole number" in bad["msg"]
    assert calls == ["a", "b"]


def test_every_reboot_is_recorded_with_its_times_boot_ids_and_outcome(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import json

    calls: list[str] = []
    run = _action(monkeypatch, tmp_path, {"a": BACK, "b": NEVER, "c": NOT_STARTED, "d": BACK},
                  calls)
    play, record = _Play("play-5"), tmp_path / "reboots.jsonl"
    for host, max_lost in (("a", 1), ("b", 1), ("c", 1), ("d", 0)):  # d: after b was lost
        run(host, play, max_lost=max_lost, record=str(record))
    run("a", play, check_mode=True, record=str(record))  # check mode records nothing
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(e["host"], e["outcome"], e["boot_id_before"], e["boot_id_after"])
            for e in entries] == [("a", "back", "old", "new"), ("b", "lost", "old", None),
                                  ("c", "failed", "old", None), ("d", "withheld", None, None)]
    assert all(e["started_at"] <= e["ended_at"] for e in entries)
    assert entries[0]["ended_at"] <= entries[1]["started_at"]
    assert calls == ["a", "b", "c", "a"]  # d withheld; the base action answers check mode


def test_the_run_reads_its_reboots_into_the_report(tmp_path: Path) -> None:
    """How many nodes were down at once is read from the reboots' own spans: a lost node's
    span ends when its wait gave up; one that ends as another starts was not down beside it."""
    import json

    from provisioner.report import Report

    spans = [("a", "10:00:00", "10:01:00", "back"), ("b", "10:01:00", "10:02:00", "back"),
             ("c", "10:01:30", "10:03:00", "lost"), ("d", "10:04:00", "10:04:00", "withheld")]
    (tmp_path / bringup.REBOOT_RECORD).write_text("".join(
        json.dumps({"host": h, "started_at": f"2026-11-28T{s}", "ended_at": f"2026-11-28T{e}",
                    "outcome": o}) + "\n" for h, s, e, o in reversed(spans)))
    report = Report(run_id="r", command="up", inventory="i", simulated=True, started_at="t")
    report.notes.append("3 reboot(s): an earlier batch's note")
    bringup._record_reboots(report, tmp_path)
    assert [r["host"] for r in report.reboots] == ["a", "b", "c", "d"]
    assert report.notes == ["4 reboot(s): 2 back, 1 lost, 1 withheld; at most 2 node(s) down "
                            "at once"]
    assert bringup.reboots_down_at_once(report.reboots[:2]) == 1
    bringup._record_reboots(report, tmp_path / "none")  # no reboots: nothing changes
    assert len(report.reboots) == 4


def test_the_ledger_is_per_play_and_safe_to_name(tmp_path: Path) -> None:
    path = rolling.ledger_path("../../etc/x y", str(tmp_path))
    assert path.parent == tmp_path and path.name == "gpuc-rolling-reboot-etcxy.lost"
    rolling.record_lost(path, "n1")
    rolling.record_lost(path, "n2")
    assert rolling.lost_nodes(path) == ["n1", "n2"]
