"""The simulated mirror's arm64 repositories: NVIDIA's layout (cuda/<os>/sbsa,
libnvidia-container/stable/deb/arm64), the same stand-ins built for arm64 (Architecture, the
aarch64 multiarch paths), a Release apt on an arm64 machine accepts, and only when asked: the
default mirror builds and publishes what it did before."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from provisioner.errors import InputError
from provisioner.matrix import STACKS_FILE, load_matrix
from provisioner.sim import stand_in_packages
from provisioner.sim.bundle import tool_script
from provisioner.sim.mirror import (
    SigningKey,
    SimPackage,
    build_flat_repo,
    build_packages,
    ensure_signing_key,
    simulated_driver_package,
)
from provisioner.sim.stand_in_packages import (
    CTK_REPO,
    all_packages,
    ctk_repo,
    cuda_repo,
    for_architecture,
    package_for,
)

needs_deb_tools = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv",
                                                "apt-get")),
    reason="needs dpkg-deb, apt-ftparchive, gpg, gpgv and apt-get",
)


def test_nvidias_arm64_directories() -> None:
    assert cuda_repo("debian12") == "cuda/debian12/x86_64"
    assert cuda_repo("debian12", "arm64") == "cuda/debian12/sbsa"
    assert cuda_repo("ubuntu2404", "arm64") == "cuda/ubuntu2404/sbsa"
    assert ctk_repo() == CTK_REPO == "libnvidia-container/stable/deb/amd64"
    assert ctk_repo("arm64") == "libnvidia-container/stable/deb/arm64"
    with pytest.raises(InputError, match="no 'ppc64el' repositories"):
        cuda_repo("debian12", "ppc64el")


def test_a_package_for_arm64_changes_its_architecture_and_triplet_paths() -> None:
    stack = {"cuda_version": "12.8"}
    cudnn = package_for("cudnn", None, "libcudnn9-dev-cuda-12", "9.8.0.87-1", stack)
    arm = for_architecture(cudnn, "arm64")
    assert arm.architecture == "arm64"
    assert arm.deb_filename == "libcudnn9-dev-cuda-12_9.8.0.87-1_arm64.deb"
    assert list(arm.files) == ["/usr/include/aarch64-linux-gnu/cudnn_version_v9.h"]
    assert list(arm.files.values()) == list(cudnn.files.values())
    driver = simulated_driver_package("cuda-drivers-580", "580.95.05-1", "13.0",
                                      tool_script("nvidia_smi"))
    arm_driver = for_architecture(driver, "arm64")
    assert arm_driver.files == driver.files and arm_driver.modes == driver.modes
    assert arm_driver.postinst == driver.postinst
    assert for_architecture(driver, "amd64") is driver
    noarch = SimPackage(name="cuda-keyring", version="1.1-1", architecture="all")
    assert for_architecture(noarch, "arm64") is noarch


def test_modes_follow_a_moved_path() -> None:
    pkg = SimPackage(name="tool", version="1.0",
                     files={"/usr/lib/x86_64-linux-gnu/tool/run": "#!/bin/sh\n"},
                     modes={"/usr/lib/x86_64-linux-gnu/tool/run": 0o755})
    assert for_architecture(pkg, "arm64").modes == {"/usr/lib/aarch64-linux-gnu/tool/run": 0o755}


# The stack matrix's stand-ins, generated once for this module (a second or so each).
_MATRIX = functools.cache(load_matrix)
_all_packages = functools.cache(
    lambda os_dir, arch: all_packages(_MATRIX(), os_dir, arch))


def test_arm64_repositories_hold_the_same_packages_as_amd64() -> None:
    for amd, arm in zip(_all_packages("debian12", "amd64"), _all_packages("debian12", "arm64"),
                        strict=True):
        assert [(p.name, p.version) for p in amd] == [(p.name, p.version) for p in arm]
        assert {p.architecture for p in arm} == {"arm64"}
        assert not any("x86_64" in path for p in arm for path in p.files)
    with pytest.raises(InputError, match="no 'i386' repositories"):
        all_packages(_MATRIX(), "debian12", "i386")


class Recorder:
    """build_packages and build_flat_repo, recorded instead of run."""

    def __init__(self) -> None:
        self.pools: list[tuple[str, list[str]]] = []
        self.repos: dict[str, tuple[tuple[str, ...], list[str]]] = {}

    def build_packages(self, pkgs: Any, outdir: Path) -> list[Path]:
        names = [p.deb_filename for p in pkgs]
        self.pools.append((outdir.name, names))
        return [outdir / name for name in names]

    def build_flat_repo(self, debs: Any, repo_dir: Path, key: Any,
                        architectures: tuple[str, ...] = ("amd64", "all")) -> None:
        self.repos[str(repo_dir)] = (architectures, [deb.name for deb in debs])


@pytest.fixture()
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(stand_in_packages, "build_packages", recorder.build_packages)
    monkeypatch.setattr(stand_in_packages, "build_flat_repo", recorder.build_flat_repo)
    monkeypatch.setattr(stand_in_packages, "all_packages",
                        lambda _matrix, os_dir="debian12", arch="amd64": _all_packages(os_dir,
                                                                                       arch))
    (tmp_path / "k.asc").write_text("key")
    monkeypatch.setattr(stand_in_packages, "ensure_signing_key",
                        lambda keydir: SigningKey("F" * 40, tmp_path, tmp_path / "k.gpg",
                                                  tmp_path / "k.asc"))
    return recorder


def test_the_default_mirror_builds_amd64_only(recorded: Recorder, tmp_path: Path) -> None:
    mirror = stand_in_packages.build_mirror(tmp_path / "mirror", STACKS_FILE)
    assert mirror.architectures == ("amd64",)
    assert [pool for pool, _ in recorded.pools] == ["cuda", "ctk"]
    assert all(name.endswith(("_amd64.deb", "_all.deb"))
               for _, names in recorded.pools for name in names)
    root = tmp_path / "mirror"
    assert set(recorded.repos) == {str(root / cuda_repo(os_dir))
                                   for os_dir in stand_in_packages.APT_OS_DIRS} | {
        str(root / CTK_REPO)}
    assert {arches for arches, _ in recorded.repos.values()} == {("amd64", "all")}


def test_arm64_is_opt_in_and_gets_its_own_repositories(recorded: Recorder,
                                                       tmp_path: Path) -> None:
    mirror = stand_in_packages.build_mirror(tmp_path / "mirror", STACKS_FILE,
                                            architectures=("amd64", "arm64"))
    assert mirror.architectures == ("amd64", "arm64")
    root = tmp_path / "mirror"
    sbsa = recorded.repos[str(root / "cuda/debian12/sbsa")]
    x86 = recorded.repos[str(root / "cuda/debian12/x86_64")]
    assert sbsa[0] == ("arm64", "all") and x86[0] == ("amd64", "all")
    assert [n.replace("_arm64.deb", "_amd64.deb") for n in sbsa[1]] == x86[1]
    ctk = recorded.repos[str(root / "libnvidia-container/stable/deb/arm64")]
    assert ctk[0] == ("arm64", "all") and ctk[1] and all(n.endswith("_arm64.deb") for n in ctk[1])
    # One pool build each for the CUDA and the container toolkit packages, both architectures.
    assert [pool for pool, _ in recorded.pools] == ["cuda", "ctk"]
    with pytest.raises(InputError, match="no 's390x' repositories"):
        stand_in_packages.build_mirror(tmp_path / "m2", STACKS_FILE, architectures=("s390x",))


@needs_deb_tools
def test_apt_on_an_arm64_machine_reads_the_arm64_repository(tmp_path: Path) -> None:
    """apt in a private state directory, told its machine is arm64: the arm64 repository
    verifies, lists its packages and offers the stand-in; the Release names arm64."""
    key_dir = Path(tempfile_dir())
    try:
        key = ensure_signing_key(key_dir)
        pkgs = [for_architecture(p, "arm64") for p in (
            package_for("cudnn", None, "libcudnn9-dev-cuda-12", "9.8.0.87-1",
                        {"cuda_version": "12.8"}),
            simulated_driver_package("cuda-drivers-580", "580.95.05-1", "13.0",
                                     tool_script("nvidia_smi")))]
        repo = tmp_path / "cuda" / "debian12" / "sbsa"
        debs = build_packages(pkgs, tmp_path / "pool")
        build_flat_repo(debs, repo, key, ("arm64", "all"))
        assert "Architectures: arm64 all\n" in (repo / "Release").read_text()
        contents = subprocess.run(["dpkg-deb", "-c", str(debs[0])], capture_output=True,
                                  text=True, check=True).stdout
        assert "./usr/include/aarch64-linux-gnu/cudnn_version_v9.h" in contents
        apt = tmp_path / "apt"
        for sub in ("etc/apt.conf.d", "etc/preferences.d", "etc/sources.list.d",
                    "etc/trusted.gpg.d", "state/lists/partial", "cache/archives/partial"):
            (apt / sub).mkdir(parents=True)
        (apt / "etc/sources.list").write_text(f"deb [signed-by={key.keyring}] file:{repo}/ /\n")
        options = [f"-oDir::Etc={apt}/etc", f"-oDir::State={apt}/state",
                   f"-oDir::Cache={apt}/cache", "-oDir::State::status=/dev/null",
                   "-oAPT::Architecture=arm64", "-oAPT::Architectures=arm64"]
        update = subprocess.run(["apt-get", *options, "update"], capture_output=True,
                                text=True, check=False)
        assert update.returncode == 0, update.stdout + update.stderr
        assert "doesn't support architecture" not in update.stderr
        policy = subprocess.run(["apt-cache", *options, "policy", "cuda-drivers-580"],
                                capture_output=True, text=True, check=True).stdout
        assert "Candidate: 580.95.05-1" in policy
    finally:
        shutil.rmtree(key_dir, ignore_errors=True)


def tempfile_dir() -> str:
    """A short directory for the signing key (gpg-agent's socket path has a length limit)."""
    import tempfile

    return tempfile.mkdtemp(prefix="gpuc-key-")


def test_unknown_repository_architectures_are_refused(tmp_path: Path) -> None:
    key = SigningKey("0" * 40, tmp_path, tmp_path / "k.gpg", tmp_path / "k.asc")
    with pytest.raises(InputError, match="repository architectures"):
        build_flat_repo([], tmp_path / "repo", key, ("sbsa",))
