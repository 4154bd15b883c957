"""`provisioner export k8s` in-process (provisioner/commands/export.py): the Kubernetes label
table's columns and rows, grouped for many nodes unless -v."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner import cli, render
from tests.unit.commands.cli_support import Tables, lines, write_inventory


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
