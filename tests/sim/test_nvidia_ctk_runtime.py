"""The stand-in nvidia-ctk makes the file edits the real `nvidia-ctk runtime configure` makes
(NVIDIA Container Toolkit cmd/nvidia-ctk/runtime/configure, pkg/config/engine/docker and
pkg/config/engine/containerd): docker's daemon.json, containerd's drop-in and imports."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from tests.sim.conftest import Bundled, run_tool


def ctk(bundled: Bundled, root: Path, *args: str) -> str:
    result = run_tool(bundled("nvidia_ctk", version="1.17.8"), root, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_docker_gains_the_nvidia_runtime_and_keeps_its_settings(tmp_path: Path,
                                                                  bundled: Bundled) -> None:
    daemon = tmp_path / "etc/docker/daemon.json"
    daemon.parent.mkdir(parents=True)
    daemon.write_text('{"log-driver": "journald", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}')
    ctk(bundled, tmp_path, "runtime", "configure", "--runtime=docker")
    text = daemon.read_text()
    assert json.loads(text) == {
        "log-driver": "journald",
        "runtimes": {"crun": {"path": "/usr/bin/crun"},
                     "nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    assert text.startswith('{\n    "log-driver"')  # Go's MarshalIndent: four spaces, keys sorted
    ctk(bundled, tmp_path, "runtime", "configure", "--runtime=docker")
    assert daemon.read_text() == text  # a rerun writes the same bytes
    ctk(bundled, tmp_path, "runtime", "configure", "--runtime=docker", "--set-as-default")
    assert json.loads(daemon.read_text())["default-runtime"] == "nvidia"


def test_docker_refuses_a_drop_in(tmp_path: Path, bundled: Bundled) -> None:
    result = run_tool(bundled("nvidia_ctk", version="1.17.8"), tmp_path, "runtime", "configure",
                      "--runtime=docker", "--drop-in-config=/etc/docker/x.json")
    assert result.returncode == 1 and "does not support drop-in configs" in result.stderr


def test_containerd_without_a_config_gets_a_version_2_drop_in(tmp_path: Path,
                                                              bundled: Bundled) -> None:
    ctk(bundled, tmp_path, "runtime", "configure", "--runtime=containerd")
    top = tmp_path / "etc/containerd/config.toml"
    drop_in = tmp_path / "etc/containerd/conf.d/99-nvidia.toml"
    assert tomllib.loads(top.read_text()) == {
        "imports": [f"{tmp_path}/etc/containerd/conf.d/*.toml"], "version": 2}
    nvidia = tomllib.loads(drop_in.read_text())["plugins"]["io.containerd.grpc.v1.cri"][
        "containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"] == {"BinaryName": "/usr/bin/nvidia-container-runtime"}
    before = (top.read_text(), drop_in.read_text())
    ctk(bundled, tmp_path, "runtime", "configure", "--runtime=containerd")
    assert (top.read_text(), drop_in.read_text()) == before


def test_containerd_2_version_3_config_uses_the_new_cri_plugin(tmp_path: Path,
                                                               bundled: Bundled) -> None:
    top = tmp_path / "etc/containerd/config.toml"
    top.parent.mkdir(parents=True)
    top.write_text('version = 3\nimports = ["/etc/containerd/other/*.toml"]\n'
                   '[plugins."io.containerd.cri.v1.images"]\n  snapshotter = "overlayfs"\n')
    ctk(bundled, tmp_path, "runtime", "configure", "--runtime=containerd", "--set-as-default")
    config = tomllib.loads(top.read_text())
    assert config["imports"] == ["/etc/containerd/other/*.toml",
                                 f"{tmp_path}/etc/containerd/conf.d/*.toml"]
    assert config["plugins"]["io.containerd.cri.v1.images"]["snapshotter"] == "overlayfs"
    drop_in = tomllib.loads((tmp_path / "etc/containerd/conf.d/99-nvidia.toml").read_text())
    cri = drop_in["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]
    assert drop_in["version"] == 3 and cri["default_runtime_name"] == "nvidia"
    assert "nvidia" in cri["runtimes"]


def test_dry_run_writes_nothing(tmp_path: Path, bundled: Bundled) -> None:
    out = ctk(bundled, tmp_path, "runtime", "configure", "--runtime=containerd", "--dry-run")
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in out
    assert not (tmp_path / "etc/containerd").exists()
