#!/usr/bin/python
# Copyright: gpu-cluster-provisioner authors
# Apache-2.0 (see galaxy.yml)
"""Documentation of the rolling_reboot action (plugins/action/rolling_reboot.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: rolling_reboot
short_description: Reboot a node, and stop rebooting more once too many did not come back
description:
  - M(ansible.builtin.reboot) (same behaviour and options as used here), for plays that reboot
    their nodes a few at a time with C(throttle).
  - A node that goes down and does not come back within O(reboot_timeout) is recorded in a
    ledger the play shares (one per run). When more than O(max_lost) nodes are in it, a node
    whose reboot has not started yet is not rebooted; the task fails there with a message
    naming the lost nodes and RV(withheld) set.
version_added: "0.1.0"
author: gpu-cluster-provisioner maintainers (@gpucluster)
options:
  max_lost:
    description:
      - How many nodes of this play may fail to come back before further reboots are withheld.
        C(-1) never withholds.
    type: int
    default: -1
  record:
    description:
      - A file on the controller to which every reboot is appended as one JSON line (C(host),
        C(started_at), C(ended_at) on the controller's clock in UTC, C(boot_id_before),
        C(boot_id_after) when it came back, C(outcome) V(back), V(lost), V(failed) or
        V(withheld)). Not written in check mode.
    type: path
  reboot_timeout:
    description: Seconds to wait for the node to come back (and again for the test command).
    type: int
    default: 600
  msg:
    description: Message shown to users before the reboot.
    type: str
    default: Reboot initiated by Ansible
  connect_timeout:
    description: Seconds to wait for a connection before trying again.
    type: int
  test_command:
    description: Command that must succeed on the node once it is back.
    type: str
    default: whoami
  pre_reboot_delay:
    description: Seconds to wait before the reboot.
    type: int
    default: 0
  post_reboot_delay:
    description: Seconds to wait after the reboot command before checking the node.
    type: int
    default: 0
  search_paths:
    description: Where to look for the C(shutdown) command on the node.
    type: list
    elements: str
    default: ['/sbin', '/bin', '/usr/sbin', '/usr/bin', '/usr/local/sbin']
  boot_time_command:
    description: Command whose output changes with every boot.
    type: str
    default: 'cat /proc/sys/kernel/random/boot_id'
  reboot_command:
    description: Command that reboots the node (the OS's shutdown by default).
    type: str
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
    details: Reports a reboot without doing it; never withholds.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode).
    support: none
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
notes:
  - Runs on the controller (an action); the ledger is a file in the controller's temporary
    directory named after the play's id.
"""

EXAMPLES = r"""
- name: Reboot at most 10% of the nodes at a time; stop after 2 that do not come back
  gpucluster.provisioner.rolling_reboot:
    reboot_timeout: 1800
    max_lost: 2
  throttle: "{{ '10%' | gpucluster.provisioner.batch_count(ansible_play_hosts_all | length) }}"
"""

RETURN = r"""
rebooted:
  description: Whether the node was rebooted.
  returned: always
  type: bool
elapsed:
  description: Seconds the reboot took.
  returned: when rebooted
  type: int
withheld:
  description: The reboot was not started because too many nodes of this run did not come back.
  returned: when withheld
  type: bool
lost_in_this_run:
  description: The nodes of this run that did not come back, when the reboot was withheld.
  returned: when withheld
  type: list
  elements: str
"""
