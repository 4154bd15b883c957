"""Controller-side judgement of what the roles measured (``<role>_report`` facts).

Each stack role's verify step reads the installed state from the node's own tools and files
(nvidia-smi, nvcc, version.json, nccl.h, the cuDNN header, nvidia-ctk, dcgmi, the package
database) and publishes it before it checks it. Here every ``stack:*`` check compares that
measured value with the value the plan decided for the host, and ``nccl_consistent`` compares
the measured NCCL across the GPU nodes. A value a role did not publish is a failure when the
stack phase completed (the role must publish), and a skip when the phase stopped early (the
phase failure already fails the run and says why).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.paths import enable_module_utils
from provisioner.plan import ClusterPlan, HostPlan
from provisioner.report import Check


def _version_policy() -> Any:
    """The version policy the roles' checks apply too (their upstream_version and
    version_first_three filters): one rule, in the collection's module_utils."""
    enable_module_utils()
    return importlib.import_module("gpucluster.version_policy")


def upstream(version: str) -> str:
    """A package version as the software reports it ('2.21.5-1+cuda12.4' -> '2.21.5')."""
    return str(_version_policy().upstream(version))


def first_three(version: str) -> str:
    """MAJOR.MINOR.PATCH of that ('9.1.0.70' -> '9.1.0'), as the cuDNN header carries it."""
    return str(_version_policy().first_three(version))

Section = Mapping[str, Any]


def _same(version: str) -> str:
    return version


@dataclass(frozen=True)
class Measurement:
    """One stack check: the role section and key that hold the measured value, the plan's
    field (a ``ResolvedStack`` attribute) and how it is brought to the form the node reports,
    what produced the measurement, and the plan's flag that makes the check apply."""

    check: str
    section: str
    key: str
    planned_field: str
    form: Callable[[str], str]
    source: str
    only_if: str | None = None

    def planned(self, stack: Any) -> str:
        return self.form(str(getattr(stack, self.planned_field)))

    def applies(self, stack: Any) -> bool:
        return self.only_if is None or bool(getattr(stack, self.only_if))


# Comparable forms (what each tool can say about the plan's version):
# - nvidia-smi and /sys/module/nvidia/version print the driver version as planned (580.95.05).
# - nvcc prints "release X.Y, VX.Y.<build>": the release is the plan's cuda_version; the V number
#   is nvcc's own build (12.8.93 in CUDA 12.8.1), not the toolkit update, so the update is read
#   from <prefix>/version.json ("cuda": {"version": "12.8.1"}) and compared with
#   cuda_toolkit_version.
# - nccl.h and libnccl.so.X.Y.Z carry the upstream version without the package revision
#   ("2.21.5" for the pin "2.21.5-1+cuda12.4").
# - the cuDNN header carries MAJOR.MINOR.PATCHLEVEL: the plan's 9.1.0.70 is compared as 9.1.0.
# - nvidia-ctk --version and dcgmi --version print the upstream release (1.17.8, 3.3.6).
# - fabric manager: the installed package's upstream version (the daemon has no cheap query).
MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement("driver", "nvidia_driver", "version", "driver_version", _same,
                "nvidia-smi"),
    Measurement("fabricmanager", "nvidia_fabricmanager", "version", "fabricmanager_version",
                upstream, "the installed fabric manager package",
                only_if="fabricmanager_enabled"),
    Measurement("nvcc_release", "cuda_toolkit", "release", "cuda_version", _same,
                "nvcc --version (release)"),
    Measurement("cuda_toolkit", "cuda_toolkit", "version", "cuda_toolkit_version", _same,
                "the toolkit's version.json"),
    Measurement("cudnn", "cudnn", "version", "cudnn_version", first_three,
                "the cuDNN version header"),
    Measurement("nccl", "nccl", "version", "nccl_version", upstream, "nccl.h"),
    Measurement("container_toolkit", "nvidia_container_toolkit", "version",
                "container_toolkit_version", upstream, "nvidia-ctk --version"),
    Measurement("dcgm", "nvidia_dcgm", "version", "dcgm_version", upstream,
                "dcgmi --version"),
)


def _measured(section: Section | None, key: str) -> str:
    value = (section or {}).get(key)
    return "" if value is None else str(value).strip()


def _not_measured(host: str, check: str, section: str, source: str, planned: str,
                  completed: bool) -> Check:
    if completed:
        return Check(host, "stack", check, "fail", None, planned,
                     f"the {section} role published no measurement of {source} "
                     "(was its verify step skipped?)")
    return Check(host, "stack", check, "skip", None, planned,
                 f"not measured: the stack phase stopped before the {section} role "
                 "verified this host (see the phase failures)")


def _compare(host: str, m: Measurement, measured: str, planned: str) -> Check:
    if measured == planned:
        return Check(host, "stack", m.check, "pass", measured, planned,
                     f"{m.source} says {measured}, as planned")
    return Check(host, "stack", m.check, "fail", measured, planned,
                 f"{m.source} says {measured}, the plan says {planned}")


def _driver_loaded(host: str, drv: Section | None, planned: str, completed: bool) -> Check:
    if not drv:
        return _not_measured(host, "driver_loaded", "nvidia_driver", "the loaded kernel module",
                             planned, completed)
    loaded = _measured(drv, "loaded")
    if str(drv.get("reboot_required")).lower() == "true":
        refused = [str(c.get("name")) for c in drv.get("signature_checks") or []
                   if isinstance(c, Mapping) and c.get("status") == "fail"]
        if refused and str(drv.get("secure_boot")) == "enabled":
            # A reboot alone does not help: the kernel refuses the module again.
            return Check(host, "stack", "driver_loaded", "fail", loaded or "none", planned,
                         "installed driver is not loaded, and with Secure Boot on the kernel "
                         "loads it only once its modules are signed by an enrolled key (see "
                         f"{', '.join(refused)}); reboot after that")
        return Check(host, "stack", "driver_loaded", "fail", loaded or "none", planned,
                     "installed driver is not loaded: reboot the node "
                     "(rerun `provisioner up --reboot` to let the provisioner do it)")
    if loaded == planned:
        return Check(host, "stack", "driver_loaded", "pass", loaded, planned,
                     "loaded kernel module is the planned driver")
    return Check(host, "stack", "driver_loaded", "fail", loaded or None, planned,
                 f"loaded kernel module is {loaded or 'unreadable'}, the plan says {planned}")


def _driver_kernels(host: str, drv: Section | None, planned: str,
                    completed: bool) -> Check | None:
    """The driver's DKMS module for the running kernel and every newer installed one (the role
    measured ``dkms status``), or its precompiled package (module source precompiled: the role
    measured ``rpm -q``): a kernel a reboot may bring up without it is a node that comes back
    without a driver. An older kernel without it (a manual fallback) is a warning."""
    precompiled = drv is not None and str(drv.get("module_source")) == "precompiled"
    made, tool = ("installed", "rpm -q") if precompiled else ("built", "dkms status")
    want = f"{planned} {made} for the running kernel and every newer one"
    if not drv:
        return _not_measured(host, "driver_kernels", "nvidia_driver", "dkms status", want,
                             completed)
    if str(drv.get("kernels_checked")).lower() == "false":
        return Check(host, "stack", "driver_kernels", "skip", None, want,
                     "not checked: nvidia_driver_dkms_check is off")
    kernels = drv.get("kernels")
    if not isinstance(kernels, Mapping) or not kernels:
        return _not_measured(host, "driver_kernels", "nvidia_driver", tool, want,
                             completed)
    states = {str(k): str(v) for k, v in sorted(kernels.items())}
    required = drv.get("kernels_required")
    must = ({str(k) for k in required} if isinstance(required, (list, tuple)) and required
            else set(states))
    measured = ", ".join(f"{k}: {v}" for k, v in states.items())
    bad = [k for k, v in states.items() if v != "installed" and k in must]
    old = [k for k, v in states.items() if v != "installed" and k not in must]
    if bad:
        return Check(host, "stack", "driver_kernels", "fail", measured, want,
                     f"the driver's module is not {made} for kernel {', '.join(bad)}: a reboot "
                     "into it leaves the node without a GPU driver")
    if old:
        return Check(host, "stack", "driver_kernels", "warn", measured, want,
                     f"older kernel {', '.join(old)} has no driver module: booting it by hand "
                     "leaves the node without a GPU driver")
    detail = (f"the driver's precompiled package is installed for all {len(states)} kernel(s) "
              "a reboot may bring up" if precompiled else
              f"dkms has the driver's module for all {len(states)} installed kernel(s)")
    return Check(host, "stack", "driver_kernels", "pass", measured, want, detail)


def _kernel_hold(host: str, drv: Section | None) -> Check | None:
    """nvidia_driver_hold_kernel: every kernel package the role meant to hold is held (apt's
    showhold, dnf's versionlock list). No check when the option is off."""
    if not drv or str(drv.get("kernel_hold")).lower() != "true":
        return None
    wanted = [str(p) for p in drv.get("kernel_hold_wanted") or []]
    held = {str(p) for p in drv.get("kernel_held") or []}
    planned = "held: " + (", ".join(wanted) or "the kernel's packages")
    if not wanted:
        return Check(host, "stack", "kernel_held", "fail", "no kernel package found", planned,
                     "nvidia_driver_hold_kernel is on, but the role found no installed kernel "
                     "package to hold")
    missing = [p for p in wanted if p not in held]
    measured = ", ".join(p for p in wanted if p in held) or "none held"
    if missing:
        return Check(host, "stack", "kernel_held", "fail", measured, planned,
                     f"{', '.join(missing)} not held: an upgrade can bring in another kernel")
    return Check(host, "stack", "kernel_held", "pass", measured, planned,
                 f"the kernel is held ({len(wanted)} package(s))")


def _module_signatures(host: str, drv: Section | None) -> list[Check]:
    """The role's module_signatures:<kernel> checks (module_utils modsign: with Secure Boot on,
    every NVIDIA module of the kernel signed by a key enrolled in the MOK list), as stack
    checks; none when the role published none (no NVIDIA module, or a role before them)."""
    out = []
    for raw in (drv or {}).get("signature_checks") or []:
        if not isinstance(raw, Mapping) or not str(raw.get("name", "")):
            continue
        measured = raw.get("measured")
        if isinstance(measured, Mapping):
            measured = ", ".join(f"{m}: {s or 'unsigned'}" for m, s in measured.items())
        out.append(Check(host, "stack", str(raw["name"]), str(raw.get("status", "fail")),
                         measured, raw.get("expected"), str(raw.get("detail", ""))))
    return out


def _nccl_library(host: str, nccl: Section | None) -> Check | None:
    """libnccl.so.X.Y.Z is what programs load; when the role could read it, it must agree with
    nccl.h (a header from one package and a library from another is a broken install)."""
    header, library = _measured(nccl, "version"), _measured(nccl, "library")
    if not header or not library or header == library:
        return None
    return Check(host, "stack", "nccl_library", "fail", library, header,
                 f"libnccl.so is {library} but nccl.h says {header}: the library and its "
                 "headers come from different packages")


def _cdi(host: str, hp: HostPlan, ctk: Section | None) -> Check | None:
    if not ctk:
        return None
    n = len([d for d in ctk.get("cdi_devices", []) if not str(d).endswith("=all")])
    expected = hp.profile.gpu_count if hp.profile else None
    ok = expected is None or n == expected
    return Check(host, "stack", "cdi_devices", "pass" if ok else "fail", n, expected,
                 "CDI spec lists every GPU" if ok else "the CDI spec does not list every GPU")


# What the fabric manager role reports per kernel module that is acceptable: loaded, or (in a
# container, whose kernel is its host's) listed for loading at boot.
MODULE_STATES_OK = ("loaded", "boot-only (container)")


def _nvlsm(host: str, stack: Any, fm: Section | None, completed: bool) -> Check | None:
    """Fourth-generation NVSwitch systems: the fabric manager does not start without the NVLink
    subnet manager's packages and its kernel modules (ib_umad)."""
    modules = tuple(getattr(stack, "fabricmanager_kernel_modules", ()) or ())
    if not getattr(stack, "fabricmanager_packages", None) and not modules:
        return None
    planned = ", ".join(["nvlsm packages installed", *(f"{m} loaded" for m in modules)])
    if not fm or "nvlsm_missing" not in fm:
        return _not_measured(host, "fabricmanager_nvlsm", "nvidia_fabricmanager",
                             "the NVLink subnet manager", planned, completed)
    missing = [str(p) for p in fm.get("nvlsm_missing") or []]
    states = {str(k): str(v) for k, v in (fm.get("kernel_modules") or {}).items()}
    bad = [f"{m} {states.get(m, 'not measured')}" for m in modules
           if states.get(m) not in MODULE_STATES_OK]
    problems = ([f"{', '.join(missing)} not installed"] if missing else []) + bad
    measured = "; ".join(problems) or ", ".join(
        ["nvlsm packages installed", *(f"{m} {states[m]}" for m in modules)])
    if problems:
        return Check(host, "stack", "fabricmanager_nvlsm", "fail", measured, planned,
                     f"the fabric manager of this NVSwitch generation needs the NVLink subnet "
                     f"manager: {measured}")
    return Check(host, "stack", "fabricmanager_nvlsm", "pass", measured, planned,
                 "NVLink subnet manager installed and its kernel modules in place")


def _host_checks(host: str, hp: HostPlan, stack: Any, rep: Mapping[str, Section],
                 completed: bool) -> list[Check]:
    drv = rep.get("nvidia_driver")
    checks = [_driver_loaded(host, drv, str(stack.driver_version), completed)]
    reboot_pending = bool(drv) and str((drv or {}).get("reboot_required")).lower() == "true"
    for m in MEASUREMENTS:
        if not m.applies(stack):
            continue
        planned = m.planned(stack)
        if m.check == "driver" and reboot_pending:
            checks.append(Check(host, "stack", "driver", "skip", None, planned,
                                "not measured: nvidia-smi cannot talk to a driver that is "
                                "installed but not loaded (see driver_loaded)"))
            continue
        measured = _measured(rep.get(m.section), m.key)
        checks.append(_compare(host, m, measured, planned) if measured
                      else _not_measured(host, m.check, m.section, m.source, planned, completed))
    extra = [_driver_kernels(host, drv, str(stack.driver_version), completed),
             _kernel_hold(host, drv),
             _nccl_library(host, rep.get("nccl")),
             _nvlsm(host, stack, rep.get("nvidia_fabricmanager"), completed),
             _cdi(host, hp, rep.get("nvidia_container_toolkit"))]
    checks.extend(c for c in extra if c is not None)
    checks.extend(_module_signatures(host, drv))
    return checks


def _nccl_consistent(measured: Mapping[str, str]) -> list[Check]:
    """The NCCL each node really has (its library when readable, else nccl.h) must be one
    version cluster-wide: collectives between different NCCL releases can hang or crash."""
    distinct = sorted(set(measured.values()))
    status = "pass" if len(distinct) == 1 else "fail"
    detail = ("same NCCL on every GPU node" if status == "pass" else
              f"NCCL differs across the cluster ({', '.join(distinct)}): collectives "
              "between these nodes can hang or crash")
    return [Check(host, "stack", "nccl_consistent", status, version,
                  distinct[0] if status == "pass" else "one version", detail)
            for host, version in sorted(measured.items())]


def stack_checks(plan: ClusterPlan, reports: Mapping[str, Mapping[str, Any]], *,
                 completed: bool = True,
                 hosts_run: Collection[str] | None = None) -> list[Check]:
    """Judge the stack phase: measured (``reports``) against planned (``plan``).

    ``completed``: the stack phase finished on every host (a missing measurement is then a
    failure, otherwise a skip). ``hosts_run``: the hosts the phase ran on (``--limit``);
    ``None`` means every host of the plan.
    """
    checks: list[Check] = []
    nccl: dict[str, str] = {}
    for host, hp in sorted(plan.hosts.items()):
        if hp.kind != "gpu" or hp.stack is None:
            continue
        if hosts_run is not None and host not in hosts_run:
            continue
        rep = reports.get(host, {})
        checks.extend(_host_checks(host, hp, hp.stack, rep, completed))
        section = rep.get("nccl")
        runtime = _measured(section, "library") or _measured(section, "version")
        if runtime:
            nccl[host] = runtime
    if nccl:
        checks.extend(_nccl_consistent(nccl))
    return checks
