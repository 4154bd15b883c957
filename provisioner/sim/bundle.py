"""The stand-in tools as the simulated nodes run them: one executable file per tool.

A tool is a module of ``provisioner.sim.tools`` with ``main(argv, **params) -> int``. It is
installed as an executable zip application (``#!/usr/bin/python3`` then a zip archive, which
python3 runs through its ``__main__.py``) holding the module and every ``provisioner`` module it
imports, transitively. The node's python3 is all it needs: a module importing anything outside
the standard library and ``provisioner`` is refused here, when the mirror is built. The
archive is byte-identical for identical sources and parameters, so the mirror's no-rebuild
shortcut holds. The tiny resident daemon stays a shell script (``tools/daemon.sh``).
"""

from __future__ import annotations

import ast
import io
import sys
import zipfile
from importlib import resources

from provisioner.errors import ProvisionerError

INTERPRETER = "/usr/bin/python3"
TOOLS_PACKAGE = "provisioner.sim.tools"
# Every timestamp inside the archive (the mirror's SOURCE_DATE_EPOCH, 2024-01-01).
_DATE_TIME = (2024, 1, 1, 0, 0, 0)


class BundleError(ProvisionerError):
    """A stand-in tool cannot be bundled (a bug of ours: it imports a third-party module)."""


def _source(module: str) -> str | None:
    """The source of a ``provisioner`` module, or None when ``module`` is not one."""
    parts = module.split(".")
    if parts[0] != "provisioner":
        return None
    file = resources.files("provisioner").joinpath(*parts[1:-1], f"{parts[-1]}.py")
    return file.read_text(encoding="utf-8") if file.is_file() else None


def _imports(module: str, source: str) -> list[str]:
    """Every module ``source`` imports (``from a import b`` yields a.b and a)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(source, filename=module)):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module is None:
                raise BundleError(f"{module}: relative imports cannot be bundled; write "
                                  "`from provisioner.... import ...`")
            out += [f"{node.module}.{alias.name}" for alias in node.names]
            out.append(node.module)
    return out


def modules_of(module: str) -> dict[str, str]:
    """``module`` and every ``provisioner`` module it imports, transitively: name -> source."""
    found: dict[str, str] = {}
    pending = [module]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        source = _source(name)
        if source is None:
            if name == module:
                raise BundleError(f"{module}: no such module in provisioner")
            continue
        found[name] = source
        for imported in _imports(name, source):
            top = imported.split(".")[0]
            if top == "provisioner":
                pending.append(imported)
            elif top not in sys.stdlib_module_names:
                raise BundleError(f"{name} imports {imported}, which is not in the standard "
                                  "library: the simulated nodes have only python3")
    return found


def _packages(modules: dict[str, str]) -> set[str]:
    return {".".join(name.split(".")[:i]) for name in modules
            for i in range(1, name.count(".") + 1)}


def tool_script(tool: str, **params: str) -> bytes:
    """The executable installed for ``provisioner.sim.tools.<tool>``; ``params`` are passed
    to its ``main`` as keyword arguments (versions it reports)."""
    module = f"{TOOLS_PACKAGE}.{tool}"
    modules = modules_of(module)
    entries = {f"{name.replace('.', '/')}.py": source for name, source in modules.items()}
    for package in _packages(modules):
        # Empty package markers: the real __init__ files are not what the tool needs.
        entries.setdefault(f"{package.replace('.', '/')}/__init__.py", "")
    entries["__main__.py"] = (
        f'"""SIMULATED {tool} (gpu-cluster-provisioner), bundled by provisioner.sim.bundle."""\n'
        "import sys\n\n"
        f"from {module} import main\n\n"
        f"sys.exit(main(sys.argv[1:], **{dict(sorted(params.items()))!r}))\n"
    )
    buf = io.BytesIO()
    buf.write(f"#!{INTERPRETER}\n".encode())
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted(entries):
            info = zipfile.ZipInfo(path, date_time=_DATE_TIME)
            info.external_attr = 0o644 << 16
            archive.writestr(info, entries[path])
    return buf.getvalue()


def daemon_script(name: str, before_idle: str = "") -> str:
    """The shell daemon standing in for ``name``; ``before_idle`` runs once after start."""
    text = (resources.files(TOOLS_PACKAGE) / "daemon.sh").read_text(encoding="utf-8")
    return text.replace("@NAME@", name).replace("@BEFORE_IDLE@\n", before_idle)
