"""provisioner.inspect: format detection and file handling (on our own fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.errors import InputError
from provisioner.inspect import FORMATS, detect_format, inspect_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

EXPECTED = {
    "nvidia-smi-xml/h100-sxm-8gpu-v13-tabs-ecc-error.xml": "nvidia-smi-xml",
    "nvidia-smi-xml/v100-pcie-2gpu-v11-dbe.xml": "nvidia-smi-xml",
    "nvidia-smi-nvlink/h100-sxm-8gpu-link-down.txt": "nvidia-smi-nvlink",
    "nvidia-smi-nvlink/pcie-mixed-no-nvlink-mig.txt": "nvidia-smi-nvlink",
    "nvidia-smi-topo/hgx-h100-8gpu-9nic-ansi.txt": "nvidia-smi-topo",
    "nvidia-smi-topo/dgx1-v100-mlx5-wrapped-header.txt": "nvidia-smi-topo",
    "ibstat/cx7-ndr-9ca-half-rate-down-roce-ibpanic.txt": "ibstat",
    "ibstat/cx5-2port-spaces-sdr-ddr.txt": "ibstat",
    "ib-sysfs-flat/h100-4dev-half-rate-down-roce.txt": "ib-sysfs-flat",
    "nvidia-smi-plain/l40s-2gpu-535-capped-325w.txt": "nvidia-smi-plain",
    "ibv-devinfo/cx7-ndr-ib-plus-eth-down-verbose.txt": "ibv-devinfo",
    "nccl-tests/h100-2node-16rank-allreduce-ncclinfo.txt": "nccl-tests",
    "nccl-tests/allgather-old-no-redop-markdown.txt": "nccl-tests",
    "nccl-tests/alltoall-json-v2.json": "nccl-tests",
    "dmesg-xid/mixed-formats-fatal.log": "dmesg-xid",
    "dcgmi-diag/r3-8gpu-memory-fail-power-warn.txt": "dcgmi-diag",
    "dcgmi-diag/r1-4gpu-all-pass.txt": "dcgmi-diag",
}


def test_every_format_has_a_fixture() -> None:
    assert set(EXPECTED.values()) == set(FORMATS)


@pytest.mark.parametrize(("relative", "fmt"), sorted(EXPECTED.items()))
def test_detect_and_inspect_fixture(relative: str, fmt: str) -> None:
    path = FIXTURES / relative
    assert detect_format(path.read_text(encoding="utf-8")) == fmt
    result = inspect_file(path)
    assert result["file"] == str(path)
    assert result["format"] == fmt
    assert isinstance(result["facts"], dict)


def test_inspect_facts_are_the_parsers_facts() -> None:
    xml = inspect_file(FIXTURES / "nvidia-smi-xml/a100-sxm-7of8-mig-v12.xml")
    assert xml["facts"]["gpu_count"] == 7
    dmesg = inspect_file(FIXTURES / "dmesg-xid/mixed-formats-fatal.log")
    assert dmesg["facts"]["summary"]["verdict"] == "fatal"
    assert len(dmesg["facts"]["events"]) == 7
    nccl = inspect_file(FIXTURES / "nccl-tests/h100-2node-16rank-allreduce-ncclinfo.txt")
    assert nccl["facts"]["avg_busbw_gbps"] == 119.761


def test_nccl_log_mentioning_xid_is_still_nccl() -> None:
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
        "[ 1.0] NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus.\n"
    )
    assert detect_format(text) == "nccl-tests"


def test_unknown_format(tmp_path: Path) -> None:
    path = tmp_path / "lspci.txt"
    path.write_text("19:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB]\n")
    with pytest.raises(InputError) as caught:
        inspect_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: unrecognised format")
    assert "nvidia-smi-xml" in message
    assert "\n" not in message


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "core.bin"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00GPU0 X")
    with pytest.raises(InputError, match=r"core\.bin: binary file"):
        inspect_file(path)


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("CA 'mlx5_0'\n\tCA type: caf\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match="non-UTF-8"):
        inspect_file(path)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.xml"
    with pytest.raises(InputError, match=r"nope\.xml: no such file"):
        inspect_file(path)


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        inspect_file(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.txt"
    path.write_text("  \n")
    with pytest.raises(InputError, match="empty file"):
        inspect_file(path)


def test_detected_but_unparseable(tmp_path: Path) -> None:
    path = tmp_path / "truncated.xml"
    path.write_text('<?xml version="1.0" ?>\n<nvidia_smi_log>\n<driver_version>550')
    with pytest.raises(InputError) as caught:
        inspect_file(path)
    assert str(caught.value).startswith(f"{path}: looks like nvidia-smi-xml output but ")
    assert caught.value.exit_code == 2
