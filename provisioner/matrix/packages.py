"""Package names and versions: the one place they come from.

Every pin follows NVIDIA's repository naming conventions (``conventional``), computed from the
component versions of a stack or of a host after its overrides. Where a stack's real package
differs from the convention, stacks.yml states it as a ``package_exceptions`` entry of that stack,
with its source; an exception replaces the conventional pin of the same name (or the one it
``replaces``) and holds only while the host did not override that component's version.

Facts of the whole matrix that names depend on (the branch from which the fabric manager loses its
suffix, the Ubuntu driver revisions by release) travel as one ``NamingFacts``.

Source tags ([CIG], [KM], [FM], [REPO], [UREPO], [DIG], [DCGM]) are the list at the top of
provisioner/data/stacks.yml.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from provisioner.errors import InputError
from provisioner.matrix.versions import (
    COMPONENTS,
    FAMILIES,
    FLAVORS,
    driver_branch,
)

if TYPE_CHECKING:
    from provisioner.matrix.resolve import ResolvedStack
    from provisioner.matrix.schema import PackageException, Stack, StackMatrix


@dataclass(frozen=True)
class PackagePin:
    """One package at one exact version, as the upstream repository names it."""

    component: str
    name: str
    version: str


@dataclass(frozen=True)
class UbuntuRevision:
    """The Debian revisions of nvidia-driver-<B>[-open] and cuda-drivers-<B> for one driver
    release in NVIDIA's Ubuntu CUDA repositories [UREPO]. They follow the publishing date, not
    the version number (535.183.06 is -1, the older 535.216.01 -0ubuntu1's successor...), so
    they are facts per release, never derived."""

    nvidia_driver: str
    cuda_drivers: str
    # nvidia-fabricmanager and libnvidia-nscq (Debian's -1 where Ubuntu's repository keeps it).
    fabricmanager: str = "1"


@dataclass(frozen=True)
class NamingFacts:
    """The matrix-wide facts package names and versions depend on."""

    # The matrix's fabricmanager_unsuffixed_from_branch [REPO].
    fabricmanager_unsuffixed_from_branch: int
    # The matrix's ubuntu_driver_packages: (release, revisions), ascending [UREPO].
    ubuntu_driver_packages: tuple[tuple[str, UbuntuRevision], ...]

    def ubuntu_revision(self, driver_version: str) -> UbuntuRevision | None:
        """The revisions stacks.yml states for exactly this release (None: not stated)."""
        return next((rev for release, rev in self.ubuntu_driver_packages
                     if release == driver_version), None)


@dataclass(frozen=True)
class NamingInputs:
    """What the names and versions of a stack's packages are derived from."""

    driver_version: str
    fabricmanager_version: str
    cuda_version: str
    cuda_toolkit_version: str
    cudnn_version: str
    nccl_version: str
    container_toolkit_version: str
    dcgm_version: str
    facts: NamingFacts
    # A host's driver override outside the matrix: its Ubuntu revisions, read from a repository
    # index or given in full (matrix/resolve.py); None: the matrix's own for the release.
    ubuntu_revision: UbuntuRevision | None = None
    # Where the kernel modules come from (dkms, or precompiled per-kernel packages on dnf).
    module_source: str = "dkms"

    @property
    def cuda_major(self) -> int:
        return int(self.cuda_version.split(".")[0])

    @classmethod
    def of_stack(cls, stack: Stack, facts: NamingFacts) -> NamingInputs:
        return cls(
            driver_version=stack.driver.version,
            fabricmanager_version=stack.fabricmanager.version,
            cuda_version=stack.cuda_version, cuda_toolkit_version=stack.cuda_toolkit_version,
            cudnn_version=stack.cudnn.version, nccl_version=stack.nccl.version,
            container_toolkit_version=stack.container_toolkit.version,
            dcgm_version=stack.dcgm.version, facts=facts)

    @classmethod
    def of_resolved(cls, r: ResolvedStack) -> NamingInputs:
        if r.naming is None:
            raise ValueError(f"host {r.host}: resolved without the matrix's naming facts")
        return cls(
            driver_version=r.driver_version, fabricmanager_version=r.fabricmanager_version,
            cuda_version=r.cuda_version, cuda_toolkit_version=r.cuda_toolkit_version,
            cudnn_version=r.cudnn_version, nccl_version=r.nccl_version,
            container_toolkit_version=r.container_toolkit_version, dcgm_version=r.dcgm_version,
            facts=r.naming, ubuntu_revision=r.ubuntu_revision, module_source=r.module_source)

    def key(self, component: str) -> tuple[object, ...]:
        """Everything ``component``'s names and versions depend on (besides the flavour)."""
        return {
            "driver": (self.driver_version, self.ubuntu_revision, self.module_source),
            "fabricmanager": (self.fabricmanager_version, self.ubuntu_revision),
            "cuda_toolkit": (self.cuda_toolkit_version,),
            "cudnn": (self.cudnn_version, self.cuda_major),
            "nccl": (self.nccl_version,),
            "container_toolkit": (self.container_toolkit_version,),
            "dcgm": (self.dcgm_version, self.cuda_major),
        }[component]


def conventional(v: NamingInputs, component: str, family: str,
                 flavor: str) -> list[tuple[str, str]]:
    """(name, version) pairs by NVIDIA's repository conventions, in install order."""
    dnf = family == "dnf"
    open_flavor = flavor == "open"
    d, b, major = v.driver_version, driver_branch(v.driver_version), v.cuda_major
    if component == "driver":
        return _driver_pins(v, family, open_flavor, d, b)
    if component == "fabricmanager":
        return _fabricmanager_pins(v, family)
    if component == "cuda_toolkit":
        # cuda-toolkit-<X>-<Y> at the toolkit release, revision 1 [CIG].
        minor = v.cuda_version.split(".")[1]
        return [(f"cuda-toolkit-{major}-{minor}", f"{v.cuda_toolkit_version}-1")]
    if component == "cudnn":
        # libcudnn9-cuda-<major> and its -dev (apt) / -devel (dnf) package [CIG].
        dev = "devel" if dnf else "dev"
        return [(f"libcudnn9-cuda-{major}", f"{v.cudnn_version}-1"),
                (f"libcudnn9-{dev}-cuda-{major}", f"{v.cudnn_version}-1")]
    if component == "nccl":
        # The NCCL version already is the package version (2.x.y-1+cudaX.Y) [CIG].
        runtime, devel = ("libnccl", "libnccl-devel") if dnf else ("libnccl2", "libnccl-dev")
        return [(runtime, v.nccl_version), (devel, v.nccl_version)]
    if component == "container_toolkit":
        # All four packages pinned to one version [NCT].
        ctk = f"{v.container_toolkit_version}-1"
        return [(name, ctk) for name in ("nvidia-container-toolkit",
                                         "nvidia-container-toolkit-base",
                                         "libnvidia-container-tools", "libnvidia-container1")]
    if component == "dcgm":
        # DCGM 3 is one CUDA-independent package (epoch 1, no Debian revision); DCGM 4 splits
        # core and per-CUDA-major [DCGM] [REPO].
        g = v.dcgm_version
        if g.startswith("3."):
            return [("datacenter-gpu-manager", f"1:{g}-1" if dnf else f"1:{g}")]
        return [("datacenter-gpu-manager-4-core", f"1:{g}-1"),
                (f"datacenter-gpu-manager-4-cuda{major}", f"1:{g}-1")]
    raise ValueError(f"unknown component {component!r}")


def _driver_pins(v: NamingInputs, family: str, open_flavor: bool, d: str,
                 b: int) -> list[tuple[str, str]]:
    """Return the driver's (name, version) pairs in ``family``, in install order: the kernel
    module of the flavour and the branch metapackage (``d``: the driver version, ``b``: its
    branch)."""
    if family == "apt":
        # Debian: the kernel module package, then the branch metapackage [CIG] [KM].
        kmod = "nvidia-kernel-open-dkms" if open_flavor else "nvidia-kernel-dkms"
        return [(kmod, f"{d}-1"), (f"cuda-drivers-{b}", f"{d}-1")]
    if family == "apt_ubuntu":
        # Ubuntu: nvidia-driver-<B>[-open], then cuda-drivers-<B> [CIG], each at the
        # revision the Ubuntu repositories carry for that release [UREPO].
        drv = f"nvidia-driver-{b}-open" if open_flavor else f"nvidia-driver-{b}"
        rev = v.ubuntu_revision or v.facts.ubuntu_revision(d)
        if rev is None:
            raise InputError(f"driver {d}: its Ubuntu package revisions are not in "
                             "stacks.yml ubuntu_driver_packages; give a repository index "
                             "or the full package version")
        return [(drv, f"{d}-{rev.nvidia_driver}"),
                (f"cuda-drivers-{b}", f"{d}-{rev.cuda_drivers}")]
    # rhel9: DKMS kernel module and the CUDA driver metapackage [CIG] [KM], epoch 3 as in
    # nvidia-driver-cuda-3:570.133.20-1.el9 [DIG]; installed from the branch's module
    # stream (ResolvedStack.dnf_module_stream). With precompiled modules the kmod is one
    # package per kernel, named by precompiled_kmod_name and installed by the role [PCK].
    if v.module_source == "precompiled":
        return [("nvidia-driver-cuda", f"3:{d}-1.el9")]
    kmod = "kmod-nvidia-open-dkms" if open_flavor else "kmod-nvidia-latest-dkms"
    return [(kmod, f"3:{d}-1.el9"), ("nvidia-driver-cuda", f"3:{d}-1.el9")]


def precompiled_kmod_name(driver_version: str) -> str:
    """The name of a precompiled kernel module package of RHEL 8/9 for ``driver_version``, with
    ``@K@`` for the kernel: ``kmod-nvidia-${driver}-${kernel}-${kernel_release}`` (e.g.
    kmod-nvidia-440.33.01-4.18.0-147.5.1 for kernel 4.18.0-147.5.1.el8_1.x86_64) [PCK]. The
    node fills in each of its kernels (filter nvidia_driver_precompiled_kmods): the name holds
    the driver version, so installing it by name pins the driver."""
    return f"kmod-nvidia-{driver_version}-@K@"


def _fabricmanager_pins(v: NamingInputs, family: str) -> list[tuple[str, str]]:
    """Return the fabric manager's and NSCQ's (name, version) pairs in ``family``."""
    # Fabric manager and NSCQ carry the branch in their names until R580 [FM] [REPO].
    # Ubuntu's repository gives them its own revision from R580's later releases on
    # [UREPO]: per release, as the driver's (ubuntu_driver_packages, or the override's).
    fm = v.fabricmanager_version
    fm_branch = driver_branch(fm)
    fm_rev = "1"
    if family == "apt_ubuntu":
        known = v.ubuntu_revision or v.facts.ubuntu_revision(fm)
        fm_rev = known.fabricmanager if known else "1"
    if fm_branch >= v.facts.fabricmanager_unsuffixed_from_branch:
        return [("nvidia-fabricmanager", f"{fm}-{fm_rev}"),
                ("libnvidia-nscq", f"{fm}-{fm_rev}")]
    name = "nvidia-fabric-manager" if family == "dnf" else f"nvidia-fabricmanager-{fm_branch}"
    return [(name, f"{fm}-{fm_rev}"), (f"libnvidia-nscq-{fm_branch}", f"{fm}-{fm_rev}")]


# Components whose pins differ between the apt families (Debian's and Ubuntu's CUDA
# repositories): the driver's names [CIG] and the fabric manager's Ubuntu revision [UREPO]. Every
# other component is the same package in both, so apt_ubuntu reads apt's pins for it.
OS_NAMED: tuple[str, ...] = ("driver", "fabricmanager")


def with_exceptions(pins: list[tuple[str, str]],
                    exceptions: Iterable[PackageException]) -> list[tuple[str, str]]:
    """``pins`` with each exception's pin in place of the one it replaces."""
    replaced = {e.replaced: (e.name, e.version) for e in exceptions}
    return [replaced.get(name, (name, version)) for name, version in pins]


def exception_problem(stack: Stack, index: int, facts: NamingFacts) -> str | None:
    """Why exception ``index`` of ``stack`` would never apply or change nothing (None: fine)."""
    exc = stack.package_exceptions[index]
    inputs = NamingInputs.of_stack(stack, facts)
    by_name = {name: version for flavor in FLAVORS
               for name, version in conventional(inputs, exc.component, exc.family, flavor)}
    if exc.replaced not in by_name:
        return (f"{exc.family} {exc.component} has no package {exc.replaced} by convention "
                f"(it has {', '.join(sorted(by_name))})")
    if exc.name == exc.replaced and exc.version == by_name[exc.replaced]:
        return (f"{exc.name} {exc.version} is what the convention gives already; "
                "remove the exception")
    return None


def component_pins(r: ResolvedStack, component: str, family: str,
                   flavor: str) -> list[tuple[str, str]]:
    """``component``'s pins for host ``r`` in ``family``: the convention, then the stack's
    exceptions for every component whose versions the host did not override."""
    inputs = NamingInputs.of_resolved(r)
    pins = conventional(inputs, component, family, flavor)
    if r.base is None:
        return pins
    base = NamingInputs.of_stack(r.base, inputs.facts)
    if inputs.key(component) != base.key(component):
        return pins
    return with_exceptions(pins, (e for e in r.base.package_exceptions
                                  if e.family == family and e.component == component))


def stack_pins(stack: Stack, facts: NamingFacts, component: str,
               family: str, flavor: str) -> list[tuple[str, str]]:
    """``component``'s pins for ``stack`` as the matrix states it (no host overrides)."""
    pins = conventional(NamingInputs.of_stack(stack, facts), component, family, flavor)
    return with_exceptions(pins, (e for e in stack.package_exceptions
                                  if e.family == family and e.component == component))


def check_family(family: str) -> None:
    if family not in FAMILIES:
        raise InputError(f"package family {family!r} is unknown; choose one of "
                         f"{', '.join(FAMILIES)}")


def packages_for(resolved: ResolvedStack, family: str = "apt") -> list[PackagePin]:
    """Exact pins for ``resolved`` in ``family`` (apt: debian12, apt_ubuntu: ubuntu2204/2404,
    dnf: rhel9), in install order. The fabric manager is included only on NVSwitch hardware.
    Hosts with the same stack and overrides share one computation (a 2,000-host plan asks a
    few times per host and family, and resolves a handful of distinct stacks)."""
    check_family(family)
    key = _pins_key(resolved, family)
    hit = _pins_cache.get(key)
    if hit is None or hit[0] is not resolved.base:
        pins: list[PackagePin] = []
        for component in COMPONENTS:
            if component == "fabricmanager" and not resolved.fabricmanager_enabled:
                continue
            pins.extend(PackagePin(component, name, version) for name, version
                        in component_pins(resolved, component, family, resolved.module_flavor))
        if len(_pins_cache) >= _PINS_CACHE_SIZE:
            _pins_cache.pop(next(iter(_pins_cache)))
        # The stack object is kept beside the pins: it stays alive, so its id is never reused.
        hit = (resolved.base, tuple(pins))
        _pins_cache[key] = hit
    return list(hit[1])


# {_pins_key: (the matrix's stack object, pins)}, oldest first, bounded.
_PINS_CACHE_SIZE = 512
_pins_cache: dict[tuple[object, ...], tuple[object, tuple[PackagePin, ...]]] = {}


def _pins_key(r: ResolvedStack, family: str) -> tuple[object, ...]:
    """Everything ``packages_for`` reads from ``r``: the naming inputs, the flavour, whether the
    fabric manager runs, and which matrix stack (its exceptions) by identity."""
    return (family, id(r.base), r.stack, r.module_flavor, r.module_source,
            r.fabricmanager_enabled, r.naming,
            r.driver_version, r.ubuntu_revision, r.fabricmanager_version, r.cuda_version,
            r.cuda_toolkit_version, r.cudnn_version, r.nccl_version, r.container_toolkit_version,
            r.dcgm_version)


# Components whose package names carry the driver branch, the module flavour, the CUDA major or
# the DCGM major (cuda-drivers-580, nvidia-driver-575-open, nvidia-fabricmanager-570,
# libnvidia-nscq-575, nvidia-kernel-open-dkms, libcudnn9-dev-cuda-12, datacenter-gpu-manager vs
# datacenter-gpu-manager-4-core): a stack change removes the other names first, so a node holds
# exactly one variant of each. Driver branches ship the same files (nvidia-smi, the libraries):
# dpkg refuses one beside the other, and the simulated mirror reproduces it (cuda-drivers-575
# beside cuda-drivers-580, libcudnn9-dev-cuda-12 beside -cuda-13: one header path). NVIDIA's
# DCGM 4 installation guide says to remove datacenter-gpu-manager (DCGM 3) before installing
# DCGM 4. Whether NVIDIA's cuDNN packages for two CUDA majors conflict is not confirmed here;
# the role measures one header, so one cuDNN is what it can verify. CUDA toolkits are not here:
# cuda-toolkit-12-9 and -13-0 live side by side in /usr/local/cuda-X.Y by design.
RENAMED_COMPONENTS: tuple[str, ...] = ("driver", "fabricmanager", "cudnn", "dcgm")
# {(component, family): names} per matrix object, the matrix kept beside (so its id stays its own).
_every_name_cache: dict[int, tuple[StackMatrix, dict[tuple[str, str], frozenset[str]]]] = {}


def every_name(matrix: StackMatrix, component: str, family: str) -> frozenset[str]:
    """Every package name ``component`` has in ``family`` in any stack of ``matrix``, either
    flavour (cached per matrix object: a 2,000-host plan asks once per family)."""
    entry = _every_name_cache.get(id(matrix))
    if entry is None or entry[0] is not matrix:
        if len(_every_name_cache) >= 8:
            _every_name_cache.pop(next(iter(_every_name_cache)))
        entry = (matrix, {})
        _every_name_cache[id(matrix)] = entry
    names = entry[1].get((component, family))
    if names is None:
        names = frozenset(name for stack in matrix.stacks.values() for flavor in FLAVORS
                          for name, _version in stack_pins(stack, matrix.naming_facts, component,
                                                           family, flavor))
        entry[1][(component, family)] = names
    return names


def replaced_packages(matrix: StackMatrix, resolved: ResolvedStack,
                      family: str) -> dict[str, list[str]]:
    """{component: names to remove before installing}: the names of RENAMED_COMPONENTS that
    other branches and the other flavour use in ``family`` and ``resolved`` does not (the
    fabric manager only where this host runs it: its role runs nowhere else)."""
    planned = {pin.name for pin in packages_for(resolved, family)}
    return {component: sorted(every_name(matrix, component, family) - planned)
            for component in RENAMED_COMPONENTS
            if component != "fabricmanager" or resolved.fabricmanager_enabled}
