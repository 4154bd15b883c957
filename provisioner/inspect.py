"""Recognise a saved tool output and parse it into the same facts the Ansible modules return.

``provisioner inspect FILE...`` is a thin adapter over :func:`inspect_file`. The parsers live in
``module_utils/gpucluster`` (shared with the modules that run on the nodes); this module only
detects the format, reads the file and turns every problem into a one-line ``InputError``.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from provisioner.busbw import FLOOR_MIN_BYTES, human_size, judged_point
from provisioner.errors import InputError
from provisioner.paths import enable_module_utils

NVIDIA_SMI_XML = "nvidia-smi-xml"
NVIDIA_SMI_NVLINK = "nvidia-smi-nvlink"
NVIDIA_SMI_TOPO = "nvidia-smi-topo"
IBSTAT = "ibstat"
IB_SYSFS_FLAT = "ib-sysfs-flat"
NVIDIA_SMI_PLAIN = "nvidia-smi-plain"
IBV_DEVINFO = "ibv-devinfo"
NCCL_TESTS = "nccl-tests"
DMESG_XID = "dmesg-xid"
DCGMI_DIAG = "dcgmi-diag"

FORMATS = (
    NVIDIA_SMI_XML,
    NVIDIA_SMI_NVLINK,
    NVIDIA_SMI_TOPO,
    IBSTAT,
    IB_SYSFS_FLAT,
    NVIDIA_SMI_PLAIN,
    IBV_DEVINFO,
    NCCL_TESTS,
    DMESG_XID,
    DCGMI_DIAG,
)

# Bigger files are not tool output we know; refuse rather than read gigabytes of log.
MAX_BYTES = 64 * 1024 * 1024
# nvidia-smi -q -x of an 8-GPU node is about 1,000 lines, a full kernel ring buffer about
# 10,000: a longer file is a whole log, answered at once instead of parsed for seconds.
MAX_LINES = 20_000
# The format signatures are looked for in the text's head (their tool prints them first), so
# that detection costs the same on a 60 MB file; the Xid marker is looked for everywhere.
DETECT_HEAD = 256 * 1024

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NCCL_HEADER = re.compile(r"^\s*#\s+size\s+count\s+type\b", re.MULTILINE)
_NCCL_FOOTER = re.compile(r"^\s*#\s*(Avg bus bandwidth|Out of bounds values)\s*:", re.MULTILINE)
_DCGM_ROW = re.compile(
    r"^\s*\|[^|\n]*\|\s*(Pass|Fail|Skip|Warn)\b|^\s*\|\s*Diagnostic\s*\|\s*Result\s*\|",
    re.MULTILINE,
)
_IBSTAT_CA = re.compile(r"^CA '[^']+'\s*$", re.MULTILINE)
# Bounded: "^\S*?[\w.-]+/ports/" backtracked over the whole of a long line at each step (a
# 20,000-character line took 2 s). A sysfs path is far shorter than these bounds.
_SYSFS_LINE = re.compile(r"^[^\s:]{0,400}[\w.-]/ports/\d{1,4}/[\w/]{1,200}:", re.MULTILINE)
_NVLINK_GPU_START = re.compile(r"^GPU \d+: ", re.MULTILINE)
_NVLINK_BODY = re.compile(
    r"^\s*Link \d+\s*:|nvlink information|support nvlink|nvlink queries",
    re.MULTILINE | re.IGNORECASE,
)
_TOPO_ROW = re.compile(r"^GPU0\s+X\b", re.MULTILINE)
_SMI_TABLE_HEADER = re.compile(r"^\|\s*NVIDIA-SMI\s+\S+\s+Driver Version:", re.MULTILINE)
_IBV_HCA = re.compile(r"^hca_id:[ \t]*\S+[ \t]*$", re.MULTILINE)
_XID = re.compile(r"NVRM:\s*Xid\s*\(")

# format -> (module in module_utils/gpucluster, function taking the file's text)
_PARSERS = {
    NVIDIA_SMI_XML: ("nvsmi_xml", "parse_nvidia_smi_xml"),
    NVIDIA_SMI_NVLINK: ("nvlink", "parse_nvlink_status"),
    NVIDIA_SMI_TOPO: ("topo", "parse_topo_matrix"),
    IBSTAT: ("ibstat", "parse_ibstat"),
    IB_SYSFS_FLAT: ("ib_sysfs", "parse_ib_sysfs_flat"),
    NVIDIA_SMI_PLAIN: ("nvsmi_table", "parse_nvidia_smi_table"),
    IBV_DEVINFO: ("ibv_devinfo", "parse_ibv_devinfo"),
    NCCL_TESTS: ("nccl_tests", "parse_nccl_tests"),
    DMESG_XID: ("xid", "parse_xid"),
    DCGMI_DIAG: ("dcgm", "parse_dcgmi_diag"),
}


def _is_nccl_json(text: str) -> bool:
    if not text.lstrip().startswith("{"):
        return False
    try:
        document = json.loads(text)
    except ValueError:
        return False
    return isinstance(document, dict) and "results" in document and "config" in document


def _has_nvlink_gpu_line(text: str) -> bool:
    """A line ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)``. Checked with string methods on
    each candidate line: the regex ``^GPU \\d+: .*\\(UUID: [^)]*\\)\\s*$`` backtracked over every
    "(UUID: " of a long line (a 2 MB line of them took minutes)."""
    for match in _NVLINK_GPU_START.finditer(text):
        end = text.find("\n", match.end())
        line = text[match.end():end if end >= 0 else len(text)].rstrip()
        opening = line.rfind("(UUID: ")
        if line.endswith(")") and opening >= 0 and ")" not in line[opening:-1]:
            return True
    return False


def detect_format(text: str) -> str:
    """Name of the tool output ``text`` holds (one of :data:`FORMATS`).

    The checks go from the most specific signature to the least, so a log that merely mentions
    another tool (an Xid line inside an NCCL log) is classified by its main content.
    Raises ``InputError`` when nothing matches.
    """
    plain = _ANSI.sub("", text[:DETECT_HEAD])
    head = plain.lstrip()[:4096]
    if "<nvidia_smi_log" in head:
        return NVIDIA_SMI_XML
    if _is_nccl_json(text) or _NCCL_HEADER.search(plain) or _NCCL_FOOTER.search(plain):
        return NCCL_TESTS
    if _DCGM_ROW.search(plain):
        return DCGMI_DIAG
    if _IBSTAT_CA.search(plain):
        return IBSTAT
    if _SYSFS_LINE.search(plain):
        return IB_SYSFS_FLAT
    if _SMI_TABLE_HEADER.search(plain):
        return NVIDIA_SMI_PLAIN
    if _IBV_HCA.search(plain):
        return IBV_DEVINFO
    if _has_nvlink_gpu_line(plain) and _NVLINK_BODY.search(plain):
        return NVIDIA_SMI_NVLINK
    if _TOPO_ROW.search(plain.replace("\t", " ")):
        return NVIDIA_SMI_TOPO
    if _XID.search(text):
        return DMESG_XID
    raise InputError(
        "unrecognised format; expected the saved output of one of: " + ", ".join(FORMATS)
    )


def _parser(fmt: str) -> Callable[[str], Any]:
    enable_module_utils()
    module_name, function_name = _PARSERS[fmt]
    module = importlib.import_module(f"gpucluster.{module_name}")
    return cast("Callable[[str], Any]", getattr(module, function_name))


def parse_text(text: str, fmt: str) -> dict[str, Any]:
    """Facts for ``text`` already known to be ``fmt``. Raises ``ValueError`` (the parsers'
    ``ParseError``) when the text does not have the expected shape."""
    parsed = _parser(fmt)(text)
    if fmt == DMESG_XID:
        xid = importlib.import_module("gpucluster.xid")
        classify = cast("Callable[[list[dict[str, Any]]], dict[str, Any]]", xid.classify)
        return {"events": parsed, "summary": classify(parsed)}
    return cast("dict[str, Any]", parsed)


def _read_text(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a file") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"{path}: larger than {MAX_BYTES // (1024 * 1024)} MiB, not a tool output")
    if not data.strip():
        raise InputError(f"{path}: empty file")
    lines = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    if lines > MAX_LINES:
        raise InputError(f"{path}: {lines} lines, longer than any output of the tools inspect "
                         f"reads (limit {MAX_LINES:,}); keep the part that matters, e.g. "
                         "`grep -E 'NVRM|Xid'` of a kernel log")
    if b"\x00" in data:
        raise InputError(f"{path}: binary file (contains NUL bytes), expected text output")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: binary or non-UTF-8 file (invalid byte at offset {exc.start})"
        ) from None


def inspect_file(path: Path) -> dict[str, Any]:
    """``{"file": str, "format": str, "facts": {...}}`` for one saved tool output.

    Raises ``InputError("<path>: <what is wrong>")`` for a missing, unreadable, binary or
    unrecognised file, and when the detected format's parser rejects the content.
    """
    text = _read_text(path)
    try:
        fmt = detect_format(text)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    try:
        facts = parse_text(text, fmt)
    except ValueError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: looks like {fmt} output but {first_line}") from None
    return {"file": str(path), "format": fmt, "facts": facts}


# --------------------------------------------------------------------------- checks vs profile

_FACT_KEY = {"nvidia-smi-xml": "gpu", "nvidia-smi-nvlink": "nvlink", "ib-sysfs-flat": "ib",
             "ibstat": "ib", "dmesg-xid": "xid", "dcgmi-diag": "dcgm"}


def check_against_profile(result: dict[str, Any], profile: Any) -> list[dict[str, Any]]:
    """The validation checks (or the busbw floor, for an nccl-tests log) that apply to one
    inspected file, judged against a hardware profile (``provisioner.profiles.Profile``)."""
    validate = importlib.import_module("gpucluster.validate")
    xid = importlib.import_module("gpucluster.xid")
    fmt, facts = result["format"], result["facts"]
    expected = profile.sim_json()
    if fmt == "nccl-tests":
        return [_busbw_check(facts, profile)]
    key = _FACT_KEY.get(fmt)
    if key is None:
        return []
    value: Any = facts
    if fmt == "ibstat":
        value = validate.ib_from_ibstat(facts)
    elif fmt == "dmesg-xid":
        events = facts if isinstance(facts, list) else facts.get("events", [])
        value = {"events": [dict(e, fatal=e.get("xid") in xid.FATAL_XIDS) for e in events]}
    return cast(list[dict[str, Any]], validate.evaluate({key: value}, expected))


def nccl_tests_point(facts: dict[str, Any]) -> Any:
    """The busbw a floor is compared with, from parsed nccl-tests facts (provisioner.busbw)."""
    return judged_point(
        (int(row.get("size_bytes") or 0), (row.get(half) or {}).get("busbw_gbps"))
        for row in facts.get("rows") or [] for half in ("out_of_place", "in_place")
        if row.get(half))


def _busbw_check(facts: dict[str, Any], profile: Any) -> dict[str, Any]:
    hosts = {r.get("host") for r in facts.get("ranks") or [] if r.get("host")}
    inter = len(hosts) > 1
    key = "busbw_floor_inter_gbps" if inter else "busbw_floor_intra_gbps"
    floor = getattr(profile, key)
    point = nccl_tests_point(facts)
    where = "multi-node" if inter else "single-node (or unknown hosts)"
    if point is None:
        return {"name": "nccl_busbw", "status": "skip", "measured": None, "expected": floor,
                "detail": f"no all-reduce size >= {human_size(FLOOR_MIN_BYTES)} in the log; "
                          "rerun with -e 8G (the floors are defined at the largest sizes)"}
    if floor is None:
        # As burn-in does for a copy floor the profile lacks: measured, reported, not judged.
        return {"name": "nccl_busbw", "status": "skip", "measured": round(point.busbw_gbps, 3),
                "expected": None,
                "detail": f"busbw {point.busbw_gbps:g} GB/s at {human_size(point.size_bytes)} (the "
                          f"largest size), not judged: profile {profile.name} has no {key} "
                          f"({where})"}
    ok = point.busbw_gbps >= floor
    return {"name": "nccl_busbw", "status": "pass" if ok else "fail",
            "measured": round(point.busbw_gbps, 3), "expected": floor,
            "detail": f"busbw {point.busbw_gbps:g} GB/s at {human_size(point.size_bytes)} (the "
                      f"largest size) vs the {where} floor {floor:g} GB/s"
                      + ("" if ok else ": below the profile's floor")}
