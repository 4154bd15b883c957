"""playbooks/facts.yml through the real runner on localhost: its small gather_subset yields the
Python and machine the wheelhouse is built for, published (node_platform_report) on gpu_nodes
only, and smoke_launch turns them into the node's platform."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from provisioner import runner, smoke_launch
from provisioner.wheelhouse import controller_platform


def test_facts_playbook_publishes_each_gpu_node_platform(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv.write_text(json.dumps({"all": {"children": {
        "gpu_nodes": {"hosts": {"node-a": local}},
        "cpu_nodes": {"hosts": {"login-a": local}}}}}))

    result = runner.run_playbook("facts.yml", [inv], tmp_path / "run", "00-facts", timeout=120)

    assert result.ok, result.failures
    assert set(result.stats) == {"node-a"}  # GPU nodes only
    published = result.reports["node-a"][smoke_launch.PLATFORM_SECTION]
    assert set(published) == {"python", "architecture"}
    assert published["python"]["executable"] == sys.executable
    # The controller's interpreter answered for node-a: the controller's platform.
    assert smoke_launch.platforms_of(result.reports, ["node-a"]) == ([controller_platform()], [])


def test_the_play_gathers_only_the_python_and_platform_subsets() -> None:
    """What the setup task gathers (ansible's own subset resolution): nothing of the hardware
    or network collectors, which cost seconds on a large node."""
    import yaml
    from ansible.module_utils.facts import default_collectors
    from ansible.module_utils.facts.collector import get_collector_names

    from provisioner.paths import collection_root

    [play] = yaml.safe_load((collection_root() / "playbooks" / "facts.yml").read_text())
    assert play["hosts"] == "gpu_nodes" and play["gather_facts"] is False
    setup = next(t["ansible.builtin.setup"] for t in play["tasks"]
                 if "ansible.builtin.setup" in t)
    every = frozenset(c.name for c in default_collectors.collectors)
    minimal = frozenset(["apparmor", "caps", "cmdline", "date_time", "distribution", "dns",
                         "env", "fips", "local", "lsb", "pkg_mgr", "platform", "python",
                         "selinux", "service_mgr", "ssh_pub_keys", "user"])
    names = get_collector_names(valid_subsets=every, minimal_gather_subset=minimal,
                                gather_subset=setup["gather_subset"])
    assert names == {"python", "platform"}
