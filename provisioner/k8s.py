"""Kubernetes hand-off: what a cluster provisioned by this tool tells Kubernetes about itself.

Pure but for ``write_handoff``, which writes three files into a directory; nothing here
contacts a host or a Kubernetes API, prints or exits. From a ``ClusterPlan``:

- ``node-labels.yaml``: the labels of every GPU node (host -> {key: value}), and
  ``label-nodes.sh``, one ``kubectl label node HOST k=v ... --overwrite`` line per node;
- ``gpu-operator-values.yaml``: values for NVIDIA's GPU Operator Helm chart on nodes that
  already have the driver, the container toolkit (with its CDI spec), DCGM and dcgm-exporter,
  installed by ``provisioner up``: the Operator must not install or run them again.

``nvidia.com/gpu.product`` is the name GPU feature discovery (GFD) writes: NVML's device name,
which is what ``nvidia-smi --query-gpu=name`` prints and what a profile's ``gpu_model`` holds
(profiles.yml, "the name nvidia-smi prints"), with the characters GFD drops removed and blanks
turned into '-' (k8s-device-plugin ``internal/lm/resource.go``, ``sanitise``; v0.20.0). GFD,
which the Operator runs by default, then writes the same value. GFD adds ``-SHARED`` when GPUs
are shared (time-slicing, MPS) and a MIG suffix with MIG; the plan knows neither.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import InputError
from provisioner.plan import ClusterPlan, HostPlan

# Labels NVIDIA's GPU feature discovery also writes (same keys, same values).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
# Ours: what the plan decided for the node.
LABEL_PREFIX = "gpucluster.io/"
STACK_LABELS: tuple[tuple[str, str], ...] = (
    # (label name after the prefix, ResolvedStack attribute)
    ("stack", "stack"),
    ("driver", "driver_version"),
    ("cuda", "cuda_version"),
    ("nccl", "nccl_version"),
    ("cudnn", "cudnn_version"),
)
PROFILE_LABEL = f"{LABEL_PREFIX}profile"

LABELS_FILE = "node-labels.yaml"
LABEL_SCRIPT = "label-nodes.sh"
VALUES_FILE = "gpu-operator-values.yaml"

# Kubernetes' rules (apimachinery validation: IsValidLabelValue, IsDNS1123Subdomain): a value
# is empty or up to 63 characters of [-A-Za-z0-9_.] that begin and end with an alphanumeric; a
# node name is a DNS subdomain. The label keys are this module's constants (the test checks
# them against Kubernetes' key rule).
LABEL_VALUE_MAX = 63
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_SUBDOMAIN_MAX = 253
_NOT_IN_VALUE = re.compile(r"[^-A-Za-z0-9_.]")
_GFD_DROPPED = re.compile(r"[^A-Za-z0-9\-_. ]")
_VALUE_RULE = ("at most 63 characters of A-Z a-z 0-9 - _ . beginning and ending with a letter "
               "or digit")

# The chart releases whose values.yaml holds every key below (NVIDIA/gpu-operator,
# deployments/gpu-operator/values.yaml at these tags).
CHART_CHECKED = "gpu-operator v26.7.0 (the same keys since v24.9)"
# GPU Operator values, each top-level key with why it is set. Every key exists in the chart's
# values.yaml (tests/unit/test_k8s_export.py lists them with the chart version it was read from).
# The nodes' own DCGM host engine (nvidia-dcgm, 127.0.0.1:5555) and dcgm-exporter (the
# monitoring phase, every GPU node, :9400) stay in charge of GPU telemetry.
_VALUES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("driver", "The driver is installed on the host (role nvidia_driver, pinned by the plan): "
     "the Operator must not install one.", {"enabled": False}),
    ("toolkit", "The NVIDIA Container Toolkit is installed on the host and registered with "
     "containerd/docker as the 'nvidia' runtime (role nvidia_container_toolkit): the Operator "
     "must not install one.", {"enabled": False}),
    ("cdi", "The host toolkit writes a CDI spec (/etc/cdi/nvidia.yaml); the device plugin hands "
     "GPUs over through CDI (containerd 2.x reads CDI specs by default; 1.7 needs "
     "enable_cdi = true).", {"enabled": True}),
    ("dcgm", "The DCGM host engine runs on the host (nvidia-dcgm, role nvidia_dcgm): no "
     "standalone DCGM pod.", {"enabled": False}),
    ("dcgmExporter", "dcgm-exporter already runs on every GPU node (monitoring phase, port "
     "9400; scrape <node>:9400). The Operator's would start a second DCGM host engine, or, "
     "attached to the host's (env DCGM_REMOTE_HOSTENGINE_INFO=localhost:5555, which makes the "
     "Operator put it on the host network), fail to bind port 9400.", {"enabled": False}),
    ("devicePlugin", "Advertises nvidia.com/gpu to the scheduler: the part Kubernetes needs.",
     {"enabled": True}),
    ("gfd", "GPU feature discovery keeps the nvidia.com/gpu.* labels current; it writes the "
     "same nvidia.com/gpu.product and nvidia.com/gpu.count values as label-nodes.sh.",
     {"enabled": True}),
)


def operator_values() -> dict[str, Any]:
    """The GPU Operator chart values of the hand-off, as Helm reads them."""
    return {key: dict(body) for key, _why, body in _VALUES}


def value_keys(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted leaf keys of a values mapping (``driver.enabled``, ...)."""
    keys: list[str] = []
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            keys.extend(value_keys(value, f"{dotted}."))
        else:
            keys.append(dotted)
    return keys


def is_valid_label_value(value: str) -> bool:
    return len(value) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(value) is not None


def is_valid_node_name(name: str) -> bool:
    return len(name) <= DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN.fullmatch(name) is not None


def sanitize_label_value(value: str) -> str:
    """``value`` made a valid label value: every character outside [-A-Za-z0-9_.] becomes '-',
    then it is cut to 63 characters and stripped of what does not begin or end with a letter or
    digit. A valid value comes back unchanged."""
    if is_valid_label_value(value):
        return value
    text = _NOT_IN_VALUE.sub("-", value)[:LABEL_VALUE_MAX]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", text)


def gfd_product(gpu_model: str) -> str:
    """The product name as GPU feature discovery labels it: characters outside
    [A-Za-z0-9-_. ] dropped, runs of blanks turned into one '-' ("NVIDIA H100 80GB HBM3" ->
    "NVIDIA-H100-80GB-HBM3")."""
    return "-".join(_GFD_DROPPED.sub("", gpu_model).split())


@dataclass(frozen=True)
class Handoff:
    """What the hand-off says: the labels per GPU node (in inventory order), the Operator's
    values, and notes on what had to be changed to fit Kubernetes' rules."""

    labels: dict[str, dict[str, str]]
    values: dict[str, Any]
    notes: tuple[str, ...] = ()
    files: dict[str, Path] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"files": {name: str(path) for name, path in self.files.items()},
                "labels": self.labels, "gpu_operator_values": self.values,
                "notes": list(self.notes)}


def _raw_labels(host: HostPlan) -> dict[str, str]:
    """The labels of a GPU node before Kubernetes' rules are applied."""
    if host.profile is None or host.stack is None:  # plan.build gives every GPU node both
        raise ValueError(f"host {host.name}: not a planned GPU node (no profile or stack)")
    labels = {GPU_PRODUCT_LABEL: gfd_product(host.profile.gpu_model),
              GPU_COUNT_LABEL: str(host.profile.gpu_count)}
    for name, attribute in STACK_LABELS:
        labels[f"{LABEL_PREFIX}{name}"] = str(getattr(host.stack, attribute))
    labels[PROFILE_LABEL] = host.profile.name
    return labels


def build(plan: ClusterPlan) -> Handoff:
    """Labels for every GPU node of ``plan`` (values made valid, each change noted once per
    label and value) and the Operator's values. An inventory without GPU nodes is refused."""
    gpu = [h for h in plan.hosts.values() if h.kind == "gpu"]
    if not gpu:
        raise InputError(f"inventory {plan.inventory.source}: no GPU nodes, so nothing to hand "
                         "off to Kubernetes; add hosts to the gpu_nodes group")
    labels: dict[str, dict[str, str]] = {}
    changed: dict[tuple[str, str, str], list[str]] = {}
    for host in gpu:
        clean: dict[str, str] = {}
        for key, value in _raw_labels(host).items():
            clean[key] = sanitize_label_value(value)
            if clean[key] != value:
                changed.setdefault((key, value, clean[key]), []).append(host.name)
        labels[host.name] = clean
    notes = [f"label {key}: {value!r} is not a valid Kubernetes label value ({_VALUE_RULE}); "
             f"written as {new!r} on {_hosts(hosts)}"
             for (key, value, new), hosts in changed.items()]
    bad_names = [h.name for h in gpu if not is_valid_node_name(h.name)]
    if bad_names:
        notes.append(f"{_hosts(bad_names)}: not a valid Kubernetes node name (lower-case "
                     f"letters, digits, '-' and '.'); {LABEL_SCRIPT} uses the inventory name: "
                     "edit it to the node's name in Kubernetes")
    return Handoff(labels=labels, values=operator_values(), notes=tuple(notes))


def _hosts(names: list[str]) -> str:
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"host{'s' if len(names) > 1 else ''} {shown}"


def _comment(lines: Iterable[str]) -> str:
    """Comment lines; a line break inside a line (an odd inventory path) stays commented."""
    return "".join(f"# {part}".rstrip() + "\n" for line in lines for part in line.splitlines())


def _header(plan: ClusterPlan, what: str) -> list[str]:
    simulated = " (a SIMULATED cluster)" if plan.simulated else ""
    return [what, f"Written by `provisioner export k8s` from the plan of the inventory{simulated}",
            f"  {plan.inventory.source}",
            "Regenerate it (do not edit it) after changing the inventory."]


def labels_yaml(plan: ClusterPlan, handoff: Handoff) -> str:
    lines = [*_header(plan, f"The labels of every GPU node ({LABEL_SCRIPT} applies them)."),
             f"{GPU_PRODUCT_LABEL} is the profile's gpu_model (the name nvidia-smi prints) "
             "the way", "GPU feature discovery writes it: blanks become '-'.",
             *[line for note in handoff.notes for line in _wrap(f"note: {note}")]]
    return _comment(lines) + yaml.safe_dump(handoff.labels, sort_keys=False)


def label_script(plan: ClusterPlan, handoff: Handoff) -> str:
    comment = _comment([
        *_header(plan, f"Labels every GPU node with the labels of {LABELS_FILE}."),
        "--overwrite replaces the values of an earlier hand-off. The node names are the",
        "inventory's: Kubernetes must know the nodes by those names.",
    ])
    lines = ["#!/bin/sh", comment.rstrip("\n"), "set -eu"]
    for host, labels in handoff.labels.items():
        pairs = " ".join(shlex.quote(f"{key}={value}") for key, value in labels.items())
        lines.append(f"kubectl label node {shlex.quote(host)} {pairs} --overwrite")
    return "\n".join(lines) + "\n"


def values_yaml(plan: ClusterPlan, handoff: Handoff) -> str:
    out = [_comment([
        *_header(plan, "Values for NVIDIA's GPU Operator Helm chart on nodes that "
                 "`provisioner up` provisioned."),
        f"Keys checked against the chart's values.yaml, {CHART_CHECKED}.",
        "  helm repo add nvidia https://helm.ngc.nvidia.com/nvidia",
        "  helm install gpu-operator nvidia/gpu-operator -n gpu-operator --create-namespace \\",
        f"    --values {VALUES_FILE}",
    ])]
    whys = {key: why for key, why, _body in _VALUES}
    for key, body in handoff.values.items():
        out.append(_comment(_wrap(whys.get(key, "")))
                   + yaml.safe_dump({key: body}, sort_keys=False))
    return "".join(out)


def _wrap(text: str, width: int = 96) -> list[str]:
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


def write_handoff(plan: ClusterPlan, directory: Path) -> Handoff:
    """Build the hand-off and write its three files into ``directory`` (created if missing;
    our files in it are overwritten). A path that is not a directory, or one that cannot be
    written, is bad input."""
    handoff = build(plan)
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"export k8s -o {directory}: exists and is not a directory; name a "
                         "directory (it is created if missing)")
    texts = {LABELS_FILE: labels_yaml(plan, handoff), LABEL_SCRIPT: label_script(plan, handoff),
             VALUES_FILE: values_yaml(plan, handoff)}
    files: dict[str, Path] = {}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            path = directory / name
            path.write_text(text, encoding="utf-8")
            if name == LABEL_SCRIPT:
                path.chmod(0o755)
            files[name] = path
    except OSError as exc:
        raise InputError(f"export k8s -o {directory}: cannot write the hand-off "
                         f"({exc.strerror or exc})") from exc
    return Handoff(labels=handoff.labels, values=handoff.values, notes=handoff.notes,
                   files=files)
