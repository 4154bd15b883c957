"""SIMULATED nvidia-ctk (gpu-cluster-provisioner): the subset the roles call.

``cdi generate --output=F`` writes a CDI spec for the simulated GPUs of /etc/gpu-sim/profile.json
(minus gpuN-missing faults); ``cdi list`` lists the devices of /etc/cdi/nvidia.yaml.
``runtime configure --runtime=docker|containerd [--set-as-default] [--config=F]
[--drop-in-config=F] [--dry-run]`` makes the file edits the real one makes
(cmd/nvidia-ctk/runtime/configure and pkg/config/engine/{docker,containerd} of the NVIDIA
Container Toolkit): docker's daemon.json gains ``runtimes.nvidia`` (``{"args": [], "path":
"nvidia-container-runtime"}``, JSON indented by four spaces, keys sorted, as Go writes it);
containerd gets the drop-in /etc/containerd/conf.d/99-nvidia.toml holding the nvidia runtime
under the CRI plugin of its config version (2: ``io.containerd.grpc.v1.cri``, 3 for containerd
2.x: ``io.containerd.cri.v1.runtime``) and the top-level config.toml an ``imports`` entry for
the drop-in directory. Installed as ``/usr/bin/nvidia-ctk`` by a simulated container toolkit
package, bundled with its version (see provisioner.sim.bundle).
"""

from __future__ import annotations

import json
import os
import re
import sys

from provisioner.sim.faults import read_fault_file
from provisioner.sim.tools.node import FAULTS_FILE, PROFILE_FILE, read_text, sim_path

CDI_SPEC = "/etc/cdi/nvidia.yaml"
DOCKER_CONFIG = "/etc/docker/daemon.json"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
# containerd config version -> the CRI plugin holding runtimes (containerd.go criRuntimePluginName)
CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


def gpus() -> list[int]:
    """The indexes of the GPUs present: the profile's, minus the missing ones."""
    try:
        count = int(json.loads(read_text(PROFILE_FILE) or "").get("gpu_count", 0))
    except (OSError, ValueError):
        return []
    faults = read_fault_file(read_text(FAULTS_FILE) or "")
    missing = {fault.gpu for fault in faults if fault.kind.key == "missing"}
    return [i for i in range(count) if i not in missing]


def spec() -> str:
    lines = ["---", "# SIMULATED CDI spec written by the simulated nvidia-ctk",
             'cdiVersion: "0.5.0"', "kind: nvidia.com/gpu", "devices:"]
    present = gpus()
    for i in present:
        lines += [f'  - name: "{i}"', "    containerEdits:", "      deviceNodes:",
                  f"        - path: /dev/nvidia{i}"]
    lines += ["  - name: all", "    containerEdits:", "      deviceNodes:"]
    lines += [f"        - path: /dev/nvidia{i}" for i in present]
    lines += ["containerEdits:", "  deviceNodes:", "    - path: /dev/nvidiactl",
              "    - path: /dev/nvidia-uvm"]
    return "\n".join(lines) + "\n"


def cdi_generate(args: list[str]) -> int:
    out = None
    for i, arg in enumerate(args):
        if arg.startswith("--output="):
            out = arg.split("=", 1)[1]
        elif arg == "--output" and i + 1 < len(args):
            out = args[i + 1]
    text = spec()
    if out:
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        sys.stdout.write(text)
    return 0


def cdi_list() -> int:
    try:
        with open(CDI_SPEC, encoding="utf-8") as handle:
            names = re.findall(r'^  - name: "?([^"\n]+)"?$', handle.read(), re.M)
    except OSError:
        names = []
    sys.stdout.write(f"INFO[0000] Found {len(names)} CDI devices\n")
    sys.stdout.writelines(f"nvidia.com/gpu={name}\n" for name in names)
    return 0


def _flags(args: list[str]) -> dict[str, str]:
    """``--name=value``, ``--name value`` and bare ``--flag`` (value "true")."""
    out: dict[str, str] = {}
    position = 0
    while position < len(args):
        arg = args[position]
        name, eq, value = arg.partition("=")
        if not name.startswith("--"):
            raise ValueError(f"unexpected argument {arg!r}")
        key = name[2:]
        if eq:
            out[key] = value
        elif key in ("runtime", "config", "drop-in-config", "nvidia-runtime-name") \
                and position + 1 < len(args):
            out[key] = args[position + 1]
            position += 1
        else:
            out[key] = "true"
        position += 1
    return out


def _info(message: str) -> None:
    sys.stderr.write(f"INFO[0000] {message}\n")


def _write(path: str, text: str, dry_run: bool) -> None:
    if dry_run:
        sys.stdout.write(text)
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def configure_docker(flags: dict[str, str]) -> int:
    path = flags.get("config") or sim_path(DOCKER_CONFIG)
    if flags.get("drop-in-config"):
        sys.stderr.write("ERRO[0000] runtime docker does not support drop-in configs\n")
        return 1
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        text = ""
    _info(f"Loading config from {path}")
    try:
        config = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        sys.stderr.write(f"ERRO[0000] unable to load config for runtime docker: {exc}\n")
        return 1
    name = flags.get("nvidia-runtime-name", "nvidia")
    found = config.get("runtimes")
    runtimes: dict[str, object] = found if isinstance(found, dict) else {}
    runtimes[name] = {"path": "nvidia-container-runtime", "args": []}
    config["runtimes"] = runtimes
    if flags.get("set-as-default") == "true" or flags.get("nvidia-set-as-default") == "true":
        config["default-runtime"] = name
    _write(path, json.dumps(config, indent=4, sort_keys=True), flags.get("dry-run") == "true")
    if flags.get("dry-run") != "true":
        _info(f"Wrote updated config to {path}")
        _info("It is recommended that docker daemon be restarted.")
    return 0


def _containerd_version(text: str) -> int:
    """The top-level config's version: 2 for a missing or empty file, 1 without the key."""
    if not text.strip():
        return 2
    match = re.search(r"^version\s*=\s*(\d+)\s*$", text, re.M)
    return int(match.group(1)) if match else 1


def _drop_in(version: int, name: str, default: bool) -> str:
    plugin = f'plugins."{CRI_PLUGIN[version]}"'
    runtime = f"{plugin}.containerd.runtimes.{name}"
    # go-toml's layout: a blank line before each table, two spaces of indent per level.
    lines = [f"version = {version}", "", "[plugins]", "", f"  [{plugin}]", "",
             f"    [{plugin}.containerd]"]
    if default:
        lines.append(f'      default_runtime_name = "{name}"')
    lines += ["", f"      [{plugin}.containerd.runtimes]", "", f"        [{runtime}]",
              "          privileged_without_host_devices = false",
              '          runtime_engine = ""', '          runtime_root = ""',
              '          runtime_type = "io.containerd.runc.v2"', "",
              f"          [{runtime}.options]", f'            BinaryName = "{RUNTIME_BINARY}"']
    return "\n".join(lines) + "\n"


def _with_import(text: str, pattern: str, version: int) -> str:
    """The top-level config with ``pattern`` in ``imports`` (config_drop_in.go ensureImports)."""
    match = re.search(r"^imports\s*=\s*\[(?P<items>[^\]]*)\]\s*$", text, re.M)
    if match:
        items = re.findall(r'"([^"]*)"', match.group("items"))
        if pattern in items:
            return text
        joined = ", ".join(f'"{item}"' for item in [*items, pattern])
        return text[:match.start()] + f"imports = [{joined}]" + text[match.end():]
    if not text.strip():
        return f'imports = ["{pattern}"]\nversion = {version}\n'
    return f'imports = ["{pattern}"]\n' + text


def configure_containerd(flags: dict[str, str]) -> int:
    top = flags.get("config") or sim_path(CONTAINERD_CONFIG)
    drop_in = flags.get("drop-in-config", sim_path(CONTAINERD_DROP_IN))
    try:
        with open(top, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        text = ""
    version = _containerd_version(text)
    _info(f"Using config version {version}")
    if version not in CRI_PLUGIN or not drop_in:
        sys.stderr.write(f"nvidia-ctk (SIMULATED): containerd config version {version} without "
                         "a drop-in is not simulated\n")
        return 2
    _info(f'Using CRI runtime plugin name "{CRI_PLUGIN[version]}"')
    name = flags.get("nvidia-runtime-name", "nvidia")
    default = flags.get("set-as-default") == "true" or flags.get("nvidia-set-as-default") == "true"
    dry_run = flags.get("dry-run") == "true"
    _write(drop_in, _drop_in(version, name, default), dry_run)
    if not dry_run:
        pattern = os.path.dirname(drop_in) + "/*.toml"
        _write(top, _with_import(text, pattern, version), False)
        _info(f"Wrote updated config to {drop_in}")
        _info("It is recommended that containerd daemon be restarted.")
    return 0


def runtime_configure(args: list[str]) -> int:
    try:
        flags = _flags(args)
    except ValueError as exc:
        sys.stderr.write(f"nvidia-ctk (SIMULATED): {exc}\n")
        return 2
    runtime = flags.get("runtime", "docker")
    if runtime == "docker":
        return configure_docker(flags)
    if runtime == "containerd":
        return configure_containerd(flags)
    sys.stderr.write(f"ERRO[0000] unrecognized runtime '{runtime}'\n")
    return 1


def main(argv: list[str], version: str) -> int:
    if not argv or argv[0] in ("-v", "--version"):
        sys.stdout.write(f"NVIDIA Container Toolkit CLI version {version} (SIMULATED)\n")
        return 0
    if argv[:2] == ["cdi", "generate"]:
        return cdi_generate(argv[2:])
    if argv[:2] == ["cdi", "list"]:
        return cdi_list()
    if argv[:2] == ["runtime", "configure"]:
        return runtime_configure(argv[2:])
    sys.stderr.write(f"nvidia-ctk (SIMULATED): unsupported command: {' '.join(argv)}\n")
    return 2
