"""SSH policy and the environment of a run: host key checking stays on whatever
ansible-runner or the caller's environment say (only the inventory may turn it off, and the
report says so), the caller's ANSIBLE_* tuning is passed through, and what an unreachable node
costs a phase (ssh's connect timeout and retries, and where each comes from).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from provisioner.errors import EnvironmentProblem
from provisioner.paths import collection_root, collections_path


def playbook_env(root: Path) -> dict[str, str]:
    """Return the environment ansible-playbook runs with (before the caller's ANSIBLE_*
    tuning): the collection's ansible.cfg, no colour, host key checking on and a PATH that
    finds ansible-playbook. Raises EnvironmentProblem when it finds none."""
    env = {
        "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        # No shared fact cache: ansible-runner points each phase's cache at its own artifacts
        # directory (ANSIBLE_CACHE_PLUGIN_CONNECTION, set after these variables), so every
        # phase gathers afresh and facts of an earlier run (a reinstalled node) never leak in.
        # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False when the environment does not set
        # it, which would override ansible.cfg's `host_key_checking = true` for every run: keep
        # it on. An inventory that turns it off for a host still can (the report says so).
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(
            [str(collections_path()), os.environ.get("ANSIBLE_COLLECTIONS_PATH", "")]).rstrip(
                os.pathsep),
    }
    # ansible-playbook comes with the interpreter's environment (the venv), even when the venv
    # is not activated.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    if shutil.which("ansible-playbook", path=path) is None:
        raise EnvironmentProblem("ansible-playbook not found next to this Python or on PATH: "
                                 "run `make deps`")
    env["PATH"] = path
    return env


def passthrough_env() -> dict[str, str]:
    """Let the caller tune Ansible (ANSIBLE_FORKS=200 ...) without our code knowing each knob;
    but nothing from the environment turns off SSH host key checking (``insecure_env``
    refuses it before a run; it is dropped here as well)."""
    return {k: v for k, v in os.environ.items() if k.startswith("ANSIBLE_")
            and k not in ("ANSIBLE_CONFIG", "ANSIBLE_FACT_CACHING_CONNECTION",
                          "ANSIBLE_COLLECTIONS_PATH") and not _weakens_host_keys(k, v)}


_FALSE = ("0", "false", "no", "off", "n", "f")
_INSECURE_SSH = ("stricthostkeychecking=no", "stricthostkeychecking no",
                 "userknownhostsfile=/dev/null", "userknownhostsfile /dev/null")


def _weakens_host_keys(name: str, value: str) -> bool:
    if name in ("ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_SSH_HOST_KEY_CHECKING",
                "ANSIBLE_PARAMIKO_HOST_KEY_CHECKING"):
        return value.strip().lower() in _FALSE
    squeezed = " ".join(value.lower().split())
    return name.startswith("ANSIBLE_") and any(bad in squeezed for bad in _INSECURE_SSH)


def insecure_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """The ANSIBLE_* variables of the environment that would turn off host key checking."""
    env = os.environ if environ is None else environ
    return sorted(k for k, v in env.items() if k.startswith("ANSIBLE_")
                  and _weakens_host_keys(k, v))


def host_key_checking_off(host_vars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The hosts whose inventory turns SSH host key checking off (``ansible_host_key_checking:
    false`` or ssh arguments with StrictHostKeyChecking=no): the report says so."""
    off = []
    for host, hv in host_vars.items():
        flags = [hv.get(k) for k in ("ansible_host_key_checking",
                                      "ansible_ssh_host_key_checking")]
        if any(f is False or (isinstance(f, str) and f.strip().lower() in _FALSE)
               for f in flags):
            off.append(host)
            continue
        args = " ".join(str(hv.get(k) or "") for k in (
            "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args"))
        if any(bad in " ".join(args.lower().split()) for bad in _INSECURE_SSH):
            off.append(host)
    return sorted(off)


# The ssh connection plugin's options `timeout` and `reconnection_retries` (ansible-core 2.19,
# plugins/connection/ssh.py DOCUMENTATION): the environment wins over ansible.cfg, and within
# each the entry listed last wins (config/manager.py _loop_entries), so they are tried here in
# reverse. A host's own variables win over both (listed per host in ``overridden_on``).
_CONNECT_TIMEOUT_ENV = ("ANSIBLE_SSH_TIMEOUT", "ANSIBLE_TIMEOUT")
_CONNECT_TIMEOUT_CFG = (("ssh_connection", "timeout"), ("defaults", "timeout"))
_RETRIES_ENV = ("ANSIBLE_SSH_RETRIES",)
_RETRIES_CFG = (("ssh_connection", "retries"), ("connection", "retries"))
_HOST_CONNECT_VARS = ("ansible_ssh_timeout", "ansible_ssh_retries")
# The plugin's defaults when nothing sets them.
_DEFAULT_CONNECT_TIMEOUT = 10
_DEFAULT_RETRIES = 0


def _setting(env: Mapping[str, str], names: Sequence[str], cfg: Any,
             keys: Sequence[tuple[str, str]]) -> tuple[int | None, str]:
    for name in names:
        if env.get(name, "").strip():
            return _int_or_none(env[name]), name
    for section, key in keys:
        if cfg.has_option(section, key):
            return _int_or_none(cfg.get(section, key)), f"ansible.cfg [{section}] {key}"
    return None, "the ssh plugin's default"


def _int_or_none(text: str) -> int | None:
    try:
        return int(str(text).strip())
    except ValueError:
        return None


def connection_settings(host_vars: Mapping[str, Mapping[str, Any]],
                        environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What an unreachable node costs a phase: ssh's connect timeout and how many times
    Ansible retries ssh, with where each value comes from; and the hosts whose inventory sets
    its own (a ConnectTimeout in their ssh arguments counts)."""
    import configparser

    # What the runs get: the ANSIBLE_* variables passed through (those that would turn off
    # host key checking are not).
    env = passthrough_env() if environ is None else environ
    cfg = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    cfg.read(collection_root() / "ansible.cfg")
    timeout, timeout_from = _setting(env, _CONNECT_TIMEOUT_ENV, cfg, _CONNECT_TIMEOUT_CFG)
    retries, retries_from = _setting(env, _RETRIES_ENV, cfg, _RETRIES_CFG)
    if timeout_from == "the ssh plugin's default":
        timeout = _DEFAULT_CONNECT_TIMEOUT
    # ssh takes the first value of an option; ssh_args come before the plugin's own
    # `-o ConnectTimeout=<timeout>` on its command line, so a ConnectTimeout there wins.
    ssh_args, args_from = env.get("ANSIBLE_SSH_ARGS"), "ANSIBLE_SSH_ARGS"
    if ssh_args is None and cfg.has_option("ssh_connection", "ssh_args"):
        ssh_args, args_from = cfg.get("ssh_connection", "ssh_args"), "ansible.cfg ssh_args"
    match = re.search(r"ConnectTimeout[= ]\s*(\d+)", ssh_args or "", re.IGNORECASE)
    if match:
        timeout, timeout_from = int(match.group(1)), args_from
    if retries_from == "the ssh plugin's default":
        retries = _DEFAULT_RETRIES
    overridden: dict[str, dict[str, Any]] = {}
    for host, hv in sorted(host_vars.items()):
        own = {k: hv[k] for k in _HOST_CONNECT_VARS if k in hv}
        args = " ".join(str(hv.get(k) or "") for k in ("ansible_ssh_common_args",
                                                        "ansible_ssh_extra_args"))
        if "connecttimeout" in args.lower():
            own["ssh_args"] = "sets ConnectTimeout"
        if own:
            overridden[host] = own
    worst = None if timeout is None or retries is None else timeout * (retries + 1)
    return {"connect_timeout_s": timeout, "connect_timeout_from": timeout_from,
            "ssh_retries": retries, "ssh_retries_from": retries_from,
            "unreachable_cost_s": worst, "overridden_on": overridden,
            "strategy": env.get("ANSIBLE_STRATEGY") or "linear"}
