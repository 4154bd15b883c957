"""The simulated cluster's pure parts: node naming, per-node faults and the files a node gets."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from provisioner.profiles import load_profiles
from provisioner.sim import cluster as cluster_mod
from provisioner.sim.cluster import SimSpec, apply_faults, sim_files, sim_inventory_vars
from provisioner.sim.faults import for_node, newer_kernel
from provisioner.sim.image import image_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))
from gpucluster.preflight import parse_lspci_nvidia
from gpucluster.xid import parse_xid

PROFILE = load_profiles()["sim-h100-8gpu"].sim_json()


def files(group: str, faults: list[str]) -> dict[str, tuple[bytes | None, int]]:
    return {path: (data, mode) for path, data, mode in
            sim_files(group, dict(PROFILE, hostname="n1"), faults, "6.1.0-test")}


def test_node_names_and_spec_digest() -> None:
    spec = SimSpec(gpu_nodes=2, cpu_nodes=1)
    assert spec.node_names() == [("sim-login-1", "cpu_nodes"), ("sim-gpu-1", "gpu_nodes"),
                                 ("sim-gpu-2", "gpu_nodes")]
    # Faults are not the cluster's shape: `sim up --fault` rewrites running nodes' files.
    assert spec.digest() == SimSpec(gpu_nodes=2, cpu_nodes=1, faults=("gpu1-missing",)).digest()
    assert spec.digest() != SimSpec(gpu_nodes=3, cpu_nodes=1).digest()
    assert spec.digest() != SimSpec(gpu_nodes=2, cpu_nodes=1, suite="trixie").digest()
    assert SimSpec(gpu_nodes=1, cpu_nodes=0).node_names() == [("sim-gpu-1", "gpu_nodes")]


def test_faults_apply_to_all_or_to_one_node() -> None:
    faults = ["gpu3-nvlink-down", "sim-gpu-2:mlx5_1-down"]
    assert for_node("sim-gpu-1", faults) == ["gpu3-nvlink-down"]
    assert for_node("sim-gpu-2", faults) == ["gpu3-nvlink-down", "mlx5_1-down"]


def test_every_node_is_marked_simulated_with_simulated_headers() -> None:
    cpu = files("cpu_nodes", [])
    assert b"SIMULATED" in (cpu["etc/gpu-sim/SIMULATED"][0] or b"")
    assert cpu["lib/modules/6.1.0-test/build"] == (b"/usr/src/linux-headers-6.1.0-test", -1)
    assert "etc/gpu-sim/profile.json" not in cpu


def test_gpu_node_gets_profile_pci_devices_ib_ports_and_kernel_log() -> None:
    gpu = files("gpu_nodes", ["gpu6-xid-79", "mlx5_2-half-rate"])
    profile = json.loads(gpu["etc/gpu-sim/profile.json"][0] or b"{}")
    assert profile["gpu_count"] == 8 and profile["hostname"] == "n1"
    devices = parse_lspci_nvidia(run_lspci(gpu, "-nn", "-d", "10de:"))
    assert [d["device_id"] for d in devices] == ["10de:2330"] * 8
    assert [d["slot"] for d in devices][:2] == ["19:00.0", "3b:00.0"]
    assert run_lspci(gpu, "-nn", "-d", "15b3:") == ""  # another vendor: nothing
    [event] = parse_xid((gpu["var/lib/gpu-sim/dmesg"][0] or b"").decode())
    assert event["xid"] == 79 and event["pci"] == "0000:cb:00"
    base = "var/lib/gpu-sim/sysfs/class/infiniband"
    assert (gpu[f"{base}/mlx5_2/ports/1/rate"][0] or b"").startswith(b"200 Gb/sec")
    assert (gpu[f"{base}/mlx5_0/ports/1/rate"][0] or b"").startswith(b"400 Gb/sec")
    assert len([p for p in gpu if p.endswith("/ports/1/state")]) == 8


def run_lspci(node: dict[str, tuple[bytes | None, int]], *args: str) -> str:
    script, mode = node["usr/local/bin/lspci"]
    assert mode == 0o755 and script is not None
    return subprocess.run(["sh", "-c", script.decode(), "lspci", *args], capture_output=True,
                          text=True, check=True).stdout


def test_gpu_node_creates_the_driver_device_nodes_at_boot() -> None:
    gpu = files("gpu_nodes", [])
    script = (gpu["usr/local/sbin/gpu-sim-devices"][0] or b"").decode()
    made = [line.split()[-4:] for line in script.splitlines() if "mknod" in line]
    assert made[0] == ["/dev/nvidiactl", "c", "195", "255"]
    assert [m[0] for m in made[1:9]] == [f"/dev/nvidia{i}" for i in range(8)]
    assert all(m[1:3] == ["c", "195"] for m in made[:9])
    assert made[-1][0] == "/dev/nvidia-nvswitchctl"  # the profile has NVSwitches
    unit = "etc/systemd/system/sysinit.target.wants/gpu-sim-devices.service"
    assert gpu[unit] == (b"/etc/systemd/system/gpu-sim-devices.service", -1)
    assert "usr/local/sbin/gpu-sim-devices" not in files("cpu_nodes", [])


def test_no_node_touches_the_machines_binfmt_table() -> None:
    """systemd-binfmt clears the kernel's binfmt_misc table, the machine's, at start and stop:
    every node masks it and the table's mount units."""
    for group in ("gpu_nodes", "cpu_nodes"):
        node = files(group, [])
        for unit in ("systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount",
                     "proc-sys-fs-binfmt_misc.mount"):
            assert node[f"etc/systemd/system/{unit}"] == (b"/dev/null", -1), (group, unit)


def test_a_multi_node_nvlink_node_gets_imex_and_its_channel() -> None:
    gb200 = dict(load_profiles()["sim-gb200-4gpu"].sim_json(), hostname="n1",
                 imex_nodes=["10.0.0.1", "10.0.0.2"])
    node = {path: (data, mode) for path, data, mode in
            sim_files("gpu_nodes", gb200, [], "6.1.0-test")}
    assert node["etc/nvidia-imex/nodes_config.cfg"] == (b"10.0.0.1\n10.0.0.2\n", 0o644)
    assert node["usr/bin/nvidia-imex-ctl"][1] == 0o755
    wants = "etc/systemd/system/multi-user.target.wants/nvidia-imex.service"
    assert node[wants] == (b"/lib/systemd/system/nvidia-imex.service", -1)
    script = (node["usr/local/sbin/gpu-sim-devices"][0] or b"").decode()
    assert "/dev/nvidia-caps-imex-channels/channel0 c 234 0" in script
    # Not on other profiles.
    assert "etc/nvidia-imex/nodes_config.cfg" not in files("gpu_nodes", [])


def test_inventory_points_role_paths_at_the_nodes_stand_ins() -> None:
    gpu = files("gpu_nodes", [])
    extra = sim_inventory_vars()
    assert extra["provisioner_simulated"] is True
    for var in ("gpu_validate_ib_sysfs_root", "gpu_validate_kernel_log"):
        path = str(extra[var]).lstrip("/")
        assert path in gpu, var
    # The loaded module's version is volatile like sysfs: the driver package writes it at
    # install when none is loaded, and every boot writes it from the installed driver.
    loaded = str(extra["nvidia_driver_loaded_version_file"])
    assert loaded.startswith("/run/") and loaded.lstrip("/") not in gpu
    boot = gpu["usr/local/sbin/gpu-sim-boot"][0].decode()
    assert f"cp /usr/lib/gpu-sim/driver-version {loaded}" in boot


def test_every_node_boots_with_its_own_boot_id_and_the_no_return_fault_blocks_sshd() -> None:
    for group in ("gpu_nodes", "cpu_nodes"):
        node = files(group, [])
        unit = node["etc/systemd/system/gpu-sim-boot.service"][0].decode()
        # Before sshd: Ansible's reboot module reads the boot id over SSH once the node is back.
        assert re.search(r"^Before=.*\bssh\.service\b", unit, re.M), unit
        assert node["etc/systemd/system/sysinit.target.wants/gpu-sim-boot.service"] == (
            b"/etc/systemd/system/gpu-sim-boot.service", -1)
        script = node["usr/local/sbin/gpu-sim-boot"][0].decode()
        assert "mount --bind /run/gpu-sim/boot_id /proc/sys/kernel/random/boot_id \\\n" in script
        # Only a node that booted before and carries the fault hangs (not its first boot).
        assert re.search(r"\[ -e /var/lib/gpu-sim/booted \] && grep -qx reboot-no-return "
                         r"/etc/gpu-sim/faults", script), script
        dropin = node["etc/systemd/system/ssh.service.d/gpu-sim-fault.conf"][0].decode()
        assert "ExecCondition=/bin/sh -c 'test ! -e /run/gpu-sim/no-sshd'" in dropin


def test_image_name_follows_the_recipe() -> None:
    image = image_for("bookworm")
    assert image.name.startswith("localhost/gpuc-node:debian12-")
    assert image_for("trixie").name.startswith("localhost/gpuc-node:debian13-")


def test_molecule_scenarios_get_their_inventory_the_sim_variables_and_the_plan(
        tmp_path: Path) -> None:
    import yaml

    from provisioner.sim.molecule_prep import write_inventories

    dest = write_inventories(tmp_path / "inv", "http://mirror:8080/", "A" * 40)
    assert sorted(p.name for p in dest.iterdir()) == ["default", "nvidia_repo"]
    repo = dest / "nvidia_repo"
    assert sorted(p.name for p in repo.iterdir()) == ["hosts.yml", "plan.yml", "sim.yml"]
    sim = yaml.safe_load((repo / "sim.yml").read_text())["all"]["vars"]
    assert sim["gpu_package_source"] == "http://mirror:8080/"
    assert sim["nvidia_repo_mirror_key_fingerprint"] == "A" * 40
    plan = yaml.safe_load((repo / "plan.yml").read_text())["all"]["hosts"]
    assert plan["gpuc-mol-repo-1"]["gpu_stack"] == "cuda-12.8"
    default = yaml.safe_load((dest / "default" / "plan.yml").read_text())["all"]["hosts"]
    # The platforms of molecule/default/molecule.yml, no more and no fewer.
    platforms = yaml.safe_load(
        (Path(__file__).parents[2] / "molecule/default/molecule.yml").read_text())["platforms"]
    assert set(default) == {p["name"] for p in platforms} == {"gpuc-mol-login-1",
                                                              "gpuc-mol-gpu-1"}
    assert "nvidia_repo_stack_packages" not in default["gpuc-mol-login-1"]


def test_faults_are_injected_into_running_nodes_and_healed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[list[str], bytes | None]] = []

    def fake_run(args: list[str], *, input_bytes: bytes | None = None,
                 **_kw: object) -> subprocess.CompletedProcess[bytes]:
        calls.append((list(args), input_bytes))
        return subprocess.CompletedProcess(args, 0, b"", b"")

    monkeypatch.setattr(cluster_mod.podman, "run", fake_run)

    def pushed(spec: SimSpec) -> dict[str, dict[str, bytes]]:
        calls.clear()
        apply_faults(spec, PROFILE, lambda _msg: None)
        out: dict[str, dict[str, bytes]] = {}
        for args, data in calls:
            if args[0] == "cp":
                node = args[-1].split(":")[0]
                with tarfile.open(fileobj=io.BytesIO(data or b"")) as tar:
                    out[node] = {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                                 for m in tar.getmembers() if m.isfile()}
                    out[node].update({m.name: f"-> {m.linkname}".encode()
                                      for m in tar.getmembers() if m.issym()})
        # The old sysfs trees and any newer kernel go first, so a healed node keeps neither.
        newer = newer_kernel(os.uname().release)
        removals = [a for a, _ in calls if a[0] == "exec"]
        assert [a[:4] for a in removals] == [["exec", n, "sh", "-c"] for n in out]
        for args in removals:
            node = args[1]
            # Last, the node's interface: net-slow's token bucket, or the line rate (healed),
            # now and at its next boot.
            script, rate_file, tc = args[4].rsplit("; ", 2)
            slow = "net-slow" in out[node].get("etc/gpu-sim/faults", b"").decode()
            mbit = 200 if slow else 2000
            assert rate_file == f"echo {mbit} > /etc/gpu-sim/eth0-rate-mbit", rate_file
            assert tc.startswith(f"tc qdisc replace dev eth0 root tbf rate {mbit}mbit "), tc
            removal, *heal = script.split(";", 1)
            # A node without reboot-no-return gets its sshd back if that fault had struck.
            no_return = "reboot-no-return" in out[node].get("etc/gpu-sim/faults", b"").decode()
            assert bool(heal) is not no_return, script
            if heal:
                assert heal[0].split() == ["if", "[", "-e", "/run/gpu-sim/no-sshd", "];", "then",
                                           "rm", "-f", "/run/gpu-sim/no-sshd", "&&", "systemctl",
                                           "start", "ssh.service;", "fi"]
            assert removal.split() == ["rm", "-rf", cluster_mod.SIM_IB_SYSFS,
                                       cluster_mod.SIM_PCI_SYSFS, cluster_mod.SIM_NET_SYSFS,
                                       f"/boot/vmlinuz-{newer}", f"/lib/modules/{newer}",
                                       f"/usr/src/linux-headers-{newer}",
                                       f"/var/lib/dkms/*/*/{newer}"]
        return out

    no_return = pushed(SimSpec(faults=("sim-gpu-1:reboot-no-return",)))
    assert no_return["sim-gpu-1"]["etc/gpu-sim/faults"] == b"reboot-no-return\n"
    faulty = pushed(SimSpec(faults=("sim-gpu-2:mlx5_1-down", "sim-gpu-2:gpu3-xid-79")))
    assert set(faulty) == {"sim-gpu-1", "sim-gpu-2"}  # GPU nodes only, every one of them
    assert faulty["sim-gpu-2"]["etc/gpu-sim/faults"] == b"mlx5_1-down\ngpu3-xid-79\n"
    assert faulty["sim-gpu-1"]["etc/gpu-sim/faults"] == b""
    log = cluster_mod.SIM_KERNEL_LOG.lstrip("/")
    assert [x["xid"] for x in parse_xid(faulty["sim-gpu-2"][log].decode())] == [79]
    assert parse_xid(faulty["sim-gpu-1"][log].decode()) == []
    state = f"{cluster_mod.SIM_IB_SYSFS.lstrip('/')}/mlx5_1/ports/1/state"
    assert b"DOWN" in faulty["sim-gpu-2"][state] and b"ACTIVE" in faulty["sim-gpu-1"][state]
    # Only fault-carrying files travel: no profile, no stand-in tool, no device script; of the
    # EFI variables the Secure Boot ones, never the MOK list or a pending request.
    secure_boot = "var/lib/gpu-sim/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
    assert all(p in (log, "etc/gpu-sim/faults") or p.startswith("var/lib/gpu-sim/sysfs/")
               or p.startswith("var/lib/gpu-sim/efivars/S") for p in faulty["sim-gpu-2"])
    assert faulty["sim-gpu-2"][secure_boot] == b"\x06\x00\x00\x00\x00"
    on = pushed(SimSpec(faults=("sim-gpu-2:secure-boot",)))
    assert on["sim-gpu-2"][secure_boot] == b"\x06\x00\x00\x00\x01"
    assert on["sim-gpu-1"][secure_boot] == b"\x06\x00\x00\x00\x00"
    healed = pushed(SimSpec())
    assert healed["sim-gpu-2"]["etc/gpu-sim/faults"] == b""
    assert healed["sim-gpu-2"][secure_boot] == b"\x06\x00\x00\x00\x00"
    assert b"ACTIVE" in healed["sim-gpu-2"][state]
    assert parse_xid(healed["sim-gpu-2"][log].decode()) == []
    # A newer kernel installed but not booted: its image and module directory, its headers
    # only with kernel-newer-unbuilt.
    newer = newer_kernel(os.uname().release)
    kernels = pushed(SimSpec(faults=("sim-gpu-1:kernel-newer-unbuilt",
                                     "sim-gpu-2:kernel-newer-no-headers")))
    assert f"boot/vmlinuz-{newer}" in kernels["sim-gpu-1"]
    assert kernels["sim-gpu-1"][f"lib/modules/{newer}/build"] == (
        f"-> /usr/src/linux-headers-{newer}".encode())
    assert f"boot/vmlinuz-{newer}" in kernels["sim-gpu-2"]
    assert not any(p.startswith(("usr/src/", f"lib/modules/{newer}/"))
                   for p in kernels["sim-gpu-2"])
    assert not any("vmlinuz" in p for p in pushed(SimSpec())["sim-gpu-1"])


@pytest.mark.parametrize("node_os", ["debian12", "ubuntu2404", "rocky9"])
def test_slurm_only_where_the_os_repositories_carry_it_and_prometheus_from_releases_on_el(
        node_os: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EL 9 has Slurm only in EPEL, which the simulated cluster cannot reach: an imitated Rocky
    cluster leaves out the Slurm groups, as a site without EPEL would. Prometheus, Alertmanager
    and node_exporter come from the release tarballs the mirror serves there, at the versions
    the mirror built (the monitoring group is there on every OS)."""
    import yaml

    from provisioner.sim.stand_in_packages import Mirror

    monkeypatch.setattr(cluster_mod, "sim_state_dir", lambda: tmp_path)
    cluster = cluster_mod.SimCluster(
        spec=SimSpec(os=node_os), inventory_dir=tmp_path,
        addresses={"sim-login-1": "10.89.0.2", "sim-gpu-1": "10.89.0.3", "sim-gpu-2": "10.89.0.4"})
    releases = {"prometheus": "2.42.0", "alertmanager": "0.25.0", "node_exporter": "1.5.0"}
    served = {}
    for project, version in releases.items():
        where = tmp_path / "prometheus-releases" / project / "releases" / "download" / f"v{version}"
        where.mkdir(parents=True)
        (where / f"{project}-{version}.linux-amd64.tar.gz").write_bytes(project.encode())
        served[project] = hashlib.sha256(project.encode()).hexdigest()
    cluster_mod._write_inventory(cluster, Mirror(tmp_path, "A" * 40,
                                                 releases if node_os == "rocky9" else {}))
    data = yaml.safe_load((tmp_path / "hosts.yml").read_text())["all"]
    el = node_os == "rocky9"
    assert ("slurm_controller" in data["children"]) is not el
    assert data["children"]["monitoring"]["hosts"] == {"sim-login-1": {}}
    assert "node_health_node_exporter" not in data["vars"]
    if el:
        assert data["vars"]["prometheus_releases_url"] == (
            "http://gpuc-sim-mirror:8080/prometheus-releases")
        assert data["vars"]["monitoring_prometheus_version"] == "2.42.0"
        assert data["vars"]["monitoring_alertmanager_version"] == "0.25.0"
        assert data["vars"]["node_health_node_exporter_version"] == "1.5.0"
        # The sums of the tarballs it serves, pinned in the inventory as a site pins its own.
        assert data["vars"]["monitoring_prometheus_sha256"] == served["prometheus"]
        assert data["vars"]["monitoring_alertmanager_sha256"] == served["alertmanager"]
        assert data["vars"]["node_health_node_exporter_sha256"] == served["node_exporter"]
    else:
        assert "prometheus_releases_url" not in data["vars"]
    assert set(data["children"]["gpu_nodes"]["hosts"]) == {"sim-gpu-1", "sim-gpu-2"}


@pytest.mark.parametrize(("subnet", "gateway", "mirror", "first", "last"), [
    ("10.89.0.0/24", "10.89.0.1", "10.89.0.2", "10.89.0.11", "10.89.0.13"),
    ("10.89.3.0/24", None, "10.89.3.2", "10.89.3.11", "10.89.3.13"),
    ("192.0.2.0/24", "192.0.2.254", "192.0.2.1", "192.0.2.10", "192.0.2.12"),
])
def test_fixed_addresses_follow_the_network(monkeypatch: pytest.MonkeyPatch, subnet: str,
                                             gateway: str | None, mirror: str, first: str,
                                             last: str) -> None:
    net = {"subnets": [{"subnet": "fd00::/64"}, {"subnet": subnet, "gateway": gateway}]}
    monkeypatch.setattr(cluster_mod.podman, "inspect",
                        lambda kind, name: net if (kind, name) == ("network", "gpuc-sim") else None)
    got = cluster_mod._fixed_addresses(["a", "b", "c"])
    assert got == {cluster_mod.MIRROR: mirror, "a": first, "b": got["b"], "c": last}
    assert len(set(got.values())) == 4 and gateway not in got.values()


def test_fixed_addresses_refuse_a_network_too_small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_mod.podman, "inspect",
                        lambda kind, name: {"subnets": [{"subnet": "10.89.0.0/28"}]})
    with pytest.raises(cluster_mod.EnvironmentProblem, match="too small for 5 nodes"):
        cluster_mod._fixed_addresses([f"n{i}" for i in range(5)])
    monkeypatch.setattr(cluster_mod.podman, "inspect", lambda kind, name: None)
    with pytest.raises(cluster_mod.EnvironmentProblem, match="no IPv4 subnet"):
        cluster_mod._fixed_addresses(["a"])


def _payload_files(name: str, group: str, client_key: Path) -> dict[str, bytes]:
    _pub, payload = cluster_mod._node_payload(name, group, client_key, "6.1.0-test", PROFILE,
                                              SimSpec(gpu_nodes=2, cpu_nodes=1))
    with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_every_node_gets_its_own_machine_id(tmp_path: Path) -> None:
    # A rebooted node's udev derives its MAC address from the machine id: nodes sharing the
    # image's id ended up with one MAC between them and stalled every new SSH connection.
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    ids = []
    for name, group in (("sim-gpu-1", "gpu_nodes"), ("sim-gpu-2", "gpu_nodes"),
                        ("sim-login-1", "cpu_nodes")):
        got = _payload_files(name, group, key)
        machine_id = got["etc/machine-id"].decode()
        assert re.fullmatch(r"[0-9a-f]{32}\n", machine_id), machine_id
        assert got["var/lib/dbus/machine-id"].decode() == machine_id
        ids.append(machine_id)
    assert len(set(ids)) == 3, ids


@pytest.mark.parametrize(("group", "faults", "mbit"), [
    ("cpu_nodes", [], "2000"),
    ("gpu_nodes", [], "2000"),
    ("gpu_nodes", ["net-slow"], "200"),
    ("gpu_nodes", ["net-slow-1400mbit", "gpu0-missing"], "1400"),
])
def test_every_node_boots_with_its_interface_at_the_line_rate_or_its_fault(
        group: str, faults: list[str], mbit: str) -> None:
    """Every node, login nodes too, has a line rate its boot gives eth0: a pair's figure is the
    network's, not the loaded machine's CPUs'."""
    data, mode = files(group, faults)["etc/gpu-sim/eth0-rate-mbit"]
    assert data == f"{mbit}\n".encode() and mode == 0o644
    boot = files(group, faults)["usr/local/sbin/gpu-sim-boot"][0] or b""
    assert b"rate=$(cat /etc/gpu-sim/eth0-rate-mbit)" in boot
    assert b"tc qdisc replace dev eth0 root tbf rate ${rate}mbit" in boot


def test_an_archive_is_copied_in_without_its_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    """podman 4.3's `cp -` closes its pipe at the end-of-archive marker: the archive goes without
    the zero padding after it, its members intact."""
    import io
    import tarfile

    from provisioner.sim import podman

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for index in range(60):
            data = b"x\n" if index % 2 else b"ends in zeros\0\0\0"
            info = tarfile.TarInfo(f"many/f{index}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    padded = buf.getvalue()
    sent: list[bytes] = []
    monkeypatch.setattr(podman, "run", lambda args, input_bytes=None, **_: sent.append(
        input_bytes or b""))
    podman.copy_into("n1", padded)
    assert len(padded) % 10240 == 0 and len(sent[0]) < len(padded)
    assert len(sent[0]) % 512 == 0 and sent[0].endswith(b"\0" * 1024)
    with tarfile.open(fileobj=io.BytesIO(sent[0])) as back:
        assert [m.name for m in back.getmembers()] == [f"many/f{i}" for i in range(60)]
        assert back.extractfile("many/f0").read() == b"ends in zeros\0\0\0"  # type: ignore[union-attr]
