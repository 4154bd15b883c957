"""How many nodes the driver role reboots at once (plugins/filter/batch.py, the reboot task's
throttle), and what `up --reboot` hands the role."""

from __future__ import annotations

import importlib.util
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from provisioner import bringup

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpuc_batch_filter", ROOT / "plugins/filter/batch.py")
assert _spec and _spec.loader
batch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(batch)


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
    tasks = yaml.safe_load((ROOT / "roles/nvidia_driver/tasks/service.yml").read_text())
    [block] = [t for t in tasks if "block" in t]
    [reboot] = [t for t in block["block"] if "ansible.builtin.reboot" in t]
    assert "batch_count(ansible_play_hosts_all | length)" in reboot["throttle"]
    assert "nvidia_driver_reboot_batch" in reboot["throttle"]
    assert reboot["ansible.builtin.reboot"]["reboot_timeout"] == "{{ nvidia_driver_reboot_timeout }}"
    [rescue] = block["rescue"]
    assert "did not come back" in rescue["ansible.builtin.fail"]["msg"]
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
    default = _extravars(monkeypatch, tmp_path, bringup.RunOptions(reboot_ok=True))
    assert "nvidia_driver_reboot_batch" not in default  # the role's 10%
    assert "nvidia_driver_reboot_timeout" not in default
