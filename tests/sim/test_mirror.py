"""The signed flat apt mirror of SIMULATED packages, built with the real Debian tools."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.errors import EnvironmentProblem, InputError
from provisioner.sim import mirror
from provisioner.sim.bundle import tool_script
from provisioner.sim.mirror import (
    SigningKey,
    SimPackage,
    build_flat_repo,
    build_packages,
    ensure_signing_key,
    simulated_driver_package,
)

OLD = 1_000_000  # an mtime no build writes

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv")),
    reason="needs dpkg-deb, apt-ftparchive, gpg and gpgv",
)


def packages(nccl_version: str = "2.21.5-1+cuda12.4") -> list[SimPackage]:
    return [
        simulated_driver_package("nvidia-driver", "550.54.15-1", "12.4",
                                 tool_script("nvidia_smi")),
        SimPackage(
            name="libnccl2",
            version=nccl_version,
            depends=("libc6",),
            provides=("libnccl",),
            files={"/usr/lib/x86_64-linux-gnu/libnccl.so.2": b"\x7fELF simulated"},
            description="NVIDIA Collective Communication Library (NCCL) Runtime",
        ),
        SimPackage(
            name="cuda-keyring",
            version="1.1-1",
            architecture="all",
            files={"/usr/share/keyrings/cuda-archive-keyring.gpg": b"not a key"},
            postinst="echo configured > /dev/null\n",
            description="NVIDIA CUDA repository keyring",
        ),
    ]


@pytest.fixture
def key_dir() -> Iterator[Path]:
    """A short directory for a signing key: gpg-agent's socket path must stay under about 100
    characters, which pytest's tmp_path under a parallel worker (`popen-gw0/...`) can pass."""
    path = Path(tempfile.mkdtemp(prefix="gpuc-key-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    return ensure_signing_key(tmp_path_factory.mktemp("keys"))


def control_field(deb: Path, name: str) -> str:
    out = subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def gpgv(key: SigningKey, *files: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["gpgv", "--keyring", str(key.keyring), *map(str, files)],
                          capture_output=True, check=False)


def tree_state(*dirs: Path) -> dict[str, tuple[float, bytes]]:
    return {str(p): (p.stat().st_mtime, p.read_bytes())
            for d in dirs for p in sorted(d.rglob("*")) if p.is_file()}


def age(*dirs: Path) -> None:
    for d in dirs:
        for path in d.rglob("*"):
            if path.is_file():
                os.utime(path, (OLD, OLD))


# --- packages --------------------------------------------------------------------------------


def test_packages_carry_exact_versions_and_simulated_markers(tmp_path: Path) -> None:
    debs = build_packages(packages(), tmp_path)
    assert [deb.name for deb in debs] == [
        "nvidia-driver_550.54.15-1_amd64.deb",
        "libnccl2_2.21.5-1+cuda12.4_amd64.deb",
        "cuda-keyring_1.1-1_all.deb",
    ]
    driver, nccl, keyring = debs
    assert control_field(nccl, "Version") == "2.21.5-1+cuda12.4"
    assert control_field(nccl, "Provides") == "libnccl"
    assert control_field(driver, "Version") == "550.54.15-1"
    assert control_field(nccl, "Depends") == "libc6"
    assert control_field(keyring, "Architecture") == "all"
    for deb in debs:
        assert control_field(deb, "Description").startswith("SIMULATED: ")
        listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                                 check=True).stdout
        name = control_field(deb, "Package")
        assert f"./usr/share/doc/{name}/SIMULATED" in listing
        assert all(" root/root " in line for line in listing.splitlines())
    driver_listing = subprocess.run(["dpkg-deb", "-c", str(driver)], capture_output=True,
                                    text=True, check=True).stdout
    assert re.search(r"^-rwxr-xr-x root/root .* \./usr/bin/nvidia-smi$", driver_listing, re.M)
    info = subprocess.run(["dpkg-deb", "-I", str(keyring)], capture_output=True, text=True,
                          check=True).stdout
    assert re.search(r"\d+ bytes, +\d+ lines +\* +postinst +#!/bin/sh", info)


def test_driver_package_installs_a_working_nvidia_smi(tmp_path: Path) -> None:
    [driver] = build_packages(packages()[:1], tmp_path / "debs")
    root = tmp_path / "node"
    subprocess.run(["dpkg-deb", "-x", str(driver), str(root)], check=True)
    assert (root / "usr/lib/gpu-sim/driver-version").read_text() == "550.54.15\n"
    assert (root / "usr/lib/gpu-sim/cuda-version").read_text() == "12.4\n"
    (root / "etc/gpu-sim").mkdir(parents=True)
    (root / "etc/gpu-sim/profile.json").write_text(
        json.dumps({"gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 4}))
    result = subprocess.run([sys.executable, str(root / "usr/bin/nvidia-smi"), "--version"],
                            env={**os.environ, "GPU_SIM_ROOT": str(root)}, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout
    assert "DRIVER version      : 550.54.15" in result.stdout
    assert os.access(root / "usr/bin/nvidia-smi", os.X_OK)


def test_rebuild_is_a_no_op_and_byte_identical(tmp_path: Path) -> None:
    first = build_packages(packages(), tmp_path)
    content = {deb.name: deb.read_bytes() for deb in first}
    age(tmp_path)
    build_packages(packages(), tmp_path)
    assert {deb.stat().st_mtime for deb in first} == {OLD}
    # Without the manifest every package really is rebuilt: still the same bytes.
    (tmp_path / ".simulated-build-manifest.json").unlink()
    build_packages(packages(), tmp_path)
    assert {deb.name: deb.read_bytes() for deb in first} == content
    assert {deb.stat().st_mtime for deb in first} == {OLD}


def test_changed_or_damaged_package_is_rebuilt(tmp_path: Path) -> None:
    driver, nccl, _ = build_packages(packages(), tmp_path)
    age(tmp_path)
    nccl.write_bytes(b"damaged")
    build_packages(packages(), tmp_path)
    assert control_field(nccl, "Version") == "2.21.5-1+cuda12.4"
    assert driver.stat().st_mtime == OLD
    new = build_packages(packages("2.22.3-1+cuda12.6"), tmp_path)
    assert new[1].name == "libnccl2_2.22.3-1+cuda12.6_amd64.deb"
    assert control_field(new[1], "Version") == "2.22.3-1+cuda12.6"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Bad_Name", "version": "1.0"}, "package name"),
        ({"name": "ok", "version": "one"}, "Debian version"),
        ({"name": "ok", "version": "1.0", "files": {"relative/path": b""}}, "absolute"),
        ({"name": "ok", "version": "1.0", "modes": {"/usr/bin/x": 0o755}}, "not in files"),
        ({"name": "ok", "version": "1.0", "architecture": "x86_64"}, "architecture"),
        ({"name": "ok", "version": "1.0", "depends": ("a, b",)}, "relation"),
    ],
)
def test_bad_package_definitions_are_input_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        SimPackage(**kwargs)  # type: ignore[arg-type]


def test_missing_tool_names_the_package_to_install(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which
    monkeypatch.setattr(mirror.shutil, "which",
                        lambda tool: None if tool == "apt-ftparchive" else real_which(tool))
    debs = build_packages(packages()[1:2], tmp_path / "debs")
    key = SigningKey("0" * 40, tmp_path, tmp_path / "k.gpg", tmp_path / "k.asc")
    with pytest.raises(EnvironmentProblem) as error:
        build_flat_repo(debs, tmp_path / "repo", key)
    assert "apt-ftparchive" in str(error.value)
    assert "apt-utils" in str(error.value)
    assert "\n" not in str(error.value)


# --- repository ------------------------------------------------------------------------------


def test_flat_repo_is_signed_and_indexed(tmp_path: Path, key: SigningKey) -> None:
    repo = tmp_path / "repo" / "debian12" / "x86_64"
    build_flat_repo(build_packages(packages(), tmp_path / "debs"), repo, key)
    index = (repo / "Packages").read_text()
    assert re.findall(r"^Package: (.*)$", index, re.M) == [
        "cuda-keyring", "libnccl2", "nvidia-driver"]
    assert "Filename: ./libnccl2_2.21.5-1+cuda12.4_amd64.deb\n" in index
    assert "Version: 2.21.5-1+cuda12.4\n" in index
    assert gzip.decompress((repo / "Packages.gz").read_bytes()) == index.encode()
    release = (repo / "Release").read_text()
    assert "Origin: gpu-cluster-provisioner simulated mirror\n" in release
    assert "Label: gpu-cluster-provisioner simulated mirror\n" in release
    sha256 = mirror.hashlib.sha256((repo / "Packages").read_bytes()).hexdigest()
    assert re.search(rf"^ {sha256} +\d+ Packages$", release, re.M)
    assert (repo / "SIMULATED").read_text().startswith("SIMULATED")
    assert gpgv(key, repo / "InRelease").returncode == 0
    assert gpgv(key, repo / "Release.gpg", repo / "Release").returncode == 0
    assert subprocess.run(["gpg", "--list-packets", str(key.keyring)], capture_output=True,
                          check=False).returncode == 0


def test_tampering_breaks_the_signatures(tmp_path: Path, key: SigningKey,
                                        key_dir: Path) -> None:
    repo = tmp_path / "repo"
    build_flat_repo(build_packages(packages(), tmp_path / "debs"), repo, key)
    inrelease = (repo / "InRelease").read_text()
    real = mirror.hashlib.sha256((repo / "Packages").read_bytes()).hexdigest()
    forged = ("0" if real[0] != "0" else "1") + real[1:]
    (repo / "InRelease").write_text(inrelease.replace(real, forged))
    result = gpgv(key, repo / "InRelease")
    assert result.returncode != 0
    assert b"BAD signature" in result.stderr
    release = (repo / "Release").read_text()
    (repo / "Release").write_text(release.replace(real, forged))
    assert gpgv(key, repo / "Release.gpg", repo / "Release").returncode != 0
    other_key = ensure_signing_key(key_dir / "other-keys")
    assert gpgv(other_key, repo / "Release.gpg", repo / "Release").returncode != 0
    # The next build repairs the forged files.
    build_flat_repo(build_packages(packages(), tmp_path / "debs"), repo, key)
    assert gpgv(key, repo / "InRelease").returncode == 0
    assert gpgv(key, repo / "Release.gpg", repo / "Release").returncode == 0


def test_repo_rebuild_with_same_inputs_changes_nothing(tmp_path: Path, key: SigningKey) -> None:
    debs_dir, repo = tmp_path / "debs", tmp_path / "repo"
    build_flat_repo(build_packages(packages(), debs_dir), repo, key)
    age(debs_dir, repo)
    before = tree_state(debs_dir, repo)
    build_flat_repo(build_packages(packages(), debs_dir), repo, key)
    assert tree_state(debs_dir, repo) == before


def test_repo_follows_a_version_change(tmp_path: Path, key: SigningKey) -> None:
    debs_dir, repo = tmp_path / "debs", tmp_path / "repo"
    build_flat_repo(build_packages(packages(), debs_dir), repo, key)
    old_release = (repo / "Release").read_bytes()
    build_flat_repo(build_packages(packages("2.22.3-1+cuda12.6"), debs_dir), repo, key)
    assert sorted(p.name for p in repo.glob("*.deb")) == [
        "cuda-keyring_1.1-1_all.deb",
        "libnccl2_2.22.3-1+cuda12.6_amd64.deb",
        "nvidia-driver_550.54.15-1_amd64.deb",
    ]
    assert "Version: 2.21.5" not in (repo / "Packages").read_text()
    assert (repo / "Release").read_bytes() != old_release
    assert gpgv(key, repo / "InRelease").returncode == 0


def test_signing_key_is_generated_once(key_dir: Path) -> None:
    first = ensure_signing_key(key_dir / "keys")
    assert re.fullmatch(r"[0-9A-F]{40}", first.fingerprint)
    assert first.keyring.read_bytes()[:1] != b"-"  # binary, as signed-by wants
    assert first.armored.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    os.utime(first.keyring, (OLD, OLD))
    again = ensure_signing_key(key_dir / "keys")
    assert again == first
    assert first.keyring.stat().st_mtime == OLD
    assert oct(first.gnupghome.stat().st_mode & 0o777) == "0o700"
    # No gpg-agent is left running for this GNUPGHOME. The agent exits on its own after
    # `gpgconf --kill`: on a loaded machine that takes a moment (a mutation run beside CI saw it
    # still listed once), so it has 10 s to go.
    home = str(first.gnupghome).encode()
    deadline = time.monotonic() + 10
    while True:
        leftovers = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if b"gpg-agent" in cmdline.read_bytes() and home in cmdline.read_bytes():
                    leftovers.append(cmdline)
            except OSError:
                continue
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert leftovers == []


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")
def test_apt_accepts_the_repository_with_signed_by(tmp_path: Path, key: SigningKey) -> None:
    """apt itself (in a private state directory) verifies and reads the mirror."""
    repo = tmp_path / "repo" / "debian12" / "x86_64"
    build_flat_repo(build_packages(packages(), tmp_path / "debs"), repo, key)
    apt = tmp_path / "apt"
    for sub in ("etc/apt.conf.d", "etc/preferences.d", "etc/sources.list.d",
                "etc/trusted.gpg.d", "state/lists/partial", "cache/archives/partial"):
        (apt / sub).mkdir(parents=True)
    (apt / "etc/sources.list").write_text(
        f"deb [signed-by={key.keyring}] file:{repo}/ /\n")
    options = [f"-oDir::Etc={apt}/etc", f"-oDir::State={apt}/state",
               f"-oDir::Cache={apt}/cache", "-oDir::State::status=/dev/null"]
    update = subprocess.run(["apt-get", *options, "update"], capture_output=True, text=True,
                            check=False)
    assert update.returncode == 0, update.stdout + update.stderr
    assert "NO_PUBKEY" not in update.stderr and "not signed" not in update.stderr
    policy = subprocess.run(["apt-cache", *options, "policy", "libnccl2"], capture_output=True,
                            text=True, check=True).stdout
    assert "Candidate: 2.21.5-1+cuda12.4" in policy


def test_the_kernel_module_package_registers_with_dkms_on_rpm_too(tmp_path: Path) -> None:
    """The DKMS driver package's install and removal scripts run on the imitated RHEL node too:
    as rpm scriptlets in rpm's built-in Lua (which calls sh), so the package requires no
    /bin/sh; the other packages carry none."""
    from provisioner.sim.rpmrepo import _build_one, rpm_filename
    from provisioner.sim.stand_in_packages import package_for

    if shutil.which("rpmbuild") is None or shutil.which("rpm") is None:
        pytest.skip("rpmbuild is not installed (make deps installs it)")
    stack = {"cuda_version": "13.0"}
    kmod = package_for("driver", "open", "kmod-nvidia-open-dkms", "3:580.95.05-1.el9", stack)
    assert kmod.scripts_on_rpm and kmod.postinst and kmod.prerm
    target = tmp_path / rpm_filename(kmod)
    _build_one(kmod, target)
    scripts = subprocess.run(["rpm", "-qp", "--scripts", str(target)], capture_output=True,
                             text=True, check=True).stdout
    assert "postinstall scriptlet (using <lua>)" in scripts
    assert "preuninstall scriptlet (using <lua>)" in scripts
    assert "dkms add -m nvidia -v 580.95.05" in scripts
    assert "dkms remove -m nvidia -v 580.95.05 --all" in scripts
    requires = subprocess.run(["rpm", "-qp", "--requires", str(target)], capture_output=True,
                              text=True, check=True).stdout
    assert "/bin/sh" not in requires
    ctk = package_for("container_toolkit", None, "libnvidia-container1", "1.18.0-1", stack)
    assert ctk.prerm is None and not ctk.scripts_on_rpm


@pytest.mark.parametrize(("name", "version"), [("cuda-drivers-580", "580.95.05-1"),
                                               ("nvidia-driver-cuda", "3:580.95.05-1.el9")])
def test_the_driver_loads_its_module_at_install_only_where_none_is_loaded(
        tmp_path: Path, name: str, version: str) -> None:
    """The user-space driver package's install script: a node without an NVIDIA module loads
    the new one (first use); a node running another driver's module keeps it until a reboot,
    which is what makes the driver role's reboot necessary on a real node too."""
    from provisioner.sim.stand_in_packages import package_for

    pkg = package_for("driver", "open", name, version, {"cuda_version": "13.0"})
    assert pkg.scripts_on_rpm and pkg.postinst
    root = tmp_path / "node"
    (root / "usr/lib/gpu-sim").mkdir(parents=True)
    (root / "usr/lib/gpu-sim/driver-version").write_text("580.95.05\n")
    script = pkg.postinst.replace(" /", f" {root}/")  # every absolute path under the node root
    loaded = root / "run/gpu-sim/module/nvidia/version"

    subprocess.run(["sh", "-ec", script], check=True)
    assert loaded.read_text() == "580.95.05\n"
    loaded.write_text("575.57.08\n")  # another driver's module is loaded
    subprocess.run(["sh", "-ec", script], check=True)
    assert loaded.read_text() == "575.57.08\n"
