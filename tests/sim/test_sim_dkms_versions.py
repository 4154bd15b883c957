"""The simulated dkms imitates the version each OS ships: a kernel without headers makes
dkms 3.1.5 and later exit 21 (EPEL 9's 3.3.0), older ones exit 1 (Debian 12's 3.0.10, Ubuntu's
2.8.7 and 3.0.11). The driver role judges the module by `dkms status`, not by the exit code,
so both read right; the error text it shows names the missing headers either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.sim.tools import dkms

OS_RELEASE = {
    "debian12": ('ID=debian\nVERSION_ID="12"\n', "3.0.10", 1),
    "ubuntu2204": ('ID=ubuntu\nVERSION_ID="22.04"\n', "2.8.7", 1),
    "ubuntu2404": ('ID=ubuntu\nVERSION_ID="24.04"\n', "3.0.11", 1),
    "rocky9": ('ID="rocky"\nVERSION_ID="9.4"\n', "3.3.0", 21),
}


@pytest.mark.parametrize("os_name", sorted(OS_RELEASE))
def test_missing_headers_exit_as_that_os_dkms_does(
        os_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    text, version, code = OS_RELEASE[os_name]
    monkeypatch.setenv("GPU_SIM_ROOT", str(tmp_path))
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text(text)
    source = tmp_path / "usr" / "src" / "nvidia-580.159.04"
    source.mkdir(parents=True)
    (source / "dkms.conf").write_text('PACKAGE_NAME="nvidia"\nAUTOINSTALL="yes"\n')
    assert dkms.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dkms-{version}"
    assert dkms.main(["add", "nvidia/580.159.04"]) == 0
    assert dkms.main(["install", "nvidia/580.159.04", "-k", "6.1.0-99-amd64"]) == code
    err = capsys.readouterr().err
    assert err.startswith("Error! Your kernel headers for kernel 6.1.0-99-amd64 cannot be found")
    assert "linux-headers-6.1.0-99-amd64" in err
    # With the headers in place the same command builds and installs the module.
    (tmp_path / "lib" / "modules" / "6.1.0-99-amd64" / "build").mkdir(parents=True)
    assert dkms.main(["install", "nvidia/580.159.04", "-k", "6.1.0-99-amd64"]) == 0
