"""Simulated NVIDIA packages for the local mirror, generated from the stack matrix.

Every package of every stack that supports Debian 12 gets a stand-in with the real upstream name
and version (so pinning, holding and version checks are the real ones). Contents are tiny
simulated tools (``provisioner.sim.tools``, bundled by ``provisioner.sim.bundle``): nvidia-smi
(answers from /etc/gpu-sim/profile.json), nvidia-persistenced, nv-fabricmanager and
nv-hostengine (idle daemons), nvcc --version, nvidia-ctk (CDI spec), dcgmi diag and health,
dcgm-exporter (a /metrics server), plus the version headers (cudnn_version.h, nccl.h) the verify
steps read.

The repositories serve amd64 (NVIDIA's ``x86_64`` directories) and, when asked, arm64 too (its
``sbsa`` directories and ``libnvidia-container/stable/deb/arm64``): the same stand-ins built for
arm64, which run unchanged on an aarch64 node (they are Python and shell).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from provisioner.errors import InputError
from provisioner.matrix import COMPONENTS, FLAVORS, StackMatrix, load_matrix
from provisioner.matrix.packages import OS_NAMED, stack_pins
from provisioner.sim.bundle import daemon_script, tool_script
from provisioner.sim.mirror import (
    SimPackage,
    build_flat_repo,
    build_packages,
    ensure_signing_key,
    simulated_driver_package,
)
from provisioner.sim.tools.kmodule import NVIDIA_MODULES
from provisioner.sim.tools.node import MODULE_VERSION_FILE, load_module_sh

CTK_REPO = "libnvidia-container/stable/deb/amd64"
KEY_PATH = "keys/mirror.asc"

# The Debian architectures the mirror can serve, and the directory NVIDIA's CUDA repositories
# keep each in: x86_64, and sbsa for Arm servers (stacks.yml's repository notes: "use sbsa in
# place of x86_64 on Arm servers"; roles/nvidia_repo/vars/main.yml maps aarch64 to sbsa; public
# install scripts fetch developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/sbsa/
# cuda-keyring_1.1-1_all.deb on arm64).
CUDA_ARCH_DIRS: dict[str, str] = {"amd64": "x86_64", "arm64": "sbsa"}
# The multiarch triplet in the paths NVIDIA's Debian packages install headers under
# (/usr/include/<triplet>/cudnn_version_v9.h): Debian's for each architecture. aarch64-linux-gnu
# is what public setups of NVIDIA's arm64 cuDNN 9 packages read (JetPack's builds); for the
# sbsa build it is unconfirmed here, taken from the same multiarch rule roles/cudnn reads.
TRIPLETS: dict[str, str] = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}


def _upstream(version: str) -> str:
    """'1:3.3.6' -> '3.3.6'; '550.54.15-1' -> '550.54.15'; '2.21.5-1+cuda12.4' -> '2.21.5'."""
    v = version.split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


def _unit(description: str, exec_start: str) -> str:
    return ("# SIMULATED unit (gpu-cluster-provisioner)\n[Unit]\n"
            f"Description={description} (SIMULATED)\n\n[Service]\nType=simple\n"
            f"ExecStart={exec_start}\nRestart=on-failure\n\n[Install]\n"
            "WantedBy=multi-user.target\n")


_DKMS_POSTINST = """\
command -v dkms >/dev/null 2>&1 || exit 0
dkms status -m nvidia -v {version} | grep -q . || dkms add -m nvidia -v {version}
for k in $(ls /lib/modules 2>/dev/null); do
  if [ -e "/lib/modules/$k/build" ] || [ -e "/lib/modules/$k/source" ]; then
    dkms install -m nvidia -v {version} -k "$k"
  else
    echo "Module build for kernel $k was skipped since the kernel headers for this kernel" \\
      "do not seem to be installed."
  fi
done
"""
_DKMS_PRERM = """\
command -v dkms >/dev/null 2>&1 || exit 0
if dkms status -m nvidia -v {version} | grep -q .; then
  dkms remove -m nvidia -v {version} --all
fi
"""


def _driver_user_space(name: str, version: str, stack: Mapping[str, Any]) -> SimPackage:
    """Return the driver package that brings nvidia-smi (cuda-drivers-<B> on apt,
    nvidia-driver-cuda on dnf), with nvidia-persistenced and its unit."""
    up = _upstream(version)
    base = simulated_driver_package(name, version, str(stack["cuda_version"]),
                                    tool_script("nvidia_smi"))
    persist = daemon_script("nvidia-persistenced",
                            before_idle="/usr/bin/nvidia-smi -pm 1 >/dev/null 2>&1 || true\n")
    files = dict(base.files)
    files.update({
        "/usr/bin/nvidia-persistenced": persist,
        "/lib/systemd/system/nvidia-persistenced.service":
            _unit("NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced"),
    })
    return SimPackage(name=name, version=version, files=files,
                      modes={**base.modes, "/usr/bin/nvidia-persistenced": 0o755},
                      description=f"NVIDIA driver {up} user space (simulated)",
                      postinst=base.postinst, scripts_on_rpm=base.scripts_on_rpm)


def _banner_if_loaded(up: str) -> str:
    """The loaded module's banner in this package's flavour, when the module loaded is this
    version (the user space package, installed first, loaded it before the flavour was known)."""
    return (f'if [ "$(cat {MODULE_VERSION_FILE} 2>/dev/null)" = "{up}" ]; then\n'
            + load_module_sh("  ") + "fi\n")


def _driver_module(name: str, version: str, flavor: str | None) -> SimPackage:
    """Return a kernel module package of the driver: its DKMS source and the scripts that
    register and build it at install and unregister it before removal."""
    up = _upstream(version)
    # The kernel module's DKMS source, registered and built at install for every kernel
    # whose headers are there (as the DKMS helper scripts of Debian's dh_dkms and the
    # kmod-*-dkms rpms do), unregistered before removal. The simulated dkms
    # (provisioner.sim.tools.dkms) compiles nothing: it installs a module file per
    # BUILT_MODULE_NAME that modinfo reads, signed as the real tool would sign it.
    return SimPackage(name=name, version=version, files={
        f"/usr/src/nvidia-{up}/SIMULATED": "simulated kernel module sources\n",
        f"/usr/src/nvidia-{up}/dkms.conf":
            f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{up}"\nAUTOINSTALL="yes"\n'
            + "".join(f'BUILT_MODULE_NAME[{i}]="{name}"\n'
                      for i, name in enumerate(NVIDIA_MODULES)),
        "/usr/lib/gpu-sim/module-flavor": f"{flavor}\n",
    }, postinst=_banner_if_loaded(up) + _DKMS_POSTINST.format(version=up),
        prerm=_DKMS_PRERM.format(version=up),
        scripts_on_rpm=True,
        description=f"NVIDIA {flavor} kernel module {up} via DKMS (simulated)")


def _fabricmanager(name: str, version: str) -> SimPackage:
    """Return the fabric manager package: an idle nv-fabricmanager daemon and its unit."""
    up = _upstream(version)
    return SimPackage(name=name, version=version, files={
        "/usr/bin/nv-fabricmanager": daemon_script("nv-fabricmanager"),
        "/usr/lib/gpu-sim/fabricmanager-version": f"{up}\n",
        "/lib/systemd/system/nvidia-fabricmanager.service":
            _unit("NVIDIA fabric manager service", "/usr/bin/nv-fabricmanager"),
    }, modes={"/usr/bin/nv-fabricmanager": 0o755},
        description=f"NVIDIA fabric manager {up} (simulated)")


def _cuda_toolkit(name: str, version: str, stack: Mapping[str, Any]) -> SimPackage:
    """Return the CUDA toolkit package: nvcc (--version only) under /usr/local/cuda-<X.Y>,
    made the /usr/local/cuda alternative at install."""
    up = _upstream(version)
    cuda = str(stack["cuda_version"])
    prefix = f"/usr/local/cuda-{cuda}"
    nvcc = tool_script("nvcc", release=cuda, toolkit=up)
    return SimPackage(name=name, version=version, files={
        f"{prefix}/bin/nvcc": nvcc,
        f"{prefix}/version.json": f'{{"cuda": {{"name": "CUDA SDK", "version": "{up}"}}}}\n',
        f"{prefix}/SIMULATED": "simulated CUDA toolkit\n",
    }, modes={f"{prefix}/bin/nvcc": 0o755},
        postinst=(f"update-alternatives --install /usr/local/cuda cuda {prefix} "
                  f"{int(cuda.replace('.', ''))}\n"),
        description=f"CUDA toolkit {up} (simulated nvcc only)")


def package_for(component: str, flavor: str | None, name: str, version: str,
                stack: Mapping[str, Any]) -> SimPackage:
    up = _upstream(version)
    # The package that brings nvidia-smi: cuda-drivers-<B> (apt), nvidia-driver-cuda (dnf).
    if component == "driver" and (name.startswith("cuda-drivers") or name == "nvidia-driver-cuda"):
        return _driver_user_space(name, version, stack)
    if component == "driver":
        return _driver_module(name, version, flavor)
    if component == "fabricmanager" and ("fabricmanager" in name or "fabric-manager" in name):
        return _fabricmanager(name, version)
    if component == "cuda_toolkit":
        return _cuda_toolkit(name, version, stack)
    if component == "cudnn" and "-dev" in name:
        major, minor, patch = [*up.split("."), "0", "0"][:3]
        return SimPackage(name=name, version=version, files={
            "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h":
                f"/* SIMULATED */\n#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n"
                f"#define CUDNN_PATCHLEVEL {patch}\n",
        }, description=f"cuDNN {up} headers (simulated)")
    if component == "nccl" and "-dev" in name:
        m = re.match(r"(\d+)\.(\d+)\.(\d+)", up)
        major, minor, patch = m.groups() if m else ("0", "0", "0")
        return SimPackage(name=name, version=version, files={
            "/usr/include/nccl.h":
                f"/* SIMULATED */\n#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n"
                f"#define NCCL_PATCH {patch}\n#define NCCL_SUFFIX \"\"\n",
        }, description=f"NCCL {up} headers (simulated)")
    if component == "container_toolkit" and name == "nvidia-container-toolkit-base":
        return SimPackage(name=name, version=version, files={
            "/usr/bin/nvidia-ctk": tool_script("nvidia_ctk", version=up),
            "/usr/bin/nvidia-container-runtime": "#!/bin/sh\necho 'SIMULATED runtime' >&2\n"
                                                 "exit 1\n",
        }, modes={"/usr/bin/nvidia-ctk": 0o755, "/usr/bin/nvidia-container-runtime": 0o755},
            description=f"NVIDIA Container Toolkit {up} CLI (simulated)")
    if component == "dcgm" and (name == "datacenter-gpu-manager" or name.endswith("-core")):
        return SimPackage(name=name, version=version, files={
            "/usr/bin/dcgmi": tool_script("dcgmi", version=up),
            "/usr/bin/nv-hostengine": daemon_script("nv-hostengine"),
            "/lib/systemd/system/nvidia-dcgm.service":
                _unit("NVIDIA DCGM host engine", "/usr/bin/nv-hostengine"),
        }, modes={"/usr/bin/dcgmi": 0o755, "/usr/bin/nv-hostengine": 0o755},
            description=f"NVIDIA DCGM {up} (simulated)")
    return SimPackage(name=name, version=version, description=f"{name} {up} (simulated)")


# NVIDIA publishes dcgm-exporter as a package-managed systemd service whose package version is
# the exporter's ("Install DCGM Exporter", DCGM documentation): the package
# datacenter-gpu-manager-exporter, its unit nvidia-dcgm-exporter.service running
# `/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv` as root (NVIDIA/dcgm-exporter
# at tag 4.5.2-4.8.1: packaging/config-files/systemd/nvidia-dcgm-exporter.service). 4.6.0-1 is a
# version NVIDIA's ubuntu2404 index lists (Azure/AgentBaker's component list, read from that
# index). The monitoring role installs the package by name, unpinned.
DCGM_EXPORTER_PACKAGE = "datacenter-gpu-manager-exporter"
DCGM_EXPORTER_VERSION = "4.6.0-1"


def dcgm_exporter_package() -> SimPackage:
    up = _upstream(DCGM_EXPORTER_VERSION)
    return SimPackage(name=DCGM_EXPORTER_PACKAGE, version=DCGM_EXPORTER_VERSION, files={
        "/usr/bin/dcgm-exporter": tool_script("dcgm_exporter", version=up),
        "/etc/dcgm-exporter/default-counters.csv": "# SIMULATED: the exporter's own list\n",
        "/lib/systemd/system/nvidia-dcgm-exporter.service":
            _unit("NVIDIA DCGM exporter", "/usr/bin/dcgm-exporter -f "
                  "/etc/dcgm-exporter/default-counters.csv"),
    }, modes={"/usr/bin/dcgm-exporter": 0o755},
        description=f"NVIDIA DCGM exporter {up} (simulated)")


# The NVLink subnet manager that fourth-generation NVSwitch systems run beside the fabric manager
# is a package of NVIDIA's CUDA repositories with its own version scheme: a public bring-up
# guide downloads nvlsm_2025.06.10-1_amd64.deb from NVIDIA's ubuntu2404 CUDA repository. The
# matrix does not pin it (no release list verified), so the mirror carries that one release.
NVLSM_VERSION = "2025.06.10-1"


def nvlsm_package() -> SimPackage:
    up = _upstream(NVLSM_VERSION)
    return SimPackage(name="nvlsm", version=NVLSM_VERSION, files={
        "/opt/nvidia/nvlsm/sbin/nvlsm": daemon_script("nvlsm"),
    }, modes={"/opt/nvidia/nvlsm/sbin/nvlsm": 0o755},
        description=f"NVIDIA NVLink subnet manager {up} (simulated)")


# The apt repositories the mirror serves, by NVIDIA's directory name, and the package family of
# their driver packages (every other component is named as on Debian: the conventions of
# matrix/packages.py).
APT_OS_DIRS: dict[str, str] = {"debian12": "apt", "ubuntu2204": "apt_ubuntu",
                               "ubuntu2404": "apt_ubuntu"}
# The rpm repository (provisioner/sim/rpmrepo.py), built only for a cluster that needs it.
OS_DIRS: dict[str, str] = {**APT_OS_DIRS, "rhel9": "dnf"}

Key = tuple[str, str]


def _check_architecture(architecture: str) -> None:
    if architecture not in CUDA_ARCH_DIRS:
        raise InputError(f"the simulated mirror has no {architecture!r} repositories; choose "
                         f"one of {', '.join(CUDA_ARCH_DIRS)}")


def cuda_repo(os_dir: str, architecture: str = "amd64") -> str:
    """Where NVIDIA keeps an OS's CUDA repository for a Debian architecture, relative to the
    mirror root (``cuda/debian12/x86_64``, ``cuda/debian12/sbsa``)."""
    _check_architecture(architecture)
    return f"cuda/{os_dir}/{CUDA_ARCH_DIRS[architecture]}"


def ctk_repo(architecture: str = "amd64") -> str:
    """The container toolkit's apt repository for a Debian architecture, relative to the mirror
    root. NVIDIA's source list names it ``stable/deb/$(ARCH)`` (apt puts in the Debian
    architecture), and NVIDIA/libnvidia-container's gh-pages branch holds ``stable/deb/amd64``
    and ``stable/deb/arm64`` (at 69f4ab797b0c6df3892f9136f7c734dac72d67fe:
    stable/deb/arm64/libnvidia-container-tools_1.20.1-1_arm64.deb beside
    stable/deb/amd64/libnvidia-container-tools_1.20.1-1_amd64.deb)."""
    _check_architecture(architecture)
    return f"libnvidia-container/stable/deb/{architecture}"


def for_architecture(pkg: SimPackage, architecture: str) -> SimPackage:
    """``pkg`` (built as amd64) as the same package for ``architecture``: its Architecture
    field, and the multiarch triplet of any path that embeds it."""
    _check_architecture(architecture)
    if pkg.architecture in ("all", architecture):
        return pkg
    native, wanted = f"/{TRIPLETS[pkg.architecture]}/", f"/{TRIPLETS[architecture]}/"
    return replace(pkg, architecture=architecture,
                   files={path.replace(native, wanted): data for path, data in pkg.files.items()},
                   modes={path.replace(native, wanted): mode for path, mode in pkg.modes.items()})


def _split(version: str) -> tuple[str, str, str]:
    """'1:3.3.6' -> ('1:', '3.3.6', ''); '2.21.5-1+cuda12.4' -> ('', '2.21.5', '-1+cuda12.4')."""
    epoch, _, rest = version.rpartition(":")
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return (f"{epoch}:" if epoch else ""), upstream, (f"-{revision}" if dash else "")


def _step(version: str, delta: int) -> str | None:
    """``version`` with the last number of its upstream part moved by ``delta`` (its width
    kept: 570.124.06 -> 570.124.07), or None when that would go below zero."""
    epoch, upstream, revision = _split(version)
    match = re.search(r"(\d+)(\D*)$", upstream)
    if match is None:
        return None
    value = int(match.group(1)) + delta
    if value < 0:
        return None
    digits = str(value).zfill(len(match.group(1)))
    return f"{epoch}{upstream[:match.start(1)]}{digits}{match.group(2)}{revision}"


def decoy_versions(version: str, taken: set[str]) -> tuple[str, str]:
    """An older and a newer release of a pinned package that no stack pins (``taken``: every
    pinned version of that package). NVIDIA's repositories carry every release of a package,
    so a pin that names no version, or the wrong one, visibly installs another release."""
    newer = _step(version, 1)
    delta = 1
    while newer is not None and newer in taken:
        delta += 1
        newer = _step(version, delta)
    older: str | None = None
    delta = -1
    while True:
        older = _step(version, delta)
        if older is None or older not in taken:
            break
        delta -= 1
    if older is None:  # 9.8.0 -> a pre-release of it, which dpkg and rpm sort first
        epoch, upstream, revision = _split(version)
        older = f"{epoch}{upstream}~pre1{revision}"
    if newer is None:
        raise ValueError(f"no newer version of {version!r} can be derived")
    return older, newer


def _pins(matrix: StackMatrix, os_dir: str) -> dict[str, dict[Key, tuple[str, str | None,
                                                                          dict[str, str]]]]:
    """{repo: {(name, version): (component, flavor, stack info)}} of every stack pin of
    ``os_dir``, for repo 'cuda' and 'ctk' (the container toolkit's repository)."""
    out: dict[str, dict[Key, tuple[str, str | None, dict[str, str]]]] = {"cuda": {}, "ctk": {}}
    driver_family = OS_DIRS[os_dir]
    other_family = "dnf" if driver_family == "dnf" else "apt"
    for stack in matrix.stacks.values():
        if os_dir not in stack.os_support:
            continue
        info = {"cuda_version": stack.cuda_version}
        for component in COMPONENTS:
            family = driver_family if component in OS_NAMED else other_family
            flavors: tuple[str | None, ...] = FLAVORS if component == "driver" else (None,)
            for flavor in flavors:
                pins = stack_pins(stack, matrix.naming_facts, component,
                                  family, flavor or stack.driver.default_module_flavor)
                for key in pins:
                    repo = "ctk" if component == "container_toolkit" else "cuda"
                    out[repo].setdefault(key, (component, flavor, info))
    return out


def _with_decoys(pins: Mapping[Key, tuple[str, str | None, dict[str, str]]]
                 ) -> list[SimPackage]:
    """The pinned packages, and an older and a newer release of each that no stack pins."""
    taken: dict[str, set[str]] = {}
    for name, version in pins:
        taken.setdefault(name, set()).add(version)
    out: dict[Key, SimPackage] = {}
    for (name, version), (component, flavor, info) in pins.items():
        out[(name, version)] = package_for(component, flavor, name, version, info)
    for (name, version), (component, flavor, info) in pins.items():
        for decoy in decoy_versions(version, taken[name]):
            if (name, decoy) not in out:
                out[(name, decoy)] = package_for(component, flavor, name, decoy, info)
    return list(out.values())


def all_packages(matrix: StackMatrix, os_dir: str = "debian12", architecture: str = "amd64"
                 ) -> tuple[list[SimPackage], list[SimPackage]]:
    """(CUDA-repo packages, container-toolkit-repo packages) of ``os_dir``'s repositories for
    a Debian ``architecture``: the apt (dnf for rhel9) pins of every stack of that OS (both
    driver flavours, the fabric manager), each with an older and a newer release beside it,
    and the unpinned dcgm-exporter and nvlsm."""
    if os_dir not in OS_DIRS:
        raise InputError(f"the simulated mirror has no {os_dir!r} repository; choose one "
                         f"of {', '.join(OS_DIRS)}")
    _check_architecture(architecture)
    pins = _pins(matrix, os_dir)
    unpinned = [dcgm_exporter_package(), nvlsm_package()]
    cuda, ctk = [*unpinned, *_with_decoys(pins["cuda"])], _with_decoys(pins["ctk"])
    if architecture == "amd64":
        return cuda, ctk
    return ([for_architecture(p, architecture) for p in cuda],
            [for_architecture(p, architecture) for p in ctk])


@dataclass(frozen=True)
class Mirror:
    root: Path
    fingerprint: str
    # The release tarballs it serves (EL clusters): project -> version (sim/releases.py).
    releases: Mapping[str, str] = field(default_factory=dict)
    # The Debian architectures its apt repositories serve.
    architectures: tuple[str, ...] = ("amd64",)


def build_mirror(root: Path, stacks_file: Path, rpm: bool = False,
                 architectures: Sequence[str] = ("amd64",)) -> Mirror:
    """Build (or refresh, cheaply) the signed simulated mirror under root; with ``rpm``, its
    rpm repositories too (they need rpmbuild and createrepo_c on the controller). The apt
    repositories serve ``architectures`` (amd64; add arm64 for aarch64 nodes: as many packages
    again to build, so only when a node needs them)."""
    arches = tuple(dict.fromkeys(architectures))
    if not arches:
        raise InputError("the simulated mirror needs at least one architecture")
    for architecture in arches:
        _check_architecture(architecture)
    matrix = load_matrix(stacks_file)
    key = ensure_signing_key(root.parent / "mirror-key")
    pool = root.parent / "mirror-pool"
    # Repository (relative to root) -> its architecture and packages.
    cuda_repos: dict[str, tuple[str, list[SimPackage]]] = {}
    ctk_repos: dict[str, tuple[str, dict[str, SimPackage]]] = {}
    for architecture in arches:
        ctk_pkgs_of_arch: dict[str, SimPackage] = {}
        for os_dir in APT_OS_DIRS:
            cuda_pkgs, ctk_pkgs = all_packages(matrix, os_dir, architecture)
            cuda_repos[cuda_repo(os_dir, architecture)] = (architecture, cuda_pkgs)
            ctk_pkgs_of_arch.update((p.deb_filename, p) for p in ctk_pkgs)
        ctk_repos[ctk_repo(architecture)] = (architecture, ctk_pkgs_of_arch)
    # One build per pool (a .deb's name carries its architecture), then each repository.
    cuda_union = {p.deb_filename: p for _arch, pkgs in cuda_repos.values() for p in pkgs}
    cuda_debs = dict(zip(cuda_union, build_packages(cuda_union.values(), pool / "cuda"),
                         strict=True))
    for repo, (architecture, pkgs) in cuda_repos.items():
        build_flat_repo([cuda_debs[p.deb_filename] for p in pkgs], root / repo, key,
                        (architecture, "all"))
    ctk_union = {name: p for _arch, pkgs in ctk_repos.values() for name, p in pkgs.items()}
    ctk_debs = dict(zip(ctk_union, build_packages(ctk_union.values(), pool / "ctk"),
                        strict=True))
    for repo, (architecture, by_name) in ctk_repos.items():
        build_flat_repo([ctk_debs[name] for name in by_name], root / repo, key,
                        (architecture, "all"))
    if rpm:
        from provisioner.sim.kernel_packages import node_kernel
        from provisioner.sim.rpmrepo import build_rpm_mirror

        rpm_cuda, rpm_ctk = all_packages(matrix, "rhel9")
        # NVIDIA's precompiled kernel modules for the kernel the imitated Rocky nodes run.
        build_rpm_mirror(root, {cuda_repo("rhel9"): rpm_cuda}, rpm_ctk, key,
                         kernels=(node_kernel(),))
    keyfile = root / KEY_PATH
    keyfile.parent.mkdir(parents=True, exist_ok=True)
    armored = key.armored.read_bytes()
    if not keyfile.is_file() or keyfile.read_bytes() != armored:
        keyfile.write_bytes(armored)
    return Mirror(root=root, fingerprint=key.fingerprint, architectures=arches)
