"""`provisioner stacks verify`: the matrix's pins against a repository's own index (apt
Packages, dnf repodata with module streams), ordered as dpkg and rpm order versions."""

from __future__ import annotations

import gzip
import http.server
import itertools
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner import cli
from provisioner.errors import InputError
from provisioner.matrix import COMPONENTS, load_matrix
from provisioner.matrix.index import load_index, newer
from provisioner.matrix.packages import OS_NAMED, stack_pins
from provisioner.matrix.verify import infer_os, verify

MATRIX = load_matrix()

VERSIONS = ["580.95.05-1", "580.95.05-0ubuntu1", "580.95.05-1ubuntu1", "1:4.4.0-1", "4.4.0-1",
            "2.28.3-1+cuda13.0", "2.28.3-1+cuda13.1", "2.28.10-1+cuda13.0", "9.8.0~pre1-1",
            "9.8.0-1", "580.126.09-1", "580.126.9-1", "1.0~rc1", "1.0", "1.0a", "1.0+b1",
            "1.0.1", "3:580.95.05-1.el9", "3:580.126.09-1.el9"]


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg")
def test_apt_order_is_dpkgs() -> None:
    for a, b in itertools.permutations(VERSIONS, 2):
        dpkg = subprocess.run(["dpkg", "--compare-versions", a, "gt", b],
                              check=False).returncode == 0
        assert newer("apt", a, b) is dpkg, (a, b)


@pytest.mark.skipif(shutil.which("rpm") is None, reason="needs rpm")
def test_dnf_order_is_rpms() -> None:
    versions = [*VERSIONS, "1.0^", "1.0^git1"]
    script = "".join(f'print(rpm.vercmp("{a}", "{b}") .. " ") ' for a, b in
                     itertools.permutations(versions, 2))
    out = subprocess.run(["rpm", "--eval", f"%{{lua: {script}}}"], capture_output=True,
                         text=True, check=True).stdout.split()
    for (a, b), verdict in zip(itertools.permutations(versions, 2), out, strict=True):
        assert newer("dnf", a, b) is (verdict == "1"), (a, b)


# --------------------------------------------------------------------------- an apt index


def pins(os_dir: str, only: str | None = None) -> set[tuple[str, str]]:
    """Every (name, version) the matrix pins for ``os_dir`` (of stack ``only``), both
    flavours."""
    family = MATRIX.repositories.cuda[os_dir].package_family
    other = "dnf" if family == "dnf" else "apt"
    out = set()
    for stack in MATRIX.stacks.values():
        if os_dir not in stack.os_support or only not in (None, stack.name):
            continue
        for component in COMPONENTS:
            if component == "container_toolkit":
                continue
            fam = family if component in OS_NAMED else other
            for flavor in stack.driver.module_flavors:
                out.update(stack_pins(stack, MATRIX.naming_facts, component, fam, flavor))
    return out


def write_apt(directory: Path, packages: set[tuple[str, str]], gz: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = "".join(f"Package: {n}\nVersion: {v}\nArchitecture: amd64\n\n"
                   for n, v in sorted(packages))
    if gz:
        (directory / "Packages.gz").write_bytes(gzip.compress(text.encode()))
    else:
        (directory / "Packages").write_text(text)
    return directory


def test_every_pin_present_passes(tmp_path: Path) -> None:
    repo = write_apt(tmp_path / "ubuntu2404" / "x86_64", pins("ubuntu2404"))
    result = verify(MATRIX, load_index(repo), "ubuntu2404")
    assert result.missing == []
    # An older stack sees the newer stacks' pins of the same package as newer releases.
    for check in result.checks:
        if check.status == "newer":
            assert (check.package, check.detail.split()[0]) in pins("ubuntu2404")
    assert verify(MATRIX, load_index(repo), "ubuntu2404", "cuda-13.2").checks
    assert {c.status for c in verify(MATRIX, load_index(repo), "ubuntu2404",
                                     "cuda-13.2").checks} == {"present"}
    assert result.not_carried == ["container_toolkit"]
    stacks = {s.name for s in MATRIX.stacks.values() if "ubuntu2404" in s.os_support}
    assert {row["stack"] for row in result.summary()} == stacks


def test_a_missing_pin_is_named_with_what_the_index_has(tmp_path: Path) -> None:
    packages = pins("ubuntu2404")
    wrong = ("cuda-drivers-580", "580.159.04-1ubuntu1")
    assert wrong in packages
    packages = (packages - {wrong}) | {("cuda-drivers-580", "580.159.04-0ubuntu1")}
    result = verify(MATRIX, load_index(write_apt(tmp_path / "r", packages, gz=False)),
                    "ubuntu2404")
    [missing] = result.missing
    assert (missing.stack, missing.package, missing.version) == ("cuda-13.0", *wrong)
    assert missing.line("ubuntu2404") == (
        "MISSING stack cuda-13.0 (ubuntu2404): driver: cuda-drivers-580 580.159.04-1ubuntu1 is "
        "not in the index (it has 580.159.04-0ubuntu1)")


def test_a_newer_release_of_the_same_branch_is_reported_not_another_branch(tmp_path: Path) -> None:
    packages = pins("ubuntu2404", "cuda-13.0") | {("libnccl2", "2.28.10-1+cuda13.0"),
                                     ("libnccl2", "2.30.1-1+cuda13.3"),
                                     ("cuda-drivers-580", "580.178.04-1ubuntu1")}
    result = verify(MATRIX, load_index(write_apt(tmp_path / "r", packages)), "ubuntu2404",
                    "cuda-13.0")
    newer_ones = {(c.package, c.detail) for c in result.checks if c.status == "newer"}
    assert newer_ones == {("libnccl2", "2.28.10-1+cuda13.0 is newer"),
                          ("cuda-drivers-580", "580.178.04-1ubuntu1 is newer")}
    assert result.missing == []


def test_the_wrong_repository_or_os_is_refused(tmp_path: Path) -> None:
    repo = write_apt(tmp_path / "r", {("something-else", "1.0-1")})
    with pytest.raises(InputError, match="carries none of the packages of the stacks of "
                                         "debian12"):
        verify(MATRIX, load_index(repo), "debian12")
    with pytest.raises(InputError, match="is an apt repository but rhel9 installs with dnf"):
        verify(MATRIX, load_index(write_apt(tmp_path / "u", pins("ubuntu2404"))), "rhel9")
    with pytest.raises(InputError, match="does not claim debian12"):
        verify(MATRIX, load_index(write_apt(tmp_path / "d", pins("debian12"))), "debian12",
               "cuda-13.2")
    with pytest.raises(InputError, match=r"no Packages, Packages\.gz or repodata/repomd\.xml"):
        load_index(tmp_path)


def test_the_os_is_read_from_a_cuda_repository_path() -> None:
    assert infer_os(MATRIX, "https://mirror.example/cuda/repos/ubuntu2204/x86_64/") == "ubuntu2204"
    assert infer_os(MATRIX, "/srv/mirror/libnvidia-container/stable/deb/amd64") is None


# --------------------------------------------------------------------------- a dnf index

PRIMARY = """<?xml version="1.0" encoding="UTF-8"?>
<metadata xmlns="http://linux.duke.edu/metadata/common" packages="{count}">
{packages}</metadata>
"""


def write_dnf(directory: Path, packages: set[tuple[str, str]], streams: dict[str, list[str]]
              ) -> Path:
    def element(name: str, version: str) -> str:
        epoch, _, rest = version.rpartition(":")
        ver, _, rel = rest.rpartition("-")
        return (f'<package type="rpm"><name>{name}</name><arch>x86_64</arch>'
                f'<version epoch="{epoch or 0}" ver="{ver}" rel="{rel}"/></package>\n')

    repodata = directory / "repodata"
    repodata.mkdir(parents=True)
    primary = PRIMARY.format(count=len(packages),
                             packages="".join(element(n, v) for n, v in sorted(packages)))
    (repodata / "abc-primary.xml.gz").write_bytes(gzip.compress(primary.encode()))
    docs = "".join(
        "---\ndocument: modulemd\nversion: 2\ndata:\n  name: nvidia-driver\n"
        f"  stream: \"{stream}\"\n  artifacts:\n    rpms:\n"
        + "".join(f"    - {a}\n" for a in artifacts) + "...\n"
        for stream, artifacts in streams.items())
    (repodata / "def-modules.yaml.gz").write_bytes(gzip.compress(docs.encode()))
    (repodata / "repomd.xml").write_text(
        '<?xml version="1.0"?>\n<repomd xmlns="http://linux.duke.edu/metadata/repo">\n'
        '<data type="primary"><location href="repodata/abc-primary.xml.gz"/></data>\n'
        '<data type="modules"><location href="repodata/def-modules.yaml.gz"/></data>\n'
        "</repomd>\n")
    return directory


def nevra(name: str, version: str) -> str:
    epoch, _, rest = version.rpartition(":")
    return f"{name}-{epoch + ':' if epoch else ''}{rest}.x86_64"


def rhel_streams(drop: str | None = None) -> dict[str, list[str]]:
    """Every module stream the rhel9 stacks need, each listing its driver pins."""
    out: dict[str, list[str]] = {}
    for stack in MATRIX.stacks.values():
        if "rhel9" not in stack.os_support:
            continue
        for flavor in stack.driver.module_flavors:
            stream = (stack.driver.dnf_module_streams or {})[flavor]
            if stream == drop:
                continue
            out.setdefault(stream.split(":")[1], []).extend(
                nevra(n, v) for n, v in stack_pins(stack, MATRIX.naming_facts, "driver", "dnf",
                                                   flavor))
    return out


def test_a_dnf_index_checks_packages_and_module_streams(tmp_path: Path) -> None:
    good = write_dnf(tmp_path / "good", pins("rhel9"), rhel_streams())
    result = verify(MATRIX, load_index(good), "rhel9")
    assert result.missing == []
    bad = write_dnf(tmp_path / "bad", pins("rhel9"), rhel_streams(drop="nvidia-driver:580-open"))
    [missing] = verify(MATRIX, load_index(bad), "rhel9").missing
    assert (missing.stack, missing.package) == ("cuda-13.0",
                                                "module stream nvidia-driver:580-open")
    assert "streams of R580: nvidia-driver:580-dkms" in missing.detail


# --------------------------------------------------------------------------- over http


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    repo = write_apt(tmp_path / "cuda" / "debian12" / "x86_64", pins("debian12"))

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/{repo.relative_to(tmp_path)}/"
    finally:
        server.shutdown()


def test_an_index_over_http_passes_and_exits_0(served: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["stacks", "verify", "--index", served]) == 0
    out = capsys.readouterr().out
    assert "every pin of debian12 is in the index" in out


def test_cli_exit_1_names_the_missing_pin_and_2_for_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    packages = pins("debian12") - {("libnccl2", "2.28.9-1+cuda13.0")}
    repo = write_apt(tmp_path / "debian12" / "x86_64", packages)
    assert cli.main(["stacks", "verify", "--index", str(repo), "--json"]) == 1
    captured = capsys.readouterr()
    assert "1 pin(s) missing from the index" in captured.err
    assert '"package": "libnccl2"' in captured.out
    assert cli.main(["stacks", "verify"]) == 2
    assert "give --index DIR|URL" in capsys.readouterr().err
    assert cli.main(["stacks", "list", "--index", str(repo)]) == 2
    assert cli.main(["stacks", "verify", "--index", str(tmp_path / "nowhere"), "--os",
                     "debian12"]) == 2
    assert "no such directory" in capsys.readouterr().err
