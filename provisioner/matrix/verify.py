"""``provisioner stacks verify``: every pin of the matrix, checked against a repository's own
index (matrix/index.py): present, missing, or present with a newer release of the same branch
beside it. Pure apart from reading the index; nothing here touches a host, prints or exits.

A repository carries some components, not all (NVIDIA's CUDA repository has the driver, the
toolkit, cuDNN, NCCL, DCGM and the fabric manager; the container toolkit lives in its own): a
component is checked where the index carries any package name that component uses in the
matrix, and listed as not carried otherwise. An index that carries none of them is refused
(the wrong repository, or the wrong --os)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from provisioner.errors import InputError
from provisioner.matrix.index import PackageIndex, newer
from provisioner.matrix.packages import OS_NAMED, every_name, stack_pins
from provisioner.matrix.schema import Stack, StackMatrix, dnf_module_stream
from provisioner.matrix.versions import COMPONENTS

Status = Literal["present", "missing", "newer"]


@dataclass(frozen=True)
class PinCheck:
    """One pin of one stack, as the index has it."""

    stack: str
    component: str
    package: str
    version: str
    status: Status
    # newer: the newest release of the same branch; missing: what the index has instead.
    detail: str = ""

    def line(self, os_dir: str) -> str:
        where = f"stack {self.stack} ({os_dir}): {self.component}: {self.package} {self.version}"
        if self.status == "missing":
            return f"MISSING {where} is not in the index{self.detail}"
        return f"newer   {where}: {self.detail}"


@dataclass
class Verification:
    source: str
    os_dir: str
    checks: list[PinCheck] = field(default_factory=list)
    # Components the index carries no package of (checked against another repository).
    not_carried: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[PinCheck]:
        return [c for c in self.checks if c.status == "missing"]

    def summary(self) -> list[dict[str, Any]]:
        """One row per stack: pins checked, present, missing, with a newer release."""
        rows: dict[str, dict[str, Any]] = {}
        for c in self.checks:
            row = rows.setdefault(c.stack, {"stack": c.stack, "pins": 0, "present": 0,
                                            "missing": 0, "newer": 0})
            row["pins"] += 1
            row["present" if c.status != "missing" else "missing"] += 1
            if c.status == "newer":
                row["newer"] += 1
        return list(rows.values())

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.source, "os": self.os_dir, "ok": not self.missing,
                "summary": self.summary(), "not_carried": list(self.not_carried),
                "checks": [asdict(c) for c in self.checks]}


def infer_os(matrix: StackMatrix, source: str) -> str | None:
    """The OS directory a CUDA repository's path names (``.../ubuntu2404/x86_64``), if any."""
    parts = re.split(r"[/\\]+", source.rstrip("/"))
    found = [p for p in parts if p in matrix.repositories.cuda]
    return found[-1] if found else None


def verify(matrix: StackMatrix, index: PackageIndex, os_dir: str,
           stack_name: str | None = None) -> Verification:
    """Every pin of every stack of ``os_dir`` (or of ``stack_name`` alone) against ``index``."""
    repo = matrix.repositories.cuda.get(os_dir)
    if repo is None:
        raise InputError(f"--os {os_dir} is not an OS of stacks.yml; choose one of "
                         f"{', '.join(sorted(matrix.repositories.cuda))}")
    stacks = _stacks(matrix, os_dir, stack_name)
    family = repo.package_family
    other = "dnf" if family == "dnf" else "apt"
    if (index.kind == "dnf") != (family == "dnf"):
        article = "an" if index.kind == "apt" else "a"
        raise InputError(f"index {index.source} is {article} {index.kind} repository but {os_dir} "
                         f"installs with {'dnf' if family == 'dnf' else 'apt'}; give the "
                         f"{os_dir} repository's index or the right --os")
    result = Verification(source=index.source, os_dir=os_dir)
    carried = [c for c in COMPONENTS
               if any(n in index.versions
                      for n in every_name(matrix, c, family if c in OS_NAMED else other))]
    result.not_carried = [c for c in COMPONENTS if c not in carried]
    if not carried:
        raise InputError(f"index {index.source} carries none of the packages of the stacks of "
                         f"{os_dir}; is it that OS's CUDA or container toolkit repository?")
    for stack in stacks:
        for component in carried:
            fam = family if component in OS_NAMED else other
            flavors = stack.driver.module_flavors if component == "driver" else (
                stack.driver.default_module_flavor,)
            seen: set[tuple[str, str]] = set()
            for flavor in flavors:
                for name, version in stack_pins(stack, matrix.naming_facts, component, fam,
                                                flavor):
                    if (name, version) in seen:
                        continue
                    seen.add((name, version))
                    result.checks.append(_check(index, stack, component, name, version))
            if component == "driver" and repo.driver_module_streams:
                result.checks.extend(_check_streams(index, matrix, stack, fam))
    return result


def _stacks(matrix: StackMatrix, os_dir: str, stack_name: str | None) -> list[Stack]:
    if stack_name is None:
        return [s for s in matrix.stacks_by_cuda() if os_dir in s.os_support]
    stack = matrix.stacks.get(stack_name)
    if stack is None:
        raise InputError(f"--stack {stack_name} is not a known stack; choose one of "
                         f"{matrix.stack_names()}")
    if os_dir not in stack.os_support:
        raise InputError(f"stack {stack_name} does not claim {os_dir} (os_support: "
                         f"{', '.join(stack.os_support)}); nothing of it to check there")
    return [stack]


def _same_branch(component: str, pinned: str, other: str) -> bool:
    """Whether ``other`` is a release of the pin's branch: the driver branch for the driver and
    the fabric manager, the CUDA build for NCCL (+cudaX.Y); any release of the same package
    otherwise (its name already carries the CUDA major or minor)."""
    if component in ("driver", "fabricmanager"):
        return _upstream_branch(pinned) == _upstream_branch(other)
    if component == "nccl":
        return pinned.rpartition("+")[2] == other.rpartition("+")[2]
    return True


def _upstream_branch(version: str) -> int | None:
    match = re.match(r"^(?:\d+:)?(\d{3})\.", version)
    return int(match.group(1)) if match else None


def _check(index: PackageIndex, stack: Stack, component: str, name: str,
           version: str) -> PinCheck:
    releases = index.releases(name)
    if version not in releases:
        near = [v for v in releases if _same_branch(component, version, v)][-3:]
        detail = f" (it has {', '.join(near)})" if near else (
            " (no release of that package at all)" if not releases else
            f" (no release of that branch; newest {releases[-1]})")
        return PinCheck(stack.name, component, name, version, "missing", detail)
    later = [v for v in releases if _same_branch(component, version, v)
             and newer(index.kind, v, version)]
    if later:
        return PinCheck(stack.name, component, name, version, "newer",
                        f"{later[-1]} is newer")
    return PinCheck(stack.name, component, name, version, "present")


def _check_streams(index: PackageIndex, matrix: StackMatrix, stack: Stack,
                   family: str) -> Iterable[PinCheck]:
    """RHEL 8/9 install the driver from a module stream: it must exist and list the pins."""
    for flavor in stack.driver.module_flavors:
        stream = dnf_module_stream(stack.driver.branch, flavor)
        if stream not in index.streams:
            same = sorted(s for s in index.streams if f":{stack.driver.branch}-" in s)
            why = (" (the index has no module metadata)" if not index.has_module_metadata
                   else f" (streams of R{stack.driver.branch}: {', '.join(same) or 'none'})")
            yield PinCheck(stack.name, "driver", f"module stream {stream}", "", "missing", why)
            continue
        for name, version in stack_pins(stack, matrix.naming_facts, "driver", family, flavor):
            if not index.stream_has(stream, name, version):
                yield PinCheck(stack.name, "driver", f"{name} in stream {stream}", version,
                               "missing", "")


