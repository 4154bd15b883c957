"""The wheelhouse for the nodes' platforms: pip command lines, the hashed requirements file,
platforms from the nodes' facts, the server's address and the site index."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from provisioner import smokerun, wheelhouse
from provisioner.errors import EnvironmentProblem
from provisioner.wheelhouse import (
    NodePlatform,
    download_command,
    hashed_requirements,
    platform_from_facts,
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


def test_hashed_requirements_pins_every_wheel(tmp_path: Path) -> None:
    torch = _wheel(tmp_path, "torch-2.13.0-cp313-cp313-manylinux_2_28_x86_64.whl", b"torch")
    numpy = _wheel(tmp_path, "numpy-2.3.1-cp313-cp313-manylinux_2_28_x86_64.whl", b"numpy")
    dep = _wheel(tmp_path, "typing_extensions-4.14.0-py3-none-any.whl", b"typing")
    (tmp_path / "notes.txt").write_text("not a wheel")
    lines = [line for line in hashed_requirements(tmp_path).splitlines()
             if not line.startswith("#")]
    assert lines == [f"numpy==2.3.1 --hash=sha256:{numpy}",
                     f"torch==2.13.0 --hash=sha256:{torch}",
                     f"typing-extensions==4.14.0 --hash=sha256:{dep}"]


def test_ensure_wheelhouse_downloads_per_platform_and_writes_the_hashes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Path, list[str], NodePlatform | None]] = []

    def fake_download(dest: Path, requirements: list[str], timeout_s: float,
                      node: NodePlatform | None = None) -> None:
        calls.append((dest, list(requirements), node))
        tag = f"cp{node.python.replace('.', '')}" if node else "cp311"
        _wheel(dest, f"numpy-2.3.1-{tag}-{tag}-manylinux_2_28_x86_64.whl", dest.name.encode())

    monkeypatch.setattr(wheelhouse, "_pip_download", fake_download)
    monkeypatch.setattr(wheelhouse, "controller_platform", lambda: NodePlatform("3.11", "x86_64"))
    house = tmp_path / "house"
    wheelhouse.ensure_wheelhouse(house, ["numpy"], platforms=[DEBIAN13, DEBIAN13,
                                                              NodePlatform("3.11", "x86_64")])
    assert [(c[0].name, c[2]) for c in calls] == [("cp311-x86_64", None),
                                                  ("cp313-x86_64", DEBIAN13)]
    text = (house / "cp313-x86_64" / "requirements.txt").read_text()
    digest = hashlib.sha256(b"cp313-x86_64").hexdigest()
    assert f"numpy==2.3.1 --hash=sha256:{digest}" in text
    # Warm: nothing downloaded again, the file is unchanged.
    wheelhouse.ensure_wheelhouse(house, ["numpy"], platforms=[DEBIAN13])
    assert len(calls) == 2
    assert (house / "cp313-x86_64" / "requirements.txt").read_text() == text


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
    assert smokerun._local_address_towards("127.0.0.1") == "127.0.0.1"
    with pytest.raises(EnvironmentProblem, match=r"address towards node no-such-node\.invalid"):
        smokerun._local_address_towards("no-such-node.invalid")


def test_pip_installs_from_the_hashed_requirements_and_refuses_a_changed_wheel(
        tmp_path: Path) -> None:
    import subprocess

    from tests.smoke.test_smoke_analysis import _make_wheel

    house = tmp_path / "cp-x"
    wheel = _make_wheel(house)
    req = house / "requirements.txt"
    req.write_text(hashed_requirements(house))

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
