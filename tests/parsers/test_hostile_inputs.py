"""`inspect` on hostile and partial input: every case answered in under a second, with a parse
or one line saying what is wrong or missing; legend lines never become matrix rows."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from provisioner.errors import InputError
from provisioner.inspect import MAX_LINES, inspect_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TOPO = (FIXTURES / "nvidia-smi-topo" / "pcie-2gpu-nic-columns-from-nic2.txt").read_text()
NVLINK = (FIXTURES / "nvidia-smi-nvlink" / "h100-sxm-8gpu-link-down.txt").read_text()
IBSTAT = (FIXTURES / "ibstat" / "cx5-2port-spaces-sdr-ddr.txt").read_text()
SYSFS = (FIXTURES / "ib-sysfs-flat" / "h100-4dev-half-rate-down-roce.txt").read_text()
LIMIT_S = 1.0


def timed(path: Path) -> tuple[dict[str, object] | None, str | None]:
    started = time.perf_counter()
    try:
        result, error = inspect_file(path), None
    except InputError as exc:
        result, error = None, str(exc)
    elapsed = time.perf_counter() - started
    assert elapsed < LIMIT_S, f"{path.name}: {elapsed:.2f} s"
    if error is not None:
        assert "\n" not in error and error.startswith(f"{path}: ")
    return result, error


def write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, newline="")
    return path


# hostile input: linear, under a second ---------------------------------------------------------

HOSTILE: dict[str, str | bytes] = {
    "2mb-one-line-letters": "a" * 2_000_000,
    "2mb-one-line-sysfs-paths": "mlx5_0/ports/1/" * 140_000,  # the quadratic sysfs regex
    "20k-sysfs-prefix": "mlx5_0/ports/1/" + "a" * 20_000,
    "2mb-one-line-uuid": "GPU 0: (UUID: " * 140_000,  # the quadratic nvlink detection
    "2mb-one-line-osc": "\x1b]" * 1_000_000,  # the quadratic ANSI strip
    "2mb-topo-row-osc": "GPU0 X " + "\x1b]" * 1_000_000,
    "2mb-one-line-spaces": "GPU0 " + " " * 2_000_000 + "X",
    "2mb-link-lines": "GPU 0: x (UUID: GPU-1)\n" + "Link 0: " * 250_000,
    "2mb-ca-name": "CA '" + "x" * 2_000_000,
    "100k-lines-junk": "abc def\n" * 100_000,
    "100k-lines-topo": "GPU0\tX\tNV18\n" * 100_000,
    "100k-lines-crlf": "GPU0 X NV18\r\n" * 100_000,
    "binary": bytes(range(256)) * 8_000,
    "binary-no-nul": bytes(range(1, 256)) * 8_000,
    "fixture-plus-2mb-line": TOPO + "x" * 2_000_000 + "\n",
    "nvlink-plus-2mb-line": NVLINK + "y" * 2_000_000 + "\n",
    "sysfs-plus-2mb-line": SYSFS + "mlx5_0/ports/1/" * 140_000 + "\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_is_answered_in_under_a_second(tmp_path: Path, name: str) -> None:
    result, error = timed(write(tmp_path, f"{name}.txt", HOSTILE[name]))
    assert (result is None) != (error is None)


def test_too_many_lines_is_one_clear_line(tmp_path: Path) -> None:
    _result, error = timed(write(tmp_path, "dmesg.log", "NVRM: Xid (PCI:0000:01:00): 79\n"
                                 * (MAX_LINES + 1)))
    assert error is not None and f"{MAX_LINES + 1} lines" in error and "grep" in error


def test_binary_bytes_are_refused_as_binary(tmp_path: Path) -> None:
    _r, error = timed(write(tmp_path, "b.bin", HOSTILE["binary"]))
    assert error is not None and "binary file" in error
    _r, error = timed(write(tmp_path, "c.bin", HOSTILE["binary-no-nul"]))
    assert error is not None and "non-UTF-8" in error


@pytest.mark.parametrize("text", [TOPO, NVLINK, IBSTAT, SYSFS])
def test_crlf_parses_as_lf(tmp_path: Path, text: str) -> None:
    lf, _ = timed(write(tmp_path, "lf.txt", text))
    crlf, _ = timed(write(tmp_path, "crlf.txt", text.replace("\n", "\r\n")))
    assert lf is not None and crlf is not None
    assert crlf["format"] == lf["format"] and crlf["facts"] == lf["facts"]


# partial pastes of topo -m ---------------------------------------------------------------------

MATRIX, _, LEGENDS = TOPO.partition("\nLegend:")
NIC_LEGEND = "NIC Legend:" + LEGENDS.partition("NIC Legend:")[2]
LEGEND_ENTRIES = LEGENDS.partition("NIC Legend:")[0]


def topo_facts(tmp_path: Path, text: str) -> dict[str, object]:
    result, error = timed(write(tmp_path, "topo.txt", text))
    assert result is not None, error
    assert result["format"] == "nvidia-smi-topo"
    facts = result["facts"]
    assert isinstance(facts, dict)
    return facts


def assert_four_clean_rows(facts: dict[str, object]) -> None:
    matrix = facts["matrix"]
    assert isinstance(matrix, dict)
    assert list(matrix) == ["GPU0", "GPU1", "NIC2", "NIC3"]
    assert matrix["NIC3"] == {"GPU0": "SYS", "GPU1": "SYS", "NIC2": "SYS", "NIC3": "X"}
    assert facts["errors"] == []
    text = repr(facts)
    assert "Self" not in text and "mlx5" not in repr(matrix) and "=" not in repr(matrix)


@pytest.mark.parametrize("shape", ["full", "no-legend", "only-nic-legend",
                                   "legend-entries-without-title", "tabs"])
def test_topo_partial_pastes_never_parse_legend_lines_as_rows(tmp_path: Path,
                                                              shape: str) -> None:
    text = {
        "full": TOPO,
        "no-legend": MATRIX + "\n",
        "only-nic-legend": MATRIX + "\n\n" + NIC_LEGEND,
        "legend-entries-without-title": MATRIX + "\n" + LEGEND_ENTRIES,
        "tabs": "\n".join("\t".join(line.split()) for line in TOPO.splitlines()),
    }[shape]
    facts = topo_facts(tmp_path, text)
    assert_four_clean_rows(facts)
    expected_legend = ({"NIC2": "mlx5_2", "NIC3": "mlx5_3"}
                       if shape in ("full", "only-nic-legend", "tabs") else {})
    assert facts["nic_legend"] == expected_legend


def test_topo_with_affinity_columns_cut(tmp_path: Path) -> None:
    header, *rows = MATRIX.splitlines()
    cut = "\n".join([" ".join(header.split()[:4]), *(" ".join(r.split()[:5]) for r in rows)])
    facts = topo_facts(tmp_path, cut)
    assert facts["affinity"] == {} and facts["errors"] == []
    assert facts["devices"] == ["GPU0", "GPU1", "NIC2", "NIC3"]


def test_topo_with_cells_cut_says_which_row(tmp_path: Path) -> None:
    lines = MATRIX.splitlines()
    lines[2] = " ".join(lines[2].split()[:3])  # GPU1 keeps two cells
    facts = topo_facts(tmp_path, "\n".join(lines) + "\n")
    assert facts["errors"] == ["GPU1: 2 cells for 4 columns"]


def test_topo_without_header_is_refused_naming_it(tmp_path: Path) -> None:
    rows = "\n".join(MATRIX.splitlines()[1:]) + "\n"
    _r, error = timed(write(tmp_path, "rows.txt", rows))
    assert error is not None and "header" in error and "missing" in error


# nvlink with only some links; ibstat with one CA ----------------------------------------------


def test_nvlink_with_only_some_links(tmp_path: Path) -> None:
    some = "\n".join(NVLINK.splitlines()[:5]) + "\n"  # GPU 0 and its links 0-3
    result, error = timed(write(tmp_path, "nvlink.txt", some))
    assert result is not None, error
    facts = result["facts"]
    assert isinstance(facts, dict)
    [gpu] = facts["gpus"]
    assert (gpu["links_up"], gpu["links_total"]) == (4, 4)


def test_ibstat_with_one_ca(tmp_path: Path) -> None:
    first_ca = IBSTAT.split("\nCA '")[0] + "\n"
    result, error = timed(write(tmp_path, "ibstat.txt", first_ca))
    assert result is not None, error
    facts = result["facts"]
    assert isinstance(facts, dict)
    assert [ca["name"] for ca in facts["cas"]] == ["mlx5_0"]
    assert [p["number"] for p in facts["cas"][0]["ports"]] == [1, 2]
