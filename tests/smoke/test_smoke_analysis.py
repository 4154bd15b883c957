"""Judge hand-written smoke reports: the controller side of the smoke job."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from provisioner import wheelhouse
from provisioner.busbw import GLOO_SKIP_REASON
from provisioner.errors import EnvironmentProblem, InputError
from provisioner.smoke_judge import SIMULATED_SKIP_REASON, judge, load_smoke_result
from provisioner.wheelhouse import ensure_wheelhouse
from provisioner.wheellock import LockedWheel

MIB = 1024 * 1024
GIB = 1024 * MIB


def _row(size: int, busbw: float, correct: bool = True, n: int = 16) -> dict[str, Any]:
    algbw = busbw * n / (2 * (n - 1))
    return {"bytes": size, "size": "x", "count": size // 4, "time_us": size / algbw / 1e3,
            "algbw_gbps": algbw, "busbw_gbps": busbw, "correct": correct}


GOOD: dict[str, Any] = {
    "schema": 1,
    "label": "inter-node",
    "backend": "nccl",
    "world_size": 16,
    "nnodes": 2,
    "nodes": {"gpu-a": list(range(8)), "gpu-b": list(range(8, 16))},
    "ranks": [
        {"rank": r, "local_rank": r % 8, "node_rank": r // 8,
         "hostname": "gpu-a" if r < 8 else "gpu-b", "device": f"cuda:{r % 8}",
         "device_name": "NVIDIA H100 80GB HBM3", "cuda_device_count": 8}
        for r in range(16)
    ],
    "allreduce": [_row(32 * MIB, 120.0), _row(256 * MIB, 160.0), _row(GIB, 175.0),
                  _row(8 * GIB, 180.0)],
    "ddp": {"steps": 20, "loss_first": 3.1, "loss_last": 0.4, "decreased": True,
            "params_identical": True, "param_checksums": ["abc"] * 16},
    "ok": True,
    "errors": [],
    "torch_version": "2.13.0",
}


def write(tmp_path: Path, data: Any, name: str = "smoke.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def variant(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    data.update(changes)
    return data


def test_good_report_passes_with_rows_per_size(tmp_path: Path) -> None:
    result = load_smoke_result(write(tmp_path, GOOD))
    verdict = judge(result, floor_gbps=150.0, simulated=False)
    assert verdict.passed, verdict.failures
    assert verdict.failures == ()
    assert [row.size for row in verdict.rows] == ["32 MiB", "256 MiB", "1 GiB", "8 GiB"]
    # Only the largest size is compared with the floor, as the floors are measured.
    assert [row.counts_for_floor for row in verdict.rows] == [False, False, False, True]
    assert verdict.floor.passed
    assert verdict.floor.skipped_reason is None
    assert verdict.floor.best_busbw_gbps == pytest.approx(180.0)
    assert verdict.floor.size_bytes == 8 * GIB
    assert verdict.nodes == ("gpu-a", "gpu-b")
    assert verdict.world_size == 16


def test_sizes_below_one_gib_never_count_for_the_floor(tmp_path: Path) -> None:
    # 500 GB/s at 64 KiB and 32 MiB is ignored: only sizes >= 1 GiB measure the links.
    data = variant(allreduce=[_row(64 * 1024, 500.0), _row(32 * MIB, 500.0), _row(GIB, 30.0)])
    verdict = judge(load_smoke_result(write(tmp_path, data)), floor_gbps=100.0, simulated=False)
    assert not verdict.passed
    assert verdict.floor.best_busbw_gbps == pytest.approx(30.0)
    assert "30.00 GB/s at 1 GiB" in verdict.failures[0]


def test_only_small_sizes_cannot_pass_a_gpu_floor(tmp_path: Path) -> None:
    data = variant(allreduce=[_row(MIB, 60.0), _row(32 * MIB, 400.0)])
    verdict = judge(load_smoke_result(write(tmp_path, data)), floor_gbps=100.0, simulated=False)
    assert not verdict.passed
    assert "no all-reduce size >= 1 GiB was measured" in verdict.failures[0]


# The public shape of a healthy 8x H100 SXM single-node all-reduce (NCCL's default algorithm):
# about 235 GB/s at 32 MiB, rising to about 470 GB/s at 8 GiB.
H100_SHAPE = [(32 * MIB, 235.0), (256 * MIB, 380.0), (GIB, 440.0), (2 * GIB, 455.0),
              (4 * GIB, 465.0), (8 * GIB, 470.0)]


def _intra_h100(shape: list[tuple[int, float]]) -> dict[str, Any]:
    return variant(label="intra-node", world_size=8, nnodes=1, nodes={"gpu-a": list(range(8))},
                   ranks=GOOD["ranks"][:8], allreduce=[_row(s, b, n=8) for s, b in shape])


def test_public_h100_shape_passes_the_h100_floor(tmp_path: Path) -> None:
    from provisioner.profiles import load_profiles

    floor = load_profiles()["hgx-h100-8gpu"].busbw_floor_intra_gbps
    assert floor == 460  # Azure's check on 8x H100 (see profiles.yml)
    verdict = judge(load_smoke_result(write(tmp_path, _intra_h100(H100_SHAPE))), floor, False)
    assert verdict.passed, verdict.failures
    assert verdict.floor.best_busbw_gbps == pytest.approx(470.0)


def test_public_h100_shape_with_8gib_at_300_fails(tmp_path: Path) -> None:
    from provisioner.profiles import load_profiles

    floor = load_profiles()["hgx-h100-8gpu"].busbw_floor_intra_gbps
    shape = [*H100_SHAPE[:-1], (8 * GIB, 300.0)]
    verdict = judge(load_smoke_result(write(tmp_path, _intra_h100(shape))), floor, False)
    assert not verdict.passed
    (failure,) = verdict.failures
    assert "300.00 GB/s at 8 GiB" in failure and "below the floor 460 GB/s" in failure


def test_gloo_judges_correctness_only(tmp_path: Path) -> None:
    data = variant(backend="gloo", allreduce=[_row(64 * 1024, 0.1, n=2), _row(MIB, 0.2, n=2)])
    verdict = judge(load_smoke_result(write(tmp_path, data)), floor_gbps=350.0, simulated=False)
    assert verdict.passed, verdict.failures
    assert verdict.floor.skipped_reason == GLOO_SKIP_REASON
    rows = copy.deepcopy(data["allreduce"])
    rows[0]["correct"] = False
    bad = judge(load_smoke_result(write(tmp_path, variant(backend="gloo", allreduce=rows))),
                350.0, False)
    assert not bad.passed


def test_wrong_allreduce_result_fails_even_when_simulated(tmp_path: Path) -> None:
    rows = copy.deepcopy(GOOD["allreduce"])
    rows[2]["correct"] = False
    data = variant(allreduce=rows, ok=False,
                   errors=["all-reduce 1 GiB: wrong result on ranks [9]"])
    verdict = judge(load_smoke_result(write(tmp_path, data)), floor_gbps=None, simulated=True)
    assert not verdict.passed
    assert any("wrong results at sizes 1 GiB" in f for f in verdict.failures)
    assert any("ranks [9]" in f for f in verdict.failures)


def test_ddp_failures_are_reported(tmp_path: Path) -> None:
    ddp = dict(GOOD["ddp"], decreased=False, params_identical=False, loss_last=3.5)
    verdict = judge(load_smoke_result(write(tmp_path, variant(ddp=ddp))), None, False)
    assert not verdict.passed
    assert any("DDP loss did not decrease (3.1 -> 3.5)" in f for f in verdict.failures)
    assert any("DDP parameters differ" in f for f in verdict.failures)


def test_below_floor_names_the_nodes(tmp_path: Path) -> None:
    verdict = judge(load_smoke_result(write(tmp_path, GOOD)), floor_gbps=350.0, simulated=False)
    assert not verdict.passed
    assert not verdict.floor.passed
    assert verdict.floor.floor_gbps == 350.0
    (failure,) = verdict.failures
    assert "below the floor 350 GB/s" in failure
    assert "180.00 GB/s at 8 GiB" in failure
    assert "gpu-a, gpu-b" in failure
    assert "[inter-node]" in failure


def test_simulated_cluster_skips_floor_but_reports_numbers(tmp_path: Path) -> None:
    data = variant(backend="gloo", allreduce=[_row(MIB, 0.3, n=2), _row(GIB, 1.1, n=2)])
    verdict = judge(load_smoke_result(write(tmp_path, data)), floor_gbps=350.0, simulated=True)
    assert verdict.passed, verdict.failures
    assert verdict.floor.skipped_reason == SIMULATED_SKIP_REASON
    assert SIMULATED_SKIP_REASON == (
        "simulated cluster: CPU gloo numbers, GPU floor not applicable")
    assert verdict.floor.best_busbw_gbps == pytest.approx(1.1)
    assert [row.busbw_gbps for row in verdict.rows] == [0.3, 1.1]


def test_job_that_stopped_early_fails_on_its_own_error(tmp_path: Path) -> None:
    data = variant(allreduce=[], ddp=None, ok=False,
                   errors=["node GPU count below --expect-gpus-per-node 8: gpu-b sees 7"])
    verdict = judge(load_smoke_result(write(tmp_path, data)), floor_gbps=100.0, simulated=False)
    assert not verdict.passed
    assert verdict.failures == (
        "[inter-node] job: node GPU count below --expect-gpus-per-node 8: gpu-b sees 7",)
    assert not verdict.floor.passed


def test_ok_flag_false_without_errors_still_fails(tmp_path: Path) -> None:
    verdict = judge(load_smoke_result(write(tmp_path, variant(ok=False))), None, False)
    assert not verdict.passed


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"schema": 1, "label": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps(variant(schema=2)), "schema 2 is not 1"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "allreduce"}), "'allreduce'"),
        (json.dumps(variant(world_size="many")), "'world_size'"),
    ],
)
def test_broken_report_is_input_error(tmp_path: Path, content: str, message: str) -> None:
    path = write(tmp_path, content)
    with pytest.raises(InputError, match="smoke") as info:
        load_smoke_result(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_report_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_smoke_result(tmp_path / "absent.json")


def test_job_report_round_trip(tmp_path: Path) -> None:
    """A report shaped exactly like the job writes (extra keys included) loads and judges."""
    data = variant(nccl_env={"NCCL_ALGO": "Ring"}, expect_gpus_per_node=8)
    result = load_smoke_result(write(tmp_path, data))
    assert result.schema_ == 1
    assert result.ranks[9].hostname == "gpu-b"
    assert judge(result, floor_gbps=None, simulated=False).floor.skipped_reason is not None


# -- wheelhouse (controller side too: how nodes get torch for the job) -------------------------
# The wheelhouse tests live here because this change may only add these two test files.


def _make_wheel(directory: Path, name: str = "gpuc_tiny", version: str = "1.0") -> Path:
    """A minimal valid pure-Python wheel, so pip runs offline against a local find-links."""
    directory.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 1\n",
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n"),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist_info}/RECORD,,\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{dist_info}/RECORD", record)
    return wheel


@pytest.fixture
def offline_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    links = tmp_path / "links"
    _make_wheel(links)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return links


@pytest.fixture
def pip_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Count the real subprocess.run calls the wheelhouse makes."""
    calls: list[list[str]] = []
    real_run = subprocess.run

    def spy(cmd: list[str], *args: Any, **kwargs: Any) -> Any:
        calls.append(list(cmd))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(wheelhouse.subprocess, "run", spy)
    return calls


def _tiny_lock(links: Path) -> list[LockedWheel]:
    wheel = links / "gpuc_tiny-1.0-py3-none-any.whl"
    return [LockedWheel("gpuc-tiny", "1.0", wheel.name,
                        hashlib.sha256(wheel.read_bytes()).hexdigest())]


def test_wheelhouse_downloads_once_and_writes_manifest(
        tmp_path: Path, offline_index: Path, pip_calls: list[list[str]]) -> None:
    house = tmp_path / "wheelhouse"
    lock = _tiny_lock(offline_index)
    assert ensure_wheelhouse(house, wheels_for=lambda _node: lock) == house
    dest = house / wheelhouse.controller_platform().key  # one directory per node platform
    assert len(pip_calls) == 1
    assert pip_calls[0][:4] == [sys.executable, "-m", "pip", "download"]
    assert "--no-deps" in pip_calls[0] and pip_calls[0][-1] == "gpuc-tiny==1.0"
    wheel = dest / "gpuc_tiny-1.0-py3-none-any.whl"
    assert wheel.is_file()
    manifest = json.loads((dest / "wheelhouse.json").read_text())
    assert manifest["requirements"] == ["gpuc-tiny==1.0"]
    assert manifest["files"] == [{
        "name": wheel.name, "size": wheel.stat().st_size, "mtime_ns": wheel.stat().st_mtime_ns,
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}]

    sha = manifest["files"][0]["sha256"]
    assert f"gpuc-tiny==1.0 --hash=sha256:{sha}" in (dest / "requirements.txt").read_text()
    before = (dest / "wheelhouse.json").stat().st_mtime_ns
    ensure_wheelhouse(house, wheels_for=lambda _node: lock)
    assert len(pip_calls) == 1
    assert (dest / "wheelhouse.json").stat().st_mtime_ns == before  # nothing changed


def test_wheelhouse_unavailable_pin_is_one_line_error(
        tmp_path: Path, offline_index: Path, pip_calls: list[list[str]]) -> None:
    lock = [LockedWheel("gpuc-tiny", "2.0", "gpuc_tiny-2.0-py3-none-any.whl", "0" * 64)]
    with pytest.raises(EnvironmentProblem, match=r"gpuc-tiny==2\.0.*failed \(rc 1\)") as info:
        ensure_wheelhouse(tmp_path / "wh", wheels_for=lambda _node: lock)
    assert "\n" not in str(info.value)
    assert len(pip_calls) == 1
    assert not list((tmp_path / "wh").rglob("wheelhouse.json"))


def test_wheelhouse_pip_success_without_the_locked_wheel_is_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(cmd: list[str], *args: Any, **kwargs: Any) -> Any:
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(wheelhouse.subprocess, "run", fake_run)
    lock = [LockedWheel("numpy", "2.4.6", "numpy-2.4.6-py3-none-any.whl", "0" * 64)]
    with pytest.raises(EnvironmentProblem, match=r"numpy-2\.4\.6-py3-none-any\.whl is not in"):
        ensure_wheelhouse(tmp_path / "wh", wheels_for=lambda _node: lock)
