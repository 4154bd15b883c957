#!/usr/bin/python
# Copyright: gpu-cluster-provisioner authors
# Apache-2.0 (see galaxy.yml)
"""Documentation of the assert_all action (plugins/action/assert_all.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: assert_all
short_description: Judge several checks in one task and report every one that fails
description:
  - M(ansible.builtin.assert) for a list of checks, each with its own message and its own
    condition. Every check is judged (not only up to the first failure); the task fails when
    any does, and its message is the messages of all that failed, joined by C(; ).
  - A check's message is rendered only when the check fails, so it may name values that exist
    only then.
  - One task instead of one per check (each task costs the controller a worker process).
version_added: "0.1.0"
author: gpu-cluster-provisioner maintainers (@gpucluster)
options:
  checks:
    description: The checks, judged in order.
    type: list
    elements: dict
    required: true
    suboptions:
      that:
        description: A conditional expression (not a template), or a list of them that must all hold.
        type: raw
        required: true
      fail_msg:
        description: The message when the check fails (a template, rendered then).
        type: str
        required: true
      when:
        description:
          - A conditional expression, or a list of them; the check is judged only when all hold.
        type: raw
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode).
    support: none
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
notes:
  - Runs on the controller (an action); it never contacts the node.
"""

EXAMPLES = r"""
- name: CuDNN | Check the installed cuDNN is the planned one and its packages are held at their pins
  gpucluster.provisioner.assert_all:
    checks:
      - that: cudnn_report.version == cudnn_version.split('.')[:3] | join('.')
        fail_msg: "host {{ inventory_hostname }}: the header says {{ cudnn_report.version }}"
      - that: __cudnn_install.probe.packages.mismatched | length == 0
        fail_msg: "host {{ inventory_hostname }}: not at their pins: {{ __cudnn_install.probe.packages.mismatched }}"
      - that: __cudnn_locks.rc == 0
        when: ansible_facts['pkg_mgr'] == 'dnf'
        fail_msg: "host {{ inventory_hostname }}: dnf versionlock failed: {{ __cudnn_locks.stderr }}"
"""

RETURN = r"""
judged:
  description: How many checks were judged (those whose C(when) held).
  returned: always
  type: int
failures:
  description: Each check that failed, in order.
  returned: always
  type: list
  elements: dict
  contains:
    check:
      description: Its index in O(checks).
      type: int
    assertion:
      description: The expression that did not hold.
      type: str
    msg:
      description: Its rendered message.
      type: str
msg:
  description: The failed checks' messages joined by C(; ), or how many passed.
  returned: always
  type: str
"""
