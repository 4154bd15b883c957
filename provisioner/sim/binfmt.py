"""The controller's binfmt_misc registration that lets it run an imitated aarch64 node.

An arm64 node image holds aarch64 binaries; the kernel runs them through qemu-user-static
when binfmt_misc maps the aarch64 ELF header to qemu's interpreter. The registration must
carry the flags OCPF (measured on Debian 12 with qemu-user-static 7.2 and podman 4.3):

- F (fix binary): the kernel opens the interpreter once, at registration, so it runs inside
  containers and chroots that do not hold the file;
- P (preserve argv[0]): what Debian's ``aarch64-binfmt-P`` interpreter expects;
- C (credentials, implies O, open binary): setuid programs run with their owner's rights.
  Debian's own registration is PF only, under which ``sudo`` in the node refuses to run
  ("must be owned by uid 0 and have the setuid bit set").

binfmt_misc is the machine's, not a container's: a registration made here serves every
container, and whatever clears the table (a privileged container's systemd-binfmt.service,
a reboot) removes it. The module never prints; it raises ``EnvironmentProblem`` with one line
saying what to do.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import EnvironmentProblem

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
# binfmt-support's import files (Debian's qemu-user-static ships one per architecture):
# "package", "interpreter", "magic", "offset", "mask", "credentials", "fix_binary", "preserve".
BINFMTS_DIR = Path("/usr/share/binfmts")
FLAGS = "OCPF"
REQUIRED_FLAGS = frozenset(FLAGS)
# Debian architecture -> the qemu-user target whose registration runs it.
QEMU_TARGETS = {"arm64": "aarch64"}


@dataclass(frozen=True)
class Registration:
    """One binfmt_misc entry as the kernel shows it (``/proc/sys/fs/binfmt_misc/NAME``)."""

    name: str
    enabled: bool
    interpreter: str
    flags: frozenset[str]

    @property
    def usable(self) -> bool:
        return self.enabled and self.flags >= REQUIRED_FLAGS


@dataclass(frozen=True)
class Recipe:
    """What binfmt-support's import file says to register (magic and mask as ``\\xHH``)."""

    interpreter: str
    magic: str
    mask: str
    offset: int

    def register_line(self, name: str) -> str:
        """The line ``register`` takes: ``:name:M:offset:magic:mask:interpreter:flags``."""
        return f":{name}:M:{self.offset}:{self.magic}:{self.mask}:{self.interpreter}:{FLAGS}"


def parse_registration(name: str, text: str) -> Registration:
    """The kernel's view of an entry: ``enabled``, ``interpreter PATH``, ``flags: POCF``..."""
    lines = [line.strip() for line in text.splitlines()]
    interpreter = next((line.split(None, 1)[1] for line in lines
                        if line.startswith("interpreter ") and " " in line), "")
    flags = next((line.split(":", 1)[1].strip() for line in lines
                  if line.startswith("flags:")), "")
    return Registration(name=name, enabled="enabled" in lines, interpreter=interpreter,
                        flags=frozenset(flags))


def parse_recipe(text: str, where: str) -> Recipe:
    """binfmt-support's import format: one ``key value`` per line."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            fields[key] = value.strip()
    missing = [key for key in ("interpreter", "magic") if not fields.get(key)]
    if missing:
        raise EnvironmentProblem(f"{where} has no {' or '.join(missing)}: reinstall "
                                 "qemu-user-static (apt-get install --reinstall "
                                 "qemu-user-static)")
    if ":" in fields["magic"] + fields.get("mask", "") + fields["interpreter"]:
        raise EnvironmentProblem(f"{where}: a ':' in the magic, mask or interpreter cannot be "
                                 "written to binfmt_misc's register file")
    try:
        offset = int(fields.get("offset", "0") or "0")
    except ValueError as exc:
        raise EnvironmentProblem(f"{where}: offset {fields['offset']!r} is not a number") from exc
    return Recipe(interpreter=fields["interpreter"], magic=fields["magic"],
                  mask=fields.get("mask", ""), offset=offset)


def entry_name(architecture: str) -> str:
    """``qemu-aarch64`` for arm64: the name Debian's qemu-user-static registers."""
    if architecture not in QEMU_TARGETS:
        raise EnvironmentProblem(f"no qemu-user emulation is set up for architecture "
                                 f"{architecture!r}: one of {', '.join(QEMU_TARGETS)}")
    return f"qemu-{QEMU_TARGETS[architecture]}"


def current(architecture: str, binfmt_dir: Path = BINFMT_DIR) -> Registration | None:
    """The machine's registration for ``architecture``, or None when there is none."""
    name = entry_name(architecture)
    try:
        return parse_registration(name, (binfmt_dir / name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EnvironmentProblem(f"cannot read {binfmt_dir / name}: {exc}") from exc


def ensure_registered(architecture: str = "arm64", *, binfmt_dir: Path = BINFMT_DIR,
                      binfmts_dir: Path = BINFMTS_DIR) -> Registration:
    """Make sure the machine runs ``architecture``'s binaries through qemu with flags OCPF,
    registering (or re-registering) it from qemu-user-static's import file when needed.

    Needs root when anything must change: binfmt_misc mounted if it is not, a registration
    without the flags removed and written again. Raises EnvironmentProblem in one line when
    it cannot."""
    name = entry_name(architecture)
    found = current(architecture, binfmt_dir) if (binfmt_dir / "status").exists() else None
    if found is not None and found.usable:
        return found
    source = binfmts_dir / name
    try:
        recipe = parse_recipe(source.read_text(encoding="utf-8"), str(source))
    except FileNotFoundError:
        raise EnvironmentProblem(
            f"{source} is missing: install qemu-user-static (apt-get install "
            f"qemu-user-static) to run {architecture} nodes") from None
    if not Path(recipe.interpreter).exists():
        raise EnvironmentProblem(f"{recipe.interpreter}, the interpreter {source} names, is "
                                 "missing: apt-get install --reinstall qemu-user-static")
    _mount(binfmt_dir)
    try:
        if found is not None:
            # An entry cannot be changed in place: writing -1 removes it.
            _kernel_write(binfmt_dir / name, "-1")
        _kernel_write(binfmt_dir / "register", recipe.register_line(name))
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot register {name} with flags OCPF in {binfmt_dir} ({exc.strerror or exc}): "
            "run as root on a kernel with binfmt_misc") from exc
    registered = current(architecture, binfmt_dir)
    if registered is None or not registered.usable:
        flags = "".join(sorted(registered.flags)) if registered else "none"
        raise EnvironmentProblem(f"{name} registered but the kernel shows flags {flags}, not "
                                 "OCPF: this kernel's binfmt_misc lacks them")
    return registered


def _kernel_write(path: Path, text: str) -> None:
    """One write to a binfmt_misc control file (the kernel acts on each write)."""
    with path.open("w", encoding="utf-8") as handle:
        handle.write(text)


def _mount(binfmt_dir: Path) -> None:
    """Mount binfmt_misc at ``binfmt_dir`` unless it is there (``status`` shows it is)."""
    if (binfmt_dir / "status").exists():
        return
    try:
        proc = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt_dir)],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"cannot mount binfmt_misc on {binfmt_dir}: {exc}") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise EnvironmentProblem(f"cannot mount binfmt_misc on {binfmt_dir} ({last}): run as "
                                 "root on a kernel with binfmt_misc")
