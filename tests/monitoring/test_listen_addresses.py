"""Where the monitoring and node_health roles make each service listen, and how verify.yml reads
where it does: the roles' own variables (defaults/main.yml, vars/main.yml) and templates,
evaluated by Ansible's templar as a run would, for the inventories they meet (ansible_host an
IPv4 address, an IPv6 address, a name) and for an explicit choice of every interface."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

from provisioner.paths import collections_path

# The roles' variables call the collection's filters (gpucluster.provisioner.*), as a run finds
# them on its collections path.
init_plugin_loader([str(collections_path())])

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "roles" / "monitoring"
NODE_HEALTH = ROOT / "roles" / "node_health"

# `ss -ltnpH` as Debian 12 prints it on the monitoring host of the simulated cluster.
SS = [
    'LISTEN 0 128 0.0.0.0:22 0.0.0.0:* users:(("sshd",pid=56,fd=3))',
    'LISTEN 0 4096 10.89.0.11:9100 0.0.0.0:* users:(("prometheus-node",pid=883,fd=3))',
    'LISTEN 0 4096 127.0.0.1:9093 0.0.0.0:* users:(("prometheus-aler",pid=1358,fd=8))',
    'LISTEN 0 4096 10.89.0.11:9090 0.0.0.0:* users:(("prometheus",pid=135,fd=7))',
]


def trusted(value: Any) -> Any:
    """YAML as a role's variables file gives it to a run: its templates may be rendered."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def role_vars(role: Path, **given: Any) -> dict[str, Any]:
    variables: dict[str, Any] = {"inventory_hostname": "sim-login-1", "ansible_facts": {},
                                 "ansible_managed": "Ansible managed"}
    for path in (role / "defaults" / "main.yml", role / "vars" / "main.yml",
                 role / "vars" / "Debian.yml"):
        variables.update(trusted(yaml.safe_load(path.read_text())))
    variables.update(given)
    return variables


def render(variables: dict[str, Any], text: str) -> Any:
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text))


def monitoring(**given: Any) -> dict[str, Any]:
    return role_vars(MONITORING, monitoring_server=True, monitoring_dcgm_exporter=True, **given)


def test_alertmanager_on_loopback_prometheus_and_dcgm_exporter_on_the_cluster_address() -> None:
    v = monitoring(ansible_host="10.89.0.11")
    assert render(v, "{{ [__monitoring_prometheus_socket, __monitoring_alertmanager_socket,"
                     " __monitoring_dcgm_exporter_socket] }}") == [
        "10.89.0.11:9090", "127.0.0.1:9093", "10.89.0.11:9400"]
    # No network facts are gathered for an inventory that gives addresses.
    assert "default_ipv4" not in render(v, "{{ __monitoring_required_facts }}")
    assert render(v, "{{ [__monitoring_prometheus_public, __monitoring_alertmanager_public] }}") \
        == ["10.89.0.11:9090", "127.0.0.1:9093"]


def test_a_host_named_by_name_listens_on_its_default_ipv4_address() -> None:
    v = monitoring(ansible_host="login1.cluster.example",
                   ansible_facts={"default_ipv4": {"address": "10.0.0.5"}})
    assert "default_ipv4" in render(v, "{{ __monitoring_required_facts }}")
    assert render(v, "{{ __monitoring_prometheus_socket }}") == "10.0.0.5:9090"
    # No default route: empty, which preflight refuses (never every interface by accident).
    lost = monitoring(ansible_host="login1.cluster.example", ansible_facts={"default_ipv4": {}})
    assert render(lost, "{{ monitoring_prometheus_listen_address }}") == ""


def test_an_ipv6_address_is_bracketed_as_go_listeners_and_ss_write_it() -> None:
    v = monitoring(ansible_host="fd00::11")
    assert render(v, "{{ __monitoring_prometheus_socket }}") == "[fd00::11]:9090"
    assert render(v, "{{ __monitoring_dcgm_exporter_socket }}") == "[fd00::11]:9400"


def test_every_interface_is_an_explicit_choice_reached_locally_on_loopback() -> None:
    v = monitoring(ansible_host="10.89.0.11", monitoring_prometheus_listen_address="0.0.0.0",
                   monitoring_dcgm_exporter_listen_address="::")
    assert render(v, "{{ [__monitoring_prometheus_socket, __monitoring_prometheus_local,"
                     " __monitoring_prometheus_public] }}") == [
        "0.0.0.0:9090", "127.0.0.1:9090", "10.89.0.11:9090"]
    assert render(v, "{{ [__monitoring_dcgm_exporter_socket, __monitoring_dcgm_exporter_local] }}") \
        == ["[::]:9400", "127.0.0.1:9400"]


def test_prometheus_reaches_alertmanager_and_itself_where_they_listen() -> None:
    v = monitoring(ansible_host="10.89.0.11")
    template = MONITORING / "templates" / "etc" / "prometheus" / "prometheus.yml.j2"
    config = yaml.safe_load(render(v, template.read_text()))
    [alerting] = config["alerting"]["alertmanagers"]
    assert alerting["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    [own] = [job for job in config["scrape_configs"] if job["job_name"] == "prometheus"]
    assert own["static_configs"][0]["targets"] == ["10.89.0.11:9090"]


def test_alertmanager_args_switch_its_cluster_gossip_off() -> None:
    tasks = yaml.safe_load((MONITORING / "tasks" / "configure.yml").read_text())
    [task] = [t for t in tasks if "Alertmanager's listen address" in t["name"]]
    line = render(monitoring(ansible_host="10.89.0.11"), task["ansible.builtin.lineinfile"]["line"])
    assert line == 'ARGS="--web.listen-address=127.0.0.1:9093 --cluster.listen-address="'


def test_the_dcgm_exporter_drop_in_replaces_the_command_line_with_the_address() -> None:
    v = monitoring(ansible_host="10.89.0.12")
    template = (MONITORING / "templates" / "etc" / "systemd" / "system"
                / "nvidia-dcgm-exporter.service.d" / "listen-address.conf.j2")
    lines = render(v, template.read_text()).splitlines()
    assert lines[lines.index("[Service]") + 1:] == [
        "ExecStart=", "ExecStart=/usr/bin/dcgm-exporter --address 10.89.0.12:9400"]
    assert render(v, "{{ __monitoring_dcgm_exporter_dropin }}") == \
        "/etc/systemd/system/nvidia-dcgm-exporter.service.d/listen-address.conf"


@pytest.mark.parametrize(("pids", "bound"), [
    ({"prometheus": "135\n", "alertmanager": "1358\n", "dcgm_exporter": "0\n"},
     {"prometheus": ["10.89.0.11:9090"], "alertmanager": ["127.0.0.1:9093"],
      "dcgm_exporter": []}),
    # Alertmanager with its gossip on: a second socket, which verify.yml refuses.
    ({"prometheus": "135\n", "alertmanager": "1358\n", "dcgm_exporter": ""},
     {"prometheus": ["10.89.0.11:9090"], "alertmanager": ["127.0.0.1:9093", "*:9094"],
      "dcgm_exporter": []}),
])
def test_verify_counts_only_the_sockets_of_each_services_main_process(
        pids: dict[str, str], bound: dict[str, list[str]]) -> None:
    lines = list(SS)
    if "*:9094" in bound["alertmanager"]:
        lines.append('LISTEN 0 4096 *:9094 *:* users:(("prometheus-aler",pid=1358,fd=3))')
    measured = {"commands": {"ss": {"rc": 0, "stdout_lines": lines},
                             **{key: {"stdout": pid} for key, pid in pids.items()}}}
    v = monitoring(ansible_host="10.89.0.11", __monitoring_listening=measured)
    # pid=135 is not pid=1358's prefix: the comma ends each pid.
    assert render(v, "{{ __monitoring_bound }}") == bound


def test_node_exporter_listens_on_the_nodes_cluster_address() -> None:
    measured = {"commands": {"ss": {"rc": 0, "stdout_lines": SS},
                             "main_pid": {"stdout": "883\n"}}}
    v = role_vars(NODE_HEALTH, ansible_host="10.89.0.11", __node_health_listening=measured)
    assert render(v, "{{ [__node_health_node_exporter_socket, __node_health_node_exporter_local,"
                     " __node_health_node_exporter_bound] }}") == [
        "10.89.0.11:9100", "10.89.0.11:9100", ["10.89.0.11:9100"]]
    tasks = yaml.safe_load((NODE_HEALTH / "tasks" / "configure.yml").read_text())
    [task] = [t for t in tasks if "node_exporter" in t["name"] and "ansible.builtin.lineinfile" in t]
    assert render(v, task["ansible.builtin.lineinfile"]["line"]) == (
        'ARGS="--collector.textfile.directory=/var/lib/prometheus/node-exporter '
        '--web.listen-address=10.89.0.11:9100"')
    named = role_vars(NODE_HEALTH, ansible_host="gpu1.cluster.example",
                      ansible_facts={"default_ipv4": {"address": "10.0.0.7"}})
    assert "default_ipv4" in render(named, "{{ __node_health_required_facts }}")
    assert render(named, "{{ __node_health_node_exporter_socket }}") == "10.0.0.7:9100"
