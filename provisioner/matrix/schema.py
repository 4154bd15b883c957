"""The stack matrix file (provisioner/data/stacks.yml): its schema, validated once by
``load_matrix``. Pure: nothing here touches a host, prints or exits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from provisioner import site
from provisioner.errors import InputError
from provisioner.matrix.packages import NamingFacts, UbuntuRevision, exception_problem
from provisioner.matrix.versions import (
    CTK_RE,
    CUDA_RE,
    CUDNN_RE,
    DCGM_RE,
    DEBIAN_REVISION_RE,
    DRIVER_RE,
    FAMILIES,
    NCCL_RE,
    STACK_NAME_RE,
    TOOLKIT_RE,
    Component,
    Designation,
    Flavor,
    PackageFamily,
    cuda_key,
    version_tuple,
)
from provisioner.profiles import DATA_DIR, read_yaml_mapping, validation_error_line

STACKS_FILE = DATA_DIR / "stacks.yml"

_PACKAGE_NAME = r"^[a-z0-9][a-z0-9.+-]*$"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PackageException(_Model):
    """A pin of one stack that the naming conventions (matrix/packages.py) do not produce."""

    family: PackageFamily
    component: Component
    name: str = Field(pattern=_PACKAGE_NAME)
    version: str = Field(min_length=1, pattern=r"^[0-9A-Za-z.:~+-]+$")
    # The conventional package this one stands in for, when the name itself differs.
    replaces: str | None = Field(default=None, pattern=_PACKAGE_NAME)

    @property
    def replaced(self) -> str:
        return self.replaces or self.name


class DriverSpec(_Model):
    branch: int = Field(ge=300, le=999)
    version: str = Field(pattern=DRIVER_RE.pattern)
    module_flavors: tuple[Flavor, ...] = Field(min_length=1)
    default_module_flavor: Flavor
    dnf_module_streams: dict[Flavor, str] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DriverSpec:
        if int(self.version.split(".")[0]) != self.branch:
            raise ValueError(f"version {self.version} is not of branch {self.branch}")
        if self.default_module_flavor not in self.module_flavors:
            raise ValueError(f"default_module_flavor {self.default_module_flavor} is not one "
                             f"of module_flavors {list(self.module_flavors)}")
        return self


class CudnnSpec(_Model):
    version: str = Field(pattern=CUDNN_RE.pattern)
    cuda_major: int = Field(ge=11)


class NcclSpec(_Model):
    version: str = Field(pattern=NCCL_RE.pattern)


class ContainerToolkitSpec(_Model):
    version: str = Field(pattern=CTK_RE.pattern)


class FabricManagerSpec(_Model):
    version: str = Field(pattern=DRIVER_RE.pattern)


class DcgmSpec(_Model):
    version: str = Field(pattern=DCGM_RE.pattern)


class Stack(_Model):
    """One matched set, exactly as stacks.yml states it."""

    name: str = Field(pattern=STACK_NAME_RE.pattern)
    os_support: tuple[str, ...] = Field(min_length=1)
    cuda_version: str = Field(pattern=CUDA_RE.pattern)
    cuda_toolkit_version: str = Field(pattern=TOOLKIT_RE.pattern)
    driver: DriverSpec
    cudnn: CudnnSpec
    nccl: NcclSpec
    container_toolkit: ContainerToolkitSpec
    fabricmanager: FabricManagerSpec
    dcgm: DcgmSpec
    package_exceptions: tuple[PackageException, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Stack:
        own = f"cuda-{self.cuda_version}"
        if self.name != own and not self.name.startswith(own + "-"):
            raise ValueError(f"a stack of CUDA {self.cuda_version} must be named {own} "
                             f"or {own}-SUFFIX")
        if not self.cuda_toolkit_version.startswith(self.cuda_version + "."):
            raise ValueError(f"cuda_toolkit_version {self.cuda_toolkit_version} is not a "
                             f"release of CUDA {self.cuda_version}")
        return self


class ArchitectureSpec(_Model):
    compute_capability: str = Field(pattern=r"^\d{1,2}\.\d$")
    min_driver_branch: int = Field(ge=300, le=999)
    open_modules: bool
    proprietary_modules: bool
    max_cuda_version: str | None = Field(default=None, pattern=CUDA_RE.pattern)

    def allows(self, flavor: str) -> bool:
        return self.open_modules if flavor == "open" else self.proprietary_modules


class CudnnBuild(_Model):
    cuda_major: int = Field(ge=11)
    first: str = Field(pattern=r"^9\.\d{1,2}\.\d{1,2}$")
    last: str | None = Field(default=None, pattern=r"^9\.\d{1,2}\.\d{1,2}$")


class RepositoryKey(_Model):
    base_url: str = Field(pattern=r"^https://")
    key_url: str = Field(pattern=r"^https://")
    # Required: a key is trusted only at a pinned, verified fingerprint.
    fingerprint: str = Field(pattern=r"^[0-9A-F]{40}$")


class CudaRepository(RepositoryKey):
    package_family: PackageFamily
    # The OS ships the driver as dnf module streams (RHEL 8/9; not RHEL 10) [DIG]: every stack
    # of this OS must name its streams.
    driver_module_streams: bool = False


class UbuntuDriverRelease(_Model):
    """The Debian revisions one driver release carries in NVIDIA's Ubuntu CUDA repositories
    (ubuntu_driver_packages) [UREPO]: they follow the publishing date, not the version."""

    nvidia_driver: str = Field(pattern=DEBIAN_REVISION_RE.pattern)
    cuda_drivers: str = Field(pattern=DEBIAN_REVISION_RE.pattern)
    # nvidia-fabricmanager and libnvidia-nscq: Debian's -1 until R580's later releases.
    fabricmanager: str = Field(default="1", pattern=DEBIAN_REVISION_RE.pattern)


class DriverBranch(_Model):
    """One driver branch's place in NVIDIA's data-center lifecycle (driver_branches) [LIFE]."""

    designation: Designation
    # "YYYY-MM" (supported to the end of that month, as NVIDIA's table states it) or
    # "YYYY-MM-DD"; null where NVIDIA publishes none (new feature branches).
    end_of_life: str | None = Field(pattern=r"^\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?$")
    source: str = Field(min_length=1)


class FabricManagerPrerequisite(_Model):
    """What the fabric manager needs besides itself on one NVSwitch generation [FMG]."""

    nvswitch_generation: int = Field(ge=1, le=9)
    from_branch: int = Field(ge=300, le=999)
    packages: dict[PackageFamily, tuple[str, ...]]
    kernel_modules: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _every_family(self) -> FabricManagerPrerequisite:
        missing = [f for f in FAMILIES if not self.packages.get(f)]  # type: ignore[call-overload]
        if missing:
            raise ValueError(f"packages: no package list for family {missing[0]}")
        return self


class ContainerToolkitRepositories(_Model):
    apt: RepositoryKey
    dnf: RepositoryKey


class Repositories(_Model):
    cuda: dict[str, CudaRepository] = Field(min_length=1)
    container_toolkit: ContainerToolkitRepositories


class StackMatrix(_Model):
    """The whole of stacks.yml, validated."""

    schema_version: Literal[1]
    default_stack: str
    open_modules_min_branch: int
    open_modules_default_from_branch: int
    fabricmanager_unsuffixed_from_branch: int
    ubuntu_driver_packages: dict[str, UbuntuDriverRelease] = Field(min_length=1)
    driver_branches: dict[int, DriverBranch] = Field(min_length=1)
    fabricmanager_prerequisites: tuple[FabricManagerPrerequisite, ...] = ()
    cuda_minimum_driver: dict[str, str] = Field(min_length=1)
    architectures: dict[str, ArchitectureSpec] = Field(min_length=1)
    cudnn_builds: tuple[CudnnBuild, ...] = Field(min_length=1)
    repositories: Repositories
    stacks: dict[str, Stack] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _name_stacks(cls, data: Any) -> Any:
        """A stack's name is its key; copy it in so each Stack knows it."""
        if isinstance(data, dict) and isinstance(data.get("stacks"), dict):
            stacks = {key: ({**body, "name": key} if isinstance(body, dict) else body)
                      for key, body in data["stacks"].items()}
            return {**data, "stacks": stacks}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> StackMatrix:
        if self.default_stack not in self.stacks:
            raise ValueError(f"default_stack {self.default_stack} is not a stack; choose one "
                             f"of {', '.join(sorted(self.stacks))}")
        for cuda, driver in self.cuda_minimum_driver.items():
            if not CUDA_RE.match(cuda) or not DRIVER_RE.match(driver):
                raise ValueError(f"cuda_minimum_driver entry {cuda!r}: {driver!r} is not "
                                 "'X.Y': 'driver version' (quote both)")
        for release in self.ubuntu_driver_packages:
            if not DRIVER_RE.match(release):
                raise ValueError(f"ubuntu_driver_packages: {release!r} is not a driver release "
                                 "like '580.95.05' (quote it)")
        generations = [p.nvswitch_generation for p in self.fabricmanager_prerequisites]
        if len(generations) != len(set(generations)):
            raise ValueError("fabricmanager_prerequisites: one entry per nvswitch_generation")
        for stack in self.stacks.values():
            self._check_streams(stack)
            if stack.cuda_version not in self.cuda_minimum_driver:
                raise ValueError(f"stack {stack.name}: cuda_version {stack.cuda_version} has "
                                 "no cuda_minimum_driver entry")
            if stack.driver.branch not in self.driver_branches:
                raise ValueError(f"stack {stack.name}: driver branch {stack.driver.branch} has no "
                                 "driver_branches entry (designation, end_of_life, source)")
            ubuntu = [os for os in stack.os_support if os in self.repositories.cuda
                      and self.repositories.cuda[os].package_family == "apt_ubuntu"]
            if ubuntu and stack.driver.version not in self.ubuntu_driver_packages:
                raise ValueError(f"stack {stack.name}: os_support {ubuntu[0]} needs the Ubuntu "
                                 f"revisions of driver {stack.driver.version}: add it to "
                                 "ubuntu_driver_packages with its source, or drop the OS")
            unknown_os = sorted(set(stack.os_support) - set(self.repositories.cuda))
            if unknown_os:
                raise ValueError(f"stack {stack.name}: os_support {unknown_os[0]} has no "
                                 "repositories.cuda entry")
            for index in range(len(stack.package_exceptions)):
                problem = exception_problem(stack, index, self.naming_facts)
                if problem:
                    raise ValueError(f"stack {stack.name}: package_exceptions[{index}]: "
                                     f"{problem}")
        return self

    def _check_streams(self, stack: Stack) -> None:
        """A stack of an OS with driver module streams names one per flavour, as
        nvidia-driver:<branch>-open / nvidia-driver:<branch>-dkms [DIG]."""
        modular = [os for os in stack.os_support
                   if os in self.repositories.cuda
                   and self.repositories.cuda[os].driver_module_streams]
        if not modular:
            return
        streams = stack.driver.dnf_module_streams or {}
        for flavor in stack.driver.module_flavors:
            want = dnf_module_stream(stack.driver.branch, flavor)
            got = streams.get(flavor)
            if got is None:
                raise ValueError(f"stack {stack.name}: driver.dnf_module_streams has no {flavor} "
                                 f"stream, but {modular[0]} installs the driver from module "
                                 f"streams; add {flavor}: \"{want}\"")
            if got != want:
                raise ValueError(f"stack {stack.name}: driver.dnf_module_streams.{flavor} is "
                                 f"{got!r}; the stream of branch {stack.driver.branch} is {want!r}")

    # -- facts the rules need ---------------------------------------------------------------

    @property
    def naming_facts(self) -> NamingFacts:
        """What package names depend on besides a stack's own versions."""
        return NamingFacts(
            fabricmanager_unsuffixed_from_branch=self.fabricmanager_unsuffixed_from_branch,
            ubuntu_driver_packages=tuple(
                (release, UbuntuRevision(r.nvidia_driver, r.cuda_drivers, r.fabricmanager))
                for release, r in sorted(self.ubuntu_driver_packages.items(),
                                         key=lambda item: version_tuple(item[0]))))

    def fabricmanager_prerequisite(self, nvswitch_generation: int | None,
                                   branch: int) -> FabricManagerPrerequisite | None:
        """What the fabric manager of driver ``branch`` needs on that NVSwitch generation."""
        return next((p for p in self.fabricmanager_prerequisites
                     if p.nvswitch_generation == nvswitch_generation
                     and branch >= p.from_branch), None)

    def minimum_driver(self, cuda: str) -> str:
        return self.cuda_minimum_driver[cuda]

    def max_cuda_for_driver(self, driver: str) -> str | None:
        """Newest CUDA X.Y whose minimum driver ``driver`` meets (None: older than all)."""
        fits = [cuda for cuda, minimum in self.cuda_minimum_driver.items()
                if version_tuple(driver) >= version_tuple(minimum)]
        return max(fits, key=cuda_key) if fits else None

    def stacks_by_cuda(self) -> list[Stack]:
        return sorted(self.stacks.values(), key=lambda s: cuda_key(s.cuda_version))

    def stack_names(self) -> str:
        """The stacks, oldest CUDA first, for "choose one of" hints."""
        return ", ".join(s.name for s in self.stacks_by_cuda())

    def cudnn_majors(self, cudnn: str) -> list[int]:
        """The CUDA majors cuDNN ``cudnn`` (9.x.y[.z]) is built for."""
        release = version_tuple(cudnn)[:3]
        return sorted(b.cuda_major for b in self.cudnn_builds
                      if version_tuple(b.first) <= release
                      and (b.last is None or release <= version_tuple(b.last)))


def dnf_module_stream(branch: int, flavor: str) -> str:
    """The dnf module stream of a driver branch and flavour on RHEL 8/9 [DIG]."""
    return f"nvidia-driver:{branch}-{'open' if flavor == 'open' else 'dkms'}"


def precompiled_stream(branch: int) -> str:
    """The precompiled dnf module stream of a driver branch on RHEL 8/9: the branch number
    alone (`dnf module install nvidia-driver:XXX`), beside the XXX-dkms and XXX-open streams
    [PCK]."""
    return f"nvidia-driver:{branch}"


# What a site's stacks.yml may hold (provisioner/site.py): its own stacks, the lifecycle of their
# driver branches, the Ubuntu revisions of their driver releases, and the site's default.
SITE_SECTIONS = ("stacks", "driver_branches", "ubuntu_driver_packages")
SITE_KEYS = frozenset(("schema_version", "default_stack", *SITE_SECTIONS))


def load_matrix(path: Path | None = None) -> StackMatrix:
    """The stack matrix of ``path``, validated once here; without a path, the packaged
    stacks.yml with the active site's stacks added, validated as one."""
    built_in = path or STACKS_FILE
    data = read_yaml_mapping(built_in)
    site_file = site.file(site.STACKS) if path is None else None
    origin: dict[str, dict[str, str]] = {}
    if site_file is not None:
        data, origin = _with_site(data, site_file)
    try:
        return StackMatrix.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = site.error_file(tuple(first["loc"]), str(first["msg"]), origin, built_in)
        raise InputError(validation_error_line(where, exc)) from exc


def stack_sources() -> dict[str, str]:
    """Where each stack of load_matrix() came from: site.BUILT_IN or the site file."""
    stacks = read_yaml_mapping(STACKS_FILE).get("stacks") or {}
    site_file = site.file(site.STACKS)
    if site_file is None:
        return dict.fromkeys((str(name) for name in stacks), site.BUILT_IN)
    extra = read_yaml_mapping(site_file).get("stacks") or {}
    return site.merge_entries("stacks", stacks, extra, site_file)[1]


def _with_site(data: dict[str, Any], site_file: Path,
               ) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """The built-in data with the site file's sections merged in, and each entry's origin."""
    extra = read_yaml_mapping(site_file)
    unknown = sorted(set(extra) - SITE_KEYS)
    if unknown:
        raise InputError(f"{site_file}: {unknown[0]}: a site's stacks.yml holds only "
                         f"{', '.join(sorted(SITE_KEYS))}")
    if extra.get("schema_version") != 1:
        raise InputError(f"{site_file}: schema_version: expected 1, found "
                         f"{extra.get('schema_version')!r}")
    merged = dict(data)
    origin: dict[str, dict[str, str]] = {}
    for section in SITE_SECTIONS:
        if section in extra:
            merged[section], origin[section] = site.merge_entries(
                section, data.get(section) or {}, extra[section], site_file)
    if "default_stack" in extra:
        merged["default_stack"] = extra["default_stack"]
    return merged, origin
