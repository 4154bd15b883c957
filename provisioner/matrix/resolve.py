"""Resolution: a host's ``gpu_stack`` and overrides become one ``ResolvedStack``, with every
rule of the matrix checked. A violation is one ``InputError`` line naming the host and the
variable. Pure: nothing here touches a host, prints or exits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from provisioner.errors import InputError
from provisioner.matrix.index import PackageIndex, versions_of_release
from provisioner.matrix.packages import NamingFacts, UbuntuRevision, precompiled_kmod_name
from provisioner.matrix.schema import (
    ArchitectureSpec,
    Stack,
    StackMatrix,
    dnf_module_stream,
    precompiled_stream,
)
from provisioner.matrix.versions import (
    CTK_RE,
    CUDA_RE,
    CUDNN_RE,
    CUDNN_SHORT_RE,
    DEBIAN_REVISION_RE,
    DRIVER_RE,
    FLAVORS,
    NCCL_RE,
    TOOLKIT_RE,
    cuda_key,
    version_tuple,
)
from provisioner.profiles import Profile


@dataclass(frozen=True)
class ResolvedStack:
    """The matched stack one host gets, after overrides, every rule checked."""

    host: str
    stack: str
    driver_branch: int
    driver_version: str
    module_flavor: str
    fabricmanager_enabled: bool
    fabricmanager_version: str
    cuda_version: str
    cuda_toolkit_version: str
    cudnn_version: str
    nccl_version: str
    container_toolkit_version: str
    dcgm_version: str
    profile: str | None = None
    overrides: tuple[str, ...] = ()
    # RHEL 8/9: the dnf module stream that carries this driver branch and flavour [DIG] (the
    # precompiled one when module_source is precompiled [PCK]).
    dnf_module_stream: str = ""
    # Where the kernel modules come from: dkms (built on the node) or precompiled (NVIDIA's
    # signed per-kernel packages of the RHEL 8/9 precompiled streams [PCK]).
    module_source: str = "dkms"
    # The GPU architecture and the newest CUDA it can run (None: no limit), for cluster rules.
    architecture: str | None = None
    max_cuda_version: str | None = None
    # What the fabric manager needs besides itself on this NVSwitch generation [FMG]:
    # {package family: [distribution packages]} and kernel modules; empty when nothing.
    fabricmanager_packages: dict[str, list[str]] = field(default_factory=dict, compare=False)
    fabricmanager_kernel_modules: tuple[str, ...] = ()
    # A driver override outside the matrix: its Ubuntu package revisions, from a repository
    # index or the override's own full version (None: the matrix's, or no Ubuntu OS).
    ubuntu_revision: UbuntuRevision | None = None
    # What the packages are derived from: the stack as the file states it, and the naming facts
    # the matrix holds (kept here so packages_for needs no matrix argument).
    base: Stack | None = field(default=None, repr=False, compare=False)
    naming: NamingFacts | None = field(default=None, repr=False, compare=False)

    @property
    def cuda_major(self) -> int:
        return int(self.cuda_version.split(".")[0])

    def as_vars(self) -> dict[str, Any]:
        """The flat Ansible variables the roles consume."""
        return {
            "gpu_stack": self.stack,
            "nvidia_driver_branch": str(self.driver_branch),
            "nvidia_driver_version": self.driver_version,
            "nvidia_driver_module_flavor": self.module_flavor,
            "nvidia_fabricmanager_enabled": self.fabricmanager_enabled,
            "nvidia_fabricmanager_version": self.fabricmanager_version,
            "cuda_version": self.cuda_version,
            "cuda_toolkit_version": self.cuda_toolkit_version,
            "cudnn_version": self.cudnn_version,
            "nccl_version": self.nccl_version,
            "nvidia_container_toolkit_version": self.container_toolkit_version,
            "dcgm_version": self.dcgm_version,
            "nvidia_driver_dnf_module_stream": self.dnf_module_stream,
            "nvidia_driver_module_source": self.module_source,
            "nvidia_driver_precompiled_kmod": (precompiled_kmod_name(self.driver_version)
                                               if self.module_source == "precompiled" else ""),
            "nvidia_fabricmanager_nvlsm_enabled": bool(self.fabricmanager_enabled
                                                        and self.fabricmanager_packages),
            "nvidia_fabricmanager_nvlsm_packages": (
                {family: list(names) for family, names in self.fabricmanager_packages.items()}
                if self.fabricmanager_enabled else {}),
            "nvidia_fabricmanager_kernel_modules": (
                list(self.fabricmanager_kernel_modules) if self.fabricmanager_enabled else []),
        }


def _override(hostvars: Mapping[str, Any], var: str, host: str) -> str | None:
    """A host's override as a string; unset, None and "" mean "use the stack's"."""
    value = hostvars.get(var)
    if value is None or value == "":
        return None
    # YAML reads an unquoted 12.4 as a float and 535 as an int; both stay meaningful.
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"host {host}: {var} must be a version string, got "
                         f"{type(value).__name__} {value!r}; quote it, e.g. {var}: \"...\"")
    return str(value).strip()


def _bad_format(host: str, var: str, value: str, shape: str) -> InputError:
    return InputError(f"host {host}: {var} {value!r} is not a version like {shape}; "
                      f"fix {var} or remove it to use the stack's")


def _known_cudnn_builds(matrix: StackMatrix) -> list[str]:
    return sorted({s.cudnn.version for s in matrix.stacks.values()}, key=version_tuple)


# The host variables resolution reads (every ``_override`` below). Two hosts that agree on
# these, on the profile and on the matrix resolve to the same stack.
RESOLVE_VARIABLES = ("gpu_stack", "nvidia_driver_version", "nvidia_driver_module_flavor",
                     "nvidia_driver_module_source",
                     "cuda_version", "cudnn_version", "nccl_version",
                     "nvidia_container_toolkit_version", "nvidia_fabricmanager_version")
_CACHE_LIMIT = 1024
_CacheKey = tuple[int, int, int, tuple[tuple[str, str], ...]]
# key -> (matrix, profile, resolved): the objects are held so that their ids stay theirs.
_cache: dict[_CacheKey, tuple[StackMatrix, Profile | None, ResolvedStack]] = {}


def resolve_stack(host: str, hostvars: Mapping[str, Any], profile: Profile | None,
                  matrix: StackMatrix, index: PackageIndex | None = None) -> ResolvedStack:
    """Apply ``gpu_stack`` and the overrides for ``host``, then check every rule.

    A fleet has thousands of hosts and a handful of distinct (profile, stack, overrides)
    groups: each group is resolved once per matrix and profile object (both frozen) and every
    other host of the group gets a copy naming it. Violations are never cached, so an error
    names the host it was found on, as an uncached resolution would. ``index``: an Ubuntu CUDA
    repository's index, where a driver override outside the matrix finds its revisions."""
    key: _CacheKey = (id(matrix), id(profile), id(index), tuple(
        (type(value).__name__, repr(value)) for value in map(hostvars.get, RESOLVE_VARIABLES)))
    hit = _cache.get(key)
    if hit is not None and hit[0] is matrix and hit[1] is profile:
        return replace(hit[2], host=host)
    resolved = _resolve(host, hostvars, profile, matrix, index)
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()
    _cache[key] = (matrix, profile, resolved)
    return resolved


def _resolve(host: str, hostvars: Mapping[str, Any], profile: Profile | None,
             matrix: StackMatrix, index: PackageIndex | None = None) -> ResolvedStack:
    stack, arch = _stack_and_architecture(host, hostvars, profile, matrix)
    overrides: list[str] = []

    # Driver (and with it the fabric manager, which must equal it).
    driver, given = _driver_override(host, hostvars, overrides)
    driver_version = driver or stack.driver.version
    branch = int(driver_version.split(".")[0])

    # Kernel module flavour.
    flavor = _module_flavor(host, hostvars, overrides, stack, branch, matrix, arch)
    source = _module_source(host, hostvars, flavor, profile)

    # CUDA toolkit.
    cuda_raw = _override(hostvars, "cuda_version", host)
    cuda_version, toolkit = stack.cuda_version, stack.cuda_toolkit_version
    if cuda_raw is not None:
        cuda_version, toolkit = _resolve_cuda(host, cuda_raw, matrix)
        overrides.append("cuda_version")

    # cuDNN, NCCL, Container Toolkit.
    cudnn, nccl, ctk = _library_overrides(host, hostvars, overrides, matrix)

    # Fabric manager: follows the driver unless set explicitly (an advanced, checked variable).
    fm = _override(hostvars, "nvidia_fabricmanager_version", host)
    fm_given: str | None = None
    if fm is not None:
        fm, fm_given = _split_revision(fm)
        overrides.append("nvidia_fabricmanager_version")
    fabricmanager_version = fm or (driver_version if driver else stack.fabricmanager.version)
    fabricmanager_enabled = bool(profile is not None and profile.nvswitch)
    prerequisite = matrix.fabricmanager_prerequisite(
        profile.nvswitch_generation if profile is not None else None,
        int(fabricmanager_version.split(".")[0])) if fabricmanager_enabled else None

    resolved = ResolvedStack(
        host=host, stack=stack.name, driver_branch=branch, driver_version=driver_version,
        module_flavor=flavor, fabricmanager_enabled=fabricmanager_enabled,
        fabricmanager_version=fabricmanager_version, cuda_version=cuda_version,
        cuda_toolkit_version=toolkit, cudnn_version=cudnn or stack.cudnn.version,
        nccl_version=nccl or stack.nccl.version,
        container_toolkit_version=ctk or stack.container_toolkit.version,
        dcgm_version=stack.dcgm.version, profile=profile.name if profile else None,
        overrides=tuple(overrides), module_source=source,
        dnf_module_stream=(precompiled_stream(branch) if source == "precompiled"
                           else dnf_module_stream(branch, flavor)),
        architecture=profile.architecture if profile else None,
        max_cuda_version=arch.max_cuda_version if arch else None,
        fabricmanager_packages=({f: list(p) for f, p in prerequisite.packages.items()}
                                if prerequisite else {}),
        fabricmanager_kernel_modules=prerequisite.kernel_modules if prerequisite else (),
        base=stack, naming=matrix.naming_facts,
    )
    _check_rules(resolved, set(overrides), profile, matrix)
    if driver is None:
        return resolved
    # After the rules: a driver the rules refuse is refused for that, not for its revision.
    return replace(resolved, ubuntu_revision=_ubuntu_revision(
        host, driver_version, (given, fm_given), fabricmanager_enabled, stack, matrix, index))


def _stack_and_architecture(host: str, hostvars: Mapping[str, Any], profile: Profile | None,
                            matrix: StackMatrix) -> tuple[Stack, ArchitectureSpec | None]:
    """Return the stack ``host`` names (gpu_stack, else the matrix's default) and its profile's
    GPU architecture (None without a profile); raise InputError when either is unknown."""
    stack_name = _override(hostvars, "gpu_stack", host) or matrix.default_stack
    stack = matrix.stacks.get(stack_name)
    if stack is None:
        raise InputError(f"host {host}: gpu_stack {stack_name} is not a known stack; choose "
                         f"one of {matrix.stack_names()}")
    arch = None
    if profile is not None:
        arch = matrix.architectures.get(profile.architecture)
        if arch is None:
            raise InputError(f"host {host}: gpu_profile {profile.name} has architecture "
                             f"{profile.architecture}, which stacks.yml does not know; add it "
                             "to architectures or pick another gpu_profile")
    return stack, arch


def _driver_override(host: str, hostvars: Mapping[str, Any],
                     overrides: list[str]) -> tuple[str | None, str | None]:
    """Return the host's nvidia_driver_version override without its package revision, and
    that revision (None, None: no override; the revision is None when not given). An
    override is appended to ``overrides``; a malformed one raises InputError."""
    driver = _override(hostvars, "nvidia_driver_version", host)
    given: str | None = None
    if driver is not None:
        driver, given = _split_revision(driver)
        if not DRIVER_RE.match(driver):
            raise _bad_format(host, "nvidia_driver_version", driver, "550.54.15")
        overrides.append("nvidia_driver_version")
    return driver, given


def _module_flavor(host: str, hostvars: Mapping[str, Any], overrides: list[str], stack: Stack,
                   branch: int, matrix: StackMatrix, arch: ArchitectureSpec | None) -> str:
    """Return the kernel module flavour: the host's nvidia_driver_module_flavor (appended to
    ``overrides``; one that is not a flavour raises InputError), else the default one."""
    flavor = _override(hostvars, "nvidia_driver_module_flavor", host)
    if flavor is not None:
        if flavor not in FLAVORS:
            raise InputError(f"host {host}: nvidia_driver_module_flavor {flavor!r} is not a "
                             f"kernel module flavour; choose one of {', '.join(FLAVORS)}")
        overrides.append("nvidia_driver_module_flavor")
    else:
        flavor = _default_flavor(stack, branch, matrix, arch)
    return flavor


MODULE_SOURCES = ("dkms", "precompiled")


def _module_source(host: str, hostvars: Mapping[str, Any], flavor: str,
                   profile: Profile | None) -> str:
    """Return where the host's kernel modules come from (nvidia_driver_module_source, default
    dkms). NVIDIA's precompiled RHEL 8/9 streams carry the proprietary modules only: their
    kmod package links nv-kernel.o_binary [PCK]; signed open modules come from the
    distributions themselves (RHEL 10), which the matrix does not list. Their package builds
    nvidia, nvidia-uvm, nvidia-modeset and nvidia-drm, no nvidia-peermem (kmod-nvidia.spec
    kmod_modules [PCK]), and the proprietary modules export no dma_buf (GPU Operator "GPUDirect
    RDMA and GPUDirect Storage": the open kernel module is required): on an RDMA fabric
    such a node has no GPUDirect RDMA path, which validate fails, so the plan refuses it."""
    source = _override(hostvars, "nvidia_driver_module_source", host) or "dkms"
    if source not in MODULE_SOURCES:
        raise InputError(f"host {host}: nvidia_driver_module_source {source!r} is not a module "
                         f"source; choose one of {', '.join(MODULE_SOURCES)}")
    if source == "precompiled" and flavor != "proprietary":
        raise InputError(f"host {host}: nvidia_driver_module_source precompiled needs the "
                         f"proprietary kernel modules (NVIDIA's precompiled streams carry no "
                         f"{flavor} ones); set nvidia_driver_module_flavor: proprietary where "
                         "the GPUs support it, or nvidia_driver_module_source: dkms")
    if source == "precompiled" and profile is not None and profile.fabric in ("infiniband",
                                                                               "roce"):
        raise InputError(f"host {host}: nvidia_driver_module_source precompiled on profile "
                         f"{profile.name}'s {profile.fabric} fabric leaves no GPUDirect RDMA "
                         "path (NVIDIA's precompiled packages carry no nvidia-peermem and the "
                         "proprietary modules export no dma_buf); use "
                         "nvidia_driver_module_source: dkms on RDMA nodes")
    return source


def _library_overrides(host: str, hostvars: Mapping[str, Any], overrides: list[str],
                       matrix: StackMatrix) -> tuple[str | None, str | None, str | None]:
    """Return the host's cuDNN, NCCL and Container Toolkit overrides, each checked (None:
    the stack's). Each override is appended to ``overrides``; a malformed one raises
    InputError."""
    cudnn = _override(hostvars, "cudnn_version", host)
    if cudnn is not None:
        cudnn = _resolve_cudnn(host, cudnn, matrix)
        overrides.append("cudnn_version")
    nccl = _override(hostvars, "nccl_version", host)
    if nccl is not None:
        if not NCCL_RE.match(nccl):
            raise _bad_format(host, "nccl_version", nccl, "2.21.5-1+cuda12.4")
        overrides.append("nccl_version")
    ctk = _override(hostvars, "nvidia_container_toolkit_version", host)
    if ctk is not None:
        ctk = ctk.removesuffix("-1")
        if not CTK_RE.match(ctk):
            raise _bad_format(host, "nvidia_container_toolkit_version", ctk, "1.17.8")
        overrides.append("nvidia_container_toolkit_version")
    return cudnn, nccl, ctk


def _split_revision(raw: str) -> tuple[str, str | None]:
    """``580.126.09-1ubuntu1`` -> (``580.126.09``, ``1ubuntu1``); no revision -> None."""
    version, dash, revision = raw.partition("-")
    if dash and DEBIAN_REVISION_RE.match(revision):
        return version, revision
    return raw, None


def _ubuntu_revision(host: str, driver: str, given: tuple[str | None, str | None],
                     fabricmanager_enabled: bool, stack: Stack, matrix: StackMatrix,
                     index: PackageIndex | None) -> UbuntuRevision | None:
    """The Ubuntu revisions of an overridden driver: stated in full by the host, known to the
    matrix, or read from the repository index. They follow the publishing date, not the
    version [HOLO], and the fabric manager's is its own (it kept Debian's -1 through R570
    [UREPO]), so a release none of these know is refused rather than guessed. ``given``: the
    revisions of nvidia_driver_version and nvidia_fabricmanager_version given in full."""
    # The fabric manager is installed only with NVSwitch; elsewhere its revision is not used.
    listed = matrix.naming_facts.ubuntu_revision(driver)
    if given[0] is not None:
        # The revision given is the driver packages' and, unless given apart (R570 and older
        # kept Debian's -1 for it) or listed, the fabric manager's.
        fm = given[1] or (listed.fabricmanager if listed else given[0])
        return UbuntuRevision(given[0], given[0], fm)
    ubuntu = [os for os in stack.os_support if os in matrix.repositories.cuda
              and matrix.repositories.cuda[os].package_family == "apt_ubuntu"]
    if not ubuntu or listed is not None:
        return None
    branch = driver.split(".", maxsplit=1)[0]
    cuda_drivers, open_name, closed_name = (f"cuda-drivers-{branch}",
                                            f"nvidia-driver-{branch}-open",
                                            f"nvidia-driver-{branch}")
    if index is None:
        raise InputError(f"host {host}: nvidia_driver_version {driver} is not a release in "
                         f"stacks.yml, and its Ubuntu package revision ({ubuntu[0]}) is a "
                         "fact of the repository, not of the number: set gpu_package_index to "
                         "the Ubuntu CUDA repository's index, or give the full package version "
                         f"as that repository lists it (nvidia_driver_version: "
                         f"\"{driver}-<revision>\")")
    fabricmanager = ("nvidia-fabricmanager", f"nvidia-fabricmanager-{branch}")
    found = versions_of_release(index, (cuda_drivers, open_name, closed_name, *fabricmanager),
                                driver)
    if cuda_drivers not in found:
        raise InputError(f"host {host}: nvidia_driver_version {driver}: the index "
                         f"{index.source} has no {cuda_drivers} of that release; check the "
                         "version, or give the full package version")
    nvidia = found.get(open_name) or found.get(closed_name) or found[cuda_drivers]
    fm_found = next((found[name] for name in fabricmanager if name in found), None)
    if fm_found is None and fabricmanager_enabled:
        raise InputError(f"host {host}: nvidia_driver_version {driver}: the index "
                         f"{index.source} has no nvidia-fabricmanager of that release, which "
                         "this NVSwitch system needs")
    return UbuntuRevision(nvidia.partition("-")[2], found[cuda_drivers].partition("-")[2],
                          fm_found.partition("-")[2] if fm_found else "1")


def _default_flavor(stack: Stack, branch: int, matrix: StackMatrix,
                    arch: ArchitectureSpec | None) -> str:
    """The stack's default flavour, or the branch's when the driver was overridden to another
    branch; switched to the other flavour when the GPU cannot run the default (Volta needs
    proprietary, Blackwell needs open) and the branch offers it."""
    if branch == stack.driver.branch:
        flavor: str = stack.driver.default_module_flavor
    else:
        flavor = "open" if branch >= matrix.open_modules_default_from_branch else "proprietary"
    if arch is not None and not arch.allows(flavor):
        other = "proprietary" if flavor == "open" else "open"
        if arch.allows(other) and (other == "proprietary"
                                   or branch >= matrix.open_modules_min_branch):
            flavor = other
    return flavor


def _resolve_cuda(host: str, raw: str, matrix: StackMatrix) -> tuple[str, str]:
    """``X.Y`` (toolkit taken from the stack of that CUDA) or ``X.Y.Z``."""
    full = TOOLKIT_RE.match(raw)
    cuda = f"{full.group(1)}.{full.group(2)}" if full else raw
    if not CUDA_RE.match(cuda):
        raise _bad_format(host, "cuda_version", raw, "12.4 or 12.4.1")
    if cuda not in matrix.cuda_minimum_driver:
        known = ", ".join(sorted(matrix.cuda_minimum_driver, key=cuda_key))
        raise InputError(f"host {host}: cuda_version {raw} is not in the CUDA/driver table of "
                         f"stacks.yml; choose one of {known}")
    if full:
        return cuda, raw
    for stack in matrix.stacks.values():
        if stack.cuda_version == cuda:
            return cuda, stack.cuda_toolkit_version
    raise InputError(f"host {host}: cuda_version {cuda} has no toolkit release in stacks.yml; "
                     f"give the full release X.Y.Z (e.g. {cuda}.1) or pick another gpu_stack")


def _resolve_cudnn(host: str, raw: str, matrix: StackMatrix) -> str:
    """A full ``9.x.y.z``, or ``9.x.y`` when the matrix knows its build number."""
    if CUDNN_RE.match(raw):
        return raw
    if CUDNN_SHORT_RE.match(raw):
        builds = [b for b in _known_cudnn_builds(matrix) if b.startswith(raw + ".")]
        if len(builds) == 1:
            return builds[0]
        raise InputError(f"host {host}: cudnn_version {raw} needs its build number (the "
                         "package version 9.X.Y.Z, e.g. 9.1.0.70); known: "
                         f"{', '.join(_known_cudnn_builds(matrix))}")
    raise _bad_format(host, "cudnn_version", raw, "9.1.0.70 (cuDNN 9)")


# --------------------------------------------------------------------------- the rules


def _stack_for_driver(matrix: StackMatrix, driver: str) -> str | None:
    """The newest stack whose CUDA the driver can run."""
    fits = [s for s in matrix.stacks_by_cuda()
            if version_tuple(driver) >= version_tuple(matrix.minimum_driver(s.cuda_version))]
    return fits[-1].name if fits else None


def _check_rules(r: ResolvedStack, overridden: set[str], profile: Profile | None,
                 matrix: StackMatrix) -> None:
    """Every rule, in a fixed order; the first violation is the one reported."""
    _check_driver_runs_cuda(r, overridden, matrix)
    if profile is not None:
        _check_architecture(r, overridden, profile, matrix)
        _check_gpu_min_driver(r, overridden, profile, matrix)
    else:
        _check_flavor_exists(r, overridden, matrix)
    _check_cudnn(r, overridden, matrix)
    _check_nccl(r, overridden, matrix)
    if profile is not None and profile.nvswitch:
        _check_fabricmanager(r, profile)


def _check_driver_runs_cuda(r: ResolvedStack, overridden: set[str],
                            matrix: StackMatrix) -> None:
    needed = matrix.minimum_driver(r.cuda_version)
    if version_tuple(r.driver_version) >= version_tuple(needed):
        return
    if "cuda_version" in overridden and "nvidia_driver_version" not in overridden:
        same_cuda = f"cuda-{r.cuda_version}"
        pick = (f"pick gpu_stack {same_cuda} or set" if same_cuda in matrix.stacks
                else "set")
        raise InputError(f"host {r.host}: cuda_version {r.cuda_version} needs a driver >= "
                         f"{needed}, but nvidia_driver_version is {r.driver_version} (from "
                         f"gpu_stack {r.stack}); {pick} nvidia_driver_version >= {needed}")
    fit = _stack_for_driver(matrix, r.driver_version)
    advice = f"pick gpu_stack {fit} or a newer driver" if fit else "pick a newer driver"
    raise InputError(f"host {r.host}: nvidia_driver_version {r.driver_version} is too old for "
                     f"cuda_version {r.cuda_version} (needs >= {needed}); {advice}")


def _check_flavor_exists(r: ResolvedStack, overridden: set[str], matrix: StackMatrix) -> None:
    if r.module_flavor == "open" and r.driver_branch < matrix.open_modules_min_branch:
        var = ("nvidia_driver_module_flavor" if "nvidia_driver_module_flavor" in overridden
               else "nvidia_driver_version")
        raise InputError(f"host {r.host}: {var}: open kernel modules need driver branch >= "
                         f"R{matrix.open_modules_min_branch}, but nvidia_driver_version is "
                         f"{r.driver_version}; set nvidia_driver_module_flavor: proprietary "
                         "or a newer driver")


def _check_architecture(r: ResolvedStack, overridden: set[str], profile: Profile,
                        matrix: StackMatrix) -> None:
    arch_name = profile.architecture
    arch = matrix.architectures[arch_name]
    if r.driver_branch < arch.min_driver_branch:
        oldest = next((s.name for s in matrix.stacks_by_cuda()
                       if s.driver.branch >= arch.min_driver_branch), None)
        advice = f"pick gpu_stack {oldest} or newer" if oldest else "pick a newer driver"
        raise InputError(f"host {r.host}: nvidia_driver_version {r.driver_version} (branch "
                         f"R{r.driver_branch}) does not support {arch_name} GPUs (gpu_profile "
                         f"{profile.name} needs branch >= R{arch.min_driver_branch}); {advice}")
    _check_flavor_exists(r, overridden, matrix)
    if not arch.allows(r.module_flavor):
        other = "proprietary" if r.module_flavor == "open" else "open"
        why = ("open kernel modules need Turing or newer" if r.module_flavor == "open"
               else "these GPUs need the open kernel modules")
        raise InputError(f"host {r.host}: nvidia_driver_module_flavor {r.module_flavor} is not "
                         f"supported on {arch_name} GPUs (gpu_profile {profile.name}: {why}); "
                         f"set nvidia_driver_module_flavor: {other}")
    if arch.max_cuda_version and cuda_key(r.cuda_version) > cuda_key(arch.max_cuda_version):
        newest = [s.name for s in matrix.stacks_by_cuda()
                  if cuda_key(s.cuda_version) <= cuda_key(arch.max_cuda_version)]
        advice = f"pick gpu_stack {newest[-1]} or older" if newest else "pick an older CUDA"
        raise InputError(f"host {r.host}: cuda_version {r.cuda_version} cannot target "
                         f"{arch_name} GPUs (gpu_profile {profile.name}; the last CUDA for them "
                         f"is {arch.max_cuda_version}); {advice}")


def _check_gpu_min_driver(r: ResolvedStack, overridden: set[str], profile: Profile,
                          matrix: StackMatrix) -> None:
    """A driver branch that knows the architecture does not know every model: the profile's
    min_driver (the first release that lists the GPU) must be met."""
    minimum = profile.min_driver
    if minimum is None or version_tuple(r.driver_version) >= version_tuple(minimum):
        return
    source = ("as overridden" if "nvidia_driver_version" in overridden
              else f"from gpu_stack {r.stack}")
    fit = next((s.name for s in matrix.stacks_by_cuda()
                if version_tuple(s.driver.version) >= version_tuple(minimum)
                and cuda_key(s.cuda_version) >= cuda_key(r.cuda_version)), None)
    stack_advice = f" or pick gpu_stack {fit} or newer" if fit else ""
    gpu = f"{profile.gpu_model} ({', '.join(profile.pci_device_ids)})"
    raise InputError(f"host {r.host}: nvidia_driver_version {r.driver_version} ({source}) is "
                     f"older than {gpu} needs (gpu_profile {profile.name}: min_driver "
                     f"{minimum}); set nvidia_driver_version >= {minimum}{stack_advice}")


def _check_cudnn(r: ResolvedStack, overridden: set[str], matrix: StackMatrix) -> None:
    majors = matrix.cudnn_majors(r.cudnn_version)
    if r.cuda_major in majors:
        return
    var = ("cuda_version" if "cuda_version" in overridden and "cudnn_version" not in overridden
           else "cudnn_version")
    builds = [b for b in matrix.cudnn_builds if b.cuda_major == r.cuda_major]
    if builds:
        fix = f"pick a cudnn_version >= {builds[0].first}"
        if builds[0].last:
            fix = f"pick a cudnn_version between {builds[0].first} and {builds[0].last}"
    else:
        fix = "pick a cuda_version cuDNN 9 is built for"
    built_for = ", ".join(f"CUDA {m}" for m in majors) or "no CUDA major stacks.yml knows"
    raise InputError(f"host {r.host}: {var}: cuDNN {r.cudnn_version} has no build for CUDA "
                     f"{r.cuda_major} (cuda_version {r.cuda_version}; it is built for "
                     f"{built_for}); {fix}")


def _check_nccl(r: ResolvedStack, overridden: set[str], matrix: StackMatrix) -> None:
    match = NCCL_RE.match(r.nccl_version)
    if match is None:  # the stack's own value is validated by the schema; overrides above
        raise _bad_format(r.host, "nccl_version", r.nccl_version, "2.21.5-1+cuda12.4")
    built = (int(match.group(1)), int(match.group(2)))
    supported = matrix.max_cuda_for_driver(r.driver_version)
    if supported is not None and built <= cuda_key(supported):
        return
    var = ("nvidia_driver_version" if "nvidia_driver_version" in overridden
           and "nccl_version" not in overridden else "nccl_version")
    limit = f"up to CUDA {supported}" if supported else "no CUDA in stacks.yml"
    raise InputError(f"host {r.host}: {var}: NCCL {r.nccl_version} is built for CUDA "
                     f"{built[0]}.{built[1]}, newer than nvidia_driver_version "
                     f"{r.driver_version} supports ({limit}); pick an nccl_version built for "
                     f"+cuda{supported or 'X.Y'} or older, or a newer driver")


def _check_fabricmanager(r: ResolvedStack, profile: Profile) -> None:
    if r.fabricmanager_version == r.driver_version:
        return
    raise InputError(f"host {r.host}: nvidia_fabricmanager_version {r.fabricmanager_version} "
                     f"does not match nvidia_driver_version {r.driver_version}; NVSwitch "
                     f"systems (gpu_profile {profile.name}) need fabric manager == driver: "
                     f"remove nvidia_fabricmanager_version or set it to {r.driver_version}")


def check_cluster(resolved: Mapping[str, ResolvedStack]) -> None:
    """Cross-host rules: every GPU node of a job must load the same NCCL, so a fleet runs one
    CUDA and a GPU that cannot run a peer's CUDA (Volta past 12.9) holds the whole fleet back."""
    hosts = sorted(resolved)
    if not hosts:
        return
    _check_fleet_cuda(resolved, hosts)
    first = resolved[hosts[0]]
    for host in hosts[1:]:
        other = resolved[host]
        if other.nccl_version != first.nccl_version:
            raise InputError(
                f"hosts {first.host} and {other.host} resolve to different nccl_version "
                f"({first.nccl_version} vs {other.nccl_version}); NCCL must match on every node "
                "of a job: set gpu_stack (or nccl_version) for the whole gpu_nodes group")


def _check_fleet_cuda(resolved: Mapping[str, ResolvedStack], hosts: list[str]) -> None:
    """A host whose GPUs cannot run another host's CUDA: named, with the CUDA the fleet needs."""
    newest = max(hosts, key=lambda h: cuda_key(resolved[h].cuda_version))
    for host in hosts:
        r = resolved[host]
        if r.max_cuda_version is None:
            continue
        peer = resolved[newest]
        if cuda_key(peer.cuda_version) > cuda_key(r.max_cuda_version):
            raise InputError(
                f"host {r.host}: {r.architecture} GPUs (gpu_profile {r.profile}) cannot run CUDA "
                f"{peer.cuda_version} like host {peer.host} (gpu_stack {peer.stack}), and NCCL "
                f"must match on every node of a job; put the whole gpu_nodes group on CUDA <= "
                f"{r.max_cuda_version} (gpu_stack cuda-{r.max_cuda_version} or older)")
