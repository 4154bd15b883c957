"""Build hook: the wheel carries the Ansible collection gpucluster.provisioner.

Everything else about the package is declared in pyproject.toml. The collection's content stays
at the top of the checkout (galaxy.yml, meta/, plugins/, roles/, playbooks/: the layout Ansible
expects); at build time it is copied into the wheel under
``provisioner/_collection/ansible_collections/gpucluster/provisioner``, where
``provisioner.paths.collection_root()`` finds it when no checkout is around. MANIFEST.in puts the
same trees in the sdist, so a wheel built from the sdist carries them too.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# Kept in step with provisioner/paths.py (_PACKAGED / namespace / name) and MANIFEST.in.
COLLECTION_DEST = Path("provisioner", "_collection", "ansible_collections", "gpucluster",
                       "provisioner")
COLLECTION_FILES = ("galaxy.yml", "ansible.cfg", "README.md")
COLLECTION_DIRS = ("meta", "plugins", "roles", "playbooks")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")


class BuildPyWithCollection(build_py):
    """build_py, then the collection's files copied into the build tree."""

    def run(self) -> None:
        super().run()
        # An editable install imports the checkout itself, which is the collection.
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / COLLECTION_DEST
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for name in COLLECTION_FILES:
            src = HERE / name
            if not src.is_file():
                raise FileNotFoundError(f"collection file {src} is missing (MANIFEST.in?)")
            shutil.copy2(src, dest / name)
        for name in COLLECTION_DIRS:
            src = HERE / name
            if not src.is_dir():
                raise FileNotFoundError(f"collection directory {src} is missing (MANIFEST.in?)")
            # Links (vars/Rocky.yml -> RedHat.yml) become copies: a wheel is a zip, no links.
            shutil.copytree(src, dest / name, ignore=SKIP)


setup(cmdclass={"build_py": BuildPyWithCollection})
