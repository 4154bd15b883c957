"""The CLI in-process (provisioner.cli.main), where the e2e tier was its only test: the plan
table's columns, the Kubernetes label table, the options `up`, `smoke`, `upgrade` and `health`
hand to the run they start, the error lines (bad input, interrupts, a bug of ours) and their
exit codes. The run itself is replaced at its boundary (bringup.run_phases, upgrade.run,
cluster_health.run, the simulator's cluster functions): nothing here contacts a host or starts a
container."""

from __future__ import annotations

import io
import json
import signal
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import bringup, cli, plan, render, runlock, upgrade
from provisioner.commands import common
from provisioner.errors import InputError

REAL_ROWS_TABLE = render.rows_table
INTERNAL = " (rerun with PROVISIONER_DEBUG=1 for the traceback)"


def write_inventory(path: Path, gpu: dict[str, str] | None = None, cpu: bool = True,
                    **gpu_vars: Any) -> Path:
    hosts = {name: {"gpu_profile": profile, "ansible_host": f"{name}.invalid", **gpu_vars}
             for name, profile in (gpu or {"gpu-01": "hgx-h100-8gpu"}).items()}
    children: dict[str, Any] = {"gpu_nodes": {"hosts": hosts}}
    if cpu:
        children["cpu_nodes"] = {"hosts": {"login-01": {"ansible_host": "login-01.invalid"}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"all": {"children": children}}))
    return path


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    return write_inventory(tmp_path / "inv" / "hosts.yml")


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISIONER_RUNS_DIR", str(tmp_path / "runs"))
    for name in [k for k in __import__("os").environ if k.startswith("ANSIBLE_")]:
        monkeypatch.delenv(name)
    return tmp_path / "runs"


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def unwrapped(text: str) -> str:
    """Text without its white space: what a console of any width shows (lines it does not
    soft-wrap break at its width, which is 80 in a pytest-xdist worker)."""
    return "".join(text.split())


@dataclass
class Tables:
    """render.rows_table, recorded (and still drawn)."""

    calls: list[tuple[str, list[dict[str, str]]]] = field(default_factory=list)

    def __call__(self, console: Any, title: str, rows: list[dict[str, str]]) -> None:
        self.calls.append((title, rows))
        REAL_ROWS_TABLE(console, title, rows)


@pytest.fixture
def tables(monkeypatch: pytest.MonkeyPatch) -> Tables:
    recorder = Tables()
    monkeypatch.setattr(render, "rows_table", recorder)
    return recorder


@dataclass
class FakeRun:
    """bringup.run_phases: what `_run` hands it, and the verdict it returns."""

    ok: bool = True
    error: BaseException | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, cp: Any, report: Any, run_dir: Path, phases: Any, options: Any,
                 display: Any) -> bool:
        self.calls.append({"plan": cp, "report": report, "run_dir": run_dir,
                           "phases": tuple(phases), "options": options})
        if self.error is not None:
            raise self.error
        return self.ok

    @property
    def options(self) -> bringup.RunOptions:
        [call] = self.calls
        return call["options"]  # type: ignore[no-any-return]

    @property
    def phases(self) -> tuple[tuple[str, str], ...]:
        [call] = self.calls
        return call["phases"]  # type: ignore[no-any-return]


@pytest.fixture
def fake_run(monkeypatch: pytest.MonkeyPatch, runs: Path) -> FakeRun:
    fake = FakeRun()
    monkeypatch.setattr(bringup, "run_phases", fake)
    return fake


def saved_report(runs: Path) -> dict[str, Any]:
    [path] = runs.glob("*/report.json")
    return json.loads(path.read_text())  # type: ignore[no-any-return]


# plan ----------------------------------------------------------------------------------------


def test_plan_table_shows_each_version_in_its_column(
        inventory: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    shown: list[list[dict[str, str]]] = []
    monkeypatch.setattr(render, "plan", lambda _console, rows, simulated: shown.append(rows))
    assert cli.main(["plan", "-i", str(inventory)]) == 0
    v = plan.build(str(inventory)).hosts["gpu-01"].variables()
    assert v["nvidia_fabricmanager_enabled"] is True  # an HGX board: its column has a version
    [rows] = shown
    gpu, cpu = ({r["host"]: r for r in rows}[h] for h in ("gpu-01", "login-01"))
    assert gpu == {
        "host": "gpu-01", "kind": "gpu", "profile": "hgx-h100-8gpu",
        "stack": v["gpu_stack"],
        "driver": f"{v['nvidia_driver_version']} ({v['nvidia_driver_module_flavor']})",
        "cuda": v["cuda_toolkit_version"], "cudnn": v["cudnn_version"],
        "nccl": v["nccl_version"], "ctk": v["nvidia_container_toolkit_version"],
        "fabric mgr": v["nvidia_fabricmanager_version"]}
    assert "-" not in gpu.values() and all(gpu.values())
    assert cpu == {"host": "login-01", "kind": "cpu", "profile": "-", "stack": "-",
                   "driver": "-", "cuda": "-", "cudnn": "-", "nccl": "-", "ctk": "-",
                   "fabric mgr": "-"}
    assert lines(capsys.readouterr().out) == ["inventory OK: 2 host(s), 1 GPU node(s)"]


def test_plan_table_without_fabric_manager_says_so(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path / "hosts.yml", {"l40s-01": "pcie-l40s-4gpu"}, cpu=False)
    cp = plan.build(str(inv))
    [row] = cli._plan_rows(cp)
    v = cp.hosts["l40s-01"].variables()
    assert v["nvidia_fabricmanager_enabled"] is False
    assert row["fabric mgr"] == "-" and row["ctk"] == v["nvidia_container_toolkit_version"]


def test_plan_json_names_each_host_its_kind_and_profile(
        inventory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "-i", str(inventory), "--json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["inventory"] == str(inventory) and doc["simulated"] is False
    assert doc["plan_inventory"] is None  # no -o
    assert sorted((h["host"], h["kind"], h["profile"]) for h in doc["hosts"]) == [
        ("gpu-01", "gpu", "hgx-h100-8gpu"), ("login-01", "cpu", None)]
    assert lines(out.err) == ["inventory OK: 2 host(s), 1 GPU node(s)"]


def test_plan_quiet_prints_the_verdict_only(inventory: Path, tables: Tables,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["-q", "plan", "-i", str(inventory)], ["plan", "-q", "-i", str(inventory)]):
        assert cli.main(argv) == 0
        assert capsys.readouterr().out == "inventory OK: 2 host(s), 1 GPU node(s)\n"
    assert tables.calls == []


def test_plan_output_line_is_one_line_however_long(tmp_path: Path, inventory: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / ("a" * 200) / ("b" * 200) / "plan.yml"
    target.parent.mkdir(parents=True)
    assert cli.main(["-q", "plan", "-i", str(inventory), "-o", str(target)]) == 0
    assert lines(capsys.readouterr().out) == [
        "inventory OK: 2 host(s), 1 GPU node(s)",
        f"plan inventory written to {target}: ansible-playbook -i {inventory} -i {target} "
        "playbooks/site.yml"]


def test_a_simulated_profile_in_a_real_inventory_names_the_first_host(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = write_inventory(tmp_path / "hosts.yml", {"sim-b": "sim-h100-8gpu",
                                                   "sim-a": "sim-h100-8gpu"}, cpu=False)
    assert cli.main(["plan", "-i", str(inv)]) == 2
    assert lines(capsys.readouterr().err) == [
        f"error: inventory {inv}: host sim-a uses the simulated profile sim-h100-8gpu but the "
        "inventory is not a simulated cluster (provisioner_simulated: true on every host); use "
        "a real hardware profile"]


# export k8s ----------------------------------------------------------------------------------


def test_export_table_columns_are_the_label_names(tmp_path: Path, inventory: Path,
                                                  tables: Tables,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "handoff"
    assert cli.main(["export", "k8s", "-i", str(inventory), "-o", str(out_dir)]) == 0
    [(title, rows)] = tables.calls
    labels = yaml.safe_load((out_dir / "node-labels.yaml").read_text())["gpu-01"]
    assert title == "Kubernetes node labels"
    assert list(rows[0]) == ["node", "gpu.product", "gpu.count", "stack", "driver", "cuda",
                             "nccl", "cudnn", "profile"]
    assert rows == [{"node": "gpu-01", "gpu.product": "NVIDIA-H100-80GB-HBM3", "gpu.count": "8",
                     "stack": labels["gpucluster.io/stack"],
                     "driver": labels["gpucluster.io/driver"],
                     "cuda": labels["gpucluster.io/cuda"], "nccl": labels["gpucluster.io/nccl"],
                     "cudnn": labels["gpucluster.io/cudnn"], "profile": "hgx-h100-8gpu"}]
    out = lines(capsys.readouterr().out)
    assert out[-1] == (
        f"Kubernetes hand-off for 1 GPU node(s) written to {out_dir}: node-labels.yaml, "
        f"label-nodes.sh, gpu-operator-values.yaml; apply with sh {out_dir}/label-nodes.sh and "
        f"helm install --values {out_dir}/gpu-operator-values.yaml")


def test_export_column_is_what_follows_the_last_slash(
        tmp_path: Path, inventory: Path, tables: Tables,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import k8s

    real = k8s.write_handoff

    def handoff(cp: Any, directory: Path) -> Any:
        from dataclasses import replace

        return replace(real(cp, directory), labels={"gpu-01": {"example.com/team/a": "x", "plain": "y",
                                    "nvidia.com/gpu.product": "z"}})

    monkeypatch.setattr(k8s, "write_handoff", handoff)
    assert cli.main(["export", "k8s", "-i", str(inventory), "-o", str(tmp_path / "o")]) == 0
    assert tables.calls == [("Kubernetes node labels",
                             [{"node": "gpu-01", "a": "x", "plain": "y", "gpu.product": "z"}])]


def test_export_of_many_nodes_groups_the_rows_unless_verbose(
        tmp_path: Path, tables: Tables, capsys: pytest.CaptureFixture[str]) -> None:
    n = render.MAX_PLAN_ROWS + 1
    inv = write_inventory(tmp_path / "hosts.yml",
                          {f"gpu-{i:02d}": "hgx-h100-8gpu" for i in range(n)}, cpu=False)
    assert cli.main(["export", "k8s", "-i", str(inv), "-o", str(tmp_path / "o")]) == 0
    [(title, rows)] = tables.calls
    assert title == (f"Kubernetes node labels of {n} nodes, one row per distinct set (-v lists "
                     "every node)")
    assert len(rows) == 1 and rows[0]["nodes"] == f"{n}: gpu-00, gpu-01, gpu-02, ..."
    assert rows[0]["profile"] == "hgx-h100-8gpu"
    tables.calls.clear()
    assert cli.main(["export", "k8s", "-v", "-i", str(inv), "-o", str(tmp_path / "o")]) == 0
    [(title, rows)] = tables.calls
    assert title == "Kubernetes node labels" and len(rows) == n


# up: the options the run gets ---------------------------------------------------------------


def test_up_passes_every_option_to_the_run(inventory: Path, fake_run: FakeRun,
                                           runs: Path) -> None:
    from provisioner.bringup import parse_max_fail
    from provisioner.upgrade import parse_batch_size

    assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--limit", "gpu-01",
                     "--timeout", "600", "--check", "--reboot", "--batch-size", "2",
                     "--reboot-timeout", "900", "--max-fail", "1",
                     "--framework", "tensorflow"]) == 0
    assert fake_run.options == bringup.RunOptions(
        limit="gpu-01", timeout_s=600, check_mode=True, reboot_ok=True,
        reboot_batch=parse_batch_size("2"), reboot_timeout_s=900,
        max_fail=parse_max_fail("1"), launcher="direct", framework="tensorflow",
        retry_hosts=(), executors=None, limit_hosts=None)
    assert fake_run.phases == bringup.UP_PHASES  # --check: no smoke job
    report = saved_report(runs)
    assert (report["command"], report["outcome"], report["exit_code"]) == ("up", "passed", 0)


def test_up_defaults(inventory: Path, fake_run: FakeRun) -> None:
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes"]) == 0
    assert fake_run.options == bringup.RunOptions(
        limit=None, timeout_s=7200, check_mode=False, reboot_ok=False, reboot_batch=None,
        reboot_timeout_s=None, max_fail=None, launcher="direct", framework="pytorch")
    assert fake_run.phases == (*bringup.UP_PHASES, bringup.SMOKE_PHASE)
    [call] = fake_run.calls
    assert call["plan"].inventory.source == inventory and call["report"].command == "up"


def test_up_skip_smoke_leaves_out_the_smoke_phase(inventory: Path, fake_run: FakeRun) -> None:
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--skip-smoke"]) == 0
    assert fake_run.phases == bringup.UP_PHASES
    assert fake_run.options.check_mode is False


def test_a_failed_run_exits_1_and_its_report_says_failed(
        inventory: Path, fake_run: FakeRun, runs: Path) -> None:
    fake_run.ok = False
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes"]) == 1
    report = saved_report(runs)
    assert (report["outcome"], report["exit_code"]) == ("failed", 1)


def test_up_executors_get_the_limit_as_hosts(inventory: Path, fake_run: FakeRun,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import executors as ex

    checked: list[Any] = []
    monkeypatch.setattr(ex, "check", checked.append)
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--limit", "gpu-01",
                     "--executors", "exec-1,exec-2"]) == 0
    expected = ex.parse("exec-1,exec-2", None)
    assert checked == [expected]
    assert fake_run.options.executors == expected
    assert fake_run.options.limit_hosts == ("gpu-01",)
    assert fake_run.options.limit == "gpu-01"


def test_up_refuses_reboot_with_executors_before_contacting_them(
        inventory: Path, fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Each executor keeps its own reboot ledger and throttle: two executors could reboot two
    # batches at once. Refused, and no executor or node is contacted.
    from provisioner import executors as ex

    checked: list[Any] = []
    monkeypatch.setattr(ex, "check", checked.append)
    assert cli.main(["up", "-i", str(inventory), "--yes", "--reboot",
                     "--executors", "exec-1,exec-2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --reboot and --executors do not go together: each executor would "
                   "keep its own reboot limit, so the cluster could lose that many batches at "
                   "once; reboot without --executors"]
    assert checked == [] and fake_run.calls == []


def test_validate_passes_limit_and_executors(inventory: Path, fake_run: FakeRun,
                                             monkeypatch: pytest.MonkeyPatch,
                                             runs: Path) -> None:
    from provisioner import executors as ex

    monkeypatch.setattr(ex, "check", lambda _e: None)
    assert cli.main(["-q", "validate", "-i", str(inventory), "--limit", "login-01,gpu-01",
                     "--executors", "exec-1"]) == 0
    assert fake_run.phases == bringup.VALIDATE_PHASES
    assert fake_run.options == bringup.RunOptions(
        limit="login-01,gpu-01", executors=ex.parse("exec-1", None),
        limit_hosts=("login-01", "gpu-01"))  # the inventory's order
    assert saved_report(runs)["command"] == "validate"


@pytest.mark.parametrize(("argv", "message"), [
    (["--executor-ssh-config", "cfg"], "--executor-ssh-config says how to reach --executors: "
     "add --executors, or leave it out"),
    (["--executors", "e1", "--limit", "nothing-*"], "--limit nothing-*: matches no host of the "
     "inventory"),
    (["--batch-size", "2"], "--batch-size and --reboot-timeout say how `up --reboot` reboots: "
     "add --reboot, or leave them out"),
    (["--reboot-timeout", "60"], "--batch-size and --reboot-timeout say how `up --reboot` "
     "reboots: add --reboot, or leave them out"),
    (["--retry-failed", "r1", "--limit", "gpu-01"], "--retry-failed picks the hosts itself: "
     "drop --limit"),
])
def test_up_refuses_options_that_do_not_go_together(
        inventory: Path, fake_run: FakeRun, argv: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["up", "-i", str(inventory), "--yes", *argv]) == 2
    assert lines(capsys.readouterr().err) == [f"error: {message}"]
    assert fake_run.calls == []


def test_up_on_real_hosts_without_yes_and_no_terminal_is_refused(
        inventory: Path, fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.main(["up", "-i", str(inventory)]) == 2
    assert lines(capsys.readouterr().err) == [
        "error: up changes real hosts: pass --yes to run non-interactively"]
    assert fake_run.calls == []


def test_retry_failed_resumes_the_lost_hosts_from_their_phase(
        tmp_path: Path, inventory: Path, fake_run: FakeRun, runs: Path) -> None:
    run_id = "20261124-000000-abcd"
    (runs / run_id).mkdir(parents=True)
    hosts = {"gpu-01": {"failed": 0, "unreachable": 0}}
    (runs / run_id / "report.json").write_text(json.dumps({
        "run_id": run_id, "command": "up", "outcome": "failed", "exit_code": 1,
        "inventory": str(inventory), "checks": [],
        "lost_hosts": {"gpu-01": {"phase": "stack", "reason": "unreachable"}},
        "phases": [{"name": "preflight", "hosts": hosts}, {"name": "stack", "hosts": hosts}]}))
    # RUN as its directory (trailing slash) or its report.json: the same run.
    for given in (f"{runs / run_id}/", str(runs / run_id / "report.json"), run_id):
        fake_run.calls.clear()
        assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--retry-failed",
                         given]) == 0
        names = [name for name, _ in (*bringup.UP_PHASES, bringup.SMOKE_PHASE)]
        assert [name for name, _ in fake_run.phases] == names[names.index("stack"):]
        assert fake_run.options.retry_hosts == ("gpu-01",)
        report = fake_run.calls[0]["report"]
        assert report.resumes == run_id and report.retried_hosts == ["gpu-01"]
        assert report.notes[0] == (f"resumes run {run_id}: gpu-01 from stack, then "
                                   "validate and after on every node")


# smoke, upgrade, health ---------------------------------------------------------------------


def test_smoke_runs_the_smoke_phase_with_its_options(inventory: Path, fake_run: FakeRun,
                                                     runs: Path) -> None:
    assert cli.main(["-q", "smoke", "-i", str(inventory)]) == 0
    assert fake_run.phases == (bringup.SMOKE_PHASE,)
    assert fake_run.options == bringup.RunOptions(limit=None, timeout_s=1800,
                                                  launcher="direct", framework="pytorch")
    assert saved_report(runs)["command"] == "smoke"


def test_smoke_options(inventory: Path, fake_run: FakeRun) -> None:
    assert cli.main(["-q", "smoke", "-i", str(inventory), "--limit", "gpu-01", "--timeout",
                     "60", "--launcher", "direct", "--framework", "tensorflow"]) == 0
    assert fake_run.options == bringup.RunOptions(limit="gpu-01", timeout_s=60,
                                                  launcher="direct", framework="tensorflow")


def test_upgrade_passes_its_settings_to_the_batches(
        inventory: Path, runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import matrix

    stack = matrix.load_matrix().default_stack
    seen: list[dict[str, Any]] = []

    def batches(cp: Any, report: Any, run_dir: Path, phases: Any, options: Any, display: Any,
                *, settings: upgrade.UpgradeSettings) -> bool:
        seen.append({"phases": tuple(phases), "options": options, "settings": settings})
        return True

    monkeypatch.setattr(upgrade, "run", batches)
    assert cli.main(["-q", "upgrade", "-i", str(inventory), "--stack", stack, "--yes"]) == 0
    assert seen == [{"phases": upgrade.BATCH_PHASES,
                     "options": bringup.RunOptions(timeout_s=7200, reboot_ok=False),
                     "settings": upgrade.UpgradeSettings(
                         stack=stack, batch_size="1", drain_timeout_s=3600, force=False,
                         max_failed_batches=1)}]
    assert saved_report(runs)["command"] == "upgrade"
    seen.clear()
    for path in runs.glob("*/report.json"):
        path.unlink()
    assert cli.main(["-q", "upgrade", "-i", str(inventory), "--stack", stack, "--yes",
                     "--batch-size", "50%", "--drain-timeout", "30", "--force",
                     "--max-failed-batches", "2", "--reboot", "--timeout", "99"]) == 0
    assert seen[0]["options"] == bringup.RunOptions(timeout_s=99, reboot_ok=True)
    assert seen[0]["settings"] == upgrade.UpgradeSettings(
        stack=stack, batch_size=upgrade.parse_batch_size("50%"), drain_timeout_s=30,
        force=True, max_failed_batches=2)


def test_health_json_is_the_summary_and_the_exit_is_the_worst_node(
        inventory: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import cluster_health

    calls: list[dict[str, Any]] = []
    summary = cluster_health.HealthSummary(run_id="r1", run_dir=tmp_path, simulated=False, nodes=[
        cluster_health.NodeHealth("gpu-01", 1, warnings=("ecc",), detail="1 warning")])

    def run(cp: Any, progress: Any = None, limit: str | None = None,
            timeout_s: int = 0) -> cluster_health.HealthSummary:
        calls.append({"limit": limit, "timeout_s": timeout_s})
        return summary

    monkeypatch.setattr(cluster_health, "run", run)
    assert cli.main(["health", "-i", str(inventory), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == summary.to_dict()
    assert calls == [{"limit": None, "timeout_s": 300}]
    assert cli.main(["-q", "health", "-i", str(inventory), "--limit", "gpu-01",
                     "--timeout", "20"]) == 1
    assert calls[-1] == {"limit": "gpu-01", "timeout_s": 20}
    assert lines(capsys.readouterr().out)[-1] == "worst: degraded (exit 1)"


# what _run records ---------------------------------------------------------------------------


def test_verbose_sets_ansible_verbosity(inventory: Path, fake_run: FakeRun,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_VERBOSITY", "")
    monkeypatch.delenv("ANSIBLE_VERBOSITY")
    assert cli.main(["validate", "-vv", "-i", str(inventory)]) == 0
    import os

    assert os.environ["ANSIBLE_VERBOSITY"] == "2"


def test_a_stale_lock_is_taken_over_and_noted(inventory: Path, fake_run: FakeRun,
                                              runs: Path) -> None:
    from provisioner.inventory import load

    lock = runlock.lock_path(runs, load(inventory))
    lock.parent.mkdir(parents=True)
    lock.write_text(json.dumps({"pid": 999999999, "command": "up"}))
    assert cli.main(["-q", "validate", "-i", str(inventory)]) == 0
    assert saved_report(runs)["notes"] == [
        "took over a stale lock of PID 999999999 (started ?), which is no longer running"]


def test_bad_input_inside_a_run_keeps_its_exit_code_and_is_recorded(
        inventory: Path, fake_run: FakeRun, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake_run.error = InputError("the phase found   bad\ninput")
    assert cli.main(["-q", "validate", "-i", str(inventory)]) == 2
    assert lines(capsys.readouterr().err) == ["error: the phase found bad input"]
    report = saved_report(runs)
    assert (report["outcome"], report["exit_code"]) == ("error", 2)
    assert report["notes"] == ["the run stopped on an error: InputError: the phase found bad "
                               "input"]


# error lines and exit codes ------------------------------------------------------------------


def test_an_unexpected_exception_is_one_internal_error_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import matrix

    monkeypatch.delenv("PROVISIONER_DEBUG", raising=False)
    message = "the matrix broke " + "x" * 600 + "\n  on a second line"

    def broken() -> None:
        raise RuntimeError(message)

    monkeypatch.setattr(matrix, "load_matrix", broken)
    assert cli.main(["stacks"]) == 1
    out = capsys.readouterr()
    assert out.out == ""
    assert lines(out.err) == [f"internal error: RuntimeError: the matrix broke {'x' * 600} on "
                              f"a second line{INTERNAL}"]
    monkeypatch.setenv("PROVISIONER_DEBUG", "1")
    with pytest.raises(RuntimeError, match="the matrix broke"):
        cli.main(["stacks"])


@pytest.mark.parametrize(("signum", "path", "code", "line"), [
    (None, None, 130, "error: interrupted by SIGINT"),
    # Longer than any console is wide: still one line.
    (signal.SIGTERM, "/runs/" + "r" * 600 + "/report.json", 143,
     "error: interrupted by SIGTERM; report saved: /runs/" + "r" * 600 + "/report.json"),
])
def test_an_interrupt_is_one_line_and_128_plus_the_signal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        signum: int | None, path: str | None, code: int, line: str) -> None:
    from provisioner import matrix

    def interrupted() -> None:
        exc = KeyboardInterrupt()
        if signum is not None:
            vars(exc).update(signum=signum, report_path=path)
        raise exc

    monkeypatch.setattr(matrix, "load_matrix", interrupted)
    assert cli.main(["stacks"]) == code
    assert lines(capsys.readouterr().err) == [line]


def test_stacks_show_and_list(monkeypatch: pytest.MonkeyPatch, tables: Tables,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import matrix

    default = matrix.load_matrix().default_stack
    shown: list[tuple[str, Any]] = []
    monkeypatch.setattr(render, "mapping", lambda _c, title, data: shown.append((title, data)))
    assert cli.main(["stacks", "show", default]) == 0
    [(title, detail)] = shown
    assert title == f"stack {default}" and detail
    assert cli.main(["stacks"]) == 0 and cli.main(["stacks", "list"]) == 0
    assert [t for t, _ in tables.calls] == ["known-good stacks (provisioner/data/stacks.yml)"] * 2
    assert tables.calls[0][1] == matrix.stack_rows(matrix.load_matrix())
    capsys.readouterr()
    assert cli.main(["stacks", "show"]) == 2
    assert lines(capsys.readouterr().err) == [
        f"error: stacks show: name a stack, e.g. `provisioner stacks show {default}`"]
    assert cli.main(["stacks", "list", default]) == 2
    assert lines(capsys.readouterr().err) == [
        f"error: stacks list takes no name (got {default!r}); to see one stack: "
        f"`provisioner stacks show {default}`"]


def test_profiles_rows(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["profiles", "--json"]) == 0
    rows = {r["profile"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["hgx-h100-8gpu"]["nvswitch"] == "gen 3"
    assert rows["pcie-l40s-4gpu"]["nvswitch"] == "no"
    assert rows["pcie-l40s-4gpu"]["fabric"].endswith("Gb/s roce")
    assert rows["pcie-l40s-4gpu"]["fabric"].startswith("2x ")
    assert (rows["sim-h100-8gpu"]["simulated"], rows["hgx-h100-8gpu"]["simulated"]) == ("yes", "")
    assert rows["hgx-h100-8gpu"]["gpu"].startswith("8x ")


def test_report_exits_with_the_saved_runs_code(runs: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    run_id = "20260101-000000-abcd"
    (runs / run_id).mkdir(parents=True)
    data = {"run_id": run_id, "command": "validate", "outcome": "failed", "exit_code": 1,
            "inventory": "hosts.yml", "phases": [], "checks": [], "notes": []}
    (runs / run_id / "report.json").write_text(json.dumps(data))
    assert cli.main(["report", run_id, "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == data
    assert cli.main(["-q", "report"]) == 1


# inspect -------------------------------------------------------------------------------------


IBSTAT = Path(__file__).resolve().parents[1] / "fixtures" / "ibstat" / "cx5-2port-spaces-sdr-ddr.txt"


def test_inspect_text_json_and_profile(tables: Tables,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", str(IBSTAT)]) == 0
    assert lines(capsys.readouterr().out)[-1] == "inspected 1 file(s)"
    assert tables.calls == []
    assert cli.main(["inspect", str(IBSTAT), "--profile", "hgx-h100-8gpu"]) == 1
    out = lines(capsys.readouterr().out)
    [(title, rows)] = tables.calls
    assert title == f"{IBSTAT} against hgx-h100-8gpu"
    failed = sum(r["status"] == "fail" for r in rows)
    assert failed and out[-1] == (f"inspected 1 file(s): {failed} check(s) failed against "
                                  "hgx-h100-8gpu")
    assert cli.main(["inspect", str(IBSTAT), "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert isinstance(one, dict) and one["file"] == str(IBSTAT) and "checks" not in one
    assert cli.main(["inspect", str(IBSTAT), str(IBSTAT), "--json"]) == 0
    two = json.loads(capsys.readouterr().out)
    assert two == [one, one]
    assert cli.main(["inspect", str(IBSTAT), "--profile", "nope"]) == 2
    assert lines(capsys.readouterr().err)[0].startswith(
        "error: inspect: unknown --profile 'nope'; choose one of cloud-h200-1gpu, gb200-nvl72-tray, ")


# sim (the simulator's functions replaced: no container is touched) ---------------------------


@dataclass
class FakeSim:
    ups: list[dict[str, Any]] = field(default_factory=list)

    def up(self, spec: Any, inventory_dir: Path, profile_json: Any, progress: Any = None,
           recreate: bool = False) -> Any:
        progress("starting nodes")
        self.ups.append({"spec": spec, "inventory_dir": inventory_dir, "recreate": recreate})
        from types import SimpleNamespace

        return SimpleNamespace(addresses={"sim-gpu-1": "10.88.0.2"})


@pytest.fixture
def fake_sim(monkeypatch: pytest.MonkeyPatch) -> FakeSim:
    from provisioner.sim import cluster, executor_containers

    fake = FakeSim()
    monkeypatch.setattr(cluster, "up", fake.up)
    monkeypatch.setattr(cluster, "down", lambda progress: 3)
    monkeypatch.setattr(executor_containers, "up", lambda count, say: {})

    def no_podman(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a test started podman")

    monkeypatch.setattr("subprocess.run", no_podman)
    monkeypatch.setattr("subprocess.Popen", no_podman)
    return fake


@pytest.mark.parametrize(("nodes", "gpu", "cpu"), [(1, 1, 0), (2, 1, 1), (4, 3, 1)])
def test_sim_up_spec(tmp_path: Path, fake_sim: FakeSim, capsys: pytest.CaptureFixture[str],
                     nodes: int, gpu: int, cpu: int) -> None:
    from provisioner.sim.cluster import SimSpec

    inv_dir = tmp_path / "inv"
    assert cli.main(["sim", "up", "--nodes", str(nodes), "--fault", "gpu3-nvlink-down",
                     "--fault", "sim-gpu-1:gpu0-missing", "--inventory-dir", str(inv_dir),
                     "--recreate"]) == 0
    assert fake_sim.ups == [{"spec": SimSpec(gpu_nodes=gpu, cpu_nodes=cpu,
                                             profile="sim-h100-8gpu",
                                             faults=("gpu3-nvlink-down",
                                                     "sim-gpu-1:gpu0-missing"),
                                             os="debian12"),
                             "inventory_dir": inv_dir, "recreate": True}]
    out = capsys.readouterr().out
    assert "starting nodes" in out.splitlines()
    assert "  sim-gpu-1      10.88.0.2\n" in out
    assert unwrapped(out).endswith(unwrapped(f"10.88.0.2 inventory: {inv_dir / 'hosts.yml'}"))


def test_sim_up_defaults_and_refusals(fake_sim: FakeSim,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.paths import workspace_root

    assert cli.main(["-q", "sim", "up"]) == 0
    [up] = fake_sim.ups
    assert up["inventory_dir"] == workspace_root() / "inventories" / "sim"
    assert (up["spec"].gpu_nodes, up["spec"].cpu_nodes, up["spec"].profile, up["recreate"]) == (
        2, 1, "sim-h100-8gpu", False)
    assert cli.main(["sim", "up", "--nodes", "65"]) == 2
    assert cli.main(["sim", "up", "--nodes", "0"]) == 2
    assert lines(capsys.readouterr().err) == ["error: sim up: --nodes must be between 1 and 64"] * 2
    assert cli.main(["sim", "down"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "simulated cluster removed (3 container(s))"
    assert cli.main(["sim", "executors", "--count", "0"]) == 0
    assert capsys.readouterr().out.splitlines() == ["no simulated executor is running"]


# small parsers and helpers -------------------------------------------------------------------


@pytest.mark.parametrize("text", ["abc", "0", "-5", ""])
def test_seconds_refuses_what_is_not_a_positive_number(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError) as err:
        cli._seconds(text)
    assert str(err.value) == f"{text!r} is not a number of seconds above 0"


@pytest.mark.parametrize("text", ["abc", "0", "-1", " ", "1.5"])
def test_count_refuses_what_is_not_a_whole_number_above_0(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError) as err:
        cli._count(text)
    assert str(err.value) == f"{text!r} is not a whole number above 0"
    assert cli._count(" 3 ") == 3 and cli._seconds("45") == 45


def test_versions_names_the_three_parts() -> None:
    from provisioner.paths import COLLECTION_FQCN

    got = cli.versions()
    assert list(got) == ["provisioner", COLLECTION_FQCN, "ansible-core"]
    assert got["provisioner"] == metadata.version("gpu-cluster-provisioner")
    assert got["ansible-core"] == metadata.version("ansible-core")


def test_an_unreadable_collection_version_is_bad_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import paths

    monkeypatch.setattr(paths, "collection_root", lambda: tmp_path)
    assert cli.main(["--version"]) == 2
    [line] = lines(capsys.readouterr().err)
    assert line.startswith(f"error: {tmp_path / 'galaxy.yml'}: no readable collection version (")


def test_consoles_are_wide_unless_their_own_stream_is_a_terminal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("COLUMNS", raising=False)
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("sys.stdout", Terminal())
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert cli._console(stderr=True).width == 160  # stderr is a log even if stdout is a terminal
    monkeypatch.setenv("COLUMNS", "97")
    assert cli._console(stderr=True).width == 97


def test_dispatch_refuses_verbose_with_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["-v", "stacks", "-q"]) == 2
    assert lines(capsys.readouterr().err) == [
        "error: -v/--verbose and -q/--quiet exclude each other: give one of them"]


# the confirmation prompt ---------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "code", "error"), [
    ("y\n", 0, None), (" YES \n", 0, None),
    ("n\n", 2, "error: aborted: nothing was changed"),
    ("\n", 2, "error: aborted: nothing was changed"),
    ("", 2, "error: aborted: no answer (end of input at the confirmation prompt); nothing was "
     "changed"),
])
def test_up_asks_before_changing_real_hosts(
        inventory: Path, fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], answer: str, code: int, error: str | None) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(answer))
    assert cli.main(["-q", "up", "-i", str(inventory)]) == code
    err = capsys.readouterr().err
    assert unwrapped(err).startswith(unwrapped(f"Provision 2 host(s) from {inventory}? [y/N]"))
    assert len(fake_run.calls) == (1 if code == 0 else 0)
    if error is not None:
        assert lines(err)[-1].endswith(error)


def test_upgrade_asks_with_the_stack_and_the_batch_size(
        inventory: Path, runs: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner import matrix

    stack = matrix.load_matrix().default_stack
    monkeypatch.setattr(upgrade, "run", lambda *_a, **_k: pytest.fail("no batch may run"))
    monkeypatch.setattr("sys.stdin", Terminal("no\n"))
    assert cli.main(["upgrade", "-i", str(inventory), "--stack", stack,
                     "--batch-size", "25%"]) == 2
    assert unwrapped(capsys.readouterr().err).startswith(unwrapped(
        f"Upgrade 1 GPU node(s) of {inventory} to {stack}, 25% at a time? [y/N]"))


# more of what the commands show --------------------------------------------------------------


def test_health_table_and_progress_title(inventory: Path, tmp_path: Path, tables: Tables,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import cluster_health, progress

    titles: list[str] = []

    class Display:
        def __init__(self, _console: Any, title: str) -> None:
            titles.append(title)

        def __enter__(self) -> Any:
            return lambda _event: None

        def __exit__(self, *_exc: object) -> None:
            return None

    monkeypatch.setattr(progress, "ProgressDisplay", Display)
    summary = cluster_health.HealthSummary(run_id="r7", run_dir=tmp_path, simulated=False, nodes=[
        cluster_health.NodeHealth("gpu-01", 0), cluster_health.NodeHealth(
            "gpu-02", 2, failing=("xid", "ecc"), detail="Xid 79")])
    monkeypatch.setattr(cluster_health, "run", lambda *_a, **_k: summary)
    assert cli.main(["health", "-i", str(inventory)]) == 2
    assert titles == ["health (health.yml)"]
    assert tables.calls == [("node health (run r7)", [
        {"node": "gpu-01", "status": "healthy", "failing": "-", "warnings": "-",
         "detail": "-"},
        {"node": "gpu-02", "status": "unhealthy", "failing": "xid, ecc", "warnings": "-",
         "detail": "Xid 79"}])]


def test_plan_verbose_prints_each_hosts_variables_sorted(
        inventory: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    monkeypatch.setattr(render, "plan", lambda *_a: None)
    monkeypatch.setattr(common, "console", Console(width=1000))  # no line of the YAML folded
    assert cli.main(["plan", "-v", "-i", str(inventory)]) == 0
    out = capsys.readouterr().out
    cp = plan.build(str(inventory))
    for name, host in cp.hosts.items():
        shown = yaml.safe_load(out.split(f"{name}:\n", 1)[1].split("\n\n", 1)[0])
        assert shown == host.variables()
        assert list(shown) == sorted(shown), name


def test_plan_row_of_a_stack_without_some_versions_shows_dashes() -> None:
    from types import SimpleNamespace

    stack = SimpleNamespace(as_vars=lambda: {"gpu_stack": "partial"})
    cp = SimpleNamespace(hosts={"gpu-01": SimpleNamespace(
        kind="gpu", profile=SimpleNamespace(name="p"), stack=stack)})
    assert cli._plan_rows(cp) == [{  # type: ignore[arg-type]
        "host": "gpu-01", "kind": "gpu", "profile": "p", "stack": "partial", "driver": "- (-)",
        "cuda": "-", "cudnn": "-", "nccl": "-", "ctk": "-", "fabric mgr": "-"}]


def test_retry_of_a_phase_this_run_skips_is_refused(
        inventory: Path, fake_run: FakeRun, runs: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    run_id = "20261124-000000-abcd"
    (runs / run_id).mkdir(parents=True)
    (runs / run_id / "report.json").write_text(json.dumps({
        "run_id": run_id, "command": "up", "outcome": "failed", "exit_code": 1,
        "inventory": str(inventory), "checks": [], "phases": [],
        "lost_hosts": {"gpu-01": {"phase": "smoke", "reason": "failed"}}}))
    assert cli.main(["up", "-i", str(inventory), "--yes", "--skip-smoke",
                     "--retry-failed", run_id]) == 2
    assert lines(capsys.readouterr().err) == [
        f"error: run {run_id} lost its hosts in smoke, which this run does not have (drop "
        "--skip-smoke?)"]
    assert fake_run.calls == []


def test_sim_os_and_down_progress(tmp_path: Path, fake_sim: FakeSim,
                                  monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from provisioner.sim import cluster

    assert cli.main(["-q", "sim", "up", "--os", "rocky9", "--inventory-dir",
                     str(tmp_path)]) == 0
    assert fake_sim.ups[0]["spec"].os == "rocky9"

    def down(progress: Any) -> int:
        progress("removing sim-gpu-1")
        return 1

    monkeypatch.setattr(cluster, "down", down)
    capsys.readouterr()
    assert cli.main(["sim", "down"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "removing sim-gpu-1", "simulated cluster removed (1 container(s))"]
    assert cli.main(["sim", "down", "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines() == ["simulated cluster removed (1 container(s))"]


def test_shell_completion_is_attached_by_destination() -> None:
    from argcomplete.completers import FilesCompleter

    parser = cli.build_parser()
    commands = {p.prog: p for p in cli._subparsers(parser)}

    def completer(prog: str, dest: str) -> Any:
        [action] = [a for a in commands[prog]._actions if a.dest == dest]
        return vars(action).get("completer")

    assert isinstance(completer("provisioner up", "inventory"), FilesCompleter)
    assert isinstance(completer("provisioner plan", "output"), FilesCompleter)
    assert completer("provisioner stacks", "name") is cli.stack_names
    assert completer("provisioner upgrade", "stack") is cli.stack_names
    assert completer("provisioner inspect", "profile") is cli.profile_names
    assert completer("provisioner sim up", "profile") is cli.profile_names
    assert completer("provisioner up", "limit") is None


# a mutation sample's survivors ----------------------------------------------------------------


def test_console_output_is_not_highlighted_even_in_colour(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """rich's highlighter colours the numbers inside host names and addresses ("sim-gpu-1",
    "10.88.0.2") wherever the output is coloured (FORCE_COLOR in CI): the CLI's consoles turn
    it off."""
    from rich.console import Console

    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    text = "sim-gpu-1 10.88.0.2 took 8.5 s [True]"
    plain = Console()
    with plain.capture() as cap:
        plain.print(text)
    assert "\x1b[" in cap.get()  # what rich does by default, in colour
    for stderr in (False, True):
        ours = cli._console(stderr=stderr)
        assert ours.color_system is not None
        with ours.capture() as cap:
            ours.print(text)
        assert cap.get() == text + "\n"


def test_up_executors_without_a_limit_run_every_host(inventory: Path, fake_run: FakeRun,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """limit_hosts None is "no --limit" to bringup's sharding; an empty value would leave
    every shard without a host."""
    from provisioner import executors as ex

    monkeypatch.setattr(ex, "check", lambda _e: None)
    assert cli.main(["-q", "up", "-i", str(inventory), "--yes", "--executors", "exec-1"]) == 0
    assert fake_run.options.executors == ex.parse("exec-1", None)
    assert fake_run.options.limit_hosts is None and fake_run.options.limit is None


def test_stacks_completes_stack_names_for_its_name_only() -> None:
    """`provisioner stacks <TAB>` offers list/show/verify (the choices of its first argument);
    only the NAME after them, and verify's --stack NAME, complete to the stacks."""
    parser = cli.build_parser()
    for command in cli._subparsers(parser):
        with_stacks = [a.dest for a in command._actions
                       if vars(a).get("completer") is cli.stack_names]
        expected = {"provisioner stacks": ["name", "only_stack"], "provisioner upgrade": ["stack"]}
        assert with_stacks == expected.get(command.prog, []), command.prog


def test_inspect_table_columns_are_each_checks_fields(
        tables: Tables, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", str(IBSTAT), "--profile", "hgx-h100-8gpu", "--json"]) == 1
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert cli.main(["inspect", str(IBSTAT), "--profile", "hgx-h100-8gpu"]) == 1
    [(_title, rows)] = tables.calls
    assert len(rows) == len(checks)
    assert any(c.get("expected") not in (None, "") for c in checks)
    for row, check in zip(rows, checks, strict=True):
        assert list(row) == ["name", "status", "measured", "expected", "detail"]
        assert row == {k: str(check.get(k, "")) for k in row}


def test_an_insecure_environment_is_refused_unless_the_inventory_says_so(
        tmp_path: Path, inventory: Path, fake_run: FakeRun, runs: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    assert cli.main(["validate", "-i", str(inventory)]) == 2
    assert lines(capsys.readouterr().err) == [
        "error: ANSIBLE_HOST_KEY_CHECKING in the environment would turn off SSH host key "
        "checking; unset it, or set ansible_host_key_checking: false in the inventory if you "
        "mean it (the report then says so)"]
    assert fake_run.calls == []
    off = write_inventory(tmp_path / "off" / "hosts.yml", cpu=False,
                          ansible_host_key_checking=False)
    assert cli.main(["-q", "validate", "-i", str(off)]) == 0
    assert len(fake_run.calls) == 1


def test_the_host_key_warning_is_one_line_however_narrow_the_console(
        tmp_path: Path, fake_run: FakeRun, runs: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    off = write_inventory(tmp_path / "hosts.yml", cpu=False, ansible_host_key_checking=False)
    monkeypatch.setattr(common, "console", Console(width=40, highlight=False))
    assert cli.main(["validate", "-i", str(off)]) == 0
    [note] = [n for n in saved_report(runs)["notes"] if "host key" in n]
    assert len(note) > 40
    assert f"warning: {note}" in capsys.readouterr().out.splitlines()


def test_ansible_verbosity_stops_at_4(inventory: Path, fake_run: FakeRun,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for verbose, expected in (("-vvvv", "4"), ("-vvvvv", "4"), ("-vvvvvvv", "4"), ("-vvv", "3")):
        monkeypatch.setenv("ANSIBLE_VERBOSITY", "")
        monkeypatch.delenv("ANSIBLE_VERBOSITY")
        assert cli.main(["validate", verbose, "-i", str(inventory)]) == 0
        assert os.environ["ANSIBLE_VERBOSITY"] == expected, verbose


def test_a_report_that_cannot_be_saved_after_an_error_is_a_warning(
        inventory: Path, runs: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    from provisioner import report as report_mod

    monkeypatch.delenv("PROVISIONER_DEBUG", raising=False)
    run_dirs: list[Path] = []

    def full_disk(_path: Path, _text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def broken(_cp: Any, _report: Any, run_dir: Path, *_a: Any) -> bool:
        run_dirs.append(run_dir)
        monkeypatch.setattr(report_mod, "write_private", full_disk)
        raise RuntimeError("the phase broke")

    monkeypatch.setattr(bringup, "run_phases", broken)
    assert cli.main(["validate", "-i", str(inventory)]) == 1
    [run_dir] = run_dirs
    assert lines(capsys.readouterr().err) == [
        f"warning: cannot save the report in {run_dir}: No space left on device",
        f"internal error: RuntimeError: the phase broke{INTERNAL}"]


def test_sim_up_profile_goes_into_the_spec(tmp_path: Path, fake_sim: FakeSim,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.profiles import load_profiles
    from provisioner.sim import cluster

    given: list[tuple[Any, Any]] = []

    def up(spec: Any, _inventory_dir: Path, profile_json: Any, progress: Any = None,
           recreate: bool = False) -> Any:
        given.append((spec, profile_json))
        return fake_sim.up(spec, _inventory_dir, profile_json, progress, recreate)

    monkeypatch.setattr(cluster, "up", up)
    name = "hgx-h100-8gpu"
    default = cluster.SimSpec().profile
    assert name != default
    assert cli.main(["-q", "sim", "up", "--profile", name, "--inventory-dir",
                     str(tmp_path)]) == 0
    [(spec, profile_json)] = given
    assert spec.profile == name
    assert profile_json == load_profiles()[name].sim_json()


def test_sim_executors_count_progress_and_addresses(
        fake_sim: FakeSim, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    from provisioner.sim import executor_containers

    counts: list[int] = []

    def up(count: int, say: Any) -> dict[str, str]:
        counts.append(count)
        say(f"starting {count} executor(s)")
        return {f"sim-exec-{i}": f"10.88.0.{20 + i}" for i in range(1, count + 1)}

    ssh_config = Path("/sim/executors/ssh_config")
    monkeypatch.setattr(executor_containers, "up", up)
    monkeypatch.setattr(executor_containers, "ssh_config_path", lambda: ssh_config)
    monkeypatch.setattr(common, "console", Console(width=1000, highlight=False))
    assert cli.main(["sim", "executors"]) == 0
    assert counts == [2]  # its help: "how many (default 2; 0 removes them)"
    assert lines(capsys.readouterr().out) == [
        "starting 2 executor(s)", "  sim-exec-1     10.88.0.21", "  sim-exec-2     10.88.0.22",
        f"use: provisioner up ... --executors sim-exec-1,sim-exec-2 --executor-ssh-config "
        f"{ssh_config}"]
    assert cli.main(["-q", "sim", "executors", "--count", "3"]) == 0
    assert counts[-1] == 3
    assert lines(capsys.readouterr().out) == [
        "  sim-exec-1     10.88.0.21", "  sim-exec-2     10.88.0.22",
        "  sim-exec-3     10.88.0.23",
        f"use: provisioner up ... --executors sim-exec-1,sim-exec-2,sim-exec-3 "
        f"--executor-ssh-config {ssh_config}"]


@pytest.mark.parametrize(("bundle", "why"), [
    ("/opt/bundle", "runs in a container only through Slurm (srun --container); this "
                    "inventory's launcher is direct"),
    ("opt/bundle", "the bundle must be an absolute path on the nodes"),
])
def test_smoke_and_up_refuse_a_container_srun_cannot_run(
        inventory: Path, fake_run: FakeRun, capsys: pytest.CaptureFixture[str],
        bundle: str, why: str) -> None:
    for command in (["smoke"], ["up", "--yes"]):
        assert cli.main(["-q", *command, "-i", str(inventory), "--container", bundle]) == 2
        err = capsys.readouterr().err
        assert f"--container {bundle}: " in err and why in " ".join(err.split()), err
    assert fake_run.calls == []


def test_a_container_reaches_the_run_with_the_slurm_launcher(
        inventory: Path, fake_run: FakeRun, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner import slurm

    monkeypatch.setattr(slurm, "choose_launcher", lambda cp, requested: "slurm")
    assert cli.main(["-q", "smoke", "-i", str(inventory), "--container", "/opt/b"]) == 0
    assert (fake_run.options.launcher, fake_run.options.container) == ("slurm", "/opt/b")


def test_up_refuses_a_container_before_asking_to_change_real_hosts(
        inventory: Path, fake_run: FakeRun, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --yes on a terminal `up` asks first; input that cannot run is refused before."""
    from provisioner.commands import common

    asked: list[str] = []
    monkeypatch.setattr(common.sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(common.errconsole, "input",
                        lambda question: asked.append(question) or "y")
    assert cli.main(["-q", "up", "-i", str(inventory), "--container", "/opt/b"]) == 2
    assert "--container /opt/b: " in capsys.readouterr().err
    assert asked == [] and fake_run.calls == []
