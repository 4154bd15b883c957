"""gpuc-slurm-health as Slurm's Prolog (--prolog, through the slurm_node role's gpuc-slurm-prolog
wrapper) and the health check's handling of a node drained already, run for real against a
stand-in gpuc-health and scontrol (the wrapper and the role's preflight:
tests/integration/test_slurm_node_role.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "roles" / "slurm_node" / "files" / "gpuc_slurm_health.py"
UNHEALTHY = {"status": 2, "status_name": "unhealthy", "mode": "quick", "problems": [], "checks": [
    {"name": "gpu_count", "status": "fail",
     "detail": "7 of 8 GPUs visible (the driver enumerates 7; a GPU fell off the bus or is not "
               "seated)"},
    {"name": "gpu0_memory", "status": "pass", "detail": "memory healthy"}]}


def program() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuc_slurm_health_prolog", PROGRAM)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Node:
    """A stand-in gpuc-health answering ``status`` with ``result`` (recording its arguments and
    PATH), a stand-in scontrol recording every call and showing the node in ``state``, and the
    settings file the role writes."""

    def __init__(self, root: Path, status: int, result: dict[str, Any] | None,
                 state: str = "IDLE", sleep: float = 0, drain_statuses: Any = (2,)) -> None:
        self.root = root
        self.health = root / "gpuc-health"
        body = "" if result is None else f"cat <<'EOF'\n{json.dumps(result)}\nEOF\n"
        self.health.write_text(f"#!/bin/sh\necho \"$@\" > {root}/health-args\n"
                               f"echo \"$PATH\" > {root}/health-path\n"
                               + (f"sleep {sleep}\n" if sleep else "")
                               + f"{body}exit {status}\n")
        self.scontrol = root / "scontrol"
        self.scontrol.write_text(
            f"#!/bin/sh\necho \"$*\" >> {root}/scontrol-calls\n"
            f"[ \"$2\" = show ] && echo \"NodeName=gpu-02 Arch=x86_64 State={state} "
            f"Reason=none\"\nexit 0\n")
        for tool in (self.health, self.scontrol):
            tool.chmod(0o755)
        self.config = root / "slurm.json"
        settings: dict[str, Any] = {"node": "gpu-02", "health": str(self.health),
                                    "health_args": ["--state", "/s.json", "--kernel-log", "/k"]}
        if drain_statuses is not None:
            settings["drain_statuses"] = list(drain_statuses)
        self.config.write_text(json.dumps(settings))

    def run(self, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(PROGRAM), "--config", str(self.config),
                               "--scontrol", str(self.scontrol), *args], capture_output=True,
                              text=True, check=False, timeout=60,
                              env=os.environ if env is None else env)

    def calls(self) -> list[str]:
        path = self.root / "scontrol-calls"
        return path.read_text().splitlines() if path.exists() else []


# --- the Prolog ------------------------------------------------------------------------------

def test_an_unhealthy_node_is_drained_by_the_prolog_and_the_job_refused(tmp_path: Path) -> None:
    node = Node(tmp_path, 2, UNHEALTHY)
    done = node.run("--prolog")
    assert done.returncode == 1, done.stderr
    assert node.calls() == [
        "update NodeName=gpu-02 State=DRAIN Reason=gpuc prolog: gpu_count: 7 of 8 GPUs visible "
        "(the driver enumerates 7; a GPU fell off the bus or is not seated)"]
    # gpuc-health in its quick mode, with the health check's arguments (--quick ignores --state).
    assert (tmp_path / "health-args").read_text().split() == [
        "--json", "--quick", "--state", "/s.json", "--kernel-log", "/k"]
    assert "gpu-02 unhealthy, draining it" in done.stderr


@pytest.mark.parametrize("status", [0, 1])
def test_a_healthy_or_degraded_node_starts_the_job_and_asks_slurm_nothing(
        tmp_path: Path, status: int) -> None:
    node = Node(tmp_path, status, {"status": status, "checks": [], "problems": []})
    done = node.run("--prolog")
    assert (done.returncode, done.stderr, node.calls()) == (0, "", [])


@pytest.mark.parametrize(("status", "result", "why"), [
    (3, {"status": 3, "problems": ["/etc/gpuc-health/expected.json: missing or empty"],
         "checks": []}, "exit 3"),
    (2, None, "exit 2"),  # no verdict on stdout: a crash, not a judgement
    (1, None, "exit 1"),
])
def test_could_not_check_lets_the_job_start_and_says_so(
        tmp_path: Path, status: int, result: dict[str, Any] | None, why: str) -> None:
    node = Node(tmp_path, status, result)
    done = node.run("--prolog")
    assert done.returncode == 0 and node.calls() == []
    assert "could not check, the job may start" in done.stderr and why in done.stderr


def test_a_missing_health_command_or_settings_let_the_job_start(tmp_path: Path) -> None:
    node = Node(tmp_path, 2, UNHEALTHY)
    node.health.unlink()
    done = node.run("--prolog")
    assert done.returncode == 0 and node.calls() == []
    assert "is not installed" in done.stderr
    node.config.unlink()
    done = node.run("--prolog")
    assert done.returncode == 0 and "slurm.json" in done.stderr


def test_a_health_command_past_the_prolog_bound_lets_the_job_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    node = Node(tmp_path, 2, UNHEALTHY, sleep=5)
    mod = program()
    monkeypatch.setattr(mod, "PROLOG_TIMEOUT", 0.5)
    assert mod.main(["--prolog", "--config", str(node.config), "--scontrol",
                     str(node.scontrol)]) == 0
    assert node.calls() == []
    assert "did not finish within 0.5 s" in capsys.readouterr().err


def test_the_prolog_failing_itself_lets_the_job_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = program()

    def broken(config: str) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(mod, "prolog_verdict", broken)
    assert mod.main(["--prolog", "--config", str(tmp_path / "absent.json")]) == 0


def test_an_unhealthy_node_refuses_the_job_even_when_scontrol_fails(tmp_path: Path) -> None:
    node = Node(tmp_path, 2, UNHEALTHY)
    node.scontrol.unlink()
    done = node.run("--prolog")
    assert done.returncode == 1  # Slurm drains it itself ("Prolog error")
    assert "scontrol update failed" in done.stderr


def test_slurmd_gives_no_search_path_the_program_gives_one(tmp_path: Path) -> None:
    node = Node(tmp_path, 0, {"status": 0, "checks": [], "problems": []})
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    assert node.run("--prolog", env=env).returncode == 0
    assert (tmp_path / "health-path").read_text().strip() == program().DEFAULT_PATH


def test_the_prolog_reason_is_bounded_like_the_health_checks() -> None:
    mod = program()
    reason = mod.drain_reason({"checks": [{"name": "x", "status": "fail", "detail": "y" * 500}]},
                              2, mod.PROLOG_REASON_PREFIX)
    assert reason.startswith("gpuc prolog: x: yyy") and len(reason) == mod.REASON_MAX


# --- the health check and a node drained already ----------------------------------------------

def test_the_health_check_keeps_the_reason_of_a_node_drained_already(tmp_path: Path) -> None:
    node = Node(tmp_path, 2, UNHEALTHY, state="IDLE+DRAIN")
    assert node.run().returncode == 0
    assert node.calls() == ["--oneliner show node gpu-02"]  # no update: the reason stays


def test_the_health_check_drains_a_node_not_drained_yet(tmp_path: Path) -> None:
    node = Node(tmp_path, 2, UNHEALTHY, state="MIXED")
    assert node.run().returncode == 0
    assert node.calls()[-1].startswith("update NodeName=gpu-02 State=DRAIN Reason=gpuc: gpu_count")


@pytest.mark.parametrize(("statuses", "drains"), [([], False), (None, True)])
def test_empty_drain_statuses_report_only_and_absent_ones_mean_unhealthy(
        tmp_path: Path, statuses: list[int] | None, drains: bool) -> None:
    node = Node(tmp_path, 2, UNHEALTHY, drain_statuses=statuses)
    assert node.run().returncode == 0
    assert any(c.startswith("update") for c in node.calls()) is drains
