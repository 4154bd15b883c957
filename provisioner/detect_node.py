"""`provisioner profiles detect --inventory X --limit HOST`: a profile read from a live node.

playbooks/detect.yml runs the node's own tools read-only (nvidia-smi -q -x, nvlink -s, topo -m,
the InfiniBand ports' sysfs files) and publishes what each printed; the outputs are saved under
the run directory, one file per tool (0600), and read by :func:`provisioner.detect.detect_profile`
exactly as saved outputs would be: one path from the tools to the profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner import inventory as inventory_mod
from provisioner.detect import Detected, detect_profile
from provisioner.errors import InputError
from provisioner.inspect import IB_SYSFS_FLAT, NVIDIA_SMI_NVLINK, detect_format
from provisioner.report import new_run_id, private_dir, runs_dir, write_private
from provisioner.results import ProgressCallback
from provisioner.runner import run_playbook

PLAYBOOK = "detect.yml"
# node_probe's key for each tool (playbooks/detect.yml) -> the file its output is saved as.
OUTPUT_FILES = {
    "nvidia_smi_xml": "nvidia-smi-q-x.xml",
    "nvidia_smi_nvlink": "nvidia-smi-nvlink-s.txt",
    "nvidia_smi_topo": "nvidia-smi-topo-m.txt",
    "ib_sysfs": "infiniband-sysfs.txt",
}


@dataclass(frozen=True)
class NodeDetection:
    host: str
    # The inventory's hosts are simulated nodes (provisioner_simulated: true).
    simulated: bool
    run_dir: Path
    detected: Detected
    saved: list[Path]
    # Tools whose output is not used, and why: printed nothing (with the exit status; e.g. no
    # InfiniBand: find finds none) or something no parser recognises (a GPU without NVLink).
    silent: dict[str, str]


def one_host(source: Path, pattern: str | None) -> str:
    """The single inventory host ``pattern`` names; anything else is one line."""
    if not pattern:
        raise InputError("profiles detect --inventory: name the node with --limit HOST")
    if not source.exists():
        raise InputError(f"inventory {source}: no such file or directory")
    hosts = inventory_mod.hosts_matching(source, pattern)
    if len(hosts) != 1:
        raise InputError(f"profiles detect: --limit {pattern} matches {len(hosts)} host(s) of "
                         f"{source}{': ' + ', '.join(hosts[:5]) if hosts else ''}; name one node")
    return hosts[0]


def detect_node(source: Path, pattern: str | None, name: str,
                on_progress: ProgressCallback | None = None,
                timeout_s: int = 600) -> NodeDetection:
    """Run the node's tools, save what they printed, and detect the profile from the files."""
    host = one_host(source, pattern)
    run_dir = runs_dir() / new_run_id()
    private_dir(run_dir)
    result = run_playbook(PLAYBOOK, [source], run_dir, "00-detect", limit=host,
                          timeout=timeout_s, on_progress=on_progress)
    outputs: dict[str, Any] = (result.reports.get(host, {}).get("detect") or {}).get(
        "outputs") or {}
    if not result.ok or not outputs:
        why = result.failures[0].message if result.failures else "it published nothing"
        raise InputError(f"profiles detect: could not read {host}: {why}")
    saved: list[Path] = []
    silent: dict[str, str] = {}
    absent: dict[str, str] = {}
    for key, file_name in OUTPUT_FILES.items():
        answer = outputs.get(key) or {}
        text = str(answer.get("stdout") or "")
        if not text.strip():
            silent[key] = f"printed nothing (rc {answer.get('rc', '?')})"
            shows = absence(key, answer)
            if shows:
                absent[shows] = f"{host} ({ABSENCES[shows]}"
                silent[key] += f": read as {ABSENCES[shows]}"
            continue
        try:
            detect_format(text)
        except InputError:
            silent[key] = f"printed what no parser recognises (rc {answer.get('rc', '?')})"
            continue
        path = run_dir / file_name
        write_private(path, text + ("" if text.endswith("\n") else "\n"))
        saved.append(path)
    if not saved:
        raise InputError(f"profiles detect: nothing {host}'s tools printed shows its hardware "
                         f"(nvidia-smi -q -x {silent.get('nvidia_smi_xml')}); is the NVIDIA "
                         "driver installed?")
    simulated = inventory_mod.load(source).simulated
    return NodeDetection(host, simulated, run_dir, detect_profile(saved, name, absent), saved,
                         silent)


# A tool that answered and printed nothing shows an absence (provisioner.detect._from_silence):
# the format it stands for -> what it did.
ABSENCES = {
    NVIDIA_SMI_NVLINK: "nvidia-smi nvlink -s exited 0 and printed nothing",
    IB_SYSFS_FLAT: "no RDMA device under the InfiniBand sysfs directory",
}


def absence(key: str, answer: dict[str, Any]) -> str | None:
    """The format whose absence a silent ``answer`` of tool ``key`` shows, or None. nvlink -s
    must have exited 0 (an error says nothing); find over the InfiniBand sysfs directory finds
    no port file (exit 0) or no directory at all (exit 1, "No such file or directory")."""
    rc = answer.get("rc")
    if key == "nvidia_smi_nvlink" and rc == 0:
        return NVIDIA_SMI_NVLINK
    if key == "ib_sysfs" and (rc == 0 or (rc == 1 and "No such file or directory"
                                          in str(answer.get("stderr") or ""))):
        return IB_SYSFS_FLAT
    return None
