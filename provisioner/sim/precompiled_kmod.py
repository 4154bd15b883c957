"""NVIDIA's precompiled kernel module packages for RHEL 8/9, as SIMULATED stand-ins.

Beside the DKMS streams (``nvidia-driver:<B>-dkms``, ``<B>-open``), NVIDIA's RHEL 8/9 CUDA
repositories carry precompiled streams ``nvidia-driver:<B>`` and ``nvidia-driver:latest``, whose
kernel modules (the proprietary ones only) come built for one kernel each, signed with NVIDIA's
key, installed with ``dnf module install nvidia-driver:<B>`` (NVIDIA/yum-packaging-precompiled-
kmod README.md, "Deliverables" and "Installing packages"; UEFI.md, "Precompiled driver").

One package per driver release and kernel, as NVIDIA/yum-packaging-precompiled-kmod's
kmod-nvidia.spec builds it (at 1070b9a):

- ``Name: kmod-nvidia-%{driver}-%{kernel}-%{kernel_release}``, ``Version: %{driver}``,
  ``Epoch: 3``, ``Release: 2%{kmod_dist}`` (the kernel's dist, ``.el8_1``: README.md's example
  kmod-nvidia-440.33.01-4.18.0-147.5.1-440.33.01-2.el8_1.x86_64.rpm);
- ``Provides: nvidia-kmod = 3:%{driver}``, ``Requires: (kernel = %{kmod_kernel_version} if
  kernel)``, ``Conflicts: kmod-nvidia-latest-dkms``, ``Supplements: (nvidia-driver = 3:%{driver}
  and kernel = %{kmod_kernel_version})``;
- the modules nvidia, nvidia-uvm, nvidia-modeset, nvidia-drm (``kmod_modules``) ship as objects
  under ``%{_libdir}/nvidia/%{_target}/%{driver}/%{kmod_kernel_version}`` with the signature of
  each linked module (``<m>.sig``, cut from what the kernel's ``sign-file sha256`` appended at
  build time with NVIDIA's key); %post links each module with the ld.gold the package ships
  into ``/lib/modules/<kernel release>/extra/drivers/video/nvidia/`` (``kmod_module_path``),
  appends its signature, then runs ``depmod -a -w``; the modules are ``%ghost`` files (rpm
  removes them with the package), and %postun runs depmod again.

The stand-in keeps the names, relations, paths and scripts. Its modules are the simulated
dkms' kind (``tools/kmodule.py``: an ELF object whose ``.modinfo`` real ``modinfo`` reads, the
proprietary flavour, the driver's version), signed when the mirror is built with a SIMULATED
key of the mirror's own (NVIDIA's certificate ``NVIDIA2019-public_key.der`` is published at the
repository root for MOK enrolment, UEFI.md "Download the X.509 certificate public key"; the
mirror publishes this key's certificate there). Nothing is linked: each module ships whole,
less its signature, and %post joins the two.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from provisioner.sim.mirror import MirrorBuildError, SimPackage, _locked, _write_if_changed
from provisioner.sim.stand_in_packages import _banner_if_loaded, _upstream
from provisioner.sim.tools.kmodule import (
    SigningError,
    elf_module,
    generate_key,
    modinfo_strings,
    sign,
)
from provisioner.sim.tools.node import MODULE_FLAVOR_FILE

# The proprietary DKMS package whose every release gets precompiled builds.
DKMS_PACKAGE = "kmod-nvidia-latest-dkms"
# The user-space package the precompiled streams install (nvidia-driver-cuda stands for NVIDIA's
# nvidia-driver, which the mirror does not carry: its Supplements name it in that one's place).
USER_SPACE_PACKAGE = "nvidia-driver-cuda"
# kmod-nvidia.spec's kmod_modules: nvidia-peermem is not among them.
MODULES = ("nvidia", "nvidia-uvm", "nvidia-modeset", "nvidia-drm")
# kmod-nvidia.spec: kmod_kbuild_dir drivers/video/nvidia under extra/ of the kernel's modules.
MODULE_SUBDIR = "extra/drivers/video/nvidia"
# kmod_o_dir is %{_libdir}/nvidia/%{_target}/...: /usr/lib64 and x86_64-linux as rpm 4.18
# expands them on this machine (on RHEL 9 the same is presumed, unconfirmed here).
OBJECT_ROOT = "/usr/lib64/nvidia/x86_64-linux"
# The certificate's name at the repository root (UEFI.md: .../cuda/repos/rhel9/x86_64/
# NVIDIA2019-public_key.der) and the simulated key's subject (NVIDIA's own CN is not imitated).
CERTIFICATE_NAME = "NVIDIA2019-public_key.der"
KEY_SUBJECT = "/CN=SIMULATED NVIDIA precompiled kmod signing key"
KEY_DIR = "precompiled-kmod-key"
# kmod-nvidia.spec signs with `sign-file sha256`.
SIGN_HASH = "sha256"
# The version-release of the rpm named `kernel` on an imitated Rocky node: sim/image.py
# registers Debian's kernel under Rocky's package names as version 0, release "debian" (a
# container runs its host's kernel, which no Rocky kernel rpm carries). The stand-ins' kernel
# relations name it where the real ones name the kernel rpm's (kmod_kernel_version).
IMITATED_KERNEL_EVR = "0-debian"
# A kernel release's trailing architecture and, before it, its dist:
# 4.18.0-147.5.1.el8_1.x86_64.
_ARCH_TAIL = re.compile(r"\.(?:x86_64|aarch64|noarch)$")
_DIST_TAIL = re.compile(r"\.el\d+(?:_\d+)?$")


@dataclass(frozen=True)
class SigningKey:
    """The simulated NVIDIA precompiled signing key: private key (PEM), certificate (DER)."""

    key: Path
    certificate: Path


def certificate_path(state_dir: Path) -> Path:
    """The simulated NVIDIA certificate (DER) on the controller, under the mirror's state
    directory (the mirror root's parent); the mirror publishes a copy of it."""
    return state_dir / KEY_DIR / CERTIFICATE_NAME


def ensure_signing_key(state_dir: Path) -> SigningKey:
    """The signing key, generated once (RSA 2048, self-signed, as kmodule.generate_key makes
    dkms' pair) under ``state_dir``."""
    keydir = state_dir / KEY_DIR
    keydir.mkdir(parents=True, exist_ok=True)
    key, cert = keydir / "private_key.priv", certificate_path(state_dir)
    with _locked(keydir / ".keygen.lock"):
        if not (key.is_file() and cert.is_file()):
            try:
                generate_key(str(key), str(cert), KEY_SUBJECT)
            except SigningError as exc:
                raise MirrorBuildError(f"openssl could not make the simulated NVIDIA signing "
                                       f"key in {keydir}: {exc}") from exc
    return SigningKey(key=key, certificate=cert)


def _kernel_version(kernel_release: str) -> str:
    """kmod-nvidia.spec's kmod_kernel_version: the release less its architecture."""
    return _ARCH_TAIL.sub("", kernel_release)


def kmod_kernel(kernel_release: str) -> str:
    """``${kernel}-${kernel_release}`` of a package name: the release less its trailing
    ``.el<N>[_<M>]`` dist and architecture (4.18.0-147.5.1.el8_1.x86_64 -> 4.18.0-147.5.1); a
    release without them, as a Debian host's 6.1.0-27-amd64, stays as it is."""
    return _DIST_TAIL.sub("", _kernel_version(kernel_release))


def kmod_dist(kernel_release: str) -> str:
    """The dist of the package's release: the kernel's (.el8_1), else the repository's .el9."""
    match = _DIST_TAIL.search(_kernel_version(kernel_release))
    return match.group(0) if match else ".el9"


def package_name(driver: str, kernel_release: str) -> str:
    """kmod-nvidia-<driver>-<kernel>-<kernel release>, lowercased and with characters a Debian
    name would refuse made dots (SimPackage names are valid in both worlds)."""
    name = f"kmod-nvidia-{driver}-{kmod_kernel(kernel_release)}"
    return re.sub(r"[^a-z0-9+.-]", ".", name.lower())


def package_version(driver: str, kernel_release: str) -> str:
    """Epoch 3, version the driver's, release 2 and the dist: 3:440.33.01-2.el8_1."""
    return f"3:{driver}-2{kmod_dist(kernel_release)}"


def object_dir(driver: str, kernel_release: str) -> str:
    """Where the package keeps its modules (kmod-nvidia.spec's kmod_o_dir)."""
    return f"{OBJECT_ROOT}/{driver}/{_kernel_version(kernel_release)}"


def module_dir(kernel_release: str) -> str:
    """Where %post puts the modules (kmod_module_path): /lib/modules/<release>/extra/..."""
    return f"/lib/modules/{kernel_release}/{MODULE_SUBDIR}"


_POST = """\
o={objects}
d={modules}
mkdir -p "$d"
for m in {names}; do
  cat "$o/$m.o" "$o/$m.sig" > "$d/.$m.ko.new"
  if cmp -s "$d/.$m.ko.new" "$d/$m.ko"; then rm -f "$d/.$m.ko.new"
  else mv -f "$d/.$m.ko.new" "$d/$m.ko"; fi
done
{depmod}
"""
# depmod's stderr is dropped: it warns there about what a real kernel's modules directory has
# and a simulated node's lacks (modules.order, modules.builtin, seen with kmod 30), which would
# be noise of the simulation's own in every dnf transaction. Its failure is still reported.
_DEPMOD = ('PATH="$PATH:/sbin:/usr/sbin" depmod -a -w {kernel} 2>/dev/null '
           '|| echo "depmod -a -w {kernel} failed" >&2')


def _signature(module: bytes, key: SigningKey) -> bytes:
    """What sign-file appends to ``module`` (the .sig file), kept beside the key so a rebuilt
    mirror does not sign again (the signature of the same module with the same key does not
    change: RSA PKCS#1 v1.5, no signing time)."""
    cert = key.certificate.read_bytes()
    digest = hashlib.sha256(module + b"\0" + cert).hexdigest()
    cached = key.key.parent / "signatures" / f"{digest}.sig"
    if cached.is_file():
        return cached.read_bytes()
    try:
        signed = sign(module, str(key.key), str(key.certificate), SIGN_HASH)
    except SigningError as exc:
        raise MirrorBuildError(f"openssl could not sign a simulated precompiled module with "
                               f"{key.key}: {exc}") from exc
    signature = signed[len(module):]
    cached.parent.mkdir(exist_ok=True)
    _write_if_changed(cached, signature)
    return signature


def precompiled_kmod(driver: str, kernel_release: str, key: SigningKey,
                     kernel_evr: str = IMITATED_KERNEL_EVR) -> SimPackage:
    """The precompiled kernel module package of driver release ``driver`` (580.95.05) for the
    kernel ``kernel_release`` (``uname -r``), its modules signed with ``key``; ``kernel_evr`` is
    the version-release of the node's `kernel` rpm carrying that kernel."""
    objects, modules = object_dir(driver, kernel_release), module_dir(kernel_release)
    files: dict[str, bytes | str] = {
        # What the simulated node's module load reads for the banner's flavour (the DKMS
        # package ships the same file): these modules are the proprietary ones.
        MODULE_FLAVOR_FILE: "proprietary\n",
    }
    for name in MODULES:
        module = elf_module(modinfo_strings(name, driver, kernel_release, "proprietary"))
        files[f"{objects}/{name}.o"] = module
        files[f"{objects}/{name}.sig"] = _signature(module, key)
    depmod = _DEPMOD.format(kernel=kernel_release)
    post = _POST.format(objects=objects, modules=modules, names=" ".join(MODULES),
                        depmod=depmod)
    return SimPackage(
        name=package_name(driver, kernel_release),
        version=package_version(driver, kernel_release),
        files=files,
        rpm_relations=(
            f"Provides: nvidia-kmod = 3:{driver}",
            f"Requires: (kernel = {kernel_evr} if kernel)",
            f"Conflicts: {DKMS_PACKAGE}",
            f"Supplements: ({USER_SPACE_PACKAGE} = 3:{driver} and kernel = {kernel_evr})",
        ),
        rpm_ghosts=(modules, *(f"{modules}/{name}.ko" for name in MODULES)),
        # As the DKMS package: the banner of a module of this version already loaded (by the
        # user-space package, before the flavour was known) is rewritten in this flavour.
        postinst=post + _banner_if_loaded(driver),
        rpm_postun=depmod + "\n",
        scripts_on_rpm=True,
        description=f"NVIDIA proprietary kernel module {driver} precompiled for kernel "
                    f"{kernel_release} (simulated)",
    )


def is_precompiled_kmod(pkg: SimPackage) -> bool:
    """Whether ``pkg`` is a precompiled kernel module package (named for its driver)."""
    upstream = _upstream(pkg.version)
    return pkg.name.startswith(f"kmod-nvidia-{upstream}-")


def precompiled_kmods(pkgs: Iterable[SimPackage], kernels: Sequence[str],
                      key: SigningKey) -> list[SimPackage]:
    """A precompiled package for every release of the proprietary DKMS package among
    ``pkgs`` and every kernel release in ``kernels``."""
    drivers = sorted({_upstream(p.version) for p in pkgs if p.name == DKMS_PACKAGE})
    return [precompiled_kmod(driver, kernel, key)
            for driver in drivers for kernel in dict.fromkeys(kernels)]
