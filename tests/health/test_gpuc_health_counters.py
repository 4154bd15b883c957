"""gpuc-health over two readings of the error counters: the first is the baseline kept in its
state file (--state), a counter raised before the next run fails that port's check and makes the
node unhealthy; without a state file every reading is a first one."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.health.conftest import Node

MakeNode = Callable[..., Node]


def checks(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in result["checks"]}


def test_a_counter_raised_between_two_runs_fails_its_port(sim_node: MakeNode) -> None:
    node = sim_node()
    rc, first = node.json()
    assert rc == 0
    assert checks(first)["ib_mlx5_1_port1_errors"]["status"] == "skip"
    assert checks(first)["ib_mlx5_1_port1_errors"]["detail"] == (
        "mlx5_1/1: first reading: baseline recorded")
    state = json.loads((node.root / "state/state.json").read_text())
    baseline = state["counters"]
    assert baseline["ib"]["mlx5_1/1"]["symbol_error"] == 0
    assert "0000:19:00.0" in baseline["pcie"]  # GPU0's PCI function, by its nvidia-smi bus id

    rc, second = node.json()
    assert rc == 0, [c for c in second["checks"] if c["status"] in ("fail", "warn")]
    assert checks(second)["ib_mlx5_1_port1_errors"]["status"] == "pass"
    assert checks(second)["gpu0_pcie_errors"]["status"] == "pass"

    (node.root / "ib/mlx5_1/ports/1/counters/symbol_error").write_text("250\n")
    rc, third = node.json()
    assert rc == 2 and third["status_name"] == "unhealthy"
    bad = checks(third)["ib_mlx5_1_port1_errors"]
    assert bad["status"] == "fail" and bad["measured"]["symbol_error"] == 250
    assert bad["detail"].startswith("mlx5_1/1: symbol_error +250 (250 per hour, more than 10)")
    assert [c["name"] for c in third["checks"] if c["status"] == "fail"] == [
        "ib_mlx5_1_port1_errors"]
    # The baseline stays (it is younger than an hour): the rise is reported again.
    again = json.loads((node.root / "state/state.json").read_text())["counters"]
    assert again == baseline
    assert node.json()[0] == 2
    text = node.run().stdout
    assert "FAIL ib_mlx5_1_port1_errors" in text and "symbol_error +250" in text


def test_a_pcie_error_between_two_runs_fails_the_gpu(sim_node: MakeNode) -> None:
    node = sim_node()
    assert node.json()[0] == 0
    nonfatal = node.root / "pci/0000:4c:00.0/aer_dev_nonfatal"
    nonfatal.write_text(nonfatal.read_text().replace("CmpltTO 0", "CmpltTO 1")
                        .replace("TOTAL_ERR_NONFATAL 0", "TOTAL_ERR_NONFATAL 1"))
    rc, result = node.json()
    assert rc == 2
    bad = checks(result)["gpu2_pcie_errors"]
    assert bad["status"] == "fail"
    assert bad["detail"].startswith("gpu2 (0000:4c:00.0): 1 uncorrectable non-fatal PCIe "
                                    "error(s) (CmpltTO +1)")


def test_the_xid_bookkeeping_and_the_counter_baseline_share_the_state_file(
        sim_node: MakeNode) -> None:
    node = sim_node("gpu1-xid-13")
    assert node.json()[0] == 1  # the Xid warns once
    state = json.loads((node.root / "state/state.json").read_text())
    assert state["xid_seen"] == 1 and "counters" in state
    assert node.json()[0] == 0  # and is not reported twice; the counters still pass


def test_without_a_state_file_every_reading_is_a_baseline(sim_node: MakeNode) -> None:
    node = sim_node()
    assert node.json()[0] == 0
    (node.root / "ib/mlx5_0/ports/1/counters/link_downed").write_text("5\n")
    rc, result = node.json("--state", "")
    assert rc == 0
    assert checks(result)["ib_mlx5_0_port1_errors"]["status"] == "skip"


def test_a_damaged_state_file_starts_a_new_baseline(sim_node: MakeNode) -> None:
    node = sim_node()
    (node.root / "state").mkdir(parents=True)
    (node.root / "state/state.json").write_text("{not json")
    rc, result = node.json()
    assert rc == 0 and checks(result)["ib_mlx5_0_port1_errors"]["status"] == "skip"
    assert "counters" in json.loads((node.root / "state/state.json").read_text())


def test_a_stateless_run_judges_against_another_run_s_baseline_without_writing_it(
        sim_node: MakeNode) -> None:
    """What `provisioner health` runs (playbooks/health.yml): --state '' and the timer's state
    file as --counters-from."""
    node = sim_node()
    assert node.json()[0] == 0  # the timer's run: the baseline in state/state.json
    timer_state = node.root / "state/state.json"
    kept = timer_state.read_text()
    (node.root / "ib/mlx5_0/ports/1/counters/link_downed").write_text("1\n")
    rc, result = node.json("--state", "", "--counters-from", str(timer_state))
    assert rc == 2
    assert "link_downed +1 (more than 0 between two readings)" in (
        checks(result)["ib_mlx5_0_port1_errors"]["detail"])
    assert timer_state.read_text() == kept
    rc, result = node.json("--state", "", "--counters-from", str(node.root / "absent.json"))
    assert rc == 0 and checks(result)["ib_mlx5_0_port1_errors"]["status"] == "skip"
