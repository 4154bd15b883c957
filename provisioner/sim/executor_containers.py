"""Executor machines for `up --executors` on the simulated cluster: containers on the cluster's
network that are what the product asks of a real executor, and nothing more. Each has

- sshd, reached as the same user as the nodes, with its own host key (written to a
  known_hosts file of its own, which the ssh_config this module writes names);
- the controller's Python environment (the venv and the interpreter it was made from),
  mounted read-only at the same paths: ansible-runner, ansible-core and the collections are
  "installed as on the controller";
- the files the inventory names on the controller's disk at the same paths: the SSH key the
  nodes accept and their known_hosts.

They carry the simulation's labels (``sim down`` and every ``sim up --recreate`` remove them)
but not the cluster's spec label, so ``sim up`` reusing the running cluster ignores them.
"""

from __future__ import annotations

import io
import sys
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from provisioner.errors import InputError
from provisioner.sim import podman
from provisioner.sim.cluster import (
    MIRROR,
    NETWORK,
    OPS_UID,
    SCOPE,
    SSH_USER,
    _add_dir,
    _add_file,
    _wait_for_ssh,
    host_keypair,
    sim_state_dir,
    subnet_hosts,
)

PREFIX = "sim-exec-"
ROLE_LABEL = "gpu-cluster-provisioner.role"
LABELS = {**SCOPE, ROLE_LABEL: "executor"}
MAX_EXECUTORS = 8
# Their addresses come after the 64 nodes' (cluster._fixed_addresses: free[9 + i]).
FIRST_ADDRESS = 9 + 64

Progress = Callable[[str], None]


def executor_dir() -> Path:
    path = sim_state_dir() / "executors"
    path.mkdir(parents=True, exist_ok=True)
    return path


def ssh_config_path() -> Path:
    return executor_dir() / "ssh_config"


def remove(say: Progress) -> list[str]:
    names = podman.list_ids("container", LABELS)
    if names:
        podman.run(["rm", "--force", "--time", "0", *names], timeout=300)
        say(f"removed executor(s) {', '.join(sorted(names))}")
    return names


def up(count: int, say: Progress) -> dict[str, str]:
    """Replace the simulated executors with ``count`` fresh ones (0 removes them); their
    addresses by name. The ssh_config to reach them: ``ssh_config_path()``."""
    if not 0 <= count <= MAX_EXECUTORS:
        raise InputError(f"sim executors: --count must be between 0 and {MAX_EXECUTORS}")
    podman.check_usable()
    mirror = podman.inspect("container", MIRROR)
    if mirror is None or podman.inspect("network", NETWORK) is None:
        raise InputError("sim executors: no simulated cluster is running: "
                         "`provisioner sim up` first")
    remove(say)
    if count == 0:
        ssh_config_path().unlink(missing_ok=True)
        return {}
    image = str(mirror.get("ImageName") or mirror.get("Image"))
    keydir = sim_state_dir() / "ssh"
    client_key = keydir / "id_ed25519"
    free = subnet_hosts()
    mounts: list[str] = []
    for root in sorted({sys.prefix, sys.base_prefix}):
        mounts += ["--volume", f"{root}:{root}:ro"]
    addresses: dict[str, str] = {}
    known: list[str] = []
    for i in range(count):
        name = f"{PREFIX}{i + 1}"
        address = free[FIRST_ADDRESS + i]
        host_pub, payload = _payload(name, client_key, keydir / "known_hosts",
                                     [sys.prefix, sys.base_prefix])
        podman.run(["create", "--name", name, "--hostname", name, "--network", NETWORK,
                    "--ip", address, *_label_args(), "--systemd=always", "--privileged",
                    *mounts, image])
        podman.copy_into(name, payload)
        podman.run(["start", name])
        addresses[name] = address
        known.append(f"{name},{address} {host_pub}")
        say(f"started executor {name} ({address})")
    _wait_for_ssh(addresses, say)
    (executor_dir() / "known_hosts").write_text("\n".join(known) + "\n")
    lines = [f"Host {PREFIX}*", f"  User {SSH_USER}", f"  IdentityFile {client_key}",
             "  IdentitiesOnly yes", f"  UserKnownHostsFile {executor_dir() / 'known_hosts'}",
             "  StrictHostKeyChecking yes", ""]
    for name, address in addresses.items():
        lines += [f"Host {name}", f"  HostName {address}", ""]
    ssh_config_path().write_text("\n".join(lines))
    return addresses


def _label_args() -> list[str]:
    out: list[str] = []
    for key, value in LABELS.items():
        out += ["--label", f"{key}={value}"]
    return out


def _payload(name: str, client_key: Path, known_hosts: Path,
             mounted: list[str]) -> tuple[str, bytes]:
    """Host key, the authorized key, a machine id of its own, and the controller's node key
    and known_hosts at their controller paths, readable by the ssh user; the directories
    above them and above the mounted Python open to it (a controller's venv may be under
    /root, 0700 in the image)."""
    priv, pub = host_keypair(name)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_dir(tar, "home/ops/.ssh", 0o700, OPS_UID)
        _add_file(tar, "home/ops/.ssh/authorized_keys", client_key.with_suffix(".pub").read_bytes(),
                  0o600, OPS_UID)
        _add_file(tar, "etc/ssh/ssh_host_ed25519_key", priv, 0o600)
        _add_file(tar, "etc/ssh/ssh_host_ed25519_key.pub", (pub + "\n").encode(), 0o644)
        machine_id = (uuid.uuid4().hex + "\n").encode()
        _add_file(tar, "etc/machine-id", machine_id, 0o444)
        keydir = PurePosixPath(client_key.parent)
        opened = {keydir, *keydir.parents}
        for root in mounted:
            opened.update(PurePosixPath(root).parents)
        for directory in sorted(opened - {PurePosixPath("/")}, key=lambda d: len(d.parts)):
            _add_dir(tar, str(directory).lstrip("/"), 0o755)
        _add_file(tar, str(keydir / client_key.name).lstrip("/"), client_key.read_bytes(),
                  0o600, OPS_UID)
        _add_file(tar, str(keydir / "known_hosts").lstrip("/"), known_hosts.read_bytes(), 0o644)
    return " ".join(pub.split()[:2]), buf.getvalue()
