"""The Kubernetes hand-off (provisioner/k8s.py): node labels from a plan, Kubernetes' label rules,
the kubectl script, and the GPU Operator values against the keys the chart really has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from yamllint import linter
from yamllint.config import YamlLintConfig

from provisioner import k8s
from provisioner import plan as plan_mod
from provisioner.errors import InputError
from provisioner.profiles import load_profiles

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "examples" / "hgx-h100-ib" / "hosts.yml"
# Kubernetes' label key (apimachinery validation, IsQualifiedName): an optional prefix, a DNS
# subdomain of at most 253 characters, and '/', then a name of 1 to 63 characters of
# [-A-Za-z0-9_.] that begins and ends with a letter or digit.
LABEL_KEY = re.compile(
    r"(?:(?=[^/]{1,253}/)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"(?=[^/]{1,63}\Z)[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")

# Keys of NVIDIA's GPU Operator Helm chart that the hand-off relies on, each read in the chart's
# own values.yaml: github.com/NVIDIA/gpu-operator, deployments/gpu-operator/values.yaml at tag
# v26.7.0 (commit 10ee5b3638b89e11e949412aafa5ba99279c3721; the tag's Chart.yaml says
# v1.0.0-devel, the release sets the version), and present with the same meaning at v24.9.2,
# v25.3.4, v25.10.1 and v26.3.3. Defaults at v26.7.0 in the comments; the hand-off writes every
# one of them explicitly. dcgmExporter.env (where DCGM_REMOTE_HOSTENGINE_INFO=localhost:5555
# would attach the exporter to the host's engine, controllers/object_controls.go
# TransformDCGMExporter) is deliberately not used: see k8s._VALUES.
CHART_KEYS = frozenset({
    "driver.enabled",        # true: the Operator installs a driver container
    "toolkit.enabled",       # true: the Operator installs the container toolkit
    "cdi.enabled",           # true (false before v25.10): CDI device injection
    "dcgm.enabled",          # false: "standalone dcgm hostengine" pod
    "dcgmExporter.enabled",  # true
    "devicePlugin.enabled",  # true
    "gfd.enabled",           # true: GPU feature discovery (the nvidia.com/gpu.* labels)
})


def write_inventory(tmp_path: Path, hosts: dict[str, dict[str, Any]],
                    cpu: dict[str, dict[str, Any]] | None = None, **all_vars: Any) -> Path:
    children: dict[str, Any] = {"gpu_nodes": {"hosts": hosts}}
    if cpu:
        children["cpu_nodes"] = {"hosts": cpu}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"vars": all_vars, "children": children}}))
    return path


# labels from a plan -------------------------------------------------------------------------


def test_labels_of_the_example_inventory_are_its_planned_stack() -> None:
    cp = plan_mod.build(EXAMPLE)
    handoff = k8s.build(cp)
    assert list(handoff.labels) == ["h100-001", "h100-002"]  # GPU nodes only, inventory order
    stack = cp.hosts["h100-001"].stack
    assert stack is not None
    assert handoff.labels["h100-001"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "gpucluster.io/stack": "cuda-13.0",
        "gpucluster.io/driver": stack.driver_version,
        "gpucluster.io/cuda": stack.cuda_version,
        "gpucluster.io/nccl": stack.nccl_version.replace("+", "-"),
        "gpucluster.io/cudnn": stack.cudnn_version,
        "gpucluster.io/profile": "hgx-h100-8gpu",
    }
    # NCCL's package version (2.28.9-1+cuda13.0) has a '+': sanitized, and said so once.
    assert "+" in stack.nccl_version
    [note] = handoff.notes
    assert "gpucluster.io/nccl" in note and repr(stack.nccl_version) in note
    assert "h100-001, h100-002" in note


def test_mixed_profiles_label_each_node_with_its_own(tmp_path: Path) -> None:
    cp = plan_mod.build(write_inventory(
        tmp_path, {"a100-01": {"gpu_profile": "hgx-a100-8gpu"},
                   "l40s-01": {"gpu_profile": "pcie-l40s-4gpu", "fabric": "ethernet"}},
        cpu={"login-01": {"fabric": "ethernet"}}))
    labels = k8s.build(cp).labels
    assert set(labels) == {"a100-01", "l40s-01"}
    assert labels["a100-01"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert labels["l40s-01"]["nvidia.com/gpu.product"] == "NVIDIA-L40S"
    assert labels["l40s-01"]["nvidia.com/gpu.count"] == "4"
    assert labels["l40s-01"]["gpucluster.io/profile"] == "pcie-l40s-4gpu"
    for host, values in labels.items():
        stack = cp.hosts[host].stack
        assert stack is not None and values["gpucluster.io/driver"] == stack.driver_version


@pytest.mark.parametrize("name", sorted(load_profiles()))
def test_every_profile_gives_valid_labels(tmp_path: Path, name: str) -> None:
    profile = load_profiles()[name]
    host: dict[str, Any] = {"gpu_profile": name}
    if profile.simulated:
        host["provisioner_simulated"] = True
    if profile.architecture == "volta":  # the newest stack's CUDA no longer targets Volta
        host["gpu_stack"] = "cuda-12.8"
    [labels] = k8s.build(plan_mod.build(write_inventory(tmp_path, {"gpu-01": host}))).labels.values()
    assert all(LABEL_KEY.fullmatch(key) for key in labels), labels
    assert all(k8s.is_valid_label_value(value) for value in labels.values()), labels
    # The profiles hold nvidia-smi's full name, and nothing in it that GFD drops.
    assert labels["nvidia.com/gpu.product"] == profile.gpu_model.replace(" ", "-")
    assert labels["nvidia.com/gpu.count"] == str(profile.gpu_count)


@pytest.mark.parametrize(("model", "product"), [
    ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ("Tesla V100-SXM2-32GB", "Tesla-V100-SXM2-32GB"),
    ("NVIDIA  GeForce RTX (TM) 4090 ", "NVIDIA-GeForce-RTX-TM-4090"),  # GFD's sanitise
])
def test_product_name_the_way_gpu_feature_discovery_writes_it(model: str, product: str) -> None:
    assert k8s.gfd_product(model) == product


def test_a_plan_without_gpu_nodes_is_refused() -> None:
    # The inventory loader already refuses an empty gpu_nodes group; the library does not
    # rely on it.
    cp = plan_mod.build(EXAMPLE)
    cpu_only = plan_mod.ClusterPlan(inventory=cp.inventory, hosts={
        name: h for name, h in cp.hosts.items() if h.kind == "cpu"})
    with pytest.raises(InputError, match="no GPU nodes, so nothing to hand off"):
        k8s.build(cpu_only)


def test_a_host_name_kubernetes_would_refuse_is_noted(tmp_path: Path) -> None:
    cp = plan_mod.build(write_inventory(tmp_path, {"GPU_01": {"gpu_profile": "hgx-h100-8gpu"}}))
    notes = k8s.build(cp).notes
    assert any("host GPU_01: not a valid Kubernetes node name" in n for n in notes), notes


# Kubernetes' rules --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "a", "8", "A-1_b.c", "570.124.06", "x" * 63,
                                   "NVIDIA-H100-80GB-HBM3"])
def test_valid_label_values(value: str) -> None:
    assert k8s.is_valid_label_value(value)
    assert k8s.sanitize_label_value(value) == value


@pytest.mark.parametrize("value", ["-a", "a-", ".a", "a_", "a b", "a+b", "a/b", "x" * 64,
                                   "caf\u00e9", "a\n", "\na", "12.8 "])
def test_invalid_label_values(value: str) -> None:
    assert not k8s.is_valid_label_value(value)
    clean = k8s.sanitize_label_value(value)
    assert k8s.is_valid_label_value(clean), clean
    assert len(clean) <= 63


@pytest.mark.parametrize(("value", "clean"), [
    ("2.25.1-1+cuda12.8", "2.25.1-1-cuda12.8"),
    ("+cuda+", "cuda"),
    ("a b/c", "a-b-c"),
    ("v" * 62 + "+x", "v" * 62),  # cut to 63, then the trailing '-' goes
    ("+++", ""),
])
def test_sanitize_replaces_then_trims(value: str, clean: str) -> None:
    assert k8s.sanitize_label_value(value) == clean


# The key rule the labels are held to, checked on Kubernetes' own examples and edges.
@pytest.mark.parametrize("key", ["nvidia.com/gpu.product", "gpucluster.io/nccl", "app",
                                 "a.b-c/x_y.z", "x" * 63, "gpucluster.io/" + "x" * 63,
                                 "a" * 253 + "/x", "Upper_case.Name"])
def test_the_label_key_rule_takes_valid_keys(key: str) -> None:
    assert LABEL_KEY.fullmatch(key)


@pytest.mark.parametrize("key", ["", "/x", "Nvidia.com/gpu", "gpucluster.io/", "a/b/c",
                                 "gpucluster.io/-x", "x" * 64, "-a.com/x", "a" * 254 + "/x",
                                 "gpucluster.io/" + "x" * 64, "a..b/x", "a_b/x", "app-"])
def test_the_label_key_rule_refuses_invalid_keys(key: str) -> None:
    assert not LABEL_KEY.fullmatch(key)


def test_every_label_key_the_hand_off_writes_is_valid() -> None:
    keys = {k8s.GPU_PRODUCT_LABEL, k8s.GPU_COUNT_LABEL, k8s.PROFILE_LABEL,
            *(f"{k8s.LABEL_PREFIX}{name}" for name, _attribute in k8s.STACK_LABELS)}
    assert set(k8s.build(plan_mod.build(EXAMPLE)).labels["h100-001"]) == keys
    assert [key for key in sorted(keys) if not LABEL_KEY.fullmatch(key)] == []


# the files ----------------------------------------------------------------------------------


def test_label_script_is_one_kubectl_line_per_node_with_quoting() -> None:
    cp = plan_mod.build(EXAMPLE)
    handoff = k8s.Handoff(labels={"gpu-01": {"a/b": "c"}, "odd $(touch x)": {"k": "v w"}},
                          values={})
    script = k8s.label_script(cp, handoff)
    assert script.startswith("#!/bin/sh\n")
    commands = [shlex.split(line) for line in script.splitlines()
                if line.startswith("kubectl ")]
    assert commands == [["kubectl", "label", "node", "gpu-01", "a/b=c", "--overwrite"],
                        ["kubectl", "label", "node", "odd $(touch x)", "k=v w", "--overwrite"]]


def test_write_handoff_writes_three_files_that_say_the_same(tmp_path: Path) -> None:
    cp = plan_mod.build(EXAMPLE)
    out = tmp_path / "deep" / "handoff"
    handoff = k8s.write_handoff(cp, out)
    assert set(handoff.files) == {"node-labels.yaml", "label-nodes.sh",
                                  "gpu-operator-values.yaml"}
    assert all(path.parent == out and path.is_file() for path in handoff.files.values())
    assert yaml.safe_load((out / "node-labels.yaml").read_text()) == handoff.labels
    script = (out / "label-nodes.sh").read_text()
    assert (out / "label-nodes.sh").stat().st_mode & 0o111
    scripted = {words[3]: dict(w.split("=", 1) for w in words[4:-1])
                for words in (shlex.split(line) for line in script.splitlines()
                              if line.startswith("kubectl "))}
    assert scripted == handoff.labels
    assert yaml.safe_load((out / "gpu-operator-values.yaml").read_text()) == handoff.values
    assert "2.28.9-1+cuda13.0" in (out / "node-labels.yaml").read_text()  # the note
    # Run again: our files are overwritten, anything else in the directory stays.
    (out / "node-labels.yaml").write_text("stale\n")
    (out / "mine.txt").write_text("keep\n")
    k8s.write_handoff(cp, out)
    assert yaml.safe_load((out / "node-labels.yaml").read_text()) == handoff.labels
    assert (out / "mine.txt").read_text() == "keep\n"


def test_written_yaml_passes_the_projects_yamllint(tmp_path: Path) -> None:
    handoff = k8s.write_handoff(plan_mod.build(EXAMPLE), tmp_path)
    config = YamlLintConfig(file=str(ROOT / ".yamllint"))
    for name in ("node-labels.yaml", "gpu-operator-values.yaml"):
        problems = list(linter.run(handoff.files[name].read_text(), config))
        assert problems == [], f"{name}: {problems}"


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "handoff"
    blocker.write_text("")
    with pytest.raises(InputError, match=r"export k8s -o .*handoff: exists and is not a dir"):
        k8s.write_handoff(plan_mod.build(EXAMPLE), blocker)
    with pytest.raises(InputError, match="cannot write the hand-off"):
        k8s.write_handoff(plan_mod.build(EXAMPLE), blocker / "below")


def test_a_simulated_cluster_says_so_in_every_file(tmp_path: Path) -> None:
    cp = plan_mod.build(write_inventory(tmp_path, {"sim-gpu-1": {
        "gpu_profile": "sim-h100-8gpu", "provisioner_simulated": True}}))
    handoff = k8s.write_handoff(cp, tmp_path / "out")
    assert all("SIMULATED" in path.read_text() for path in handoff.files.values())


# the GPU Operator values --------------------------------------------------------------------


def test_values_use_only_keys_the_chart_has_and_all_of_them() -> None:
    assert sorted(k8s.value_keys(k8s.operator_values())) == sorted(CHART_KEYS)


def test_values_leave_the_host_installed_stack_alone() -> None:
    values = k8s.operator_values()
    assert values["driver"] == {"enabled": False}
    assert values["toolkit"] == {"enabled": False}
    assert values["dcgm"] == {"enabled": False}  # the host engine runs on the node
    # The nodes' own dcgm-exporter (monitoring phase) holds port 9400.
    assert values["dcgmExporter"] == {"enabled": False}
    assert values["devicePlugin"] == {"enabled": True}
    assert values["cdi"] == {"enabled": True}


def test_cdi_is_on_because_the_toolkit_role_generates_the_spec() -> None:
    role = ROOT / "roles" / "nvidia_container_toolkit"
    # The generator runs in a small sh script that compares its output with the installed spec,
    # in the install call's probe (install.yml); cdi.yml installs what it generated.
    role_vars = yaml.safe_load((role / "vars" / "main.yml").read_text())
    argv = role_vars["__nvidia_container_toolkit_gen_query"]
    assert argv[:2] == ["sh", "-c"] and argv[2].startswith("nvidia-ctk cdi generate "), argv
    assert "__nvidia_container_toolkit_gen_query" in role_vars[
        "__nvidia_container_toolkit_after_install_probe"]["commands"]
    install = yaml.safe_load((role / "tasks" / "install.yml").read_text())
    assert any(t.get("gpucluster.provisioner.pinned_packages", {}).get("probe")
               == "{{ __nvidia_container_toolkit_after_install_probe }}" for t in install)
    assert "cdi.yml" in (role / "tasks" / "main.yml").read_text()
    cdi = (role / "tasks" / "cdi.yml").read_text()
    assert "src: \"{{ __nvidia_container_toolkit_scratch }}\"" in cdi
    assert k8s.operator_values()["cdi"]["enabled"] is True


def test_monitoring_runs_dcgm_exporter_on_every_gpu_node_so_the_operators_is_off() -> None:
    """The reason dcgmExporter is off: if the playbook stops running dcgm-exporter on the GPU
    nodes, this fails and the values should turn the Operator's back on."""
    playbook = (ROOT / "playbooks" / "monitoring.yml").read_text()
    assert "monitoring_dcgm_exporter: \"{{ inventory_hostname in groups['gpu_nodes'] }}\"" in (
        playbook)
    assert k8s.operator_values()["dcgmExporter"]["enabled"] is False
