"""NVIDIA's RHEL 9 precompiled driver streams in the simulated rpm mirror: one kmod-nvidia
package per proprietary driver release and node kernel, named, versioned and related as
NVIDIA's kmod-nvidia.spec makes them; its modules read by real modinfo, signed with the
simulated NVIDIA key whose certificate the mirror publishes; its %post puts them where modprobe
(and the simulated module load, Secure Boot's check included) finds them; and modules.yaml
streams B and latest that list them, while the DKMS streams do not."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from provisioner.errors import InputError
from provisioner.matrix import STACKS_FILE, load_matrix
from provisioner.sim import image
from provisioner.sim.mirror import SimPackage
from provisioner.sim.precompiled_kmod import (
    IMITATED_KERNEL_EVR,
    MODULES,
    SigningKey,
    ensure_signing_key,
    module_dir,
    object_dir,
    package_name,
    package_version,
    precompiled_kmod,
    precompiled_kmods,
)
from provisioner.sim.rpmrepo import modules_yaml, nevra, precompiled_certificate, rpm_filename
from provisioner.sim.stand_in_packages import all_packages
from provisioner.sim.tools import kmodule
from provisioner.sim.tools.node import NVIDIA_KO_PATHS, PROC_VERSION_FILE
from tests.sim.conftest import Bundled
from tests.sim.module_signature import verify_appended_signature
from tests.sim.test_mokutil import boot, efi_node, hash_file, load_module, mokutil

MODINFO = shutil.which("modinfo") or next(
    (p for p in ("/usr/sbin/modinfo", "/sbin/modinfo") if os.access(p, os.X_OK)), None)
OPENSSL = shutil.which("openssl")
RPM_TOOLS = all(shutil.which(t) for t in ("rpmbuild", "rpm", "rpmsign", "createrepo_c",
                                         "modifyrepo_c", "gpg"))
pytestmark = pytest.mark.skipif(OPENSSL is None, reason="needs openssl")

DRIVER = "580.159.04"
KERNEL = "6.1.0-27-amd64"
SIGNER = "SIMULATED NVIDIA precompiled kmod signing key"


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


@pytest.fixture(scope="module")
def key(state: Path) -> SigningKey:
    return ensure_signing_key(state)


@pytest.fixture(scope="module")
def rhel9() -> list[SimPackage]:
    return all_packages(load_matrix(STACKS_FILE), "rhel9")[0]


@pytest.mark.parametrize(("driver", "kernel", "name", "version", "rpm", "objects", "modules"), [
    # NVIDIA/yum-packaging-precompiled-kmod README.md's example package.
    ("440.33.01", "4.18.0-147.5.1.el8_1.x86_64", "kmod-nvidia-440.33.01-4.18.0-147.5.1",
     "3:440.33.01-2.el8_1", "kmod-nvidia-440.33.01-4.18.0-147.5.1-440.33.01-2.el8_1.x86_64.rpm",
     "/usr/lib64/nvidia/x86_64-linux/440.33.01/4.18.0-147.5.1.el8_1",
     "/lib/modules/4.18.0-147.5.1.el8_1.x86_64/extra/drivers/video/nvidia"),
    ("580.95.05", "5.14.0-427.13.1.el9_4.x86_64", "kmod-nvidia-580.95.05-5.14.0-427.13.1",
     "3:580.95.05-2.el9_4", "kmod-nvidia-580.95.05-5.14.0-427.13.1-580.95.05-2.el9_4.x86_64.rpm",
     "/usr/lib64/nvidia/x86_64-linux/580.95.05/5.14.0-427.13.1.el9_4",
     "/lib/modules/5.14.0-427.13.1.el9_4.x86_64/extra/drivers/video/nvidia"),
    # The kernel a simulated node runs (the controller's, Debian's here): kept whole.
    ("580.95.05", "6.1.0-27-amd64", "kmod-nvidia-580.95.05-6.1.0-27-amd64", "3:580.95.05-2.el9",
     "kmod-nvidia-580.95.05-6.1.0-27-amd64-580.95.05-2.el9.x86_64.rpm",
     "/usr/lib64/nvidia/x86_64-linux/580.95.05/6.1.0-27-amd64",
     "/lib/modules/6.1.0-27-amd64/extra/drivers/video/nvidia"),
])
def test_package_names_and_paths_follow_nvidias_spec(
        driver: str, kernel: str, name: str, version: str, rpm: str, objects: str,
        modules: str) -> None:
    assert package_name(driver, kernel) == name
    assert package_version(driver, kernel) == version
    assert rpm_filename(SimPackage(name=name, version=version)) == rpm
    assert object_dir(driver, kernel) == objects
    assert module_dir(kernel) == modules


def test_one_package_per_proprietary_release_and_kernel(rhel9: list[SimPackage],
                                                        key: SigningKey) -> None:
    dkms = {p.version.split(":")[1].split("-")[0] for p in rhel9
            if p.name == "kmod-nvidia-latest-dkms"}
    assert DRIVER in dkms
    kmods = precompiled_kmods(rhel9, [KERNEL, KERNEL], key)  # a kernel named twice: once
    assert sorted((p.name, p.version) for p in kmods) == sorted(
        (f"kmod-nvidia-{v}-{KERNEL}", f"3:{v}-2.el9") for v in dkms)


def test_the_package_relations_are_nvidias(key: SigningKey) -> None:
    pkg = precompiled_kmod(DRIVER, KERNEL, key)
    assert pkg.rpm_relations == (
        f"Provides: nvidia-kmod = 3:{DRIVER}",
        f"Requires: (kernel = {IMITATED_KERNEL_EVR} if kernel)",
        "Conflicts: kmod-nvidia-latest-dkms",
        f"Supplements: (nvidia-driver-cuda = 3:{DRIVER} and kernel = {IMITATED_KERNEL_EVR})")
    objects = f"/usr/lib64/nvidia/x86_64-linux/{DRIVER}/{KERNEL}"
    assert set(pkg.files) == {"/usr/lib/gpu-sim/module-flavor",
                              *(f"{objects}/{m}.{ext}" for m in MODULES for ext in ("o", "sig"))}
    assert pkg.files["/usr/lib/gpu-sim/module-flavor"] == "proprietary\n"


def test_the_kernel_relation_names_the_imitated_nodes_kernel_rpm() -> None:
    """sim/image.py registers the Rocky node's `kernel` rpm as version 0, release debian: the
    relation names that one, or dnf would refuse the package on every imitated node."""
    version, release = IMITATED_KERNEL_EVR.split("-")
    assert f'"Version: {version}" "Release: {release}"' in image._ROCKY9_SETUP
    names = re.search(r"for name in (.*?); do", image._ROCKY9_SETUP, re.S)
    assert names is not None and "kernel" in names.group(1).replace("\\", " ").split()


def test_an_rpm_relation_must_be_a_known_tag() -> None:
    with pytest.raises(InputError, match="rpm relation"):
        SimPackage(name="ok", version="1.0", rpm_relations=("Recommends: x",))


@pytest.mark.skipif(not RPM_TOOLS, reason="needs rpmbuild and rpm")
def test_the_rpm_carries_relations_scripts_and_ghost_modules(tmp_path: Path,
                                                            key: SigningKey) -> None:
    from provisioner.sim.rpmrepo import _build_one

    pkg = precompiled_kmod(DRIVER, KERNEL, key)
    target = tmp_path / rpm_filename(pkg)
    _build_one(pkg, target)

    def query(*args: str) -> str:
        return subprocess.run(["rpm", "-qp", *args, str(target)], capture_output=True,
                              text=True, check=True).stdout

    name = f"kmod-nvidia-{DRIVER}-{KERNEL}"
    assert query("--qf", "%{NAME} %{EPOCH}:%{VERSION}-%{RELEASE}") == f"{name} 3:{DRIVER}-2.el9"
    assert query("--provides") == (f"{name} = 3:{DRIVER}-2.el9\n{name}(x86-64) = 3:{DRIVER}-2.el9\n"
                                   f"nvidia-kmod = 3:{DRIVER}\n")
    assert query("--conflicts") == "kmod-nvidia-latest-dkms\n"
    assert query("--supplements") == f"(nvidia-driver-cuda = 3:{DRIVER} and kernel = 0-debian)\n"
    assert "(kernel = 0-debian if kernel)\n" in query("--requires")
    assert "/bin/sh" not in query("--requires")
    scripts = query("--scripts")
    assert "postinstall scriptlet (using <lua>)" in scripts
    assert "postuninstall scriptlet (using <lua>)" in scripts
    assert scripts.count(f"depmod -a -w {KERNEL} 2>/dev/null") == 2  # %post and %postun
    ghosts = [line.split(" ", 1)[1] for line in
              query("--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]").splitlines()
              if line.startswith("g ")]
    modules = f"/lib/modules/{KERNEL}/extra/drivers/video/nvidia"
    assert sorted(ghosts) == sorted([modules, *(f"{modules}/{m}.ko" for m in MODULES)])


def install_files(pkg: SimPackage, root: Path) -> None:
    """What rpm unpacks from the package, under ``root``."""
    for path, data in pkg.all_files().items():
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def run_post(pkg: SimPackage, root: Path) -> Path:
    """The package's %post against ``root`` (every node path under it), with a depmod that
    records its arguments (the real one would rewrite this machine's modules index)."""
    assert pkg.postinst is not None
    script = re.sub(r"(?<=[\s=\"])/(?=(?:usr|lib|run|var)/)", f"{root}/", pkg.postinst)
    bin_dir = root / "test-depmod"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "depmod").write_text(f'#!/bin/sh\necho "$@" >> {root}/depmod.calls\n')
    (bin_dir / "depmod").chmod(0o755)
    env = {**os.environ, "GPU_SIM_ROOT": str(root), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["sh", "-ec", script], env=env, check=True)
    return root / "depmod.calls"


def modinfo(path: Path, field: str) -> str:
    proc = subprocess.run([str(MODINFO), "-F", field, str(path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.skipif(MODINFO is None, reason="needs kmod's modinfo")
def test_post_links_signed_modules_into_extra_and_changes_nothing_again(
        tmp_path: Path, state: Path, key: SigningKey) -> None:
    pkg = precompiled_kmod(DRIVER, KERNEL, key)
    root = tmp_path / "node"
    install_files(pkg, root)
    calls = run_post(pkg, root)
    modules = root / f"lib/modules/{KERNEL}/extra/drivers/video/nvidia"
    assert sorted(p.name for p in modules.iterdir()) == sorted(f"{m}.ko" for m in MODULES)
    assert calls.read_text() == f"-a -w {KERNEL}\n"
    for name in MODULES:
        ko = modules / f"{name}.ko"
        assert modinfo(ko, "signer") == f"{SIGNER}\n", name
        assert modinfo(ko, "version") == f"{DRIVER}\n", name
        assert modinfo(ko, "sig_hashalgo") == "sha256\n", name
        assert modinfo(ko, "vermagic").startswith(f"{KERNEL} SMP"), name
    assert modinfo(modules / "nvidia.ko", "license") == "NVIDIA\n"
    # The signature the package ships covers the module: openssl verifies it against the
    # certificate the mirror publishes.
    ko = (modules / "nvidia.ko").read_bytes()
    unsigned = (root / object_dir(DRIVER, KERNEL).lstrip("/") / "nvidia.o").read_bytes()
    verify = verify_appended_signature(ko, unsigned, precompiled_certificate(state), tmp_path)
    assert verify.returncode == 0, verify.stderr
    # A reinstall's %post changes nothing (bytes and times), and leaves no scratch file.
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in modules.iterdir()}
    run_post(pkg, root)
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in modules.iterdir()} == before


@pytest.mark.skipif(MODINFO is None, reason="needs kmod's modinfo")
def test_secure_boot_loads_the_precompiled_module_once_nvidias_key_is_enrolled(
        bundled: Bundled, tmp_path: Path, state: Path, key: SigningKey) -> None:
    """The module load (boot, driver install) checks the nvidia.ko modprobe would load: the
    DKMS one under updates/ when there is one, else the precompiled one under extra/."""
    running = os.uname().release  # the load script reads `uname -r`
    root = efi_node(tmp_path / "node", True)
    (root / "usr/lib/gpu-sim").mkdir(parents=True)
    (root / "usr/lib/gpu-sim/driver-version").write_text(f"{DRIVER}\n")
    pkg = precompiled_kmod(DRIVER, running, key)
    install_files(pkg, root)
    run_post(pkg, root)
    loaded = root / "run/gpu-sim/module/nvidia/version"
    assert load_module(root, bundled).returncode == 0
    assert not loaded.exists()  # NVIDIA's key is not enrolled yet
    assert "Lockdown: modprobe: unsigned module loading is restricted" in (
        root / "var/lib/gpu-sim/dmesg").read_text()
    imported = mokutil(bundled, root, "--import", str(precompiled_certificate(state)),
                       "--hash-file", hash_file(tmp_path))
    assert imported.returncode == 0, imported.stderr
    (root / "etc/gpu-sim/faults").write_text("secure-boot\nmok-enrolled\n")
    boot(root)
    # A DKMS build under updates/ comes first: signed by nobody enrolled, it is refused.
    dkms_ko = root / f"lib/modules/{running}/{NVIDIA_KO_PATHS[0]}"
    dkms_ko.parent.mkdir(parents=True)
    dkms_ko.write_bytes(kmodule.elf_module(kmodule.modinfo_strings("nvidia", DRIVER, running)))
    assert load_module(root, bundled).returncode == 0
    assert not loaded.exists()
    dkms_ko.unlink()
    assert load_module(root, bundled).returncode == 0
    assert loaded.read_text() == f"{DRIVER}\n"
    assert (root / PROC_VERSION_FILE.lstrip("/")).read_text().splitlines()[0] == (
        f"NVRM version: NVIDIA UNIX {os.uname().machine} Kernel Module  {DRIVER}  SIMULATED")


def test_the_refusal_checks_updates_before_extra() -> None:
    assert NVIDIA_KO_PATHS == ("updates/dkms/nvidia.ko", "extra/drivers/video/nvidia/nvidia.ko")


def _docs(text: str) -> dict[str, dict[str, Any]]:
    """{stream or 'defaults': data} of a modules.yaml."""
    out = {}
    for doc in yaml.safe_load_all(text):
        data = doc["data"]
        out["defaults" if doc["document"] == "modulemd-defaults" else data["stream"]] = data
    return out


def test_precompiled_streams_list_the_kmods_and_the_dkms_streams_do_not(
        rhel9: list[SimPackage], key: SigningKey) -> None:
    kmods = precompiled_kmods(rhel9, [KERNEL], key)
    docs = _docs(modules_yaml([*rhel9, *kmods]))
    branches = sorted({p.version.split(":")[1].split(".")[0] for p in rhel9
                       if p.name == "kmod-nvidia-latest-dkms"}, key=int)
    assert "580" in branches
    assert set(docs) == {"defaults", "latest",
                         *(f"{b}{kind}" for b in branches for kind in ("", "-dkms", "-open"))}

    def releases(name: str, branch: str) -> list[SimPackage]:
        return [p for p in [*rhel9, *kmods] if p.name.startswith(name)
                and p.version.split(":")[1].startswith(f"{branch}.")]

    stream = docs["580"]
    assert stream["profiles"] == {"default": {"rpms": ["nvidia-driver-cuda"]}}
    assert stream["artifacts"] == {"rpms": sorted(
        nevra(p) for p in [*releases("nvidia-driver-cuda", "580"),
                           *releases("kmod-nvidia-580.", "580")])}
    assert f"kmod-nvidia-{DRIVER}-{KERNEL}-3:{DRIVER}-2.el9.x86_64" in stream["artifacts"]["rpms"]
    assert docs["580-dkms"]["artifacts"] == {"rpms": sorted(
        nevra(p) for p in [*releases("nvidia-driver-cuda", "580"),
                           *releases("kmod-nvidia-latest-dkms", "580")])}
    for name, data in docs.items():
        if name.endswith(("-dkms", "-open")):
            assert not [a for a in data["artifacts"]["rpms"]
                        if re.match(r"kmod-nvidia-\d", a)], name
    newest = branches[-1]
    assert docs["latest"]["artifacts"] == docs[newest]["artifacts"]
    assert docs["latest"]["profiles"] == docs[newest]["profiles"]
    # The precompiled streams' default profile; no default stream (nothing enabled unasked).
    assert docs["defaults"] == {"module": "nvidia-driver", "profiles": {
        **{b: ["default"] for b in branches}, "latest": ["default"]}}


def test_without_precompiled_modules_the_module_metadata_is_unchanged(
        rhel9: list[SimPackage], key: SigningKey) -> None:
    """The DKMS streams' documents are the same text with the precompiled ones beside them,
    and a repository without them gets the documents it always had (no defaults)."""
    before = modules_yaml(rhel9)
    after = modules_yaml([*rhel9, *precompiled_kmods(rhel9, [KERNEL], key)])
    assert "modulemd-defaults" not in before
    old_docs = ["---" + doc for doc in before.split("---") if doc]
    assert len(old_docs) == len(_docs(before)) > 0
    for doc in old_docs:
        assert doc in after


@pytest.mark.skipif(not RPM_TOOLS, reason="needs rpmbuild, rpmsign, createrepo_c")
def test_the_rpm_mirror_serves_the_kmods_and_nvidias_certificate(
        tmp_path: Path, rhel9: list[SimPackage]) -> None:
    from provisioner.sim.mirror import ensure_signing_key as mirror_key
    from provisioner.sim.rpmrepo import build_rpm_mirror

    branch = [p for p in rhel9 if p.name in ("nvidia-driver-cuda", "kmod-nvidia-latest-dkms")
              and p.version.startswith("3:580.")]
    root = tmp_path / "mirror"
    repo = root / "cuda/rhel9/x86_64"
    build_rpm_mirror(root, {"cuda/rhel9/x86_64": branch}, [], mirror_key(tmp_path / "mk"),
                     kernels=(KERNEL,))
    published = repo / "NVIDIA2019-public_key.der"
    assert published.read_bytes() == precompiled_certificate(tmp_path).read_bytes()
    subject = subprocess.run([str(OPENSSL), "x509", "-inform", "DER", "-in", str(published),
                              "-noout", "-subject"], capture_output=True, text=True, check=True)
    assert subject.stdout.strip() == f"subject=CN = {SIGNER}"
    versions = sorted(p.version.split(":")[1].split("-")[0] for p in branch
                      if p.name == "kmod-nvidia-latest-dkms")
    assert sorted(p.name for p in repo.glob(f"kmod-nvidia-*-{KERNEL}-*.rpm")) == [
        f"kmod-nvidia-{v}-{KERNEL}-{v}-2.el9.x86_64.rpm" for v in versions]
    # A rebuild with the same inputs touches nothing.
    times = {p.name: p.stat().st_mtime_ns for p in repo.rglob("*") if p.is_file()}
    build_rpm_mirror(root, {"cuda/rhel9/x86_64": branch}, [], mirror_key(tmp_path / "mk"),
                     kernels=(KERNEL,))
    assert {p.name: p.stat().st_mtime_ns for p in repo.rglob("*") if p.is_file()} == times


def test_the_certificate_path_defaults_to_the_simulated_clusters_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from provisioner.sim import cluster

    monkeypatch.setattr(cluster, "sim_state_dir", lambda: tmp_path)
    assert precompiled_certificate() == tmp_path / "precompiled-kmod-key/NVIDIA2019-public_key.der"
    assert precompiled_certificate(tmp_path / "x") == (
        tmp_path / "x/precompiled-kmod-key/NVIDIA2019-public_key.der")
