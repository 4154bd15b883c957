"""The wheel carries the collection, and the installed package works without a checkout.

The wheel is built the way a release is: an sdist from a copy of the working tree, then the
wheel from that sdist (`python -m build`), so MANIFEST.in and setup.py's build step are both
exercised. It is installed into a fresh virtualenv and run from an unrelated directory with
nothing pointing at the checkout. Its dependencies (ansible-core, ansible-runner, pydantic, ...)
are not downloaded again: the new venv reads the development venv's site-packages through a
plain path in a .pth file, where .pth files are not processed, so the editable install of the
checkout that venv holds stays inactive; `pip check` proves every declared dependency is met.
"""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.packaging.conftest import (
    EXAMPLE_INVENTORY,
    NAME,
    NAMESPACE,
    ROOT,
    collection_files,
    outside_env,
    run,
    worktree_files,
)

PREFIX = f"provisioner/_collection/ansible_collections/{NAMESPACE}/{NAME}"
TOP_FILES = {"galaxy.yml", "ansible.cfg", "README.md"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for rel in worktree_files():
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest, follow_symlinks=False)
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build requirements (setuptools) come from this venv, not a download;
    # `build` still refuses to run when they are not met.
    built = run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, src], cwd=src)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("venv")
    venv = where / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=where)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  cwd=where).stdout.strip()
    Path(purelib, "_dev_venv_dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", python]
    installed = run([*pip, "install", "--no-deps", "--no-index", wheel], cwd=where)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    checked = run([*pip, "check"], cwd=where)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return venv


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A directory that is not a checkout, holding a copy of an example inventory."""
    (tmp_path / "hosts.yml").write_text(EXAMPLE_INVENTORY.read_text())
    return tmp_path


def test_the_wheel_carries_every_file_of_the_collection(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    carried = {n[len(PREFIX) + 1:] for n in names if n.startswith(PREFIX + "/")}
    expected = collection_files(worktree_files()) | TOP_FILES
    assert carried == expected, (sorted(expected - carried)[:20], sorted(carried - expected)[:20])
    assert {"provisioner/data/stacks.yml", "provisioner/data/profiles.yml"} <= set(names)


def test_the_sdist_carries_the_collection(dist: Path) -> None:
    import tarfile

    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    assert TOP_FILES | {"setup.py", "MANIFEST.in"} <= names
    assert collection_files(worktree_files()) <= names


def test_installed_package_imports_itself_and_its_collection_not_the_checkout(
        venv: Path, elsewhere: Path) -> None:
    probe = ("import json, sys, provisioner, provisioner.paths as p\n"
             "print(json.dumps({'module': provisioner.__file__, 'root': str(p.collection_root()),"
             " 'collections': str(p.collections_path()), 'workspace': str(p.workspace_root()),"
             " 'sys_path': sys.path}))")
    out = run([venv / "bin" / "python", "-c", probe], cwd=elsewhere)
    assert out.returncode == 0, out.stderr
    where = json.loads(out.stdout)
    package = Path(where["module"]).resolve().parent
    assert package.is_relative_to(venv.resolve()), where["module"]
    assert Path(where["root"]) == package / PREFIX.removeprefix("provisioner/")
    assert (Path(where["collections"]) / "ansible_collections" / NAMESPACE / NAME
            == Path(where["root"]))
    assert Path(where["workspace"]) == elsewhere.resolve()
    assert ROOT.resolve() not in {Path(p or elsewhere).resolve() for p in where["sys_path"]}


def test_installed_cli_lists_the_stacks_from_another_directory(venv: Path,
                                                               elsewhere: Path) -> None:
    out = run([venv / "bin" / "provisioner", "stacks"], cwd=elsewhere)
    assert out.returncode == 0, out.stdout + out.stderr
    stacks = yaml.safe_load((ROOT / "provisioner" / "data" / "stacks.yml").read_text())["stacks"]
    assert stacks
    for name in stacks:
        assert name in out.stdout


def test_installed_cli_plans_an_inventory_from_another_directory(venv: Path,
                                                                 elsewhere: Path) -> None:
    out = run([venv / "bin" / "provisioner", "plan", "--inventory", elsewhere / "hosts.yml"],
              cwd=elsewhere)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "inventory OK: 3 host(s), 2 GPU node(s)" in out.stdout
    for host in ("h100-001", "h100-002", "login-01"):
        assert host in out.stdout
    bad = run([venv / "bin" / "provisioner", "plan", "--inventory", elsewhere / "missing.yml"],
              cwd=elsewhere)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_ansible_finds_the_modules_in_the_collection_the_wheel_carries(
        venv: Path, elsewhere: Path) -> None:
    out = run([venv / "bin" / "python", "-c",
               "import provisioner.paths as p; print(p.collections_path())"], cwd=elsewhere)
    packaged = Path(out.stdout.strip())
    doc = run([Path(sys.executable).parent / "ansible-doc", "--json", "-t", "module",
               f"{NAMESPACE}.{NAME}.pinned_packages"], cwd=elsewhere,
              env=outside_env(ANSIBLE_COLLECTIONS_PATH=str(packaged)))
    assert doc.returncode == 0, doc.stderr
    data = json.loads(doc.stdout)[f"{NAMESPACE}.{NAME}.pinned_packages"]["doc"]
    assert Path(data["filename"]).is_relative_to(packaged)
