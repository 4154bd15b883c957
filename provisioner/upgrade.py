"""`provisioner upgrade`: another stack on the GPU nodes, a batch of nodes at a time, while the
others keep running jobs. Never prints: progress goes to the display the CLI supplies.

Per batch, in order: drain its nodes in Slurm and wait until no job runs on them (drain.yml on
the controller), the stack, validate and monitoring phases of `up` limited to the batch
(bringup.run_phases, with the plan of the new stack), then resume the nodes that passed and
leave the others drained with the reason (resume.yml). Without Slurm nothing is drained or
resumed. A failed batch counts against ``max_failed_batches``; at that count, or when jobs do
not end within the drain timeout, the upgrade stops and the later batches are not touched.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from provisioner import bringup, slurm
from provisioner.bringup import DisplayFactory, RunOptions
from provisioner.matrix import load_matrix
from provisioner.plan import ClusterPlan
from provisioner.report import Batch, Phase, Report
from provisioner.results import ProgressCallback
from provisioner.run_cancel import raise_if_cancelled
from provisioner.runner import run_playbook

# The phases of `up` a batch runs. Not preflight (the nodes run jobs until drained: its
# checks would race them), not fabric (nothing in it depends on the stack), not the scheduler
# (slurm.conf does not change) and not the smoke job (it would need nodes of other batches).
BATCH_PHASES: tuple[tuple[str, str], ...] = tuple(
    phase for phase in bringup.UP_PHASES if phase[0] in ("stack", "validate", "monitoring"))
DRAIN_PLAYBOOK = "drain.yml"
RESUME_PLAYBOOK = "resume.yml"
# Every drain reason the upgrade writes starts so (drain.yml knows a node it drained by it).
REASON_PREFIX = "gpuc upgrade to "


@dataclass(frozen=True)
class UpgradeSettings:
    stack: str
    batch_size: str = "1"
    drain_timeout_s: int = 3600
    # Seconds between two looks at the drained nodes' jobs (squeue).
    drain_poll_s: int = 10
    # Cancel the jobs still running when the drain timeout has passed, instead of stopping.
    force: bool = False
    max_failed_batches: int = 1


def parse_batch_size(text: str) -> str:
    """``N`` nodes (N >= 1) or ``P%`` of the GPU nodes (1-100); the text, checked."""
    value = text.strip()
    number = value[:-1] if value.endswith("%") else value
    if not number.isdigit() or int(number) < 1 or (value.endswith("%") and int(number) > 100):
        raise ValueError(f"{text!r} is not a number of nodes (N >= 1) or a percentage of the "
                         "GPU nodes (P%, 1-100)")
    return value


def batch_length(size: str, nodes: int) -> int:
    """Nodes per batch: N, or P% of ``nodes`` rounded up; at least 1, at most ``nodes``."""
    wanted = math.ceil(nodes * int(size[:-1]) / 100) if size.endswith("%") else int(size)
    return max(1, min(wanted, nodes))


def split_batches(nodes: Sequence[str], size: str) -> list[list[str]]:
    """The nodes in batches of ``batch_length``, in their inventory order."""
    step = batch_length(size, len(nodes))
    return [list(nodes[i:i + step]) for i in range(0, len(nodes), step)]


def failure_reason(stack: str, lost: Mapping[str, Any]) -> str:
    """Why a node stays drained: ``gpuc upgrade to STACK failed: PHASE: WHAT``, WHAT being
    the failed checks (``checks``, set by the upgrade), else the failed task, else the
    reason (unreachable)."""
    checks = list(lost.get("checks") or [])
    what = (", ".join(checks[:3]) + (", ..." if len(checks) > 3 else "") if checks
            else "unreachable" if lost.get("reason") == "unreachable"
            else lost.get("task") or lost.get("reason") or "failed")
    return slurm.reason(f"{REASON_PREFIX}{stack} failed: {lost.get('phase', '?')}: {what}")


def _when(epoch: Any) -> str | None:
    try:
        return datetime.fromtimestamp(float(epoch), UTC).isoformat(timespec="seconds")
    except (TypeError, ValueError, OverflowError):
        return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class _Context:
    plan: ClusterPlan
    report: Report
    run_dir: Path
    inventories: list[Path]
    options: RunOptions
    display: DisplayFactory
    settings: UpgradeSettings
    controller: str | None


def run(plan: ClusterPlan, report: Report, run_dir: Path, phases: Sequence[tuple[str, str]],
        options: RunOptions, display: DisplayFactory, *, settings: UpgradeSettings) -> bool:
    """Upgrade every GPU node of ``plan`` (planned with the new stack), batch by batch; the
    batches land in ``report.batches``. True when every batch passed."""
    gpu = plan.inventory.gpu_hosts
    batches = report.plan_batches(split_batches(gpu, settings.batch_size))
    plan_inventory = plan.write_inventory(run_dir / "plan.yml")
    plan_inventory.chmod(0o600)
    controller = slurm.controller(plan)
    ctx = _Context(plan, report, run_dir, [plan.inventory.source, plan_inventory],
                   # A node lost in one batch must not stop the next batch's phases: the
                   # batches, not run_phases' loss policy, decide when the upgrade stops.
                   replace(options, max_fail=str(len(gpu))), display, settings, controller)
    report.add_notes(_inventory_notes(plan, settings.stack))
    if controller is None:
        report.add_note("no scheduler drained the nodes (the inventory has no Slurm): "
                        "jobs running on a node while its batch was upgraded are the "
                        "operator's business")
    failed = 0
    stop = ""
    try:
        for batch in batches:
            if not _run_batch(ctx, batch, phases):
                failed += 1
            if batch.outcome in STOPPING:
                stop = f"batch {batch.number}: {batch.outcome}"
            elif failed >= settings.max_failed_batches:
                stop = (f"{failed} failed batch(es), --max-failed-batches "
                        f"{settings.max_failed_batches}")
            if stop:
                break
    finally:
        _not_run(report, stop or "interrupted")
        report.drop_repeated_notes()  # monitoring notes, once per batch
    return failed == 0 and all(b.outcome == "passed" for b in report.batches)


# Outcomes of a batch after which no other batch runs, whatever --max-failed-batches says: the
# drain did not happen as it must (jobs still running, or Slurm refused).
STOPPING = ("drain timed out", "drain failed")


def _not_run(report: Report, why: str) -> None:
    """Say which batches the upgrade did not reach, and why."""
    skipped = [b for b in report.batches if b.outcome == "not run"]
    if not skipped:
        return
    last = max((b.number for b in report.batches if b.outcome != "not run"), default=0)
    for b in skipped:
        report.update_batch(b, detail=f"not run: the upgrade stopped after batch {last} ({why})")
    report.add_note(
        f"stopped after batch {last} ({why}): batch(es) "
        f"{', '.join(str(b.number) for b in skipped)} not run, nodes "
        f"{', '.join(node for b in skipped for node in b.nodes)} untouched")


def _inventory_notes(plan: ClusterPlan, stack: str) -> list[str]:
    """The inventory still plans the old stack: the next `up` would put it back."""
    default = load_matrix().default_stack
    behind = sorted(name for name in plan.inventory.gpu_hosts
                    if str(plan.inventory.hosts[name].vars.get("gpu_stack") or default) != stack)
    if not behind:
        return []
    return [f"the inventory plans another stack than {stack} for {len(behind)} GPU node(s) "
            f"({', '.join(behind[:5])}{', ...' if len(behind) > 5 else ''}): set gpu_stack: "
            f"{stack} in it, or the next `provisioner up` installs that stack again"]


def _run_batch(ctx: _Context, batch: Batch, phases: Sequence[tuple[str, str]]) -> bool:
    total = len(ctx.report.batches)

    def display(title: str) -> AbstractContextManager[ProgressCallback]:
        return ctx.display(f"batch {batch.number}/{total}: {title}")

    try:
        held: dict[str, str] = {}
        if ctx.controller is not None:
            drained = _drain(ctx, batch, display)
            if drained is None:
                return False
            held = drained
        ctx.report.update_batch(batch, stack_started_at=_now())
        before, checks_before = len(ctx.report.phases), len(ctx.report.checks)
        options = replace(ctx.options, limit=":".join(batch.nodes),
                          ident_prefix=f"b{batch.number:02d}.")
        bringup.run_phases(ctx.plan, ctx.report, ctx.run_dir, phases, options, display)
        ran = ctx.report.phases[before:]
        failed = _failed_nodes(batch.nodes, phases, ran, ctx.report.lost_hosts)
        ctx.report.record_lost({node: why for node, why in failed.items()
                                if node not in ctx.report.lost_hosts})
        for node, why in failed.items():
            why["checks"] = [c.name for c in ctx.report.checks[checks_before:]
                             if c.host == node and c.status == "fail"]
        ctx.report.prefix_phases(before, f"batch {batch.number} ")
        ctx.report.update_batch(batch, phases=_phase_outcomes(batch, phases, ran, failed))
        resumed = _resume(ctx, batch, failed, held, display)
        ctx.report.update_batch(
            batch, outcome="passed" if not failed and resumed else "failed",
            detail="; ".join(f"{node}: {failure_reason(ctx.settings.stack, why)}"
                             for node, why in sorted(failed.items())) if failed else None)
        return batch.outcome == "passed"
    except BaseException:
        if batch.outcome == "not run":
            in_slurm = (" drained in Slurm (`scontrol update NodeName=... State=RESUME` once "
                        "checked) and" if ctx.controller else "")
            ctx.report.update_batch(
                batch, outcome="interrupted",
                detail=(f"stopped during this batch: {', '.join(batch.nodes)} may be left"
                        f"{in_slurm} half-upgraded; run the upgrade again"))
        raise


def _phase_outcomes(batch: Batch, phases: Sequence[tuple[str, str]], ran: Sequence[Phase],
                    failed: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each phase of the batch: "passed", "failed on NODE, ..." or "not run"."""
    out = {}
    for name, _playbook in phases:
        bad = sorted(node for node, why in failed.items() if why.get("phase") == name)
        ran_it = any(p.name == f"batch {batch.number} {name}" for p in ran)
        out[name] = (f"failed on {', '.join(bad)}" if bad
                     else "passed" if ran_it else "not run")
    return out


def _failed_nodes(nodes: Sequence[str], phases: Sequence[tuple[str, str]],
                  ran: Sequence[Phase], lost: Mapping[str, Mapping[str, Any]],
                  ) -> dict[str, dict[str, Any]]:
    """The batch's nodes that did not pass every phase, with why (as ``Report.lost_hosts``
    says it). A node passed when each phase ran on it and it neither failed nor was
    unreachable there: a phase that stopped without a word about a node (timed out, the play
    itself failed) leaves that node failed too."""
    out: dict[str, dict[str, Any]] = {}
    for node in nodes:
        if node in lost:
            out[node] = dict(lost[node])
            continue
        for index, (name, playbook) in enumerate(phases):
            phase = ran[index] if index < len(ran) else None
            stats = phase.hosts.get(node) if phase is not None else None
            if phase is None or stats is None or stats.get("failed") or stats.get("unreachable"):
                task = f"{playbook} {phase.status} (rc {phase.rc})" if phase else "not run"
                out[node] = {"phase": name, "reason": "failed", "task": task, "message": ""}
                break
    return out


def _drain(ctx: _Context, batch: Batch, display: DisplayFactory) -> dict[str, str] | None:
    """drain.yml for the batch. The nodes someone else drained before (node -> reason), or
    None when the upgrade must stop: the jobs did not end in time, or the play failed."""
    assert ctx.controller is not None
    extravars = {"upgrade_slurm_controller": ctx.controller, "upgrade_nodes": batch.nodes,
                 "upgrade_stack": ctx.settings.stack,
                 "upgrade_drain_timeout": ctx.settings.drain_timeout_s,
                 "upgrade_drain_poll": ctx.settings.drain_poll_s,
                 "upgrade_force": ctx.settings.force}
    with display(f"drain ({DRAIN_PLAYBOOK})") as progress:
        result = run_playbook(DRAIN_PLAYBOOK, ctx.inventories, ctx.run_dir,
                              f"b{batch.number:02d}.drain", extravars=extravars,
                              limit=ctx.controller,
                              # the wait, plus room for the drain itself and a cancel
                              timeout=ctx.settings.drain_timeout_s + ctx.options.timeout_s,
                              on_progress=progress)
    phase = ctx.report.add_phase(f"batch {batch.number} drain", result)
    bringup.secure_run_dir(ctx.run_dir, ctx.report)
    raise_if_cancelled()
    found: Mapping[str, Any] = result.reports.get(ctx.controller, {}).get("upgrade") or {}
    drained_at, done = _when(found.get("drained_at")), _when(found.get("jobs_done_at"))
    ctx.report.update_batch(
        batch, drained_at=drained_at,
        drain_wait_s=round(float(found["jobs_done_at"]) - float(found["drained_at"]), 1)
        if drained_at and done else None,
        jobs_waited_for=[str(j) for j in found.get("jobs_at_drain") or []],
        jobs_cancelled=[str(j) for j in found.get("jobs_cancelled") or []])
    left = [str(j) for j in found.get("jobs_left") or []]
    nodes = ", ".join(batch.nodes)
    if phase.ok:
        return {str(k): str(v) for k, v in (found.get("held") or {}).items()}
    if left:
        ctx.report.update_batch(
            batch, outcome="drain timed out",
            detail=(f"{len(left)} job(s) still ran on {nodes} after "
                    f"{ctx.settings.drain_timeout_s} s: {'; '.join(left)}"),
            kept_drained={node: f"{REASON_PREFIX}{ctx.settings.stack} (drained, the upgrade "
                          "stopped waiting for its jobs)" for node in batch.nodes})
        ctx.report.add_note(
            f"batch {batch.number}: jobs still run on {nodes} after the drain timeout "
            f"({ctx.settings.drain_timeout_s} s): {'; '.join(left)}. The nodes stay drained; "
            "the upgrade stopped before touching them (wait for the jobs, raise "
            "--drain-timeout, or --force to cancel them)")
    else:
        why = next((f"{f.task}: {f.message}" for f in result.failures), result.status)
        ctx.report.update_batch(
            batch, outcome="drain failed",
            detail=f"could not drain {nodes} in Slurm on {ctx.controller}: {why}")
        ctx.report.add_note(f"batch {batch.number}: {batch.detail}; the upgrade stopped "
                            "before touching the nodes")
    return None


def _resume(ctx: _Context, batch: Batch, lost: Mapping[str, Mapping[str, Any]],
            held: Mapping[str, str], display: DisplayFactory) -> bool:
    """resume.yml: resume the nodes that passed, leave the failed ones drained with why. A node
    drained before the upgrade for another reason is never resumed. False when Slurm was not
    told (the nodes then stay drained)."""
    if ctx.controller is None:
        return True
    stack = ctx.settings.stack
    resume = [node for node in batch.nodes if node not in lost and node not in held]
    keep: dict[str, str] = {}
    kept: dict[str, str] = {}
    for node in batch.nodes:
        if node in lost:
            reason = failure_reason(stack, lost[node])
            keep[node] = kept[node] = slurm.reason(f"{reason}; drained before: {held[node]}"
                                                   if node in held else reason)
        elif node in held:
            kept[node] = (f"drained before the upgrade (Reason={held[node]}): left drained "
                          "with that reason")
    ctx.report.update_batch(batch, kept_drained=kept)
    if not resume and not keep:
        return True
    with display(f"resume ({RESUME_PLAYBOOK})") as progress:
        result = run_playbook(RESUME_PLAYBOOK, ctx.inventories, ctx.run_dir,
                              f"b{batch.number:02d}.resume",
                              extravars={"upgrade_slurm_controller": ctx.controller,
                                         "upgrade_resume_nodes": resume,
                                         "upgrade_keep_drained": keep},
                              limit=ctx.controller, timeout=ctx.options.timeout_s,
                              on_progress=progress)
    phase = ctx.report.add_phase(f"batch {batch.number} resume", result)
    bringup.secure_run_dir(ctx.run_dir, ctx.report)
    raise_if_cancelled()
    if phase.ok:
        ctx.report.update_batch(batch, resumed=resume)
        return True
    why = next((f"{f.task}: {f.message}" for f in result.failures), result.status)
    ctx.report.update_batch(
        batch, detail=f"resume.yml failed on {ctx.controller}: {why}",
        kept_drained={node: f"upgraded and validated, but resuming it in Slurm failed ({why}): "
                            f"scontrol update NodeName={node} State=RESUME" for node in resume})
    return False
