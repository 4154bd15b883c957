"""gpuc-oci-run, the runtime Slurm's oci.conf calls (roles/slurm_node/files/gpuc_oci_run.py):
the CDI edits it applies to a step's bundle, which GPU device files it gives (only those the
step may open), the job's binds, the node's resolver files, and that it then runs the real
runtime with its arguments unchanged. The whole path under Slurm is in
tests/e2e/test_slurm_container_e2e.py."""

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
import yaml

PROGRAM = Path(__file__).resolve().parents[2] / "roles/slurm_node/files/gpuc_oci_run.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuc_oci_run", PROGRAM)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


oci = load()

SPEC: dict[str, Any] = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
        {"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}},
        {"name": "all", "containerEdits": {"deviceNodes": [
            {"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}, {"path": "/dev/nvidia2"}]}},
    ],
    "containerEdits": {
        "deviceNodes": [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}],
        "mounts": [{"hostPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05",
                    "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05",
                    "options": ["ro", "nosuid", "nodev", "bind"]}],
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-ctk",
                   "args": ["nvidia-ctk", "hook", "update-ldcache"]}],
    },
}


def probe_from(answers: dict[str, bool | None]) -> Any:
    return lambda path: answers.get(path, True)


def destinations(config: dict[str, Any]) -> list[str]:
    return [m["destination"] for m in config["mounts"]]


def test_a_step_gets_the_gpus_its_cgroup_lets_it_open_and_the_common_files() -> None:
    config: dict[str, Any] = {"mounts": [], "process": {"env": ["PATH=/usr/bin"]}}
    # nvidia0 is another job's (EPERM), nvidia-uvm does not exist on this node.
    got = oci.apply(config, oci.container_edits([SPEC]),
                    probe_from({"/dev/nvidia0": False, "/dev/nvidia-uvm": None}))
    assert got == {"given": ["/dev/nvidiactl", "/dev/nvidia1", "/dev/nvidia2"],
                   "denied": ["/dev/nvidia0"]}
    binds = {m["destination"]: m for m in config["mounts"]}
    assert binds["/dev/nvidia1"]["type"] == "bind" and binds["/dev/nvidia1"]["source"] == \
        "/dev/nvidia1"
    assert "/dev/nvidia0" not in binds and "/dev/nvidia-uvm" not in binds
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05" in binds
    assert config["process"]["env"] == ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=void"]
    assert config["hooks"]["createContainer"][0]["args"][-1] == "update-ldcache"


def test_a_common_device_the_cgroup_denies_is_still_given() -> None:
    """Only per-GPU files are filtered: nvidiactl is every job's (Slurm allows it to all)."""
    config: dict[str, Any] = {}
    got = oci.apply(config, oci.container_edits([SPEC]),
                    probe_from({"/dev/nvidiactl": False}))
    assert "/dev/nvidiactl" in got["given"] and got["denied"] == []


def test_without_an_all_device_every_named_device_is_used() -> None:
    spec = {**SPEC, "devices": SPEC["devices"][:2]}
    config: dict[str, Any] = {}
    got = oci.apply(config, oci.container_edits([spec]), probe_from({}))
    assert got["given"] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1"]


def test_what_the_bundle_mounts_already_is_kept() -> None:
    config: dict[str, Any] = {"mounts": [{"destination": "/dev/nvidia1", "type": "bind",
                                          "source": "/elsewhere", "options": ["bind"]}]}
    oci.apply(config, oci.container_edits([SPEC]), probe_from({}))
    assert destinations(config).count("/dev/nvidia1") == 1
    assert config["mounts"][0]["source"] == "/elsewhere"


def test_specs_of_other_kinds_are_ignored_and_yaml_and_json_are_read(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text(yaml.safe_dump(SPEC))
    (tmp_path / "other.json").write_text(json.dumps({**SPEC, "kind": "example.com/fpga"}))
    specs = oci.load_specs((str(tmp_path), str(tmp_path / "absent")))
    assert [s["kind"] for s in specs] == ["nvidia.com/gpu"]


def test_the_job_binds_and_the_resolver_files(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc/hosts").write_text("")
    config: dict[str, Any] = {"root": {"path": "rootfs"}, "mounts": [],
                              "process": {"env": ["GPUC_OCI_BINDS=/opt/a,/var/b:/b"]}}
    oci.add_binds(config)
    oci.add_host_files(config, str(tmp_path))
    assert [(m["source"], m["destination"]) for m in config["mounts"]] == [
        ("/opt/a", "/opt/a"), ("/var/b", "/b"), ("/etc/hosts", "/etc/hosts")]
    # The image has no resolv.conf: a read-only rootfs cannot take one, none is added.
    assert "/etc/resolv.conf" not in destinations(config)


def test_a_relative_bind_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    config: dict[str, Any] = {"process": {"env": ["GPUC_OCI_BINDS=opt/a"]}}
    with pytest.raises(SystemExit) as stop:
        oci.add_binds(config)
    assert stop.value.code == 1
    assert "GPUC_OCI_BINDS: 'opt/a' is not an absolute path" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--root=/r", "run", "--bundle=B", "id"],
                                  ["--root=/r", "run", "--bundle", "B", "id"],
                                  ["run", "id", "-b", "B"]])
def test_the_bundle_is_found_as_crun_and_runc_take_it(args: list[str]) -> None:
    assert oci.bundle_of(args) == "B"


def test_may_open_tells_a_denied_file_from_a_missing_and_an_open_one(tmp_path: Path) -> None:
    here = tmp_path / "file"
    here.write_text("")
    assert oci.may_open(str(here)) is True
    assert oci.may_open(str(tmp_path / "absent")) is None
    if os.geteuid() != 0:
        here.chmod(0)
        assert oci.may_open(str(here)) is False


def run_program(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The program as oci.conf runs it, with a stand-in runtime that prints its arguments and
    the bundle's mounts."""
    runtime = tmp_path / "fake-runtime"
    runtime.write_text("#!/bin/sh\necho \"$@\"\n"
                       "for a; do case $a in --bundle=*) cat \"${a#--bundle=}/config.json\";; "
                       "esac; done\n")
    runtime.chmod(0o755)
    return subprocess.run([sys.executable, str(PROGRAM), str(runtime), *args],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})


def test_the_runtime_runs_with_the_arguments_it_was_given(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({
        "root": {"path": "rootfs"}, "mounts": [],
        "process": {"env": [f"GPUC_OCI_BINDS={tmp_path}"]}}))
    args = ["--rootless=true", f"--root={tmp_path}/state", "run", f"--bundle={bundle}", "n.u.1.0.0"]
    out = run_program(tmp_path, *args)
    assert out.returncode == 0, out.stderr
    first, _, config = out.stdout.partition("\n")
    assert first.split() == args
    assert str(tmp_path) in [m["destination"] for m in json.loads(config)["mounts"]]


def test_state_and_kill_pass_through_without_reading_a_bundle(tmp_path: Path) -> None:
    out = run_program(tmp_path, "--root=/r", "kill", "-a", "n.u.1.0.0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["--root=/r", "kill", "-a", "n.u.1.0.0"]


def test_a_bundle_that_cannot_be_read_stops_in_one_line(tmp_path: Path) -> None:
    out = run_program(tmp_path, "run", f"--bundle={tmp_path}/missing", "id")
    assert out.returncode == 1
    assert out.stderr.startswith(f"gpuc-oci-run: cannot prepare the bundle {tmp_path}/missing:")
    assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""
