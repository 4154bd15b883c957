"""The simulated cluster: podman containers with systemd + sshd acting as login and GPU nodes.

Everything created here carries ``gpu-cluster-provisioner.managed=true`` and
``gpu-cluster-provisioner.scope=sim``; ``sim up`` removes stale objects carrying those labels
(and only those) before it creates anything.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import socket
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provisioner.errors import EnvironmentProblem, InputError
from provisioner.paths import cache_dir
from provisioner.sim import podman
from provisioner.sim.bundle import tool_script
from provisioner.sim.faults import (
    HEADERS_CONFIG,
    KERNEL_FILES,
    LINK_RATE_FILE,
    MIRROR_FAULTS,
    NET_SYSFS,
    fault_file_text,
    for_node,
    has_fault,
    kernel_files,
    kernel_log,
    link_rate_mbit,
    mirror_fault_text,
    net_slow_rate,
    net_slow_script,
    newer_kernel,
    parse_faults,
    tc_command,
    validate,
)
from provisioner.sim.image import NodeImage, ensure_image, image_for
from provisioner.sim.kernel_packages import kernel_debs_dir, kernel_packages, node_kernel
from provisioner.sim.mirror import build_packages
from provisioner.sim.releases import RELEASES_DIR, build_releases, runtime_files, tarball_sha256
from provisioner.sim.stand_in_packages import Mirror, build_mirror
from provisioner.sim.sysfs import write_ib_sysfs, write_net_sysfs, write_pci_sysfs
from provisioner.sim.tools import mirror_server
from provisioner.sim.tools.node import (
    DRIVER_VERSION_FILE,
    EFI_ATTR_BS_RT,
    EFIVARS,
    FAULTS_FILE,
    HGX_BUS_NUMBERS,
    MODULE_VERSION_FILE,
    PROC_VERSION_FILE,
    SHIM_LOCK_GUID,
    efivar_path,
    load_module_sh,
    secure_boot_vars,
)

NETWORK = "gpuc-sim"
MIRROR = "gpuc-sim-mirror"
MIRROR_PORT = 8080
SCOPE = {podman.LABEL: "true", podman.SCOPE_LABEL: "sim"}
SPEC_LABEL = "gpu-cluster-provisioner.spec"
SSH_USER = "ops"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SimSpec:
    gpu_nodes: int = 2
    cpu_nodes: int = 1
    profile: str = "sim-h100-8gpu"
    faults: tuple[str, ...] = ()
    suite: str = "bookworm"
    # The OS every node runs (image.NODE_OSES): debian12 is the Debian `suite`; the others
    # are imitated on a Debian userland (provisioner/sim/image.py).
    os: str = "debian12"
    # The nodes' Debian architecture: amd64 (this machine's), or arm64, run through
    # qemu-user-static (image.py): Ansible sees aarch64 nodes and NVIDIA's sbsa repositories.
    arch: str = "amd64"

    def digest(self) -> str:
        """The cluster's shape: nodes, profile, OS. Faults are not part of it: `sim up` with
        other faults rewrites the fault files of the running nodes (``apply_faults``) instead
        of recreating them, so an installed stack survives fault injection."""
        fields: list[object] = [self.gpu_nodes, self.cpu_nodes, self.profile, self.suite,
                                NODE_RUNTIME]
        if self.os != "debian12":
            fields.append(self.os)
        if self.arch != "amd64":
            fields.append(self.arch)
        return hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:12]

    def image_key(self) -> str:
        """What image.ensure_image builds this spec's nodes from."""
        return self.suite if self.os == "debian12" else self.os

    def node_names(self) -> list[tuple[str, str]]:
        """(name, group) pairs."""
        return ([(f"sim-login-{i}", "cpu_nodes") for i in range(1, self.cpu_nodes + 1)]
                + [(f"sim-gpu-{i}", "gpu_nodes") for i in range(1, self.gpu_nodes + 1)])


@dataclass
class SimCluster:
    spec: SimSpec
    inventory_dir: Path
    addresses: dict[str, str] = field(default_factory=dict)
    reused: bool = False


def sim_state_dir() -> Path:
    path = cache_dir() / "sim"
    path.mkdir(parents=True, exist_ok=True)
    return path


def mirror_dir() -> Path:
    path = sim_state_dir() / "mirror"
    path.mkdir(parents=True, exist_ok=True)
    return path


def mirror_fault_dir() -> Path:
    """The controller's side of the mirror container's fault directory (MIRROR_FAULTS)."""
    path = sim_state_dir() / "mirror-faults"
    path.mkdir(parents=True, exist_ok=True)
    return path


def apply_mirror_faults(spec: SimSpec, say: Progress) -> None:
    """Give the package mirror exactly the mirror faults of ``spec`` (none heals it). Written
    in place: the container sees the directory through a bind mount."""
    text = mirror_fault_text(spec.faults)
    path = mirror_fault_dir() / Path(MIRROR_FAULTS).name
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
        if text or spec.faults:
            say(f"{MIRROR}: faults now {', '.join(text.splitlines()) or 'none'}")


def clear_stale(progress: Progress | None = None) -> int:
    """Remove every container and network of ours (label-selected) from earlier runs."""
    names = podman.list_ids("container", SCOPE)
    if names:
        if progress:
            progress(f"removing {len(names)} stale simulated container(s): {', '.join(names)}")
        podman.run(["rm", "--force", "--time", "0", *names], timeout=600)
    for net in podman.list_ids("network", SCOPE):
        podman.run(["network", "rm", "--force", net])
    return len(names)


def down(progress: Progress | None = None) -> int:
    return clear_stale(progress)


def _stopped_if_same_shape(spec: SimSpec) -> list[str] | None:
    """None when the containers of ``spec``'s shape are not all there; else the stopped ones
    (a node killed by a test or stopped by podman keeps its disk and can be started again)."""
    names = set(podman.list_ids("container", {**SCOPE, SPEC_LABEL: spec.digest()}))
    wanted = {name for name, _ in spec.node_names()} | {MIRROR}
    if names != wanted:
        return None
    stopped = []
    for name in sorted(wanted):
        info = podman.inspect("container", name)
        if not info:
            return None
        if not info.get("State", {}).get("Running"):
            stopped.append(name)
    return stopped


# How nodes and the mirror are created and booted (restart policy, boot unit, machine id, the
# mirror's server, the stand-ins a node is created with, such as dcb on RoCE nodes): a change
# recreates a cluster made by an older one instead of reusing it.
NODE_RUNTIME = 6

# What a fault changes on a node (faults.FaultKind.node_files), rewritten by apply_faults.
FAULT_FILES = ("etc/gpu-sim/faults",
               *(path.lstrip("/") for path, _ in secure_boot_vars(False)))


def apply_faults(spec: SimSpec, profile_json: Mapping[str, Any], say: Progress) -> None:
    """Give every running GPU node exactly the faults of ``spec`` (none heals it): its fault
    file, the simulated kernel log and the InfiniBand sysfs tree, the same content a new node
    gets. Nothing else on the node changes. An error counter a fault sets rises on the running
    node (validate and gpuc-health judge the rise since their last reading)."""
    kernel = node_kernel()
    log = SIM_KERNEL_LOG.lstrip("/")
    sysfs = SIM_SYSFS.lstrip("/")
    newer = newer_kernel(kernel)
    kernel_paths = tuple(p.replace("K2", newer).lstrip("/") for p in KERNEL_FILES)
    for name, group in spec.node_names():
        if group != "gpu_nodes":
            continue
        faults = for_node(name, spec.faults)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path, data, mode in sim_files(group, dict(profile_json, hostname=name), faults,
                                              kernel):
                if (path in FAULT_FILES or path == log or path.startswith(sysfs + "/")
                        or path.startswith(kernel_paths)):
                    if data is None:
                        _add_dir(tar, path, mode)
                    elif mode == -1:
                        _add_symlink(tar, path, data.decode())
                    else:
                        _add_file(tar, path, data, mode)
        # A healed node loses the newer kernel as `apt remove` would take it: image, modules
        # (the DKMS-built ones included), headers and DKMS' record of builds for it.
        script = (f"rm -rf {SIM_IB_SYSFS} {SIM_PCI_SYSFS} {SIM_NET_SYSFS} "
                  + " ".join(f"/{p}" for p in kernel_paths)
                  + f" /var/lib/dkms/*/*/{newer}")
        if not has_fault(parse_faults(faults), "reboot-no-return"):
            # Healed of reboot-no-return after it struck: its sshd starts, as from the console.
            script += (f"; if [ -e {NO_SSH_FLAG} ]; then rm -f {NO_SSH_FLAG} && "
                       "systemctl start ssh.service; fi")
        script += "; " + net_slow_script(parse_faults(faults))
        podman.run(["exec", name, "sh", "-c", script])
        podman.copy_into(name, buf.getvalue())
        say(f"{name}: faults now {', '.join(faults) if faults else 'none'}")


def up(spec: SimSpec, inventory_dir: Path, profile_json: Mapping[str, Any],
       progress: Progress | None = None, recreate: bool = False) -> SimCluster:
    """Start (or reuse, when identical and running) the simulated cluster; write the inventory."""
    if spec.gpu_nodes < 1 or spec.gpu_nodes + spec.cpu_nodes > 64:
        raise InputError("sim up: --nodes must give at least 1 GPU node and at most 64 nodes")
    names = spec.node_names()
    validate(spec.faults, profile_json, [name for name, group in names if group == "gpu_nodes"],
             [name for name, group in names if group != "gpu_nodes"])
    image_for(spec.image_key(), spec.arch)  # refuses an OS not imitated on that architecture
    podman.check_usable()
    say = progress or (lambda _msg: None)
    # SSH material lives outside the inventory directory: Ansible parses every file in it.
    keydir = sim_state_dir() / "ssh"
    keydir.mkdir(parents=True, exist_ok=True)
    inventory_dir.mkdir(parents=True, exist_ok=True)
    cluster = SimCluster(spec=spec, inventory_dir=inventory_dir)
    stopped = None if recreate else _stopped_if_same_shape(spec)
    if stopped is not None:
        return _reuse(cluster, stopped, keydir, profile_json, say)
    clear_stale(say)
    image = ensure_image(spec.image_key(), spec.arch)
    say(f"node image {image.name}" + (f" ({spec.arch}, emulated)" if image.emulated else ""))
    # The mirror serves files to the nodes: it runs natively whatever the nodes' architecture.
    mirror_image = ensure_image(spec.image_key()) if image.emulated else image
    podman.run(["network", "create", *_labels(spec), NETWORK])
    fixed = _fixed_addresses([name for name, _group in spec.node_names()])
    client_key = _ensure_client_key(keydir)
    kernel = node_kernel()
    mirror = _build_mirror(spec)
    say(f"simulated package mirror built (key {mirror.fingerprint[-16:]})")
    apply_mirror_faults(spec, say)
    _start_mirror(spec, mirror_image.name, fixed[MIRROR])
    if profile_json.get("multi_node_nvlink"):
        # One NVLink domain: every GPU node's address in IMEX's node list.
        profile_json = dict(profile_json, imex_nodes=[
            fixed[name] for name, group in names if group == "gpu_nodes"])
    known_hosts = _create_nodes(spec, image, fixed, client_key, kernel, profile_json, say)
    cluster.addresses = _addresses(spec)
    lines = [f"{name},{cluster.addresses[name]} {pub}" for name, pub in known_hosts]
    (keydir / "known_hosts").write_text("\n".join(lines) + "\n")
    _wait_for_ssh(cluster.addresses, say)
    _say_slowed(spec, say)
    _install_kernel_packages(spec, kernel, say)
    _write_inventory(cluster, mirror)
    return cluster


def _reuse(cluster: SimCluster, stopped: list[str], keydir: Path,
           profile_json: Mapping[str, Any], say: Progress) -> SimCluster:
    """Start the ``stopped`` nodes of a cluster of the same shape again, give it the spec's
    faults and rewrite its inventory; return ``cluster``, marked reused."""
    spec = cluster.spec
    cluster.reused = True
    for name in stopped:
        podman.run(["start", name])
        say(f"started stopped node {name} again (its disk is kept)")
    cluster.addresses = _addresses(spec)
    # Nodes keep their fixed addresses; a cluster made before they had them may not.
    _readdress_known_hosts(keydir / "known_hosts", cluster.addresses)
    if stopped:
        _wait_for_ssh({n: a for n, a in cluster.addresses.items() if n in stopped}, say)
    apply_faults(spec, profile_json, say)
    apply_mirror_faults(spec, say)
    mirror = _build_mirror(spec)  # cheap when nothing changed; picks up stacks.yml edits
    _write_inventory(cluster, mirror)
    say("reusing the running simulated cluster (same nodes, profile and OS)")
    return cluster


def _create_nodes(spec: SimSpec, image: NodeImage, fixed: Mapping[str, str], client_key: Path,
                  kernel: str, profile_json: Mapping[str, Any],
                  say: Progress) -> list[tuple[str, str]]:
    """Create and start every node of ``spec`` from ``image`` at its fixed address; return
    each node's name and SSH host public key, in node order."""
    known_hosts: list[tuple[str, str]] = []
    # EL nodes run Debian's builds of Prometheus' programs from the simulated release tarballs:
    # the data files those builds read (upstream's builds embed them) go where they look.
    extra = runtime_files(_release_debs()) if spec.os in EPEL_ONLY_OSES else {}
    if image.emulated:
        extra = {**extra, **EMULATED_SERVICE_FILES}
    for name, group in spec.node_names():
        host_pub, payload = _node_payload(name, group, client_key, kernel, profile_json, spec,
                                          extra)
        # A fixed address, as a real node has (static or a DHCP reservation): a node that is
        # stopped and started again keeps it, so a rerun after a reboot changes nothing.
        podman.run(["create", "--name", name, "--hostname", name, "--network", NETWORK,
                    "--ip", fixed[name], *_labels(spec), "--systemd=always", "--privileged",
                    # A node that reboots comes back (`podman stop` and `kill` stay stopped).
                    "--restart=always",
                    "--tmpfs", "/tmp", *image.run_options(), image.name])
        podman.copy_into(name, payload)
        podman.run(["start", name])
        known_hosts.append((name, host_pub))
        say(f"started {name} ({group})")
    return known_hosts


def _say_slowed(spec: SimSpec, say: Progress) -> None:
    """Say which GPU nodes a slow-network fault slowed, with their rate; return None."""
    for name, group in spec.node_names():
        # The boot unit gave each node's eth0 its rate (the line rate, or a slow fault's).
        slow = parse_faults(for_node(name, spec.faults)) if group == "gpu_nodes" else []
        rate = net_slow_rate(slow)
        if rate is not None:
            say(f"{name}: network slowed ({rate})")


# The kernel's own packages as a Debian or Ubuntu node has them (the image has none): the running
# kernel's image and headers and the metapackages that upgrade them (linux-image-amd64 on
# Debian, linux-image-generic on Ubuntu), so what the roles read and hold through dpkg is there.
def _install_kernel_packages(spec: SimSpec, kernel: str, say: Progress) -> None:
    packages = kernel_packages(spec.os, kernel, spec.arch)
    if not packages:
        return
    debs = build_packages(packages, kernel_debs_dir(sim_state_dir(), spec.os, spec.arch))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_dir(tar, "var/cache/gpu-sim/kernel", 0o755)
        for deb in debs:
            _add_file(tar, f"var/cache/gpu-sim/kernel/{deb.name}", deb.read_bytes(), 0o644)
    for name, _group in spec.node_names():
        podman.copy_into(name, buf.getvalue())
        podman.run(["exec", name, "sh", "-c",
                    "dpkg -i /var/cache/gpu-sim/kernel/*.deb >/dev/null"])
    say(f"kernel packages installed: {', '.join(p.name for p in packages)}")


def _readdress_known_hosts(path: Path, addresses: Mapping[str, str]) -> None:
    """Rewrite the ``name,address key`` lines of ``path`` with the nodes' current addresses."""
    if not path.exists():
        return
    lines = []
    for line in path.read_text().splitlines():
        names, _, key = line.partition(" ")
        name = names.split(",")[0]
        lines.append(f"{name},{addresses[name]} {key}" if name in addresses else line)
    path.write_text("\n".join(lines) + "\n")


def _release_debs() -> Path:
    """Where Debian's builds of Prometheus' programs are cached (sim/releases.py)."""
    return cache_dir() / "sim" / "release-debs"


def _build_mirror(spec: SimSpec) -> Mirror:
    from provisioner.matrix import STACKS_FILE

    # The rpm repositories need rpmbuild and createrepo_c: built for Rocky nodes only.
    mirror = build_mirror(mirror_dir(), STACKS_FILE, rpm=spec.os == "rocky9",
                          architectures=tuple(dict.fromkeys(("amd64", spec.arch))))
    if spec.os in EPEL_ONLY_OSES:
        # Prometheus, Alertmanager and node_exporter as release tarballs (no EL package).
        mirror = Mirror(mirror.root, mirror.fingerprint,
                        build_releases(mirror_dir(), _release_debs()), mirror.architectures)
    return mirror


def _labels(spec: SimSpec) -> list[str]:
    out: list[str] = []
    for key, value in {**SCOPE, SPEC_LABEL: spec.digest()}.items():
        out += ["--label", f"{key}={value}"]
    return out


def subnet_hosts() -> list[str]:
    """The addresses of the simulation's network, the gateway left out, in order."""
    import ipaddress

    info = podman.inspect("network", NETWORK) or {}
    subnets = [s for s in info.get("subnets") or []
               if ipaddress.ip_network(s.get("subnet", "::/128")).version == 4]
    if not subnets:
        raise EnvironmentProblem(f"podman network {NETWORK} has no IPv4 subnet")
    net = ipaddress.ip_network(subnets[0]["subnet"])
    gateway = ipaddress.ip_address(str(subnets[0].get("gateway") or next(net.hosts())))
    return [str(h) for h in net.hosts() if h != gateway]


def _fixed_addresses(names: list[str]) -> dict[str, str]:
    """An address on the network for the mirror and each node: the mirror the first host after
    the gateway, the nodes from the tenth host on, in order (the network is a /24 or larger;
    the simulated executors come after the 64 nodes a cluster may have)."""
    free = subnet_hosts()
    if len(free) < len(names) + 10:
        raise EnvironmentProblem(f"podman network {NETWORK} is too small for "
                                 f"{len(names)} nodes")
    out = {MIRROR: free[0]}
    out.update((name, free[9 + i]) for i, name in enumerate(names))
    return out


def _start_mirror(spec: SimSpec, image: str, address: str) -> None:
    """The controller's package mirror and wheelhouse, served to the nodes by name over HTTP."""
    root = mirror_dir()
    (root / "SIMULATED").write_text(
        "This mirror holds SIMULATED NVIDIA packages built by gpu-cluster-provisioner.\n")
    podman.run(["run", "-d", "--name", MIRROR, "--hostname", MIRROR, "--network", NETWORK,
                "--ip", address, *_labels(spec), "--volume", f"{root}:/srv/mirror:ro",
                "--volume", f"{mirror_fault_dir()}:{Path(MIRROR_FAULTS).parent}:ro",
                "--volume", f"{Path(mirror_server.__file__)}:/opt/gpu-sim/mirror_server.py:ro",
                "--entrypoint", "/usr/bin/python3", image, "/opt/gpu-sim/mirror_server.py",
                "--port", str(MIRROR_PORT), "--directory", "/srv/mirror",
                "--faults", MIRROR_FAULTS])


def _ensure_client_key(keydir: Path) -> Path:
    key = keydir / "id_ed25519"
    if not key.is_file():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C",
                        "gpu-cluster-provisioner-sim", "-f", str(key)], check=True)
    return key


def host_keypair(name: str) -> tuple[bytes, str]:
    """A fresh ed25519 host key for ``name``: the private key file's bytes, the public line."""
    with tempfile.TemporaryDirectory() as tmp:
        hostkey = Path(tmp) / "ssh_host_ed25519_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name,
                        "-f", str(hostkey)], check=True)
        return hostkey.read_bytes(), hostkey.with_suffix(".pub").read_text().strip()


def _node_payload(name: str, group: str, client_key: Path, kernel: str,
                  profile_json: Mapping[str, Any], spec: SimSpec,
                  extra: Mapping[str, bytes] | None = None) -> tuple[str, bytes]:
    """A tar stream copied into the container before it boots: host key, authorized key and,
    on GPU nodes, the simulated hardware description."""
    priv, pub = host_keypair(name)
    host_pub = " ".join(pub.split()[:2])
    authorized = client_key.with_suffix(".pub").read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        _add_dir(tar, "home/ops/.ssh", 0o700, OPS_UID)
        _add_file(tar, "home/ops/.ssh/authorized_keys", authorized, 0o600, OPS_UID)
        _add_file(tar, "etc/ssh/ssh_host_ed25519_key", priv, 0o600)
        _add_file(tar, "etc/ssh/ssh_host_ed25519_key.pub", (pub + "\n").encode(), 0o644)
        # Its own machine id, as every installed machine has: the image's would be shared by
        # every node, and systemd-udevd derives the node's MAC address from it
        # (MACAddressPolicy=persistent; seen after a reboot on Debian nodes, from the first boot
        # on the imitated Rocky ones), so nodes answered ARP for each other and new
        # connections to them stalled for seconds to a minute.
        machine_id = (uuid.uuid4().hex + "\n").encode()
        _add_file(tar, "etc/machine-id", machine_id, 0o444)
        _add_file(tar, "var/lib/dbus/machine-id", machine_id, 0o644)
        for path, data, mode in sim_files(group, dict(profile_json, hostname=name),
                                          for_node(name, spec.faults), kernel):
            if data is None:
                _add_dir(tar, path, mode)
            elif mode == -1:
                _add_symlink(tar, path, data.decode())
            else:
                _add_file(tar, path, data, mode)
        for path, data in sorted((extra or {}).items()):
            parts = path.split("/")
            for depth in range(1, len(parts)):
                _add_dir(tar, "/".join(parts[:depth]), 0o755)
            _add_file(tar, path, data, 0o644)
    return host_pub, buf.getvalue()


# Every service of an emulated node (systemd's top-level service.d drop-ins, systemd 244+):
# qemu-user cannot give a service a user namespace of its own (systemd fails "Failed to set up
# user namespacing: Invalid argument", status 217/USER; seen with Debian's prometheus.service,
# PrivateUsers=true) nor load credentials (the image empties LoadCredential= for the units it
# has; this covers those installed later). What the units ask for stays otherwise as shipped.
EMULATED_SERVICE_FILES = {
    "etc/systemd/system/service.d/50-gpuc-emulated.conf":
        b"# SIMULATED emulated node (gpu-cluster-provisioner): see provisioner/sim/cluster.py\n"
        b"[Service]\nPrivateUsers=no\nLoadCredential=\n",
}

BINFMT_UNITS = ("systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount",
                "proc-sys-fs-binfmt_misc.mount")

SIM_MARKER = (b"This node is part of a SIMULATED cluster (gpu-cluster-provisioner). "
              b"No real GPU, NVLink or InfiniBand hardware is present.\n")


def sim_files(group: str, profile_json: Mapping[str, Any], faults: Iterable[str],
              kernel: str) -> list[tuple[str, bytes | None, int]]:
    """(path, content, mode) of the simulation files a node gets; content None is a directory,
    mode -1 a symlink whose target is the content. Shared with the molecule harness."""
    faults = list(faults)
    hdr = f"usr/src/linux-headers-{kernel}"
    out: list[tuple[str, bytes | None, int]] = [
        ("etc/gpu-sim", None, 0o755),
        ("etc/gpu-sim/SIMULATED", SIM_MARKER, 0o644),
        # What the node's eth0 sends at most, applied at every boot (BOOT_SCRIPT).
        (LINK_RATE_FILE.lstrip("/"), f"{link_rate_mbit(parse_faults(faults))}\n".encode(),
         0o644),
        # The running kernel is the controller's; its headers are simulated so preflight and
        # the driver role's DKMS path have something to find.
        (hdr, None, 0o755),
        (f"{hdr}/SIMULATED", SIM_MARKER, 0o644),
        # Its config's module signing lines: dkms signs with CONFIG_MODULE_SIG_HASH.
        (f"{hdr}/.config", HEADERS_CONFIG, 0o644),
        (f"lib/modules/{kernel}", None, 0o755),
        (f"lib/modules/{kernel}/build", f"/{hdr}".encode(), -1),
        # The running kernel's image, where Debian, Ubuntu and RHEL keep it.
        ("boot", None, 0o755),
        (f"boot/vmlinuz-{kernel}", SIM_MARKER, 0o644),
        # What a kernel boot gives a real node and a container restart does not (BOOT_UNIT).
        ("usr/local/sbin/gpu-sim-boot", BOOT_SCRIPT.encode(), 0o755),
        (f"etc/systemd/system/{BOOT_UNIT}", BOOT_UNIT_TEXT.encode(), 0o644),
        ("etc/systemd/system/sysinit.target.wants", None, 0o755),
        (f"etc/systemd/system/sysinit.target.wants/{BOOT_UNIT}",
         f"/etc/systemd/system/{BOOT_UNIT}".encode(), -1),
        # The kernel's binfmt_misc table is the machine's, not the container's: a privileged
        # node's systemd-binfmt.service clears it at start and at stop (seen: it removed this
        # machine's qemu-aarch64 registration), so the units that touch it are masked.
        *((f"etc/systemd/system/{unit}", b"/dev/null", -1) for unit in BINFMT_UNITS),
        ("etc/systemd/system/ssh.service.d", None, 0o755),
        ("etc/systemd/system/ssh.service.d/gpu-sim-fault.conf", SSH_FAULT_DROPIN.encode(),
         0o644),
        # The EFI variables a real node's efivarfs shows (Secure Boot on with the secure-boot
        # fault) and shim's mokutil answering from them, first on PATH.
        ("var/lib/gpu-sim", None, 0o755),
        (EFIVARS.lstrip("/"), None, 0o755),
        *((path.lstrip("/"), data, 0o644) for path, data in secure_boot_vars(
            has_fault(parse_faults(faults), "secure-boot"))),
        ("usr/local/bin/mokutil", tool_script("mokutil"), 0o755),
    ]
    if group == "gpu_nodes":
        out += _gpu_node_files(profile_json, faults, kernel)
    return out


def _gpu_node_files(profile_json: Mapping[str, Any], faults: list[str],
                    kernel: str) -> list[tuple[str, bytes | None, int]]:
    """What a GPU node gets beyond every node's files: the stand-in tools, the hardware's
    description and faults, the kernel log, sysfs trees and, on a multi-node NVLink node,
    IMEX."""
    out: list[tuple[str, bytes | None, int]] = [
        # dkms comes with the OS on a real node (a dependency of NVIDIA's -dkms packages).
        ("usr/sbin/dkms", tool_script("dkms"), 0o755),
        # nvbandwidth is no package: a site builds it from NVIDIA/nvbandwidth's source and
        # installs the binary, here where such a build goes.
        ("usr/local/bin/nvbandwidth", tool_script("nvbandwidth"), 0o755),
        ("etc/gpu-sim/profile.json", json.dumps(dict(profile_json), indent=2).encode(),
         0o644),
        ("etc/gpu-sim/faults", fault_file_text(faults).encode(), 0o644),
        ("var/lib/gpu-sim", None, 0o755),
        (SIM_KERNEL_LOG.lstrip("/"), kernel_log(parse_faults(faults)).encode(), 0o644),
        # lspci as a real GPU node answers it; /usr/local/bin comes first on PATH (sudo's
        # secure_path too), ahead of the image's pciutils.
        ("usr/local/bin/lspci", _lspci_script(profile_json).encode(), 0o755),
        # The device nodes the NVIDIA driver creates, made at every boot (/dev is a tmpfs).
        ("usr/local/sbin/gpu-sim-devices", _devices_script(profile_json).encode(), 0o755),
        (f"etc/systemd/system/{DEVICES_UNIT}", DEVICES_UNIT_TEXT.encode(), 0o644),
        (f"etc/systemd/system/sysinit.target.wants/{DEVICES_UNIT}",
         f"/etc/systemd/system/{DEVICES_UNIT}".encode(), -1),
    ]
    if str(profile_json.get("fabric", "")).lower() == "roce":
        # iproute2's dcb answers for interfaces of the node's network namespace, which has none
        # of the simulated HCAs': the stand-in shows their PFC (tools/dcb.py).
        out.append(("usr/local/bin/dcb", tool_script("dcb"), 0o755))
    out += _sysfs_tree(profile_json, faults)
    out += kernel_files(parse_faults(faults), kernel)
    if "imex_nodes" in profile_json:
        out += imex_files(profile_json["imex_nodes"])
    return out


IMEX_UNIT = "nvidia-imex.service"
IMEX_UNIT_TEXT = """[Unit]
Description=NVIDIA IMEX service (SIMULATED)
After=network-online.target

[Service]
ExecStart=/usr/bin/nvidia-imex
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""


def imex_files(addresses: Iterable[str]) -> list[tuple[str, bytes | None, int]]:
    """IMEX as a site's image of a multi-node NVLink node has it (this project does not install
    it): the daemon, nvidia-imex-ctl, the domain's node list and the service, enabled. The
    IMEX channel is made at boot with the other device nodes (_devices_script)."""
    nodes = "".join(f"{address}\n" for address in addresses)
    return [
        ("usr/bin/nvidia-imex", tool_script("imex", role="daemon"), 0o755),
        ("usr/bin/nvidia-imex-ctl", tool_script("imex", role="ctl"), 0o755),
        ("etc/nvidia-imex", None, 0o755),
        ("etc/nvidia-imex/nodes_config.cfg", nodes.encode(), 0o644),
        (f"lib/systemd/system/{IMEX_UNIT}", IMEX_UNIT_TEXT.encode(), 0o644),
        ("etc/systemd/system/multi-user.target.wants", None, 0o755),
        (f"etc/systemd/system/multi-user.target.wants/{IMEX_UNIT}",
         f"/lib/systemd/system/{IMEX_UNIT}".encode(), -1),
    ]


# Where a simulated node keeps what a container cannot show at the kernel's own paths; the
# simulated cluster's inventory points the roles' path parameters here (sim_inventory_vars).
SIM_KERNEL_LOG = "/var/lib/gpu-sim/dmesg"
SIM_SYSFS = "/var/lib/gpu-sim/sysfs"
SIM_IB_SYSFS = f"{SIM_SYSFS}/class/infiniband"
SIM_PCI_SYSFS = f"{SIM_SYSFS}/bus/pci/devices"
# The RoCE HCAs' network interfaces (their ECN enable files), as /sys/class/net: beside
# SIM_IB_SYSFS, where the faults (mlx5_N-ecn-off) write.
SIM_NET_SYSFS = NET_SYSFS
# The loaded module's version (tools/node.py MODULE_VERSION_FILE): written by the driver
# package's install and by every boot (gpu-sim-boot), read as /sys/module/nvidia/version.
SIM_DRIVER_VERSION_FILE = MODULE_VERSION_FILE
# The node's EFI variables (tools/node.py EFIVARS), where efivarfs keeps them on a real node.
SIM_EFIVARS = EFIVARS
# The stand-in /proc of the NVIDIA driver's files (tools/node.py PROC_VERSION_FILE and the MIG
# capability minors beside it).
SIM_PROC_ROOT = PROC_VERSION_FILE.split("/driver/", 1)[0]


# A simulated cluster is a demo and a test bed: a fault injected into a running node shows in
# gpuc-health within 15 s and fires its alert within a minute, instead of the production
# periods (a 2 min timer, 30 s scrapes, alerts held 5-15 min).
SIM_MONITORING_PERIODS: dict[str, str] = {
    "node_health_interval": "15s",
    "node_health_latency_interval": "15s",
    "monitoring_scrape_interval": "5s",
    "monitoring_evaluation_interval": "5s",
    "monitoring_alert_for_override": "20s",
}


def sim_inventory_vars() -> dict[str, Any]:
    """Role parameters whose real defaults name kernel interfaces a container lacks, set to
    the simulated node's stand-ins; plus the flag that marks every report SIMULATED."""
    return {
        "provisioner_simulated": True,
        "nvidia_driver_loaded_version_file": SIM_DRIVER_VERSION_FILE,
        "gpu_validate_nvidia_proc_version": PROC_VERSION_FILE,
        "gpu_mig_proc_root": SIM_PROC_ROOT,
        "gpu_validate_ib_sysfs_root": SIM_IB_SYSFS,
        "gpu_validate_net_sysfs_root": SIM_NET_SYSFS,
        "rdma_ib_sysfs_root": SIM_IB_SYSFS,
        "gpu_validate_pci_sysfs_root": SIM_PCI_SYSFS,
        "preflight_pci_sysfs_root": SIM_PCI_SYSFS,
        "preflight_efivars_root": SIM_EFIVARS,
        "nvidia_driver_efivars_root": SIM_EFIVARS,
        "gpu_validate_kernel_log": SIM_KERNEL_LOG,
        "node_health_ib_sysfs_root": SIM_IB_SYSFS,
        "node_health_pci_sysfs_root": SIM_PCI_SYSFS,
        "node_health_kernel_log": SIM_KERNEL_LOG,
        "certify_kernel_log": SIM_KERNEL_LOG,
        **SIM_MONITORING_PERIODS,
    }



# Slurm is on in the simulated cluster: the first login node runs slurmctld. Its slurmd runs as
# on a real node (proctrack/cgroup, task/cgroup, cgroup.conf with ConstrainDevices): a node's
# container has its own cgroup tree, and the host kernel's device rules decide which GPU files a
# job opens (this host's kernel mounts cgroup v1, so Slurm's autodetect takes its cgroup/v1
# plugin there, where a cgroup v2 node takes cgroup/v2 from the same cgroup.conf). Its slurmd has
# no NVML: gres.conf lists the device files the simulator makes. Slurm's containers run with
# Debian's crun inside the node (rootless, as the job's user), as on a real node.
SIM_SLURM_VARS: dict[str, Any] = {
    "slurm_node_gres_autodetect": False,
    "slurm_node_oci_runtime": "crun",
}


# Imitated OSes whose Slurm and Prometheus packages live outside the OS repositories (EPEL):
# Slurm is off there, Prometheus' programs come from release tarballs.
EPEL_ONLY_OSES = ("rocky9",)


def sim_slurm_groups(spec: SimSpec) -> dict[str, dict[str, Any]]:
    """The [slurm_controller] group: the first CPU node, when there is one."""
    login = [name for name, group in spec.node_names() if group == "cpu_nodes"]
    return {"slurm_controller": {"hosts": {login[0]: {}}}} if login else {}


BOOT_UNIT = "gpu-sim-boot.service"
BOOT_UNIT_TEXT = """\
# SIMULATED node (gpu-cluster-provisioner): what a kernel boot gives a real node.
[Unit]
Description=SIMULATED boot: a boot id of its own, the installed NVIDIA module loaded
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/gpu-sim-boot

[Install]
WantedBy=sysinit.target
"""
# Set at boot when the node has the reboot-no-return fault: its sshd does not start.
NO_SSH_FLAG = "/run/gpu-sim/no-sshd"
BOOTED_FLAG = "/var/lib/gpu-sim/booted"
def _octal(data: bytes) -> str:
    """``data`` as printf(1) octal escapes."""
    return "".join(f"\\{byte:03o}" for byte in data)


BOOT_SCRIPT = f"""\
#!/bin/sh
# SIMULATED node (gpu-cluster-provisioner): run at every start of the container.
mkdir -p /run/gpu-sim /var/lib/gpu-sim
# A container shares the host kernel's boot id, which its restart does not change; a reboot
# must (Ansible's reboot module waits for a new one). The bind mount lives until the next start.
cat /proc/sys/kernel/random/uuid > /run/gpu-sim/boot_id
mount --bind /run/gpu-sim/boot_id /proc/sys/kernel/random/boot_id \\
  || echo "gpu-sim-boot: no boot id of its own" >&2
# mok-enrolled (provisioner/sim/faults.py): before the kernel starts, shim's MokManager found an
# enrolment request (MokNew) and a person confirmed it at the console: its keys join the MOK
# list (MokListRT, attributes then the EFI_SIGNATURE_LISTs), so the kernel below trusts them.
# Without the fault the request stays pending.
request={efivar_path("MokNew", SHIM_LOCK_GUID)}
if [ -s "$request" ] && grep -qx mok-enrolled {FAULTS_FILE} 2>/dev/null; then
  list={efivar_path("MokListRT", SHIM_LOCK_GUID)}
  {{ if [ -s "$list" ]; then cat "$list"; else printf '{_octal(EFI_ATTR_BS_RT)}'; fi
    tail -c +5 "$request"; }} > "$list.new" && mv "$list.new" "$list" && rm -f "$request"
fi
# The kernel loads the installed driver's module.
if [ -s {DRIVER_VERSION_FILE} ]; then
{load_module_sh("  ")}fi
# reboot-no-return (provisioner/sim/faults.py): a node that has booted before and carries the
# fault hangs before sshd (its first boot, when the fault was injected at creation, does not).
if [ -e {BOOTED_FLAG} ] && grep -qx reboot-no-return {FAULTS_FILE} 2>/dev/null; then
  touch {NO_SSH_FLAG}
fi
touch {BOOTED_FLAG}
# The line rate of the node's interface (provisioner/sim/faults.py), or a slow fault's: a
# restarted container gets a new network namespace, without the token bucket.
if [ -s {LINK_RATE_FILE} ]; then
  rate=$(cat {LINK_RATE_FILE})
  {tc_command("${rate}")} || echo "gpu-sim-boot: eth0 keeps no rate" >&2
fi
exit 0
"""
SSH_FAULT_DROPIN = f"""\
# SIMULATED node (gpu-cluster-provisioner): the reboot-no-return fault keeps sshd down.
[Service]
ExecCondition=/bin/sh -c 'test ! -e {NO_SSH_FLAG}'
"""

DEVICES_UNIT = "gpu-sim-devices.service"
DEVICES_UNIT_TEXT = """\
# SIMULATED node (gpu-cluster-provisioner): creates the NVIDIA device nodes at boot.
[Unit]
Description=SIMULATED NVIDIA device nodes
DefaultDependencies=no
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/gpu-sim-devices

[Install]
WantedBy=sysinit.target
"""

# Character major of /dev/nvidia* (fixed by the driver); the NVSwitch control device gets a
# dynamic major on real systems, this one stands in for it.
NVIDIA_MAJOR = 195
NVSWITCH_MAJOR = 509
# The major of nvidia-caps-imex-channels in the IMEX guide's /proc/devices example.
IMEX_CHANNEL_MAJOR = 234


def _devices_script(profile: Mapping[str, Any]) -> str:
    count = int(profile.get("gpu_count", 0))
    nodes = [("nvidiactl", NVIDIA_MAJOR, 255)]
    nodes += [(f"nvidia{i}", NVIDIA_MAJOR, i) for i in range(count)]
    if profile.get("nvswitch"):
        nodes.append(("nvidia-nvswitchctl", NVSWITCH_MAJOR, 0))
    lines = ["#!/bin/sh", "# SIMULATED node (gpu-cluster-provisioner): the device nodes the "
             "NVIDIA driver creates.", "set -e"]
    if profile.get("multi_node_nvlink"):
        # IMEX channel 0, as a site creates it at every boot (channels are not created by
        # default nor kept over a reboot: NVIDIA's IMEX guide).
        lines.append("mkdir -p /dev/nvidia-caps-imex-channels")
        nodes.append(("nvidia-caps-imex-channels/channel0", IMEX_CHANNEL_MAJOR, 0))
    lines += [f"[ -e /dev/{name} ] || mknod -m 0666 /dev/{name} c {major} {minor}"
              for name, major, minor in nodes]
    return "\n".join(lines) + "\n"


def _sysfs_tree(profile_json: Mapping[str, Any],
                faults: Iterable[str]) -> list[tuple[str, bytes | None, int]]:
    """The simulated /sys/class/infiniband, /sys/bus/pci/devices (the GPUs' and HCAs' PCI
    functions, linked from each HCA's ``device``) and, on a RoCE profile, /sys/class/net (the
    HCAs' interfaces and their ECN files), placed under /var/lib/gpu-sim/sysfs."""
    base = SIM_SYSFS.lstrip("/")
    out: list[tuple[str, bytes | None, int]] = [("var/lib/gpu-sim/sysfs", None, 0o755)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sysfs"
        pci = root / Path(SIM_PCI_SYSFS).relative_to(SIM_SYSFS)
        write_pci_sysfs(pci, profile_json, list(faults))
        write_ib_sysfs(root / Path(SIM_IB_SYSFS).relative_to(SIM_SYSFS), profile_json,
                       list(faults), pci_root=pci)
        write_net_sysfs(root / Path(SIM_NET_SYSFS).relative_to(SIM_SYSFS), profile_json,
                        list(faults))
        for dirpath, dirnames, filenames in sorted(os.walk(root)):
            here = Path(dirpath)
            for name in sorted(dirnames + filenames):
                path = here / name
                rel = f"{base}/{path.relative_to(root)}"
                if path.is_symlink():
                    out.append((rel, os.readlink(path).encode(), -1))
                elif path.is_dir():
                    out.append((rel, None, 0o755))
                else:
                    out.append((rel, path.read_bytes(), 0o444))
    return sorted(out, key=lambda entry: entry[0])


# Realistic HGX bus ids (8-GPU baseboard), the ones the simulated nvidia-smi reports.
HGX_BUS_IDS = tuple(f"{bus:02x}" for bus in HGX_BUS_NUMBERS)


def _lspci_lines(profile: Mapping[str, Any]) -> str:
    """The profile's GPUs as `lspci -nn` prints them (a pci.ids too old to name the model)."""
    ids = list(profile.get("pci_device_ids") or ["10de:2330"])
    count = int(profile.get("gpu_count", 0))
    lines = []
    for i in range(count):
        bus = HGX_BUS_IDS[i] if i < len(HGX_BUS_IDS) else f"{0xe0 + i:02x}"
        lines.append(f"{bus}:00.0 3D controller [0302]: NVIDIA Corporation Device [{ids[0]}] "
                     "(rev a1)")
    return "\n".join(lines) + ("\n" if lines else "")


def _lspci_script(profile: Mapping[str, Any]) -> str:
    """A stand-in lspci: prints the NVIDIA devices for no filter or an NVIDIA -d filter."""
    return (
        "#!/bin/sh\n"
        "# SIMULATED lspci (gpu-cluster-provisioner): the profile's GPUs in `lspci -nn` format.\n"
        "filter=\n"
        "while [ $# -gt 0 ]; do\n"
        "  case \"$1\" in\n"
        "    -d) filter=\"$2\"; shift 2 ;;\n"
        "    -d*) filter=\"${1#-d}\"; shift ;;\n"
        "    *) shift ;;\n"
        "  esac\n"
        "done\n"
        "case \"$filter\" in\n"
        "  ''|10de|10de:*) ;;\n"
        "  *) exit 0 ;;\n"
        "esac\n"
        "cat <<'EOF'\n"
        f"{_lspci_lines(profile)}"
        "EOF\n")


OPS_UID = 1000  # the first user debootstrap's useradd creates in the node image


def _info(path: str, mode: int, owner: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.mode, info.uid, info.gid, info.mtime = mode, owner, owner, int(time.time())
    return info


def _add_dir(tar: tarfile.TarFile, path: str, mode: int, owner: int = 0) -> None:
    info = _info(path, mode, owner)
    info.type = tarfile.DIRTYPE
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, path: str, data: bytes, mode: int, owner: int = 0) -> None:
    info = _info(path, mode, owner)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _add_symlink(tar: tarfile.TarFile, path: str, target: str) -> None:
    info = tarfile.TarInfo(path)
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def _addresses(spec: SimSpec) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, _group in spec.node_names():
        info = podman.inspect("container", name) or {}
        nets = info.get("NetworkSettings", {}).get("Networks", {})
        addr = nets.get(NETWORK, {}).get("IPAddress")
        if not addr:
            raise EnvironmentProblem(f"simulated node {name} has no address on {NETWORK}")
        out[name] = str(addr)
    return out


def _wait_for_ssh(addresses: Mapping[str, str], say: Progress, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    pending = dict(addresses)
    while pending and time.monotonic() < deadline:
        for name, addr in list(pending.items()):
            try:
                with socket.create_connection((addr, 22), timeout=2) as sock:
                    if sock.recv(16).startswith(b"SSH-"):
                        del pending[name]
            except OSError:
                pass
        if pending:
            time.sleep(0.5)
    if pending:
        raise EnvironmentProblem(
            f"sshd did not come up on simulated node(s) {', '.join(sorted(pending))} "
            f"within {timeout:.0f}s: check `podman logs {next(iter(pending))}`")
    say("sshd is up on every node")


def _write_inventory(cluster: SimCluster, mirror: Mirror) -> None:
    inv = cluster.inventory_dir
    keydir = sim_state_dir() / "ssh"
    groups: dict[str, dict[str, Any]] = {"gpu_nodes": {"hosts": {}}, "cpu_nodes": {"hosts": {}}}
    for name, group in cluster.spec.node_names():
        host: dict[str, Any] = {"ansible_host": cluster.addresses[name]}
        if group == "gpu_nodes":
            host["gpu_profile"] = cluster.spec.profile
        groups[group]["hosts"][name] = host
    if cluster.spec.os in EPEL_ONLY_OSES:
        # Slurm comes from EPEL on EL 9, not reachable from here: what a site without it sets
        # (README, "RHEL and Rocky"), so the simulated EL cluster runs every other phase.
        # Prometheus, Alertmanager and node_exporter come from the release tarballs the
        # simulated mirror serves (sim/releases.py): Debian's builds, so the planned versions
        # are the ones those binaries report.
        releases = mirror.releases
        os_vars: dict[str, Any] = {
            "prometheus_releases_url": f"http://{MIRROR}:{MIRROR_PORT}/{RELEASES_DIR}",
            "monitoring_prometheus_version": releases["prometheus"],
            "monitoring_alertmanager_version": releases["alertmanager"],
            "node_health_node_exporter_version": releases["node_exporter"],
            # The site's own sums of the tarballs it serves (the roles pin the project's).
            "monitoring_prometheus_sha256": tarball_sha256(
                mirror.root, "prometheus", releases["prometheus"]),
            "monitoring_alertmanager_sha256": tarball_sha256(
                mirror.root, "alertmanager", releases["alertmanager"]),
            "node_health_node_exporter_sha256": tarball_sha256(
                mirror.root, "node_exporter", releases["node_exporter"]),
        }
    else:
        os_vars = dict(SIM_SLURM_VARS)
        groups.update(sim_slurm_groups(cluster.spec))
    # Prometheus + Alertmanager on the first CPU node (the first GPU node without one).
    monitor = next(iter(groups["cpu_nodes"]["hosts"] or groups["gpu_nodes"]["hosts"]))
    groups["monitoring"] = {"hosts": {monitor: {}}}
    data = {
        "all": {
            "vars": {
                "ansible_user": SSH_USER,
                "ansible_become": True,
                "ansible_ssh_private_key_file": str(keydir / "id_ed25519"),
                "ansible_ssh_common_args": (
                    f"-o UserKnownHostsFile={keydir / 'known_hosts'} "
                    "-o StrictHostKeyChecking=yes"),
                "gpu_package_source": f"http://{MIRROR}:{MIRROR_PORT}/",
                "gpu_package_source_dir": str(mirror_dir()),
                "nvidia_repo_mirror_key_fingerprint": mirror.fingerprint,
                **sim_inventory_vars(),
                **os_vars,
            },
            "children": groups,
        }
    }
    header = ("# Written by `provisioner sim up`: a SIMULATED cluster of podman containers.\n"
              "# Regenerated on every sim up; do not edit.\n")
    (inv / "hosts.yml").write_text(header + yaml.safe_dump(data, sort_keys=False))
