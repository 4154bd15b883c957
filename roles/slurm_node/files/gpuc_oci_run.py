# gpuc-oci-run: the OCI runtime Slurm's oci.conf calls for `srun --container=<bundle>`,
# installed by the slurm_node role. It runs as the job's user (Slurm's containers are
# rootless), edits the step's bundle and then runs the real runtime (crun or runc) with the
# arguments it was given, unchanged:
#
#   gpuc-oci-run crun --rootless=true --root=/run/slurm-oci/%u run --bundle %b <id>
#
# What it adds to the step's config.json before a `run` or `create`:
# - The node's GPUs, as the node's CDI specification (nvidia-ctk cdi generate) describes them:
#   its device nodes, mounts, environment and hooks (CDI's "all" device and the common edits).
#   A rootless runtime cannot create device nodes, so each one is bind-mounted from the node.
#   Only the devices this step may open are given: a GPU device node the step's cgroup denies
#   (Slurm's ConstrainDevices: open() fails with EPERM) is left out, so a job given 2 GPUs
#   sees exactly those 2 inside the container.
# - The node's /etc/hosts and /etc/resolv.conf (the container shares the node's network).
# - The directories the job names in GPUC_OCI_BINDS (its environment: "path[:dest],..."),
#   bind-mounted as they are. The runtime runs as the user: a bind gives the container nothing
#   the user could not read or write already.
#
# Slurm 22.05 gives a container step no gres environment (CUDA_VISIBLE_DEVICES,
# SLURM_STEP_GPUS are absent from the env it writes into config.json, seen on Debian 12's
# 22.05.8), which is why the devices are read from the cgroup here and not from the job's
# environment.
from __future__ import annotations

import errno
import glob
import json
import os
import re
import sys
from typing import Any

CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_KIND = "nvidia.com/gpu"
# Device nodes of single GPUs or MIG capabilities: given only when the step may open them.
_PER_GPU = re.compile(r"^/dev/(nvidia[0-9]+|nvidia-caps/.+)$")


def fail(message: str) -> None:
    sys.stderr.write(f"gpuc-oci-run: {message}\n")
    sys.exit(1)


def load_specs(dirs: tuple[str, ...] = CDI_DIRS, kind: str = CDI_KIND) -> list[dict[str, Any]]:
    """The CDI specifications of ``kind`` in ``dirs`` (YAML or JSON), in name order."""
    specs = []
    for directory in dirs:
        for path in sorted(glob.glob(os.path.join(directory, "*.json")) +
                           glob.glob(os.path.join(directory, "*.yaml"))):
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            if path.endswith(".json"):
                spec = json.loads(text)
            else:
                try:
                    import yaml  # python3-yaml, installed with this program by the role
                except ImportError:
                    fail(f"cannot read {path}: python3's yaml module is not installed")
                spec = yaml.safe_load(text)
            if isinstance(spec, dict) and spec.get("kind") == kind:
                specs.append(spec)
    return specs


def container_edits(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The edits for every GPU of the node: each spec's common edits and its ``all`` device
    (or, without one, every device it names)."""
    edits = []
    for spec in specs:
        if spec.get("containerEdits"):
            edits.append(spec["containerEdits"])
        devices = spec.get("devices") or []
        named_all = [d for d in devices if d.get("name") == "all"]
        for device in named_all or devices:
            if device.get("containerEdits"):
                edits.append(device["containerEdits"])
    return edits


def may_open(path: str) -> bool | None:
    """Whether this process may open a device node: False when the cgroup denies it (EPERM),
    None when it does not exist; a node that exists without a device behind it (ENXIO) is
    allowed, as is one that opens."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            return False
        if exc.errno == errno.ENOENT:
            return None
        return True
    os.close(fd)
    return True


def apply(config: dict[str, Any], edits: list[dict[str, Any]],
          probe: Any = may_open) -> dict[str, list[str]]:
    """Apply CDI edits to an OCI config in place; returns the device nodes given and left out."""
    mounts = config.setdefault("mounts", [])
    have = {m.get("destination") for m in mounts}
    process = config.setdefault("process", {})
    env = process.setdefault("env", [])
    given: list[str] = []
    denied: list[str] = []
    for edit in edits:
        for node in edit.get("deviceNodes") or []:
            path = node.get("hostPath") or node["path"]
            dest = node["path"]
            allowed = probe(path)
            if allowed is None:
                continue
            if not allowed and _PER_GPU.match(dest):
                denied.append(dest)
                continue
            if dest not in have:
                mounts.append({"destination": dest, "type": "bind", "source": path,
                               "options": ["bind", "nosuid", "noexec"]})
                have.add(dest)
                given.append(dest)
        for mount in edit.get("mounts") or []:
            if mount["containerPath"] in have:
                continue
            mounts.append({"destination": mount["containerPath"], "type": mount.get("type", "bind"),
                           "source": mount["hostPath"],
                           "options": list(mount.get("options") or ["rbind", "ro"])})
            have.add(mount["containerPath"])
        for item in edit.get("env") or []:
            if item not in env:
                env.append(item)
        for hook in edit.get("hooks") or []:
            stage = hook.get("hookName")
            entry = {k: v for k, v in hook.items() if k != "hookName"}
            config.setdefault("hooks", {}).setdefault(stage, []).append(entry)
    return {"given": given, "denied": denied}


def add_binds(config: dict[str, Any]) -> None:
    """The directories the job asked for in GPUC_OCI_BINDS (its environment in the config)."""
    env = dict(item.split("=", 1) for item in config.get("process", {}).get("env", [])
               if "=" in item)
    mounts = config.setdefault("mounts", [])
    have = {m.get("destination") for m in mounts}
    for item in filter(None, env.get("GPUC_OCI_BINDS", "").split(",")):
        source, _sep, dest = item.partition(":")
        dest = dest or source
        if not os.path.isabs(source) or not os.path.isabs(dest):
            fail(f"GPUC_OCI_BINDS: {item!r} is not an absolute path")
        if dest not in have:
            mounts.append({"destination": dest, "type": "bind", "source": source,
                           "options": ["rbind"]})
            have.add(dest)


# Slurm's containers share the node's network (its containers guide: "All containers should
# work with the host network"), so names resolve as on the node: its resolver files are
# bind-mounted read-only over the image's, as container engines do for a host-network
# container. Only where the image has the file (a read-only rootfs cannot take a new one).
HOST_FILES = ("/etc/hosts", "/etc/resolv.conf")


def add_host_files(config: dict[str, Any], bundle: str) -> None:
    root = config.get("root", {}).get("path", "rootfs")
    root = root if os.path.isabs(root) else os.path.join(bundle, root)
    mounts = config.setdefault("mounts", [])
    have = {m.get("destination") for m in mounts}
    for path in HOST_FILES:
        if path not in have and os.path.isfile(path) and os.path.isfile(root + path):
            mounts.append({"destination": path, "type": "bind", "source": path,
                           "options": ["bind", "ro"]})


def bundle_of(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg in ("--bundle", "-b") and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--bundle="):
            return arg.split("=", 1)[1]
    return None


def edit_bundle(bundle: str) -> None:
    path = os.path.join(bundle, "config.json")
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    apply(config, container_edits(load_specs()))
    add_binds(config)
    add_host_files(config, bundle)
    # Slurm writes the step's config.json as root into a directory of the user's: replace it.
    tmp = path + ".gpuc"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    os.replace(tmp, path)


def main(argv: list[str]) -> None:
    if not argv:
        fail("usage: gpuc-oci-run RUNTIME [RUNTIME ARGUMENTS...]")
    runtime, args = argv[0], argv[1:]
    command = next((a for a in args if not a.startswith("-")), None)
    if command in ("run", "create"):
        bundle = bundle_of(args)
        if bundle is None:
            fail(f"{command} without --bundle: {' '.join(args)}")
        try:
            edit_bundle(bundle)
        except (OSError, ValueError, KeyError) as exc:
            fail(f"cannot prepare the bundle {bundle}: {exc}")
    try:
        os.execvp(runtime, [runtime, *args])
    except OSError as exc:
        fail(f"cannot run {runtime}: {exc.strerror or exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
