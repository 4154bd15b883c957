"""Simulated NVIDIA packages for the local mirror, generated from the stack matrix.

Every package of every stack that supports Debian 12 gets a stand-in with the real upstream name
and version (so pinning, holding and version checks are the real ones). Contents are tiny
simulated tools (``provisioner.sim.tools``, bundled by ``provisioner.sim.bundle``): nvidia-smi
(answers from /etc/gpu-sim/profile.json), nvidia-persistenced, nv-fabricmanager and
nv-hostengine (idle daemons), nvcc --version, nvidia-ctk (CDI spec), dcgmi diag and health,
dcgm-exporter (a /metrics server), plus the version headers (cudnn_version.h, nccl.h) the verify
steps read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.matrix import COMPONENTS, FLAVORS, StackMatrix, load_matrix
from provisioner.matrix.packages import stack_pins
from provisioner.sim.bundle import daemon_script, tool_script
from provisioner.sim.mirror import (
    SimPackage,
    build_flat_repo,
    build_packages,
    ensure_signing_key,
    simulated_driver_package,
)

OS_DIR = "debian12"
CUDA_REPO = f"cuda/{OS_DIR}/x86_64"
CTK_REPO = "libnvidia-container/stable/deb/amd64"
KEY_PATH = "keys/mirror.asc"


def _upstream(version: str) -> str:
    """'1:3.3.6' -> '3.3.6'; '550.54.15-1' -> '550.54.15'; '2.21.5-1+cuda12.4' -> '2.21.5'."""
    v = version.split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


def _unit(description: str, exec_start: str) -> str:
    return ("# SIMULATED unit (gpu-cluster-provisioner)\n[Unit]\n"
            f"Description={description} (SIMULATED)\n\n[Service]\nType=simple\n"
            f"ExecStart={exec_start}\nRestart=on-failure\n\n[Install]\n"
            "WantedBy=multi-user.target\n")


def package_for(component: str, flavor: str | None, name: str, version: str,
                stack: Mapping[str, Any]) -> SimPackage:
    up = _upstream(version)
    if component == "driver" and name.startswith("cuda-drivers"):
        base = simulated_driver_package(name, version, str(stack["cuda_version"]),
                                        tool_script("nvidia_smi"))
        persist = daemon_script("nvidia-persistenced",
                                before_idle="/usr/bin/nvidia-smi -pm 1 >/dev/null 2>&1 || true\n")
        files = dict(base.files)
        files.update({
            "/usr/bin/nvidia-persistenced": persist,
            "/lib/systemd/system/nvidia-persistenced.service":
                _unit("NVIDIA Persistence Daemon", "/usr/bin/nvidia-persistenced"),
        })
        return SimPackage(name=name, version=version, files=files,
                          modes={**base.modes, "/usr/bin/nvidia-persistenced": 0o755},
                          description=f"NVIDIA driver {up} user space (simulated)")
    if component == "driver":
        return SimPackage(name=name, version=version, files={
            f"/usr/src/nvidia-{up}/SIMULATED": "simulated kernel module sources\n",
            "/usr/lib/gpu-sim/module-flavor": f"{flavor}\n",
        }, description=f"NVIDIA {flavor} kernel module {up} via DKMS (simulated)")
    if component == "fabricmanager" and "fabricmanager" in name:
        return SimPackage(name=name, version=version, files={
            "/usr/bin/nv-fabricmanager": daemon_script("nv-fabricmanager"),
            "/usr/lib/gpu-sim/fabricmanager-version": f"{up}\n",
            "/lib/systemd/system/nvidia-fabricmanager.service":
                _unit("NVIDIA fabric manager service", "/usr/bin/nv-fabricmanager"),
        }, modes={"/usr/bin/nv-fabricmanager": 0o755},
            description=f"NVIDIA fabric manager {up} (simulated)")
    if component == "cuda_toolkit":
        cuda = str(stack["cuda_version"])
        prefix = f"/usr/local/cuda-{cuda}"
        nvcc = tool_script("nvcc", release=cuda, toolkit=up)
        return SimPackage(name=name, version=version, files={
            f"{prefix}/bin/nvcc": nvcc,
            f"{prefix}/version.json": f'{{"cuda": {{"name": "CUDA SDK", "version": "{up}"}}}}\n',
            f"{prefix}/SIMULATED": "simulated CUDA toolkit\n",
        }, modes={f"{prefix}/bin/nvcc": 0o755},
            postinst=(f"update-alternatives --install /usr/local/cuda cuda {prefix} "
                      f"{int(cuda.replace('.', ''))}\n"),
            description=f"CUDA toolkit {up} (simulated nvcc only)")
    if component == "cudnn" and "-dev" in name:
        major, minor, patch = [*up.split("."), "0", "0"][:3]
        return SimPackage(name=name, version=version, files={
            "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h":
                f"/* SIMULATED */\n#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n"
                f"#define CUDNN_PATCHLEVEL {patch}\n",
        }, description=f"cuDNN {up} headers (simulated)")
    if component == "nccl" and "-dev" in name:
        m = re.match(r"(\d+)\.(\d+)\.(\d+)", up)
        major, minor, patch = m.groups() if m else ("0", "0", "0")
        return SimPackage(name=name, version=version, files={
            "/usr/include/nccl.h":
                f"/* SIMULATED */\n#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n"
                f"#define NCCL_PATCH {patch}\n#define NCCL_SUFFIX \"\"\n",
        }, description=f"NCCL {up} headers (simulated)")
    if component == "container_toolkit" and name == "nvidia-container-toolkit-base":
        return SimPackage(name=name, version=version, files={
            "/usr/bin/nvidia-ctk": tool_script("nvidia_ctk", version=up),
            "/usr/bin/nvidia-container-runtime": "#!/bin/sh\necho 'SIMULATED runtime' >&2\n"
                                                 "exit 1\n",
        }, modes={"/usr/bin/nvidia-ctk": 0o755, "/usr/bin/nvidia-container-runtime": 0o755},
            description=f"NVIDIA Container Toolkit {up} CLI (simulated)")
    if component == "dcgm" and (name == "datacenter-gpu-manager" or name.endswith("-core")):
        return SimPackage(name=name, version=version, files={
            "/usr/bin/dcgmi": tool_script("dcgmi", version=up),
            "/usr/bin/nv-hostengine": daemon_script("nv-hostengine"),
            "/lib/systemd/system/nvidia-dcgm.service":
                _unit("NVIDIA DCGM host engine", "/usr/bin/nv-hostengine"),
        }, modes={"/usr/bin/dcgmi": 0o755, "/usr/bin/nv-hostengine": 0o755},
            description=f"NVIDIA DCGM {up} (simulated)")
    return SimPackage(name=name, version=version, description=f"{name} {up} (simulated)")


# NVIDIA publishes dcgm-exporter as a package-managed systemd service whose package version is
# the exporter's ("Install DCGM Exporter", DCGM documentation); 4.8.3 is the exporter release a
# public package index carries as dcgm-exporter 4.8.3 (built against DCGM 4.6.0). The monitoring
# role installs the package by name, unpinned like a tool outside the stack matrix.
DCGM_EXPORTER_VERSION = "4.8.3-1"


def dcgm_exporter_package() -> SimPackage:
    up = _upstream(DCGM_EXPORTER_VERSION)
    return SimPackage(name="dcgm-exporter", version=DCGM_EXPORTER_VERSION, files={
        "/usr/bin/dcgm-exporter": tool_script("dcgm_exporter", version=up),
        "/lib/systemd/system/dcgm-exporter.service":
            _unit("NVIDIA DCGM exporter", "/usr/bin/dcgm-exporter --address :9400"),
    }, modes={"/usr/bin/dcgm-exporter": 0o755},
        description=f"NVIDIA DCGM exporter {up} (simulated)")


def all_packages(matrix: StackMatrix) -> tuple[list[SimPackage], list[SimPackage]]:
    """(CUDA-repo packages, container-toolkit-repo packages), de-duplicated by name+version:
    the apt pins of every Debian 12 stack, both driver flavours and the fabric manager."""
    exporter = dcgm_exporter_package()
    cuda: dict[tuple[str, str], SimPackage] = {(exporter.name, exporter.version): exporter}
    ctk: dict[tuple[str, str], SimPackage] = {}
    for stack in matrix.stacks.values():
        if OS_DIR not in stack.os_support:
            continue
        info = {"cuda_version": stack.cuda_version}
        for component in COMPONENTS:
            flavors: tuple[str | None, ...] = FLAVORS if component == "driver" else (None,)
            for flavor in flavors:
                pins = stack_pins(stack, matrix.naming_facts, component,
                                  "apt", flavor or stack.driver.default_module_flavor)
                for key in pins:
                    target = ctk if component == "container_toolkit" else cuda
                    if key not in target:
                        target[key] = package_for(component, flavor, *key, info)
    return list(cuda.values()), list(ctk.values())


@dataclass(frozen=True)
class Mirror:
    root: Path
    fingerprint: str


def build_mirror(root: Path, stacks_file: Path) -> Mirror:
    """Build (or refresh, cheaply) the signed simulated mirror under root."""
    matrix = load_matrix(stacks_file)
    cuda_pkgs, ctk_pkgs = all_packages(matrix)
    key = ensure_signing_key(root.parent / "mirror-key")
    pool = root.parent / "mirror-pool"
    cuda_debs = build_packages(cuda_pkgs, pool / "cuda")
    ctk_debs = build_packages(ctk_pkgs, pool / "ctk")
    build_flat_repo(cuda_debs, root / CUDA_REPO, key)
    build_flat_repo(ctk_debs, root / CTK_REPO, key)
    keyfile = root / KEY_PATH
    keyfile.parent.mkdir(parents=True, exist_ok=True)
    armored = key.armored.read_bytes()
    if not keyfile.is_file() or keyfile.read_bytes() != armored:
        keyfile.write_bytes(armored)
    return Mirror(root=root, fingerprint=key.fingerprint)
