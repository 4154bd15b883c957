"""The smoke job's second framework on the controller: what each framework installs and where
its wheelhouse goes, the role variables a run passes, and the report and console naming the
framework that ran. (The job itself: tests/smoke/test_smoke_job_tf.py; the role on localhost:
tests/integration/test_smoke_tf_role.py.)"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from provisioner import cli, render, smoke_launch, wheelhouse
from provisioner.errors import InputError
from provisioner.plan import ClusterPlan, build
from provisioner.report import Report
from provisioner.smoke_judge import SmokeResult, judge

ROLE = Path(__file__).resolve().parents[2] / "roles" / "smoke_job"


def plan(tmp_path: Path, simulated: bool, extra: dict[str, Any] | None = None) -> ClusterPlan:
    host = ({"gpu_profile": "sim-h100-8gpu", "provisioner_simulated": True} if simulated
            else {"gpu_profile": "hgx-h100-8gpu"})
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"all": {"vars": {"gpu_package_source": "http://mirror:8080/",
                                                **(extra or {})},
                                       "children": {"gpu_nodes": {"hosts": {
                                           "gpu-01": {**host, "ansible_host": "gpu-01.invalid"},
                                           "gpu-02": {**host, "ansible_host": "gpu-02.invalid"},
                                       }}}}}))
    return build(inv)


def test_each_framework_installs_its_own_pinned_build() -> None:
    assert wheelhouse.FRAMEWORKS == ("pytorch", "tensorflow")
    assert wheelhouse.framework_requirements("pytorch", simulated=True) == \
        wheelhouse.DEFAULT_REQUIREMENTS
    assert wheelhouse.framework_requirements("pytorch", simulated=False) == \
        wheelhouse.DEFAULT_REQUIREMENTS
    # The simulated cluster runs on CPUs: the CPU-only wheel, no CUDA libraries to fetch.
    assert wheelhouse.framework_requirements("tensorflow", simulated=True) == \
        ("tensorflow-cpu==2.21.0",)
    # Real GPU nodes: the GPU build with NVIDIA's CUDA, cuDNN and NCCL wheels.
    assert wheelhouse.framework_requirements("tensorflow", simulated=False) == \
        ("tensorflow[and-cuda]==2.21.0",)
    with pytest.raises(InputError, match="unknown smoke job framework 'jax'"):
        wheelhouse.framework_requirements("jax", simulated=True)
    assert wheelhouse.framework_subdir("pytorch") == ""
    assert wheelhouse.framework_subdir("tensorflow") == "tensorflow"


def test_the_role_defaults_pin_what_the_wheelhouse_builds() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["smoke_job_framework"] == "pytorch"
    assert tuple(defaults["smoke_job_requirements"]) == wheelhouse.DEFAULT_REQUIREMENTS
    assert tuple(defaults["smoke_job_tensorflow_requirements"]) == \
        wheelhouse.TENSORFLOW_GPU_REQUIREMENTS
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    choices = specs["argument_specs"]["main"]["options"]["smoke_job_framework"]["choices"]
    assert tuple(choices) == wheelhouse.FRAMEWORKS


def test_the_project_venv_installs_the_tensorflow_simulated_nodes_run() -> None:
    """The TensorFlow job's tests (tests/smoke/test_smoke_job_tf.py) run on the venv's build:
    the one the wheelhouse serves simulated nodes."""
    makefile = (ROLE.parents[1] / "Makefile").read_text()
    install = next(line for line in makefile.splitlines()
                   if "pip install" in line and "torch==" in line)
    assert f"'{wheelhouse.TENSORFLOW_CPU_REQUIREMENTS[0]}'" in install.split()


def test_the_cli_offers_the_frameworks_and_defaults_to_pytorch() -> None:
    parser = cli.build_parser()
    for command in (["smoke", "-i", "x"], ["up", "-i", "x"]):
        assert parser.parse_args(command).framework == "pytorch"
        assert parser.parse_args([*command, "--framework", "tensorflow"]).framework == \
            "tensorflow"
    sub = next(a for a in parser._actions if a.dest == "command")
    for command in ("smoke", "up"):
        option = next(a for a in sub.choices[command]._actions  # type: ignore[attr-defined]
                      if a.dest == "framework")
        assert tuple(option.choices) == wheelhouse.FRAMEWORKS


@pytest.mark.parametrize(("framework", "simulated", "subdir", "requirements"), [
    ("pytorch", True, "", wheelhouse.DEFAULT_REQUIREMENTS),
    ("tensorflow", True, "tensorflow", ("tensorflow-cpu==2.21.0",)),
    ("tensorflow", False, "tensorflow", ("tensorflow[and-cuda]==2.21.0",)),
])
def test_each_framework_has_its_own_wheelhouse_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, framework: str, simulated: bool,
        subdir: str, requirements: tuple[str, ...]) -> None:
    filled: list[tuple[Path, tuple[str, ...]]] = []

    def fill(dest: Path, wheels_for: Any, **_: object) -> Path:
        # What the lock gives the controller's platform: the requirement set's own wheels.
        names = {w.name for w in wheels_for(wheelhouse.controller_platform())}
        filled.append((dest, tuple(r for r in requirements
                                   if r.split("==")[0].split("[")[0] in names)))
        return dest

    monkeypatch.setattr(smoke_launch, "ensure_wheelhouse", fill)
    cp = plan(tmp_path, simulated, {"gpu_package_source_dir": str(tmp_path / "mirror")})
    with smoke_launch.wheelhouse_url(cp, tmp_path / "cache", framework=framework) as url:
        assert url == "http://mirror:8080/wheels/" + (f"{subdir}/" if subdir else "")
    assert filled == [(tmp_path / "mirror" / "wheels" / subdir, requirements)]


def test_a_run_tells_the_role_which_framework_and_build(tmp_path: Path) -> None:
    sim = smoke_launch.extravars(plan(tmp_path, True), "run1", tmp_path, "http://w/",
                             launcher="slurm", framework="tensorflow")
    assert sim["smoke_job_framework"] == "tensorflow"
    assert sim["smoke_job_launcher"] == "slurm"
    assert sim["smoke_job_tensorflow_requirements"] == ["tensorflow-cpu==2.21.0"]
    real = smoke_launch.extravars(plan(tmp_path, False), "run1", tmp_path, "http://w/")
    assert real["smoke_job_framework"] == "pytorch"
    assert real["smoke_job_tensorflow_requirements"] == ["tensorflow[and-cuda]==2.21.0"]


def tf_result(world_size: int = 2, decreased: bool = True) -> dict[str, Any]:
    """What gpuc_smoke_tf.py writes (the fields the controller reads, and a few more)."""
    hosts = [f"sim-gpu-{i + 1}" for i in range(world_size)]
    return {
        "schema": 1, "framework": "tensorflow", "label": "inter-node", "backend": "ring",
        "world_size": world_size, "nnodes": world_size,
        "nodes": {host: [i] for i, host in enumerate(hosts)},
        "ranks": [{"rank": i, "local_rank": 0, "node_rank": i, "hostname": host,
                   "device": f"/job:worker/replica:0/task:{i}/device:CPU:0",
                   "device_name": "cpu", "cuda_device_count": 0}
                  for i, host in enumerate(hosts)],
        "allreduce": [{"bytes": 8192, "size": "8 KiB", "count": 2048, "time_us": 900.0,
                       "algbw_gbps": 0.009, "busbw_gbps": 0.009, "correct": True}],
        "sizes_dropped": [], "ok": decreased, "errors": [],
        "ddp": {"method": "keras+MultiWorkerMirroredStrategy", "steps": 6, "loss_first": 9.0,
                "loss_last": 3.0 if decreased else 9.5, "decreased": decreased,
                "params_identical": True, "param_checksums": ["ab"] * world_size},
        "tensorflow_version": "2.21.0", "workers": ["10.89.0.3:29500", "10.89.0.4:29500"],
    }


def test_the_report_names_the_framework_and_the_console_shows_it(tmp_path: Path) -> None:
    cp = plan(tmp_path, True)
    rep = Report("20260101-000000-beef", "smoke", "inv", simulated=True,
                 started_at="2026-01-01T00:00:00+00:00")
    reports = {"gpu-01": {"smoke_job": {"framework": "tensorflow", "node_rank": 0, "passes": {
        "inter": {"rc": 0, "result": tf_result(), "log": []}}}},
               "gpu-02": {"smoke_job": {"framework": "tensorflow", "node_rank": 1, "passes": {
                   "inter": {"rc": 0, "result": None, "log": []}}}}}
    assert smoke_launch.fold_results(cp, rep, tmp_path, reports, [], launcher="slurm",
                                 framework="tensorflow")
    assert rep.smoke is not None
    assert rep.smoke["framework"] == "tensorflow" and rep.smoke["launcher"] == "slurm"
    [run] = rep.smoke["runs"]
    assert run["verdict"]["passed"] and run["nnodes"] == 2
    assert run["verdict"]["summary"].startswith(
        "PASS: correct all-reduce, Keras (MultiWorkerMirroredStrategy) loss decreased")
    out = io.StringIO()
    render.smoke_table(Console(file=out, width=200), rep.smoke)
    text = " ".join(out.getvalue().split())  # the title wraps to the table's width
    assert "(tensorflow, ring, 2 ranks on 2 node(s), launched by slurm)" in text
    # A report from before the second framework: PyTorch ran it.
    out = io.StringIO()
    render.smoke_table(Console(file=out, width=200), {**rep.smoke, "framework": None})
    assert "(pytorch, ring," in " ".join(out.getvalue().split())


def test_training_failures_name_the_framework() -> None:
    tf_failure = judge(SmokeResult.model_validate(tf_result(decreased=False)), None, True)
    assert "[inter-node] Keras (MultiWorkerMirroredStrategy) loss did not decrease (9 -> 9.5)" \
        in tf_failure.failures
    torch = {k: v for k, v in tf_result(decreased=False).items() if k != "framework"}
    torch_failure = judge(SmokeResult.model_validate(torch), None, True)
    assert "[inter-node] DDP loss did not decrease (9 -> 9.5)" in torch_failure.failures


def test_a_run_that_measured_nothing_is_one_line_without_a_table() -> None:
    smoke = {"simulated": True, "launcher": "slurm", "runs": [
        {"label": "nccl-tests sim-gpu-2", "backend": None, "world_size": None, "nnodes": None,
         "allreduce": [], "verdict": {"passed": True,
                                      "summary": "SKIPPED: nccl-tests not built: no nvcc"}}]}
    out = io.StringIO()
    render.smoke_table(Console(file=out, width=200), smoke)
    text = out.getvalue()
    assert text.strip() == ("SIMULATED smoke: nccl-tests sim-gpu-2: SKIPPED: nccl-tests not "
                            "built: no nvcc")
    assert "None" not in text and "┃" not in text
