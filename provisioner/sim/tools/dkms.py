"""SIMULATED dkms (gpu-cluster-provisioner): the Dynamic Kernel Module Support commands a driver
package and the roles use, on the simulated node's files.

Installed as ``/usr/sbin/dkms`` on every simulated node (the real one comes with the OS and is a
dependency of NVIDIA's ``*-dkms`` driver packages). It keeps the real tool's layout and words,
so what reads them cannot tell the difference:

- ``add``: a module's source ``/usr/src/<module>-<version>`` (with its ``dkms.conf``) enters the
  tree as ``/var/lib/dkms/<module>/<version>/source``;
- ``build``/``install`` for a kernel: needs that kernel's headers at ``/lib/modules/<k>/build``
  (the real tool compiles against them); the built module goes to
  ``/var/lib/dkms/<module>/<version>/<k>/<arch>/module/`` and, installed, to
  ``/lib/modules/<k>/updates/dkms/`` (nothing is compiled: the ``.ko`` is a text stand-in);
- ``autoinstall [-k K]``: every added module whose ``dkms.conf`` says ``AUTOINSTALL="yes"``,
  installed for K (default: the running kernel), as the kernel's install hook runs it;
- ``status``: one line per module, version and kernel, as dkms 3 prints them
  (``nvidia/580.95.05, 6.1.0-18-amd64, x86_64: installed``);
- ``remove <module>/<version> --all`` (or ``-k K``), as a package's prerm runs it.

Modules and versions are given as ``-m M -v V`` or ``M/V``, as the real tool accepts them.

The version each OS ships is imitated (``dkms --version``, and what it exits with when a
kernel's headers are missing): dell/dkms exits 21 for missing headers from v3.1.5 (commit
1ec99c0, 2025-01-03) and 1 before. Debian 12 ships 3.0.10, Ubuntu 22.04 2.8.7 (its message
names no path), Ubuntu 24.04 3.0.11, EPEL 9 3.3.0 (21, presumed from the upstream change).
"""

from __future__ import annotations

import os
import re
import shutil
import sys

from provisioner.sim.tools.node import read_text, sim_path

TREE = "/var/lib/dkms"
SOURCES = "/usr/src"
MODULES = "/lib/modules"
ARCH = "x86_64"


# (ID, VERSION_ID) of /etc/os-release -> the dkms version that OS ships. Rocky imitates RHEL 9
# with EPEL's dkms.
_SHIPPED = {("debian", "12"): "3.0.10", ("ubuntu", "22.04"): "2.8.7",
            ("ubuntu", "24.04"): "3.0.11", ("rocky", "9"): "3.3.0", ("rhel", "9"): "3.3.0"}
_MISSING_HEADERS_21_FROM = (3, 1, 5)


def shipped_version() -> str:
    """The dkms version of this node's OS (Debian 12's where the OS is not listed)."""
    fields: dict[str, str] = {}
    for line in (read_text("/etc/os-release") or "").splitlines():
        key, _, value = line.partition("=")
        fields[key.strip()] = value.strip().strip('"')
    major = fields.get("VERSION_ID", "").split(".")[0]
    os_id = fields.get("ID", "")
    for release in ((os_id, fields.get("VERSION_ID", "")), (os_id, major)):
        if release in _SHIPPED:
            return _SHIPPED[release]
    return "3.0.10"


def _headers_error(kernel: str) -> DkmsError:
    version = shipped_version()
    code = 21 if tuple(int(p) for p in version.split(".")) >= _MISSING_HEADERS_21_FROM else 1
    if version.startswith("2."):
        return DkmsError(f"Your kernel headers for kernel {kernel} cannot be found.\n"
                         f"Please install the linux-headers-{kernel} package,\n"
                         "or use the --kernelsourcedir option to tell DKMS where it's located",
                         code)
    return DkmsError(f"Your kernel headers for kernel {kernel} cannot be found at "
                     f"/lib/modules/{kernel}/build or /lib/modules/{kernel}/source.\n"
                     f"Please install the linux-headers-{kernel} package or use the "
                     "--kernelsourcedir option to tell DKMS where it's located.", code)


class DkmsError(Exception):
    """An error the real tool reports as ``Error! ...`` with a non-zero exit."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _node_dir(path: str) -> bool:
    """Whether node path ``path`` is a directory, an absolute symlink resolved on the node."""
    local = sim_path(path)
    if os.path.islink(local):
        target = os.readlink(local)
        local = sim_path(target) if target.startswith("/") else os.path.join(
            os.path.dirname(local), target)
    return os.path.isdir(local)


def _headers(kernel: str) -> bool:
    return any(_node_dir(f"{MODULES}/{kernel}/{d}") for d in ("build", "source"))


def _added() -> list[tuple[str, str]]:
    """(module, version) of every module in the tree, sorted."""
    out = []
    root = sim_path(TREE)
    for module in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        for version in sorted(os.listdir(os.path.join(root, module))):
            if os.path.lexists(os.path.join(root, module, version, "source")):
                out.append((module, version))
    return out


def _installed_ko(module: str, kernel: str) -> str:
    return sim_path(f"{MODULES}/{kernel}/updates/dkms/{module}.ko")


def _built_dir(module: str, version: str, kernel: str) -> str:
    return sim_path(f"{TREE}/{module}/{version}/{kernel}/{ARCH}")


def add(module: str, version: str) -> None:
    source = f"{SOURCES}/{module}-{version}"
    if not os.path.isfile(sim_path(f"{source}/dkms.conf")):
        raise DkmsError(f"Could not find module source directory.\nDirectory: {source} "
                        "does not exist.", 2)
    if (module, version) in _added():
        raise DkmsError(f"DKMS tree already contains: {module}/{version}\n"
                        "You cannot add the same module/version combo more than once.", 3)
    os.makedirs(sim_path(f"{TREE}/{module}/{version}"), exist_ok=True)
    os.symlink(source, sim_path(f"{TREE}/{module}/{version}/source"))
    print(f"Creating symlink /var/lib/dkms/{module}/{version}/source -> {source}")


def install(module: str, version: str, kernel: str) -> None:
    if (module, version) not in _added():
        raise DkmsError(f"The module/version combo: {module}/{version} is not located in the "
                        "DKMS tree.", 3)
    if not _headers(kernel):
        raise _headers_error(kernel)
    built = _built_dir(module, version, kernel)
    os.makedirs(os.path.join(built, "module"), exist_ok=True)
    text = f"SIMULATED {module} {version} for {kernel}\n"
    with open(os.path.join(built, "module", f"{module}.ko"), "w", encoding="utf-8") as fh:
        fh.write(text)
    target = _installed_ko(module, kernel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"Building module(s)... done.\nInstalling /lib/modules/{kernel}/updates/dkms/{module}.ko")


def _autoinstall_wanted(module: str, version: str) -> bool:
    path = sim_path(f"{SOURCES}/{module}-{version}/dkms.conf")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return False
    return re.search(r'^AUTOINSTALL="?yes"?\s*$', text, re.M | re.I) is not None


def autoinstall(kernel: str) -> None:
    for module, version in _added():
        if _autoinstall_wanted(module, version) and _state(module, version, kernel) != "installed":
            install(module, version, kernel)


def _state(module: str, version: str, kernel: str) -> str | None:
    if not os.path.isdir(_built_dir(module, version, kernel)):
        return None
    try:
        with open(_installed_ko(module, kernel), encoding="utf-8") as fh:
            mine = fh.read() == f"SIMULATED {module} {version} for {kernel}\n"
    except OSError:
        mine = False
    return "installed" if mine else "built"


def status(module: str | None, version: str | None, kernel: str | None) -> list[str]:
    lines = []
    for m, v in _added():
        if (module and m != module) or (version and v != version):
            continue
        tree = sim_path(f"{TREE}/{m}/{v}")
        kernels = sorted(k for k in os.listdir(tree) if k != "source"
                         and (kernel is None or k == kernel))
        states = [(k, _state(m, v, k)) for k in kernels]
        states = [(k, s) for k, s in states if s]
        if not states and kernel is None:
            lines.append(f"{m}/{v}: added")
        lines += [f"{m}/{v}, {k}, {ARCH}: {s}" for k, s in states]
    return lines


def remove(module: str, version: str, kernel: str | None) -> None:
    if (module, version) not in _added():
        raise DkmsError(f"The module/version combo: {module}/{version} is not located in the "
                        "DKMS tree.", 3)
    tree = sim_path(f"{TREE}/{module}/{version}")
    kernels = [k for k in os.listdir(tree) if k != "source" and (kernel is None or k == kernel)]
    for k in kernels:
        if _state(module, version, k) == "installed":
            os.remove(_installed_ko(module, k))
        shutil.rmtree(os.path.join(tree, k))
        print(f"Module {module}/{version} for kernel {k} ({ARCH}): removed.")
    if kernel is None:
        shutil.rmtree(tree)
        print(f"Deleting module {module}/{version} completely from the DKMS tree.")


def _parse(argv: list[str]) -> tuple[str, dict[str, str | bool]]:
    if not argv:
        raise DkmsError("no command given (add, build, install, autoinstall, status, remove)", 4)
    command, rest = argv[0], argv[1:]
    opts: dict[str, str | bool] = {}
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in ("-m", "-v", "-k") and i + 1 < len(rest):
            opts[arg[1]] = rest[i + 1]
            i += 2
            continue
        if arg == "--all":
            opts["all"] = True
        elif "/" in arg and not arg.startswith("-"):
            opts["m"], opts["v"] = arg.split("/", 1)
        elif not arg.startswith("-") and "m" not in opts:
            opts["m"] = arg
        i += 1
    return command, opts


def main(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-V"]):
        print(f"dkms-{shipped_version()}")
        return 0
    try:
        command, opts = _parse(argv)
        module, version, kernel = (str(opts[k]) if k in opts else None for k in "mvk")
        if command == "status":
            for line in status(module, version, kernel):
                print(line)
            return 0
        if command == "autoinstall":
            autoinstall(kernel or os.uname().release)
            return 0
        if module is None or version is None:
            raise DkmsError(f"{command}: a module and version are needed (-m M -v V or M/V)", 4)
        if command == "add":
            add(module, version)
        elif command in ("build", "install"):
            install(module, version, kernel or os.uname().release)
        elif command == "remove":
            if kernel is None and not opts.get("all"):
                raise DkmsError("remove: give -k KERNEL or --all", 4)
            remove(module, version, kernel)
        else:
            raise DkmsError(f"unknown command {command!r}", 4)
    except DkmsError as exc:
        sys.stderr.write(f"Error! {exc}\n")
        return exc.code
    return 0
