"""gpuc-slurm-health: Slurm's HealthCheckProgram on a GPU node. Standard library only.

slurmd runs it (as root, without arguments) every HealthCheckInterval. It runs the node health
command (gpuc-health of the node_health role) with --json and, when the command's exit status
is one of the drain statuses, drains this node with the failing checks as the reason:

    scontrol update NodeName=<node> State=DRAIN Reason="gpuc: gpu3_nvlink: ..."

It never resumes a node: a drained node comes back when someone runs
``scontrol update NodeName=<node> State=RESUME`` after fixing it. What it runs and how it is
read from the settings file the slurm_node role writes (--config, JSON: node, health,
health_args, drain_statuses).

Exit status: 0 when it did its job (the node may have been drained), 1 when the health command
or scontrol could not be run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

REASON_PREFIX = "gpuc: "
REASON_MAX = 200  # keeps sinfo -R readable; the full verdict is in gpuc-health --json
HEALTH_TIMEOUT = 120
STATUS_NAMES = {0: "healthy", 1: "degraded", 2: "unhealthy", 3: "could not check"}


def drain_reason(result: dict[str, Any], status: int) -> str:
    """``gpuc: <check>: <detail>; ...`` from gpuc-health's JSON: the failed checks, else the
    warnings, else what it could not check; one line, at most REASON_MAX characters."""
    checks = [c for c in result.get("checks") or [] if isinstance(c, dict)]
    failed = [c for c in checks if c.get("status") == "fail"]
    warned = [c for c in checks if c.get("status") == "warn"]
    parts = ["%s: %s" % (c.get("name"), c.get("detail") or c.get("status"))
             for c in (failed or warned)]
    parts += ["could not check: %s" % p for p in result.get("problems") or []]
    if not parts:
        parts = [STATUS_NAMES.get(status, "exit %d" % status)]
    text = " ".join((REASON_PREFIX + "; ".join(str(p) for p in parts)).split())
    return text if len(text) <= REASON_MAX else text[:REASON_MAX - 3] + "..."


def run_health(program: str, args: list[str]) -> tuple[int, dict[str, Any] | None, str]:
    """(exit status, parsed JSON or None, a message when it could not be run or read)."""
    if not os.access(program, os.X_OK):
        return 3, None, "%s is not installed" % program
    try:
        done = subprocess.run([program, "--json", *args], capture_output=True, text=True,
                              timeout=HEALTH_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return 3, None, "%s did not finish within %d s" % (program, HEALTH_TIMEOUT)
    try:
        data = json.loads(done.stdout)
    except ValueError:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return done.returncode, None, lines[-1] if lines else "exit %d" % done.returncode
    return done.returncode, data if isinstance(data, dict) else None, ""


def drain(scontrol: str, node: str, reason: str) -> int:
    done = subprocess.run([scontrol, "update", "NodeName=" + node, "State=DRAIN",
                           "Reason=" + reason], capture_output=True, text=True, timeout=60,
                          check=False)
    if done.returncode != 0:
        sys.stderr.write("gpuc-slurm-health: scontrol update failed: %s\n"
                         % (done.stderr or done.stdout).strip())
    return done.returncode


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuc-slurm-health",
                                     description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--config", default="/etc/gpuc-health/slurm.json")
    parser.add_argument("--scontrol", default="scontrol")
    opts = parser.parse_args(argv)
    try:
        with open(opts.config, encoding="utf-8") as handle:
            config = json.load(handle)
        node = str(config["node"])
        program = str(config["health"])
        args = [str(a) for a in config.get("health_args") or []]
        statuses = {int(s) for s in config.get("drain_statuses") or [2]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write("gpuc-slurm-health: %s: %s\n" % (opts.config, exc))
        return 1
    status, result, message = run_health(program, args)
    if status not in statuses:
        if message:
            sys.stderr.write("gpuc-slurm-health: %s (not draining: exit %d)\n" % (message, status))
        return 0
    reason = drain_reason(result or {"problems": [message] if message else []}, status)
    return 0 if drain(opts.scontrol, node, reason) == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
