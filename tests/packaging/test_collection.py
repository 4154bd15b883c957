"""The collection tarball: `ansible-galaxy collection build` ships the Ansible content and nothing
else, `ansible-galaxy collection install` installs it, and Ansible runs it from there (module
documentation, the site playbook by its fully qualified name), from a directory that is not
the checkout, with nothing pointing at the checkout. tests/e2e/test_collection_e2e.py runs the
installed collection's site playbook on the simulated cluster."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from tests.packaging.conftest import (
    BIN,
    COLLECTION_DIRS,
    EXAMPLE_INVENTORY,
    NAME,
    NAMESPACE,
    ROOT,
    collection_files,
    outside_env,
    run,
    worktree_files,
)

FQCN = f"{NAMESPACE}.{NAME}"
# What the tarball may hold at its top: the content, its docs, and ansible-test's ignore file.
TOP_LEVEL = {"MANIFEST.json", "FILES.json", "README.md", "CHANGELOG.md", "ansible.cfg",
             ".ansible-lint", ".yamllint", "docs", "tests", *COLLECTION_DIRS}
MAX_BYTES = 500_000  # 0.41 MB on 2026-11-28 (f1c7883); the repository with its fixtures is MBs


def build_tarball(out: Path) -> Path:
    built = run([BIN / "ansible-galaxy", "collection", "build", "--output-path", out, ROOT],
                cwd=out)
    assert built.returncode == 0, built.stdout + built.stderr
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    tarball = out / f"{NAMESPACE}-{NAME}-{version}.tar.gz"
    assert tarball.is_file(), built.stdout
    return tarball


def install_tarball(tarball: Path, where: Path) -> Path:
    """Install as a user would; returns the collections path holding it."""
    colls = where / "collections"
    installed = run([BIN / "ansible-galaxy", "collection", "install", "-p", colls, tarball],
                    cwd=where, env=outside_env(ANSIBLE_COLLECTIONS_PATH=str(colls)))
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"{FQCN}:" in installed.stdout and "installed successfully" in installed.stdout, \
        installed.stdout
    return colls


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tarball(tmp_path_factory.mktemp("galaxy"))


@pytest.fixture(scope="module")
def installed(tarball: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_tarball(tarball, tmp_path_factory.mktemp("installed"))


def test_tarball_holds_the_content_and_nothing_else(tarball: Path) -> None:
    with tarfile.open(tarball) as tar:
        files = {m.name for m in tar.getmembers() if m.isfile()}
    assert tarball.stat().st_size < MAX_BYTES
    assert {f.split("/", 1)[0] for f in files} <= TOP_LEVEL
    assert collection_files(worktree_files()) <= files
    assert {f for f in files if f.startswith("tests/")} == {"tests/sanity/ignore-2.19.txt"}
    leaks = [f for f in files
             if re.search(r"(^|/)(\.venv|\.git|__pycache__|\.ansible|runs|provisioner)(/|$)", f)
             or f.endswith((".pyc", ".egg-info"))]
    assert leaks == []
    manifest = json.loads(tar_member(tarball, "MANIFEST.json"))
    assert manifest["collection_info"]["namespace"] == NAMESPACE
    assert manifest["collection_info"]["name"] == NAME


def tar_member(tarball: Path, name: str) -> str:
    with tarfile.open(tarball) as tar:
        member = tar.extractfile(name)
        assert member is not None
        return member.read().decode()


@pytest.mark.parametrize("module", ["pinned_packages", "node_preflight", "gpu_node_facts",
                                    "release_archive"])
def test_installed_collection_documents_its_modules(installed: Path, tmp_path: Path,
                                                    module: str) -> None:
    doc = run([BIN / "ansible-doc", "--json", "-t", "module", f"{FQCN}.{module}"], cwd=tmp_path,
              env=outside_env(ANSIBLE_COLLECTIONS_PATH=str(installed)))
    assert doc.returncode == 0, doc.stderr
    data = json.loads(doc.stdout)[f"{FQCN}.{module}"]["doc"]
    assert Path(data["filename"]).is_relative_to(installed)
    assert data["module"] == module and data["short_description"]


def test_installed_collection_runs_the_site_playbook_by_its_name(installed: Path,
                                                                 tmp_path: Path) -> None:
    env = outside_env(ANSIBLE_COLLECTIONS_PATH=str(installed))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(EXAMPLE_INVENTORY.read_text())
    checked = run([BIN / "ansible-playbook", "--syntax-check", "-i", inventory, f"{FQCN}.site"],
                  cwd=tmp_path, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    site = installed / "ansible_collections" / NAMESPACE / NAME / "playbooks" / "site.yml"
    assert f"playbook: {site}" in checked.stdout
    listed = run([BIN / "ansible-playbook", "--list-tasks", "-i", inventory, f"{FQCN}.site"],
                 cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    for role in ("preflight", "nvidia_driver", "rdma", "gpu_validate"):
        assert f"{FQCN}.{role} : " in listed.stdout


def test_an_unknown_playbook_name_is_refused(installed: Path, tmp_path: Path) -> None:
    """The positive test above is not vacuous: a name the collection lacks fails."""
    out = run([BIN / "ansible-playbook", "--syntax-check", "-i", "localhost,",
               f"{FQCN}.no_such_playbook"], cwd=tmp_path,
              env=outside_env(ANSIBLE_COLLECTIONS_PATH=str(installed)))
    assert out.returncode != 0


def test_no_playbook_or_role_reaches_outside_the_collection() -> None:
    """An installed collection has no ../provisioner next to it: content that climbs out of
    playbooks/ or a role must land on a directory the collection ships (roles/X/../../plugins
    is the collection's own plugins/)."""
    climbing = re.compile(r"(playbook_dir|role_path)\s*}}\s*/((?:\.\./)+)([\w.-]+)")
    shipped = {f.split("/")[0] for f in collection_files(worktree_files())}
    offenders = []
    for f in sorted(collection_files(worktree_files())):
        if not f.endswith((".yml", ".yaml", ".j2")):
            continue
        for m in climbing.finditer((ROOT / f).read_text(errors="replace")):
            # playbooks/ sits one level below the root, roles/<name>/ two.
            ups = m.group(2).count("../")
            depth = 1 if m.group(1) == "playbook_dir" else 2
            if ups != depth or m.group(3) not in shipped:
                offenders.append(f"{f}: {m.group(0)}")
    assert offenders == []
