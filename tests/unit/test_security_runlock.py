"""The run lock belongs to the hosts a run touches, not to the path that named them: an inventory
directory and the hosts file in it are one cluster, and one run at a time may change it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from provisioner import runlock
from provisioner.inventory import HostEntry, Inventory, load
from provisioner.runlock import RunLocked
from tests.unit.test_monitoring_phase import sim_inventory


def inventory(source: Path, hosts: dict[str, str]) -> Inventory:
    return Inventory(source=source, hosts={
        name: HostEntry(name=name, groups=("gpu_nodes",), vars={},
                        connection={"ansible_host": address})
        for name, address in hosts.items()})


def test_a_directory_and_its_hosts_file_share_one_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inv_dir = sim_inventory(tmp_path, monkeypatch)
    runs = tmp_path / "runs"
    first = runlock.acquire(runs, load(inv_dir), "up")
    try:
        with pytest.raises(RunLocked) as refused:
            runlock.acquire(runs, load(inv_dir / "hosts.yml"), "validate")
        message = str(refused.value)
        assert "is in use by `provisioner up`" in message
        assert f"on the same hosts from {inv_dir.resolve()} (PID" in message
        assert f"(PID {os.getpid()}, started 20" in message
    finally:
        first.release()
    again = runlock.acquire(runs, load(inv_dir / "hosts.yml"), "validate")
    assert again.stale is None
    again.release()


def test_different_hosts_take_different_locks(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    a = runlock.acquire(runs, inventory(tmp_path / "a.yml", {"gpu-01": "10.0.0.1"}), "up")
    b = runlock.acquire(runs, inventory(tmp_path / "b.yml", {"gpu-02": "10.0.0.2"}), "up")
    # The same names at other addresses: another cluster.
    c = runlock.acquire(runs, inventory(tmp_path / "c.yml", {"gpu-01": "10.1.0.1"}), "up")
    assert len({a.path, b.path, c.path}) == 3
    for lock in (a, b, c):
        lock.release()


def test_the_host_order_does_not_matter(tmp_path: Path) -> None:
    hosts = {"gpu-01": "10.0.0.1", "gpu-02": "10.0.0.2"}
    one = inventory(tmp_path / "one.yml", hosts)
    other = inventory(tmp_path / "other.yml", dict(reversed(hosts.items())))
    assert runlock.lock_path(tmp_path, one) == runlock.lock_path(tmp_path, other)


def test_a_stale_lock_of_the_same_hosts_is_taken_over(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    inv = inventory(tmp_path / "inv", {"gpu-01": "10.0.0.1"})
    path = runlock.lock_path(runs, inv)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": 999999999, "command": "up",
                                "inventory": str(tmp_path / "inv" / "hosts.yml")}))
    lock = runlock.acquire(runs, inventory(tmp_path / "inv" / "hosts.yml",
                                           {"gpu-01": "10.0.0.1"}), "validate")
    assert lock.stale is not None and lock.stale["pid"] == 999999999
    lock.release()
    assert path.read_text() == ""
