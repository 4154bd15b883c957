"""`provisioner stacks verify` against the simulated mirror's real-shaped indexes (apt
Packages.gz per OS, dnf repodata with modules.yaml for rhel9): the matrix passes on every OS
it claims, and one deliberately wrong pin fails, naming the package. An air-gapped site runs
the same command against its own mirror before `up`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from provisioner import cli
from provisioner.matrix import schema
from provisioner.matrix.schema import STACKS_FILE
from provisioner.sim.stand_in_packages import CTK_REPO, build_mirror, cuda_repo

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv")),
    reason="needs dpkg-deb, apt-ftparchive, gpg and gpgv",
)
RPM = all(shutil.which(t) for t in ("rpmbuild", "createrepo_c", "modifyrepo_c", "rpmsign"))


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify") / "mirror"
    build_mirror(root, STACKS_FILE, rpm=RPM)
    return root


OSES = ["debian12", "ubuntu2204", "ubuntu2404",
        pytest.param("rhel9", marks=pytest.mark.skipif(not RPM, reason="needs rpm tools"))]


@pytest.mark.parametrize("os_dir", OSES)
def test_the_matrix_passes_against_the_mirrors_index(
        mirror: Path, os_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["stacks", "verify", "--index", str(mirror / cuda_repo(os_dir))]) == 0
    assert f"every pin of {os_dir} is in the index" in capsys.readouterr().out


def test_the_container_toolkit_repository_is_checked_too(
        mirror: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["stacks", "verify", "--index", str(mirror / CTK_REPO), "--os",
                     "debian12", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"component": "container_toolkit"' in out
    assert '"not_carried": [\n    "driver"' in out


def test_one_wrong_pin_fails_naming_the_package(
        mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(STACKS_FILE.read_text())
    data["stacks"]["cuda-13.0"]["nccl"]["version"] = "2.28.5-1+cuda13.0"  # not in the mirror
    wrong = tmp_path / "stacks.yml"
    wrong.write_text(yaml.safe_dump(data))
    monkeypatch.setattr(schema, "STACKS_FILE", wrong)
    assert cli.main(["stacks", "verify", "--index",
                     str(mirror / cuda_repo("ubuntu2404"))]) == 1
    out, err = capsys.readouterr()
    missing = [line for line in out.splitlines() if line.startswith("MISSING")]
    assert missing == [
        "MISSING stack cuda-13.0 (ubuntu2404): nccl: libnccl2 2.28.5-1+cuda13.0 is not in the "
        "index (it has 2.28.8-1+cuda13.0, 2.28.9-1+cuda13.0, 2.28.10-1+cuda13.0)",
        "MISSING stack cuda-13.0 (ubuntu2404): nccl: libnccl-dev 2.28.5-1+cuda13.0 is not in "
        "the index (it has 2.28.8-1+cuda13.0, 2.28.9-1+cuda13.0, 2.28.10-1+cuda13.0)"]
    assert "2 pin(s) missing from the index" in out + err
