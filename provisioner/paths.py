"""Where the Ansible collection lives, where runs are written, and the shared parsers' path.

The Ansible content is the collection ``gpucluster.provisioner`` (galaxy.yml at the checkout's
root). From a checkout it is the checkout itself, reached through a link
``.ansible/collections/ansible_collections/gpucluster/provisioner`` -> the checkout; from an
installed wheel it is the copy the wheel carries under ``provisioner/_collection``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from provisioner.errors import EnvironmentProblem

COLLECTION_NAMESPACE = "gpucluster"
COLLECTION_NAME = "provisioner"
COLLECTION_FQCN = f"{COLLECTION_NAMESPACE}.{COLLECTION_NAME}"

_PACKAGE_DIR = Path(__file__).resolve().parent
_PACKAGED = _PACKAGE_DIR / "_collection"


def _is_collection(root: Path) -> bool:
    return (root / "galaxy.yml").is_file() and (root / "playbooks" / "site.yml").is_file()


def _checkout() -> Path | None:
    """The checkout this package was imported from (editable install or PYTHONPATH)."""
    root = _PACKAGE_DIR.parent
    return root if _is_collection(root) else None


def collection_root() -> Path:
    """The directory holding galaxy.yml, playbooks/, roles/ and plugins/.

    ``PROVISIONER_HOME`` (a checkout) wins; then the checkout this package runs from; then the
    copy an installed wheel carries.
    """
    env = os.environ.get("PROVISIONER_HOME")
    candidates = [Path(env)] if env else [
        c for c in (_checkout(), _PACKAGED / "ansible_collections" / COLLECTION_NAMESPACE
                    / COLLECTION_NAME) if c is not None]
    for root in candidates:
        if _is_collection(root):
            return root
    where = candidates[0] if candidates else _PACKAGE_DIR
    raise EnvironmentProblem(f"cannot find the {COLLECTION_FQCN} collection (galaxy.yml, "
                             f"playbooks/site.yml) under {where}: set PROVISIONER_HOME to a "
                             "checkout or reinstall the package")


# Kept for the callers that mean "where the content is": one name, one answer.
project_root = collection_root


def workspace_root() -> Path:
    """Where runs/, inventories/sim/ and Ansible's caches go: the checkout when running from
    one, the current directory when running from an installed wheel."""
    root = collection_root()
    return Path.cwd() if root.is_relative_to(_PACKAGED) else root


def collections_path() -> Path:
    """A directory D with D/ansible_collections/gpucluster/provisioner = the collection, for
    ANSIBLE_COLLECTIONS_PATH. From a checkout the link is made (idempotently) on first use."""
    root = collection_root()
    if root.is_relative_to(_PACKAGED):
        return _PACKAGED
    base = root / ".ansible" / "collections"
    link = base / "ansible_collections" / COLLECTION_NAMESPACE / COLLECTION_NAME
    if not (link.is_symlink() and link.resolve() == root.resolve()):
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(root, link.parent), target_is_directory=True)
    return base


def cache_dir() -> Path:
    """The controller's cache (wheelhouse, node images): ``PROVISIONER_CACHE``, else
    ``$XDG_CACHE_HOME/gpu-cluster-provisioner``."""
    base = os.environ.get("PROVISIONER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "gpu-cluster-provisioner")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def module_utils_dir() -> Path:
    return collection_root() / "plugins" / "module_utils"


def enable_module_utils() -> None:
    """Make ``plugins/module_utils/gpucluster`` importable as ``gpucluster`` (pure parsers
    shared with the Ansible modules, which ship them to the nodes themselves)."""
    path = str(module_utils_dir())
    if path not in sys.path:
        sys.path.insert(0, path)
