"""gpuc-slurm-health: Slurm's HealthCheckProgram, and its Prolog, on a GPU node. Standard
library only.

As the HealthCheckProgram slurmd runs it (as root, without arguments) every
HealthCheckInterval. It runs the node health command (gpuc-health of the node_health role)
with --json and, when the command's exit status is one of the drain statuses, drains this node
with the failing checks as the reason:

    scontrol update NodeName=<node> State=DRAIN Reason="gpuc: gpu3_nvlink: ..."

A node that is drained already keeps its reason (the Prolog's, an upgrade's, an
administrator's): scontrol would replace it on every interval otherwise.

With --prolog (slurm.conf's Prolog is the role's gpuc-slurm-prolog, which runs this program so)
slurmd runs it before each job on every node of the allocation (PrologFlags=Alloc). It runs
`gpuc-health --quick --json` (the devices a job needs now, in a few seconds) and, on an
unhealthy verdict (exit 2), drains this node with "gpuc prolog: <failed checks>" as the reason
and exits 1: Slurm then starts no job there, requeues the job held and leaves the drained node
with this reason (slurm.conf(5), Prolog; slurmctld drains with "Prolog error" only a node that
is not drained yet). Healthy or degraded: exit 0 at once. Could not check (gpuc-health missing,
its settings unreadable, no answer within PROLOG_TIMEOUT, no verdict): exit 0 and a syslog
line, so that a broken install does not drain every node at its next job.

It never resumes a node: a drained node comes back when someone runs
``scontrol update NodeName=<node> State=RESUME`` after fixing it. What it runs and how it is
read from the settings file the slurm_node role writes (--config, JSON: node, health,
health_args, drain_statuses; an empty drain_statuses list: the health check only reports).

Exit status as the HealthCheckProgram: 0 when it did its job (the node may have been drained),
1 when the health command or scontrol could not be run. As the Prolog: 1 when the node is
unhealthy (the job must not start here), else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Any

REASON_PREFIX = "gpuc: "
PROLOG_REASON_PREFIX = "gpuc prolog: "
REASON_MAX = 200  # keeps sinfo -R readable; the full verdict is in gpuc-health --json
# Below slurmd's own bound on the HealthCheckProgram (60 s, run_script_health_check in
# src/slurmd/slurmd/slurmd.c): past that slurmd kills this program before it could report.
HEALTH_TIMEOUT = 50
# The Prolog's bound on `gpuc-health --quick`. slurm.conf(5) expects a Prolog to finish "in less
# time than MessageTimeout" (10 s by default); PrologEpilogTimeout, the bound Slurm enforces,
# waits indefinitely by default. Above gpuc-health's own bound on each tool in --quick
# (QUICK_TOOL_TIMEOUT, 6 s), so that gpuc-health says which tool did not answer before this
# cuts it off.
PROLOG_TIMEOUT = 8
SCONTROL_TIMEOUT = 30  # a controller that does not answer; the Prolog gives it PROLOG_TIMEOUT
# The Prolog keeps a job off the node for this verdict only: degraded (1) is a warning, could
# not check (3) says nothing about the devices.
PROLOG_BLOCKING_STATUS = 2
# slurmd gives the Prolog and the HealthCheckProgram no search path ("for security reasons",
# Slurm's Prolog and Epilog Guide; env built in src/plugins/prep/script/prep_script_slurmd.c):
# the commands this program and gpuc-health run are looked up here then.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STATUS_NAMES = {0: "healthy", 1: "degraded", 2: "unhealthy", 3: "could not check"}


def drain_reason(result: dict[str, Any], status: int, prefix: str = REASON_PREFIX) -> str:
    """``gpuc: <check>: <detail>; ...`` from gpuc-health's JSON: the failed checks, else the
    warnings, else what it could not check; one line, at most REASON_MAX characters."""
    checks = [c for c in result.get("checks") or [] if isinstance(c, dict)]
    failed = [c for c in checks if c.get("status") == "fail"]
    warned = [c for c in checks if c.get("status") == "warn"]
    parts = [f"{c.get('name')}: {c.get('detail') or c.get('status')}"
             for c in (failed or warned)]
    parts += [f"could not check: {p}" for p in result.get("problems") or []]
    if not parts:
        parts = [STATUS_NAMES.get(status, f"exit {status}")]
    text = " ".join((prefix + "; ".join(str(p) for p in parts)).split())
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3] + "..."


def run_health(program: str, args: list[str],
               timeout: float = HEALTH_TIMEOUT) -> tuple[int, dict[str, Any] | None, str]:
    """(exit status, parsed JSON or None, a message when it could not be run or read)."""
    if not os.access(program, os.X_OK):
        return 3, None, f"{program} is not installed"
    try:
        done = subprocess.run([program, "--json", *args], capture_output=True, text=True,
                              timeout=timeout, check=False, env=command_env())
    except subprocess.TimeoutExpired:
        return 3, None, f"{program} did not finish within {timeout:g} s"
    try:
        data = json.loads(done.stdout)
    except ValueError:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return done.returncode, None, lines[-1] if lines else f"exit {done.returncode}"
    return done.returncode, data if isinstance(data, dict) else None, ""


def command_env() -> dict[str, str]:
    return {**os.environ, "PATH": os.environ.get("PATH") or DEFAULT_PATH}


def scontrol_path(scontrol: str) -> str:
    """``scontrol`` as given when it is a path, else looked up in the PATH command_env gives."""
    if os.sep in scontrol:
        return scontrol
    for directory in command_env()["PATH"].split(os.pathsep):
        candidate = os.path.join(directory, scontrol)
        if os.access(candidate, os.X_OK):
            return candidate
    return scontrol


def drain(scontrol: str, node: str, reason: str, timeout: float = SCONTROL_TIMEOUT) -> int:
    try:
        done = subprocess.run([scontrol_path(scontrol), "update", "NodeName=" + node,
                               "State=DRAIN", "Reason=" + reason], capture_output=True,
                              text=True, timeout=timeout, check=False, env=command_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        log(f"scontrol update failed: {exc}")
        return 1
    if done.returncode != 0:
        log(f"scontrol update failed: {(done.stderr or done.stdout).strip()}")
    return done.returncode


def drained_already(scontrol: str, node: str) -> str | None:
    """The node's State when slurmctld has it drained or draining, else None (also when it
    cannot tell: draining again is then the safe side)."""
    try:
        done = subprocess.run([scontrol_path(scontrol), "--oneliner", "show", "node", node],
                              capture_output=True, text=True, timeout=SCONTROL_TIMEOUT,
                              check=False, env=command_env())
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\bState=(\S+)", done.stdout) if done.returncode == 0 else None
    return match.group(1) if match and "DRAIN" in match.group(1) else None


def log(message: str) -> None:
    """stderr, and syslog: slurmd keeps a Prolog's output only when it fails (slurm.conf(5),
    Prolog and Epilog Scripts: "Standard output and error messages are normally not
    preserved")."""
    sys.stderr.write(f"gpuc-slurm-health: {message}\n")
    try:
        import syslog

        syslog.openlog("gpuc-slurm-health", 0, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_WARNING, message)
    except (ImportError, OSError):
        pass


def load_config(path: str) -> tuple[str, str, list[str], set[int]]:
    """(node, health program, its arguments, drain statuses); OSError, ValueError, KeyError or
    TypeError when the settings cannot be read."""
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
    node = str(config["node"])
    program = str(config["health"])
    args = [str(a) for a in config.get("health_args") or []]
    statuses = {int(s) for s in config.get("drain_statuses", [2])}
    return node, program, args, statuses


def health_check(opts: argparse.Namespace) -> int:
    try:
        node, program, args, statuses = load_config(opts.config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log(f"{opts.config}: {exc}")
        return 1
    status, result, message = run_health(program, args)
    if status not in statuses:
        if message:
            log(f"{message} (not draining: exit {status})")
        return 0
    state = drained_already(opts.scontrol, node)
    if state is not None:
        return 0  # its reason stays: the first finding, or someone else's
    reason = drain_reason(result or {"problems": [message] if message else []}, status)
    return 0 if drain(opts.scontrol, node, reason) == 0 else 1


def prolog_verdict(config: str) -> tuple[str, str] | None:
    """(node, drain reason) when gpuc-health --quick says the node is unhealthy, else None
    (healthy, degraded, or it could not check: logged)."""
    try:
        node, program, args, _statuses = load_config(config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log(f"prolog: could not check, the job may start: {config}: {exc}")
        return None
    status, result, message = run_health(program, ["--quick", *args], PROLOG_TIMEOUT)
    if status == PROLOG_BLOCKING_STATUS and result is not None:
        return node, drain_reason(result, status, PROLOG_REASON_PREFIX)
    if status not in (0, 1) or message:
        log(f"prolog: could not check, the job may start: {message or f'{program} exit {status}'}")
    return None


def prolog(opts: argparse.Namespace) -> int:
    try:
        verdict = prolog_verdict(opts.config)
    except Exception as exc:  # a bug or a broken install must not drain every node
        log(f"prolog: could not check, the job may start: {exc!r}")
        return 0
    if verdict is None:
        return 0
    node, reason = verdict
    job = os.environ.get("SLURM_JOB_ID", "?")
    log(f"prolog: {node} unhealthy, draining it; job {job} does not start here: {reason}")
    drain(opts.scontrol, node, reason, PROLOG_TIMEOUT)
    return 1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuc-slurm-health",
                                     description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--config", default="/etc/gpuc-health/slurm.json")
    parser.add_argument("--scontrol", default="scontrol")
    parser.add_argument("--prolog", action="store_true",
                        help="Slurm's Prolog: gpuc-health --quick, drain and exit 1 when "
                             "unhealthy")
    opts = parser.parse_args(argv)
    return prolog(opts) if opts.prolog else health_check(opts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
