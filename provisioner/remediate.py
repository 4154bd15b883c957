"""`provisioner remediate`: take the nodes Slurm holds drained back into service, or say why not.

In order, never printing (progress goes to the display the CLI supplies):

1. On the Slurm controller (remediate_survey.yml, read-only): every node's state and drain
   reason (``sinfo -N -o '%N|%T|%E'``). A GPU node of the inventory is taken when it is drained
   and idle (``drained``; a ``draining`` node still runs jobs and is left to finish them) and its
   reason is one the provisioner wrote (``gpuc``: gpuc-slurm-health, certify, upgrade), so a
   node an administrator drained by hand is not touched unless ``--any-reason``.
2. On those nodes (remediate_reset.yml): every GPU reset at once (``nvidia-smi --gpu-reset``;
   nvidia-smi(1): without -i all GPUs are reset, which pre-Ampere and NVSwitch systems without
   Fabric Manager need anyway; root, no application may hold a GPU: the node is drained and
   idle). A node whose reset fails is rebooted with ``--reboot`` (the rolling_reboot action, at
   most ``remediate_reboot_batch`` at once, withheld once one did not come back), else it
   stays drained with the reason.
3. The validate phase of ``up`` on the nodes reset or rebooted (nvidia-smi(1): "Following a
   reset, it is recommended that the health of each reset GPU be verified before further use").
4. On the controller (resume.yml): ``State=RESUME`` for the nodes that passed, and for the others
   a reason saying what remediate found (they stay drained).

The report's ``remediate`` section has, per node taken or passed over, what happened.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provisioner import bringup, slurm
from provisioner.bringup import DisplayFactory, RunOptions
from provisioner.errors import InputError
from provisioner.plan import ClusterPlan
from provisioner.report import Report
from provisioner.runner import run_playbook

SURVEY_PLAYBOOK = "remediate_survey.yml"
RESET_PLAYBOOK = "remediate_reset.yml"
RESUME_PLAYBOOK = "resume.yml"
# The drain reasons the provisioner writes: gpuc-slurm-health ("gpuc: ..."; as Slurm's Prolog
# "gpuc prolog: ..."), certify ("gpuc certify ..."), upgrade ("gpuc upgrade to ..."), remediate
# itself ("gpuc remediate ...").
OWN_REASON = re.compile(r"^gpuc[ :]")


@dataclass
class NodeOutcome:
    host: str
    slurm_state: str
    reason: str
    # taken | skipped: the node was (not) remediated; why in detail
    taken: bool = False
    reset: str = "not run"  # passed | failed (rc N): ... | not run
    rebooted: bool = False
    validate: str = "not run"  # passed | failed: checks | not run
    resumed: bool = False
    detail: str = ""


@dataclass(frozen=True)
class RemediateSettings:
    any_reason: bool = False
    reboot: bool = False


@dataclass
class _Run:
    plan: ClusterPlan
    report: Report
    run_dir: Path
    options: RunOptions
    display: DisplayFactory
    controller: str
    outcomes: dict[str, NodeOutcome] = field(default_factory=dict)


def controller_of(plan: ClusterPlan) -> str:
    """The Slurm controller, or one line (InputError) when the inventory has no Slurm."""
    controller = slurm.controller(plan)
    if controller is None:
        raise InputError(f"remediate: inventory {plan.inventory.source} has no Slurm "
                         "([slurm_controller] group or slurm_enabled): there is no drained "
                         "node to take back")
    return controller


def parse_sinfo(lines: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``sinfo -N -o '%N|%T|%E'`` lines: node -> (state, reason). A node listed once per
    partition keeps its first line."""
    out: dict[str, tuple[str, str]] = {}
    for line in lines:
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[0]:
            out.setdefault(parts[0], (parts[1].strip().lower(), parts[2].strip()))
    return out


def choose(states: Mapping[str, tuple[str, str]], gpu_hosts: Sequence[str],
           any_reason: bool) -> dict[str, NodeOutcome]:
    """Every drained GPU node of the inventory, taken or passed over with why."""
    out = {}
    for host in sorted(gpu_hosts):
        state, reason = states.get(host, ("", ""))
        if "drain" not in state:
            continue
        outcome = NodeOutcome(host, state, reason)
        if "draining" in state:
            outcome.detail = "jobs still run on it (draining): left to finish them"
        elif not any_reason and not OWN_REASON.match(reason):
            outcome.detail = ("drained for a reason the provisioner did not write: left as it "
                              "is (--any-reason takes it too)")
        else:
            outcome.taken = True
        out[host] = outcome
    return out


def run(plan: ClusterPlan, report: Report, run_dir: Path, phases: Sequence[tuple[str, str]],
        options: RunOptions, display: DisplayFactory, *,
        settings: RemediateSettings) -> bool:
    """Remediate the drained nodes (see the module's description). True when every node
    taken was resumed (and when none was drained)."""
    ctx = _Run(plan, report, run_dir, options, display, controller_of(plan))
    try:
        ctx.outcomes = _survey(ctx, settings)
        taken = [h for h, o in ctx.outcomes.items() if o.taken]
        if taken:
            ready = _reset(ctx, taken, settings)
            passed = _validate(ctx, ready, phases) if ready else []
            _resume(ctx, passed, [h for h in taken if h not in passed])
    finally:
        report.record_remediate(asdict(o) for o in ctx.outcomes.values())
        report.add_notes(_summary(o) for o in ctx.outcomes.values())
    return all(o.resumed for o in ctx.outcomes.values() if o.taken) and _phases_ok(report)


def _phases_ok(report: Report) -> bool:
    return all(p.ok for p in report.phases)


def _summary(o: NodeOutcome) -> str:
    if not o.taken:
        return f"{o.host}: not remediated: {o.detail} (reason: {o.reason or '-'})"
    steps = [f"reset {o.reset}"] + (["rebooted"] if o.rebooted else []) + [
        f"validate {o.validate}", "resumed" if o.resumed else "stays drained"]
    return f"{o.host}: " + ", ".join(steps) + (f" ({o.detail})" if o.detail else "")


def _survey(ctx: _Run, settings: RemediateSettings) -> dict[str, NodeOutcome]:
    with ctx.display(f"survey ({SURVEY_PLAYBOOK})") as progress:
        result = run_playbook(SURVEY_PLAYBOOK, [ctx.plan.inventory.source], ctx.run_dir,
                              "00-survey", extravars={"remediate_slurm_controller":
                                                      ctx.controller},
                              limit=ctx.controller, timeout=300, on_progress=progress)
    ctx.report.add_phase("survey", result)
    found: Mapping[str, Any] = result.reports.get(ctx.controller, {}).get("remediate") or {}
    if not result.ok:
        return {}
    states = parse_sinfo([str(line) for line in found.get("sinfo") or []])
    return choose(states, ctx.plan.inventory.gpu_hosts, settings.any_reason)


def _reset(ctx: _Run, hosts: Sequence[str], settings: RemediateSettings) -> list[str]:
    """Reset the GPUs of ``hosts`` (reboot where that fails and --reboot); the hosts ready to
    be validated."""
    extravars = {"remediate_hosts": ":".join(hosts), "remediate_reboot": settings.reboot}
    with ctx.display(f"reset ({RESET_PLAYBOOK})") as progress:
        result = run_playbook(RESET_PLAYBOOK, [ctx.plan.inventory.source], ctx.run_dir,
                              "01-reset", extravars=extravars, limit=":".join(hosts),
                              timeout=ctx.options.timeout_s, on_progress=progress)
    ctx.report.add_phase("reset", result)
    ready = []
    for host in hosts:
        o = ctx.outcomes[host]
        got: Mapping[str, Any] = result.reports.get(host, {}).get("remediate") or {}
        rc = _int(got.get("reset_rc"))
        if rc == 0:
            o.reset = "passed"
        elif rc is None:
            o.reset = "failed: the node did not run it"
            o.detail = next((f"{f.task}: {f.message}" for f in result.failures
                             if f.host == host), "no result from the node")
        else:
            o.reset = f"failed (rc {rc}): {str(got.get('reset_message') or '').strip()}"
        o.rebooted = str(got.get("rebooted")).lower() == "true"
        if got.get("reboot_error"):
            o.detail = f"reboot: {got['reboot_error']}"
        if rc == 0 or o.rebooted:
            ready.append(host)
        elif not settings.reboot and rc is not None:
            o.detail = "its GPUs could not be reset: reboot it (--reboot) or power-cycle it"
    return ready


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _validate(ctx: _Run, hosts: Sequence[str], phases: Sequence[tuple[str, str]]) -> list[str]:
    """The validate phase on ``hosts``; those that passed every check."""
    first = len(ctx.report.checks)
    options = RunOptions(limit=":".join(hosts), timeout_s=ctx.options.timeout_s,
                         max_fail=str(len(hosts)))
    bringup.run_phases(ctx.plan, ctx.report, ctx.run_dir, phases, options, ctx.display)
    passed = []
    for host in hosts:
        o = ctx.outcomes[host]
        failing = [c.name for c in ctx.report.checks[first:]
                   if c.host == host and c.status == "fail"]
        ran = any(c.host == host for c in ctx.report.checks[first:])
        lost = ctx.report.lost_hosts.get(host)
        if failing:
            o.validate = f"failed: {', '.join(failing)}"
        elif lost or not ran:
            o.validate = f"failed: {(lost or {}).get('message') or 'no checks from the node'}"
        else:
            o.validate = "passed"
            passed.append(host)
    return passed


def _resume(ctx: _Run, passed: Sequence[str], kept: Sequence[str]) -> None:
    keep = {h: slurm.reason(f"gpuc remediate: {_why(ctx.outcomes[h])}; before: "
                       f"{ctx.outcomes[h].reason}") for h in kept}
    extravars = {"upgrade_slurm_controller": ctx.controller,
                 "upgrade_resume_nodes": list(passed), "upgrade_keep_drained": keep}
    with ctx.display(f"resume ({RESUME_PLAYBOOK})") as progress:
        result = run_playbook(RESUME_PLAYBOOK, [ctx.plan.inventory.source], ctx.run_dir,
                              "03-resume", extravars=extravars, limit=ctx.controller,
                              timeout=300, on_progress=progress)
    ctx.report.add_phase("resume", result)
    for host in passed:
        ctx.outcomes[host].resumed = result.ok
        if not result.ok:
            ctx.outcomes[host].detail = "validated, but resuming it in Slurm failed"


def _why(o: NodeOutcome) -> str:
    if o.validate.startswith("failed"):
        return f"validate {o.validate}"
    return f"reset {o.reset}"
