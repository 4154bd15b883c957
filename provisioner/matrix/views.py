"""The matrix as the CLI shows it: ``provisioner stacks list`` rows and ``stacks show NAME``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provisioner.errors import InputError
from provisioner.matrix.lifecycle import end_date
from provisioner.matrix.packages import stack_pins
from provisioner.matrix.resolve import resolve_stack
from provisioner.matrix.schema import Stack, StackMatrix
from provisioner.matrix.versions import COMPONENTS, FAMILIES, cuda_key
from provisioner.profiles import Profile


def _flavors_text(stack: Stack) -> str:
    return ", ".join(f"{f} (default)" if f == stack.driver.default_module_flavor else f
                     for f in stack.driver.module_flavors)


def _end_text(matrix: StackMatrix, branch: int) -> str:
    end = end_date(matrix.driver_branches[branch])
    return end.isoformat() if end else "not published"


def stack_rows(matrix: StackMatrix) -> list[dict[str, str]]:
    """One row per stack, oldest CUDA first, for ``provisioner stacks list``."""
    return [{
        "stack": s.name,
        "default": "yes" if s.name == matrix.default_stack else "",
        "driver": f"R{s.driver.branch} {s.driver.version}",
        "branch": matrix.driver_branches[s.driver.branch].designation,
        "end_of_life": _end_text(matrix, s.driver.branch),
        "module_flavors": _flavors_text(s),
        "cuda": s.cuda_toolkit_version,
        "cudnn": s.cudnn.version,
        "nccl": s.nccl.version,
        "container_toolkit": s.container_toolkit.version,
        "fabricmanager": s.fabricmanager.version,
        "dcgm": s.dcgm.version,
        "os": ", ".join(s.os_support),
    } for s in matrix.stacks_by_cuda()]


def _packages(matrix: StackMatrix, stack: Stack) -> dict[str, dict[str, Any]]:
    def pins(component: str, family: str, flavor: str) -> list[str]:
        return [f"{name} {version}" for name, version in stack_pins(
            stack, matrix.naming_facts, component, family, flavor)]

    flavor = stack.driver.default_module_flavor
    return {family: {
        "driver": {f: pins("driver", family, f) for f in stack.driver.module_flavors},
        **{component: pins(component, family, flavor) for component in COMPONENTS[1:]},
    } for family in FAMILIES}


def _profile_verdicts(matrix: StackMatrix, stack: Stack,
                      profiles: Mapping[str, Profile]) -> dict[str, dict[str, Any]]:
    """Per hardware profile: its GPU, the driver minimum it states, and whether this stack as
    shipped passes every rule on it ("ok") or why not (the plan's refusal, host-free)."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(profiles):
        profile = profiles[name]
        arch = matrix.architectures.get(profile.architecture)
        try:
            resolve_stack("-", {"gpu_stack": stack.name}, profile, matrix)
            verdict = "ok"
        except InputError as exc:
            verdict = str(exc).removeprefix("host -: ")
        out[name] = {
            "gpu": f"{profile.gpu_model} ({', '.join(profile.pci_device_ids)})",
            "min_driver": profile.min_driver
            or (f"R{arch.min_driver_branch}" if arch is not None else None),
            "verdict": verdict,
        }
    return out


def stack_detail(matrix: StackMatrix, name: str,
                 profiles: Mapping[str, Profile] | None = None) -> dict[str, Any]:
    """Everything about one stack, for ``provisioner stacks show NAME`` (with ``profiles``: also
    what each hardware profile's GPU needs and whether the stack passes on it)."""
    stack = matrix.stacks.get(name)
    if stack is None:
        raise InputError(f"stack {name} is not known; choose one of {matrix.stack_names()}")
    supported = sorted(a for a, spec in matrix.architectures.items()
                       if stack.driver.branch >= spec.min_driver_branch
                       and (spec.max_cuda_version is None
                            or cuda_key(stack.cuda_version) <= cuda_key(spec.max_cuda_version)))
    prerequisites = [{"nvswitch_generation": p.nvswitch_generation,
                      "packages": {f: list(names) for f, names in p.packages.items()},
                      "kernel_modules": list(p.kernel_modules)}
                     for p in matrix.fabricmanager_prerequisites
                     if stack.driver.branch >= p.from_branch]
    detail: dict[str, Any] = {
        "stack": stack.name,
        "default": stack.name == matrix.default_stack,
        "cuda_version": stack.cuda_version,
        "cuda_toolkit_version": stack.cuda_toolkit_version,
        "cuda_minimum_driver": matrix.minimum_driver(stack.cuda_version),
        "driver_branch": stack.driver.branch,
        "driver_version": stack.driver.version,
        "driver_branch_designation": matrix.driver_branches[stack.driver.branch].designation,
        "driver_branch_end_of_life": _end_text(matrix, stack.driver.branch),
        "driver_branch_source": matrix.driver_branches[stack.driver.branch].source,
        "module_flavors": list(stack.driver.module_flavors),
        "default_module_flavor": stack.driver.default_module_flavor,
        "dnf_module_streams": dict(stack.driver.dnf_module_streams or {}),
        "cudnn_version": stack.cudnn.version,
        "nccl_version": stack.nccl.version,
        "container_toolkit_version": stack.container_toolkit.version,
        "fabricmanager_version": stack.fabricmanager.version,
        "fabricmanager_prerequisites": prerequisites,
        "dcgm_version": stack.dcgm.version,
        "os_support": list(stack.os_support),
        "architectures": supported,
        "packages": _packages(matrix, stack),
    }
    if profiles is not None:
        detail["gpu_profiles"] = _profile_verdicts(matrix, stack, profiles)
    return detail
