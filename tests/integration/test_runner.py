"""The ansible-runner wrapper against real ansible-runner on localhost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner import results, run_events, runner

PLAYBOOK = """
- name: Test | Localhost play
  hosts: all
  gather_facts: false
  tasks:
    - name: Test | Something that changes
      ansible.builtin.command: "true"
      changed_when: true
    - name: Test | Publish a report section
      ansible.builtin.set_fact:
        demo_report:
          checks:
            - {name: answer, status: pass, measured: 42, expected: 42, detail: fine}
    - name: Test | Skipped task
      ansible.builtin.debug:
        msg: never
      when: false
    - name: Test | Fail on the second host only
      ansible.builtin.fail:
        msg: "deliberate failure on {{ inventory_hostname }}"
      when: inventory_hostname == 'node-b'
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    (root / "playbooks").mkdir(parents=True)
    (root / "playbooks" / "site.yml").write_text("[]\n")
    (root / "galaxy.yml").write_text("namespace: gpucluster\nname: provisioner\n")
    (root / "playbooks" / "demo.yml").write_text(PLAYBOOK)
    (root / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    monkeypatch.setenv("PROVISIONER_HOME", str(root))
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        "    ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        "  hosts:\n    node-a: {}\n    node-b: {}\n")
    return inv


def test_run_streams_events_and_judges_from_stats(project: Path, tmp_path: Path) -> None:
    seen: list[results.ProgressEvent] = []
    result = runner.run_playbook("demo.yml", [project], tmp_path / "run", "01-demo",
                                 timeout=120, on_progress=seen.append)
    assert result.status == "failed"
    assert not result.ok
    assert result.stats["node-a"].changed == 1
    assert result.stats["node-a"].failed == 0
    assert result.stats["node-b"].failed == 1
    assert [f.host for f in result.failures] == ["node-b"]
    assert "deliberate failure on node-b" in result.failures[0].message
    assert result.reports["node-a"]["demo"]["checks"][0]["measured"] == 42
    kinds = {e.kind for e in seen}
    assert {"play", "task", "ok", "changed", "failed"} <= kinds
    # Only failed/unreachable events are kept on disk; ok/changed ones are not.
    kept = list((result.artifact_dir / "job_events").glob("*.json"))
    assert 0 < len(kept) < result.events_seen
    kept_kinds = {json.loads(p.read_text())["event"] for p in kept}
    assert kept_kinds == {"runner_on_failed"}


def test_failure_list_is_bounded(project: Path, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_events, "MAX_FAILURES", 0)
    result = runner.run_playbook("demo.yml", [project], tmp_path / "run", "02-demo", timeout=120)
    assert result.failures == []
    assert result.dropped_failures == 1


def test_unreachable_host_is_reported(tmp_path: Path, project: Path) -> None:
    inv = tmp_path / "dead.yml"
    # 127.0.0.2 port 1: nothing listens on loopback there, so the connection is refused at once.
    inv.write_text("all:\n  hosts:\n    ghost:\n      ansible_host: 127.0.0.2\n"
                   "      ansible_port: 1\n")
    result = runner.run_playbook("demo.yml", [inv], tmp_path / "run", "03-demo", timeout=120)
    assert not result.ok
    assert result.stats["ghost"].unreachable == 1
    assert result.failures[0].unreachable


HOST_KEYS = """
- name: Test | What the run's Ansible says about host keys
  hosts: node-a
  gather_facts: false
  tasks:
    - name: Test | Publish the effective setting
      ansible.builtin.set_fact:
        keys_report:
          checking: "{{ lookup('ansible.builtin.config', 'HOST_KEY_CHECKING') }}"
"""


@pytest.mark.parametrize("environment", [None, "False", "no"])
def test_host_key_checking_stays_on_whatever_runner_or_environment_say(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        environment: str | None) -> None:
    """ansible-runner turns host key checking off when the environment does not set it; an
    ANSIBLE_HOST_KEY_CHECKING=False in the caller's environment must not turn it off either."""
    (Path(str(project.parent)) / "project" / "playbooks" / "keys.yml").write_text(HOST_KEYS)
    if environment is None:
        monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    else:
        monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", environment)
    result = runner.run_playbook("keys.yml", [project], tmp_path / "run", "01-keys", timeout=120)
    assert result.ok, result.failures
    assert result.reports["node-a"]["keys"]["checking"] is True

