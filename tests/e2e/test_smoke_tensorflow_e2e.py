"""`provisioner smoke --framework tensorflow` on the session's shared simulated cluster: the
wheelhouse gets tensorflow-cpu (wheels/tensorflow/<cpXY-machine>/ in the mirror, hashed
requirements), each GPU node installs it into its own venv, and the TensorFlow job passes on
each node alone and across both nodes (MultiWorkerMirroredStrategy, RING collectives on CPU).
The cluster has Slurm, so the job starts through srun (one worker per node, TF_CONFIG built
from the step's node list); the report names the framework and the launcher."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import newest_report

Cli = Callable[..., subprocess.CompletedProcess[str]]
pytestmark = [pytest.mark.e2e]


def test_tensorflow_smoke_passes_across_two_nodes(cli: Cli, healthy_cluster: Path,
                                                  runs_dir: Path) -> None:
    out = cli("smoke", "--inventory", str(healthy_cluster), "--framework", "tensorflow",
              timeout=1800)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    report = newest_report(runs_dir)
    smoke = report["smoke"]
    assert smoke["framework"] == "tensorflow"
    assert smoke["launcher"] == "slurm"
    runs = {run["label"]: run for run in smoke["runs"]}
    inter = runs["inter-node"]
    assert inter["verdict"]["passed"], inter["verdict"]["summary"]
    assert inter["backend"] == "ring"
    assert inter["nnodes"] == 2 and inter["world_size"] == 2
    assert len(inter["nodes"]) == 2  # one worker on each node's own host
    assert inter["allreduce"] and all(row["correct"] for row in inter["allreduce"])
    assert inter["ddp"]["decreased"] and inter["ddp"]["params_identical"]
    intra = [run for label, run in runs.items() if label.startswith("intra-node")]
    assert len(intra) == 2 and all(run["verdict"]["passed"] for run in intra)
    assert "Keras (MultiWorkerMirroredStrategy) loss decreased" in inter["verdict"]["summary"]
    # The console names the framework the way it names the launcher.
    console = " ".join(out.stdout.split())
    assert "tensorflow, ring" in console and "launched by slurm" in console
    # Installed from its own hashed wheelhouse, next to PyTorch's.
    pinned = list(Path(healthy_cluster).parent.rglob("wheels/tensorflow/cp3*-*/requirements.txt"))
    if pinned:  # where the simulated mirror's directory is visible from the inventory's
        text = pinned[0].read_text()
        assert "tensorflow-cpu==2.21.0 --hash=sha256:" in text
        assert "torch==" not in text
