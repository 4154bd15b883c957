"""The stack matrix file (provisioner/data/stacks.yml): its schema, validated once by
``load_matrix``. Pure: nothing here touches a host, prints or exits."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from provisioner.errors import InputError
from provisioner.matrix.packages import exception_problem
from provisioner.matrix.versions import (
    CTK_RE,
    CUDA_RE,
    CUDNN_RE,
    DCGM_RE,
    DRIVER_RE,
    NCCL_RE,
    STACK_NAME_RE,
    TOOLKIT_RE,
    Component,
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
        if self.name != f"cuda-{self.cuda_version}":
            raise ValueError(f"a stack of CUDA {self.cuda_version} must be named "
                             f"cuda-{self.cuda_version}")
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
    fingerprint: str | None = Field(default=None, pattern=r"^[0-9A-F]{40}$")


class CudaRepository(RepositoryKey):
    package_family: PackageFamily


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
        for stack in self.stacks.values():
            if stack.cuda_version not in self.cuda_minimum_driver:
                raise ValueError(f"stack {stack.name}: cuda_version {stack.cuda_version} has "
                                 "no cuda_minimum_driver entry")
            unknown_os = sorted(set(stack.os_support) - set(self.repositories.cuda))
            if unknown_os:
                raise ValueError(f"stack {stack.name}: os_support {unknown_os[0]} has no "
                                 "repositories.cuda entry")
            for index in range(len(stack.package_exceptions)):
                problem = exception_problem(stack, index,
                                            self.fabricmanager_unsuffixed_from_branch)
                if problem:
                    raise ValueError(f"stack {stack.name}: package_exceptions[{index}]: "
                                     f"{problem}")
        return self

    # -- facts the rules need ---------------------------------------------------------------

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


def load_matrix(path: Path | None = None) -> StackMatrix:
    """The stack matrix of ``path`` (default: the packaged stacks.yml), validated once here."""
    path = path or STACKS_FILE
    data = read_yaml_mapping(path)
    try:
        return StackMatrix.model_validate(data)
    except ValidationError as exc:
        raise InputError(validation_error_line(path, exc)) from exc
