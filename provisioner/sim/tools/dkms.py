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
  ``/lib/modules/<k>/updates/dkms/``, one ``.ko`` per ``BUILT_MODULE_NAME[i]`` of its
  ``dkms.conf`` (the module's own name when it names none). Nothing is compiled: each ``.ko`` is
  a minimal ELF object whose ``.modinfo`` the node's real ``modinfo`` reads (``kmodule.py``),
  signed as the real tool signs it (below);
- ``autoinstall [-k K]``: every added module whose ``dkms.conf`` says ``AUTOINSTALL="yes"``,
  installed for K (default: the running kernel), as the kernel's install hook runs it;
- ``status``: one line per module, version and kernel, as dkms 3 prints them
  (``nvidia/580.95.05, 6.1.0-18-amd64, x86_64: installed``);
- ``remove <module>/<version> --all`` (or ``-k K``), as a package's prerm runs it.

Modules and versions are given as ``-m M -v V`` or ``M/V``, as the real tool accepts them.

Module signing follows the real tool's ``prepare_signing`` (dell/dkms, dkms.in): the stand-in
plays the kernel's ``sign-file`` too (the real one comes with the kernel headers: Debian's
linux-kbuild, ``/lib/modules/<k>/build/scripts/sign-file``), signing with the node's real
``openssl`` (``kmodule.sign``).

- dkms 3.0.11 and later (Ubuntu 24.04, EPEL 9) sign only when the kernel's config
  (``/lib/modules/<k>/build/.config``) has ``CONFIG_MODULE_SIG_HASH``, with that hash (dell/dkms
  @ c2b29f1, "dkms: skip module signing when hash is unknown", first in v3.0.11); 3.0.10
  (Debian 12) signs with that hash, or sha512 without a config (dell/dkms v3.0.10 @ 3f72c9b,
  dkms.in prepare_signing).
- Ubuntu: the key of shim-signed's update-secureboot-policy, ``/var/lib/shim-signed/mok/
  MOK.priv`` and ``MOK.der``; when either is missing the real tool makes them with
  update-secureboot-policy, which a node without shim-signed lacks, so nothing is signed
  ("Binary update-secureboot-policy not found, modules won't be signed"; dell/dkms @ 793fdab,
  dkms.in prepare_mok). Ubuntu 22.04's dkms 2.8.7 signs with kmodsign and the same two files,
  sha512 (dell/dkms v2.8.7 @ 5c5d557, dkms sign_build); here when both files exist.
- Every other OS (Debian, EL): ``/var/lib/dkms/mok.key`` and ``mok.pub``, a self-signed pair
  generated when either is missing (``openssl req -new -x509 -nodes -days 36500 -subj
  "/CN=DKMS module signing key" -newkey rsa:2048``, with ``-addext
  extendedKeyUsage=codeSigning`` from v3.1.8: dell/dkms v3.0.10 prepare_signing, @ 793fdab
  prepare_mok). So a Debian 12 node's modules are signed whether or not Secure Boot is on, as
  with the real tool.

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

from provisioner.sim.tools.kmodule import (
    SigningError,
    elf_module,
    generate_key,
    modinfo_strings,
    sign,
)
from provisioner.sim.tools.node import MODULE_FLAVOR_FILE, read_text, sim_path

TREE = "/var/lib/dkms"
SOURCES = "/usr/src"
MODULES = "/lib/modules"
# The machine dkms builds for, as `uname -m` names it (x86_64; aarch64 on an arm64 node, where
# qemu-user answers uname as the emulated machine).
ARCH = os.uname().machine


# (ID, VERSION_ID) of /etc/os-release -> the dkms version that OS ships. Rocky imitates RHEL 9
# with EPEL's dkms.
_SHIPPED = {("debian", "12"): "3.0.10", ("ubuntu", "22.04"): "2.8.7",
            ("ubuntu", "24.04"): "3.0.11", ("rocky", "9"): "3.3.0", ("rhel", "9"): "3.3.0"}
_MISSING_HEADERS_21_FROM = (3, 1, 5)


def _os_id() -> str:
    for line in (read_text("/etc/os-release") or "").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "ID":
            return value.strip().strip('"')
    return ""


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


def _node_local(path: str) -> str:
    """The local path of node path ``path``, an absolute symlink resolved on the node."""
    local = sim_path(path)
    if os.path.islink(local):
        target = os.readlink(local)
        local = sim_path(target) if target.startswith("/") else os.path.join(
            os.path.dirname(local), target)
    return local


def _node_dir(path: str) -> bool:
    """Whether node path ``path`` is a directory, an absolute symlink resolved on the node."""
    return os.path.isdir(_node_local(path))


def _headers(kernel: str) -> bool:
    return any(_node_dir(f"{MODULES}/{kernel}/{d}") for d in ("build", "source"))


def _added() -> list[tuple[str, str]]:
    """(module, version) of every module in the tree, sorted."""
    out = []
    root = sim_path(TREE)
    for module in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if not os.path.isdir(os.path.join(root, module)):
            continue  # the signing key pair (mok.key, mok.pub) lives here too
        for version in sorted(os.listdir(os.path.join(root, module))):
            if os.path.lexists(os.path.join(root, module, version, "source")):
                out.append((module, version))
    return out


def _installed_ko(name: str, kernel: str) -> str:
    return sim_path(f"{MODULES}/{kernel}/updates/dkms/{name}.ko")


def _built_dir(module: str, version: str, kernel: str) -> str:
    return sim_path(f"{TREE}/{module}/{version}/{kernel}/{ARCH}")


def _built_names(module: str, version: str) -> list[str]:
    """The kernel modules ``dkms.conf`` says the package builds (BUILT_MODULE_NAME[i], in
    index order); the package's own name when it names none."""
    text = read_text(f"{SOURCES}/{module}-{version}/dkms.conf") or ""
    found = sorted((int(i), name) for i, name in re.findall(
        r'^BUILT_MODULE_NAME\[(\d+)\]="?([^"\s]+)"?\s*$', text, re.M))
    return [name for _, name in found] or [module]


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))


def _sign_hash(kernel: str, version: str) -> str | None:
    """The hash the real tool signs with for ``kernel``, None when it would not sign."""
    config = f"{MODULES}/{kernel}/build/.config"
    try:
        with open(os.path.join(_node_local(f"{MODULES}/{kernel}/build"), ".config"),
                  encoding="utf-8") as fh:
            text: str | None = fh.read()
    except OSError:
        text = None
    match = re.search(r'^CONFIG_MODULE_SIG_HASH="?([^"\s]+)"?', text or "", re.M)
    if match:
        return match.group(1)
    if _version_tuple(version) < (3, 0, 11):
        return "sha512"
    print(f"Kernel config {config} not found, modules won't be signed" if text is None else
          "The kernel is built without module signing facility, modules won't be signed")
    return None


def _signing(kernel: str) -> tuple[str, str, str] | None:
    """(key, certificate, hash) the real tool would sign ``kernel``'s modules with, the pair
    generated where it would generate one; None when it would not sign."""
    version = shipped_version()
    sign_hash = _sign_hash(kernel, version)
    if sign_hash is None:
        return None
    if _os_id() == "ubuntu":
        key, cert = "/var/lib/shim-signed/mok/MOK.priv", "/var/lib/shim-signed/mok/MOK.der"
        if not (os.path.isfile(sim_path(key)) and os.path.isfile(sim_path(cert))):
            if not version.startswith("2."):
                print("Binary update-secureboot-policy not found, modules won't be signed")
            return None
        return key, cert, "sha512" if version.startswith("2.") else sign_hash
    key, cert = f"{TREE}/mok.key", f"{TREE}/mok.pub"
    print(f"Signing key: {key}\nPublic certificate (MOK): {cert}")
    if not (os.path.isfile(sim_path(key)) and os.path.isfile(sim_path(cert))):
        print("Certificate or key are missing, generating self signed certificate for MOK...")
        os.makedirs(os.path.dirname(sim_path(key)), exist_ok=True)
        try:
            generate_key(sim_path(key), sim_path(cert), "/CN=DKMS module signing key",
                         code_signing=_version_tuple(version) >= (3, 1, 8))
        except (SigningError, OSError):
            print(f"Key file {key} not found and can't be generated, modules won't be signed")
            return None
    return key, cert, sign_hash


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
    flavor = (read_text(MODULE_FLAVOR_FILE) or "open").strip() or "open"
    signing = _signing(kernel)
    print("Building module(s)... done.")
    for name in _built_names(module, version):
        data = elf_module(modinfo_strings(name, version, kernel, flavor))
        built_ko = os.path.join(built, "module", f"{name}.ko")
        if signing is not None:
            key, cert, sign_hash = signing
            print(f"Signing module {TREE}/{module}/{version}/{kernel}/{ARCH}/module/{name}.ko")
            try:
                data = sign(data, sim_path(key), sim_path(cert), sign_hash)
            except SigningError as exc:
                raise DkmsError(f"Failed to sign module {name}.ko: {exc}", 1) from exc
        with open(built_ko, "wb") as fh:
            fh.write(data)
        target = _installed_ko(name, kernel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(data)
        print(f"Installing /lib/modules/{kernel}/updates/dkms/{name}.ko")


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
    """installed (every module built for ``kernel`` is the one in place), built, or None."""
    built = os.path.join(_built_dir(module, version, kernel), "module")
    if not os.path.isdir(_built_dir(module, version, kernel)):
        return None
    names = [f[:-3] for f in sorted(os.listdir(built)) if f.endswith(".ko")] if os.path.isdir(
        built) else []
    return "installed" if names and all(_same(os.path.join(built, f"{n}.ko"),
                                              _installed_ko(n, kernel)) for n in names) else "built"


def _same(built: str, installed: str) -> bool:
    try:
        with open(built, "rb") as a, open(installed, "rb") as b:
            return a.read() == b.read()
    except OSError:
        return False


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
        built = os.path.join(_built_dir(module, version, k), "module")
        for ko in sorted(os.listdir(built)) if os.path.isdir(built) else []:
            if _same(os.path.join(built, ko), _installed_ko(ko[:-3], k)):
                os.remove(_installed_ko(ko[:-3], k))
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
