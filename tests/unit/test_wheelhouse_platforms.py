"""The wheelhouse for the nodes' platforms: pip command lines, the reviewed lock's requirements
file, every wheel checked against the lock, platforms from the nodes' facts, the server's
address and the site index."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from provisioner import smoke_launch, wheelhouse
from provisioner.errors import EnvironmentProblem
from provisioner.wheelhouse import (
    NodePlatform,
    download_command,
    platform_from_facts,
)
from provisioner.wheellock import (
    LOCK_FILE,
    LockedWheel,
    load_lock,
    locked_wheels,
    requirements_text,
)

DEBIAN13 = NodePlatform("3.13", "x86_64")


def test_download_command_targets_the_node_platform(tmp_path: Path) -> None:
    cmd = download_command(tmp_path / "cp313-x86_64", ["torch==2.13.0", "numpy"], DEBIAN13)
    assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--only-binary=:all:" in cmd
    platforms = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--platform"]
    assert platforms[0] == "manylinux_2_28_x86_64" and "manylinux2014_x86_64" in platforms
    assert all(p.endswith("_x86_64") for p in platforms)
    # pip matches --platform tags exactly: no glibc between 2.17 and 2.28 may be missing
    # (nvidia-nccl-cu13 2.29.7 ships for manylinux_2_18 only).
    assert {f"manylinux_2_{minor}_x86_64" for minor in range(17, 29)} <= set(platforms)
    at = cmd.index("--python-version")
    assert cmd[at:at + 6] == ["--python-version", "3.13", "--implementation", "cp",
                              "--abi", "cp313"]
    assert cmd[-2:] == ["torch==2.13.0", "numpy"]
    assert cmd[cmd.index("--dest") + 1] == str(tmp_path / "cp313-x86_64")


def test_download_command_for_the_controller_has_no_platform_flags(tmp_path: Path) -> None:
    cmd = download_command(tmp_path, ["numpy"])
    assert "--platform" not in cmd and "--python-version" not in cmd


def test_platform_key_and_arm() -> None:
    assert DEBIAN13.key == "cp313-x86_64"
    arm = NodePlatform("3.11", "aarch64")
    assert arm.key == "cp311-aarch64" and arm.platform_tags[0] == "manylinux_2_28_aarch64"


def _wheel(directory: Path, name: str, body: bytes) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(body)
    return hashlib.sha256(body).hexdigest()


def test_the_lock_requirements_pin_every_wheel_with_its_one_hash() -> None:
    wheels = [LockedWheel("torch", "2.13.0", "torch-2.13.0-cp313-cp313-x.whl", "a" * 64),
              LockedWheel("numpy", "2.3.1", "numpy-2.3.1-cp313-cp313-x.whl", "b" * 64)]
    lines = [line for line in requirements_text(wheels).splitlines() if not line.startswith("#")]
    assert lines == [f"numpy==2.3.1 --hash=sha256:{'b' * 64}",
                     f"torch==2.13.0 --hash=sha256:{'a' * 64}"]


def _locked(directory: Path, name: str, version: str, body: bytes) -> LockedWheel:
    file = f"{name}-{version}-py3-none-any.whl"
    return LockedWheel(name, version, file, _wheel(directory, file, body))


def test_ensure_wheelhouse_downloads_the_locked_pins_and_checks_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "index"
    lock = {"cp313-x86_64": [_locked(source, "numpy", "2.3.1", b"numpy for 3.13")],
            "cp311-x86_64": [_locked(source, "numpy", "2.3.1", b"numpy for 3.11")]}
    calls: list[tuple[str, list[str], NodePlatform | None, bool]] = []

    def fake_download(dest: Path, requirements: list[str], timeout_s: float,
                      node: NodePlatform | None = None, no_deps: bool = False) -> None:
        calls.append((dest.name, list(requirements), node, no_deps))
        [wheel] = lock[dest.name]
        (dest / wheel.file).write_bytes(
            b"numpy for 3.13" if dest.name == "cp313-x86_64" else b"numpy for 3.11")

    monkeypatch.setattr(wheelhouse, "_pip_download", fake_download)
    monkeypatch.setattr(wheelhouse, "controller_platform", lambda: NodePlatform("3.11", "x86_64"))
    house = tmp_path / "house"
    wheelhouse.ensure_wheelhouse(house, wheels_for=lambda node: lock[node.key],
                                 platforms=[DEBIAN13, DEBIAN13, NodePlatform("3.11", "x86_64")])
    # Exactly the locked pins, without resolving dependencies.
    assert calls == [("cp311-x86_64", ["numpy==2.3.1"], None, True),
                     ("cp313-x86_64", ["numpy==2.3.1"], DEBIAN13, True)]
    text = (house / "cp313-x86_64" / "requirements.txt").read_text()
    assert text == requirements_text(lock["cp313-x86_64"])
    # Warm: nothing downloaded again.
    wheelhouse.ensure_wheelhouse(house, wheels_for=lambda node: lock[node.key],
                                 platforms=[DEBIAN13])
    assert len(calls) == 2
    # A file in the cache that is not the locked one (the index or the cache served another):
    # refused before anything is served.
    (house / "cp313-x86_64" / lock["cp313-x86_64"][0].file).write_bytes(b"numpy, evil")
    with pytest.raises(EnvironmentProblem, match=r"has sha256 [0-9a-f]{64}, the reviewed lock "
                                                 r"says [0-9a-f]{64}; remove it"):
        wheelhouse.ensure_wheelhouse(house, wheels_for=lambda node: lock[node.key],
                                     platforms=[DEBIAN13])


def test_an_unlocked_platform_is_refused_in_one_line() -> None:
    with pytest.raises(EnvironmentProblem) as exc:
        locked_wheels(load_lock(), "pytorch-gpu", "cp399-sparc")
    assert "\n" not in str(exc.value)
    assert str(exc.value).startswith("smoke job wheels: no reviewed lock for pytorch-gpu on "
                                     "cp399-sparc")
    assert "python -m provisioner.wheellock --set pytorch-gpu --platform cp399-sparc" in str(
        exc.value)


def test_the_projects_lock_covers_the_simulated_cluster_and_names_its_files() -> None:
    from packaging.utils import parse_wheel_filename

    lock = load_lock(LOCK_FILE)
    for name in ("pytorch-sim", "tensorflow-sim", "pytorch-gpu", "tensorflow-gpu"):
        assert "cp311-x86_64" in lock[name], name
    for name, platforms in lock.items():
        for key, wheels in platforms.items():
            assert len({w.name for w in wheels}) == len(wheels), (name, key)
            for w in wheels:
                parsed_name, parsed_version, _b, tags = parse_wheel_filename(w.file)
                assert (str(parsed_name), str(parsed_version)) == (w.name, w.version)
                assert len(w.sha256) == 64 and int(w.sha256, 16) >= 0
                machine = key.split("-", 1)[1]
                assert any(t.platform in ("any", ) or t.platform.endswith(machine)
                           for t in tags), (key, w.file)
    # The GPU sets install NVIDIA's builds, never the CPU one the simulation runs.
    assert all("+cpu" not in w.version for wheels in lock["pytorch-gpu"].values()
               for w in wheels)
    sim_torch = {w.version for w in lock["pytorch-sim"]["cp311-x86_64"] if w.name == "torch"}
    assert sim_torch == {"2.13.0+cpu"}


def test_platform_from_facts() -> None:
    # As playbooks/facts.yml publishes them (node_platform_report), and as injected facts.
    assert platform_from_facts({"python": {"version": {"major": 3, "minor": 13, "micro": 5}},
                                "architecture": "x86_64"}) == DEBIAN13
    assert platform_from_facts({"ansible_python": {"version": {"major": 3, "minor": 11}},
                                "ansible_architecture": "arm64"}) == NodePlatform("3.11",
                                                                                  "aarch64")
    for unusable in ({"architecture": "x86_64"}, {"python": {"version": "3.13"}},
                     {"python": {"version": {"major": 3, "minor": 13}},
                      "architecture": "sparc64"},
                     {"python": {"version": {"major": "x", "minor": 1}}, "architecture": "x86_64"}):
        assert platform_from_facts(unusable) is None, unusable


def test_controller_address_towards_a_node() -> None:
    assert smoke_launch._local_address_towards("127.0.0.1") == "127.0.0.1"
    with pytest.raises(EnvironmentProblem, match=r"address towards node no-such-node\.invalid"):
        smoke_launch._local_address_towards("no-such-node.invalid")


def test_pip_installs_from_the_hashed_requirements_and_refuses_a_changed_wheel(
        tmp_path: Path) -> None:
    import subprocess

    from tests.smoke.test_smoke_analysis import _make_wheel

    house = tmp_path / "cp-x"
    wheel = _make_wheel(house)
    req = house / "requirements.txt"
    req.write_text(requirements_text([LockedWheel("gpuc-tiny", "1.0", wheel.name,
                                                  hashlib.sha256(wheel.read_bytes()).hexdigest())]))

    def install(target: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-index",
             "--find-links", str(house), "--require-hashes", "-r", str(req),
             "--target", str(tmp_path / target)],
            capture_output=True, text=True, timeout=120, check=False)

    ok = install("good")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "good" / "gpuc_tiny" / "__init__.py").is_file()
    wheel.write_bytes(wheel.read_bytes() + b"\0")  # a wheel altered after the file was written
    bad = install("bad")
    assert bad.returncode != 0 and "hash" in bad.stderr.lower()
