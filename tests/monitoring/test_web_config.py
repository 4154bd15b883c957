"""TLS and basic auth on the monitoring endpoints (the exporter toolkit's web configuration), as
the monitoring and node_health roles' own variables and templates give them to a run: off by
default (no file, no flag, plain HTTP); on, every service gets the flag that names the file,
Prometheus speaks TLS and basic auth to every target and to Alertmanager, the key and the
password are readable by the services' group only, and alertmanager.yml (the webhook URL is
its secret) is too."""

from __future__ import annotations

from typing import Any

import yaml

from tests.monitoring.test_listen_addresses import (
    MONITORING,
    NODE_HEALTH,
    render,
    role_vars,
)

CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
HASH = "$2b$10$abcdefghijklmnopqrstuu5FJ3C7FS4jMOqgO2TltKa.V3D7Tbia"
WEB = {"prometheus_web_tls_cert": CERT, "prometheus_web_tls_key": KEY,
       "prometheus_web_tls_ca": CERT, "prometheus_web_users": {"scraper": HASH},
       "prometheus_web_client_user": "scraper", "prometheus_web_client_password": "s3cret"}


def monitoring(**given: Any) -> dict[str, Any]:
    return role_vars(MONITORING, monitoring_server=True, monitoring_dcgm_exporter=True,
                     ansible_host="10.89.0.11", ansible_check_mode=False,
                     monitoring_node_targets=["sim-gpu-1=10.89.0.12"],
                     monitoring_gpu_targets=["sim-gpu-1=10.89.0.12"], **given)


def task(role: Any, file: str, words: str) -> dict[str, Any]:
    tasks = yaml.safe_load((role / "tasks" / file).read_text())
    [found] = [t for t in tasks if words in t["name"]]
    return found


def prometheus_yml(v: dict[str, Any]) -> dict[str, Any]:
    text = (MONITORING / "templates" / "etc" / "prometheus" / "prometheus.yml.j2").read_text()
    return yaml.safe_load(render(v, text))


def test_off_by_default_no_file_no_flag_plain_http() -> None:
    v = monitoring()
    files = render(v, "{{ __monitoring_web_files }}")
    assert {name: entry for name, entry in files.items()} == {
        name: {"state": "absent"} for name in
        ["web-config.yml", "tls.crt", "tls.key", "ca.crt", "client-password"]}
    line = render(v, task(MONITORING, "configure.yml", "Prometheus' listen")
                  ["ansible.builtin.lineinfile"]["line"])
    assert "web.config.file" not in line
    config = prometheus_yml(v)
    assert all("scheme" not in job and "basic_auth" not in job for job in config["scrape_configs"])
    assert render(v, "{{ __monitoring_scheme }}") == "http"


def test_on_every_service_has_its_flag_and_prometheus_speaks_tls_and_auth() -> None:
    v = monitoring(**WEB)
    path = "/etc/gpucluster-web/monitoring/web-config.yml"
    for words in ("Prometheus' listen", "Alertmanager's listen"):
        line = render(v, task(MONITORING, "configure.yml", words)["ansible.builtin.lineinfile"]["line"])
        assert line.endswith(f' --web.config.file={path}"'), line
    dropin = (MONITORING / "templates" / "etc" / "systemd" / "system"
              / "nvidia-dcgm-exporter.service.d" / "listen-address.conf.j2").read_text()
    assert render(v, dropin).splitlines()[-1] == (
        f"ExecStart=/usr/bin/dcgm-exporter --address 10.89.0.12:9400 --web-config-file {path}"
        .replace("10.89.0.12", "10.89.0.11"))
    config = prometheus_yml(v)
    client = {"scheme": "https",
              "tls_config": {"ca_file": "/etc/gpucluster-web/monitoring/ca.crt"},
              "basic_auth": {"username": "scraper",
                             "password_file": "/etc/gpucluster-web/monitoring/client-password"}}
    assert [job["job_name"] for job in config["scrape_configs"]] == ["prometheus", "node", "dcgm"]
    for job in config["scrape_configs"]:
        assert {k: job[k] for k in client} == client, job
    [alerting] = config["alerting"]["alertmanagers"]
    assert {k: alerting[k] for k in client} == client
    assert "s3cret" not in yaml.safe_dump(config)  # the password is in its own file only


def test_the_secrets_are_for_the_servers_group_only() -> None:
    v = monitoring(**WEB)
    files = render(v, "{{ __monitoring_web_files }}")
    assert files["tls.key"] == {"content": KEY, "mode": "0640"}
    assert files["client-password"] == {"content": "s3cret", "mode": "0640"}
    assert files["web-config.yml"]["mode"] == "0640"
    assert "mode" not in files["tls.crt"]  # the file_set call's 0644
    web = yaml.safe_load(files["web-config.yml"]["content"])
    assert web == {"tls_server_config": {"cert_file": "/etc/gpucluster-web/monitoring/tls.crt",
                                         "key_file": "/etc/gpucluster-web/monitoring/tls.key"},
                   "basic_auth_users": {"scraper": HASH}}
    assert render(v, "{{ __monitoring_group }}") == "prometheus"
    # alertmanager.yml carries the webhook URL: 0640, the servers' group.
    configure = task(MONITORING, "configure.yml", "Install the cluster's rules")
    assert "'mode': '0640'" in configure["gpucluster.provisioner.file_set"]["files"]
    assert configure["gpucluster.provisioner.file_set"]["group"] == "{{ __monitoring_group }}"
    # Where only dcgm-exporter runs (as root), root's group.
    assert render(role_vars(MONITORING, monitoring_server=False, monitoring_dcgm_exporter=True,
                            ansible_check_mode=False), "{{ __monitoring_group }}") == "root"


def test_node_exporter_gets_the_same_settings() -> None:
    v = role_vars(NODE_HEALTH, ansible_host="10.89.0.12", **WEB)
    files = render(v, "{{ __node_health_web_files }}")
    assert files["tls.key"] == {"content": KEY, "mode": "0640"}
    web = yaml.safe_load(files["web-config.yml"]["content"])
    assert web["basic_auth_users"] == {"scraper": HASH}
    assert web["tls_server_config"]["key_file"] == "/etc/gpucluster-web/node_exporter/tls.key"
    line = render(v, task(NODE_HEALTH, "configure.yml", "textfile collector")
                  ["ansible.builtin.lineinfile"]["line"])
    assert line.endswith(' --web.config.file=/etc/gpucluster-web/node_exporter/web-config.yml"')
    assert render(v, "{{ __node_health_scheme }}") == "https"


def test_one_rule_writes_both_roles_web_files_byte_for_byte_as_the_roles_templates_did() -> None:
    """The exporter_web_files filter against the Jinja both roles carried before (to_nice_json
    with sorted keys): the same bytes, so no converged node rewrites a file or restarts."""
    old = ("{{ ({'tls_server_config': {'cert_file': d ~ '/tls.crt', 'key_file': d ~ '/tls.key'}}"
           " if cert | length > 0 else {}) | combine({'basic_auth_users': users}"
           " if users | length > 0 else {}) | to_nice_json(sort_keys=true) }}")
    for cert, users in ((CERT, {"scraper": HASH}), (CERT, {}), ("", {"scraper": HASH})):
        given = {"d": "/etc/gpucluster-web/monitoring", "cert": cert, "users": users}
        v = monitoring(monitoring_web_tls_cert=cert, monitoring_web_tls_key=KEY if cert else "",
                       monitoring_web_users=users, **given)
        files = render(v, "{{ __monitoring_web_files }}")
        assert files["web-config.yml"] == {"content": render(v, old), "mode": "0640"}
        assert files["tls.key"] == ({"content": KEY, "mode": "0640"} if cert
                                    else {"state": "absent"})
    off = render(monitoring(), "{{ __monitoring_web_files }}")
    assert off == {name: {"state": "absent"} for name in
                   ("web-config.yml", "tls.crt", "tls.key", "ca.crt", "client-password")}
    # node_exporter has no client of the role's own: no client-password file at all.
    assert set(render(role_vars(NODE_HEALTH), "{{ __node_health_web_files }}")) == {
        "web-config.yml", "tls.crt", "tls.key", "ca.crt"}
    on = render(monitoring(monitoring_web_client_user="scraper",
                           monitoring_web_client_password="s3cret"),
                "{{ __monitoring_web_files }}")
    assert on["client-password"] == {"content": "s3cret", "mode": "0640"}


def test_release_tarballs_are_named_by_go_architecture() -> None:
    for arch, go in (("x86_64", "amd64"), ("aarch64", "arm64"), ("ppc64le", "ppc64le")):
        for role, name in ((MONITORING, "__monitoring_release_arch"),
                           (NODE_HEALTH, "__node_health_release_arch")):
            v = role_vars(role, ansible_facts={"architecture": arch})
            assert render(v, "{{ " + name + " }}") == go
