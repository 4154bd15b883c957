"""`up`, `validate` and `smoke` as library calls: phases run through ansible-runner, results
folded into a Report. Never prints: progress goes to the callback the CLI supplies."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provisioner import readings
from provisioner.executors import Executors, bundled, run_sharded
from provisioner.judge import stack_checks
from provisioner.plan import ClusterPlan
from provisioner.report import (
    Check,
    Report,
    make_private,
    new_run_id,
    private_dir,
    redact_tree,
    runs_dir,
)
from provisioner.results import PlaybookResult, ProgressCallback
from provisioner.run_cancel import raise_if_cancelled
from provisioner.runner import run_playbook
from provisioner.ssh_policy import connection_settings, host_key_checking_off
from provisioner.untrusted import secrets_in

if TYPE_CHECKING:
    from provisioner.smoke_launch import FactsGathered

# (phase name, playbook). site.yml chains the same playbooks for plain ansible-playbook use.
UP_PHASES: tuple[tuple[str, str], ...] = (
    ("preflight", "preflight.yml"),
    ("stack", "stack.yml"),
    ("fabric", "fabric.yml"),
    ("validate", "validate.yml"),
    # Day two: gpuc-health and the exporters on every node, Prometheus + Alertmanager on the
    # hosts of the inventory group [monitoring] (none: no server, said in the report's notes).
    ("monitoring", "monitoring.yml"),
)
# The phases an executor runs for its shard (`up --executors`): every phase of UP_PHASES, each
# node's work its own (the rdma role's bandwidth pairs are made within a shard).
SHARDED_PHASES = frozenset(name for name, _playbook in UP_PHASES)
MONITORING_GROUP = "monitoring"
VALIDATE_PHASES: tuple[tuple[str, str], ...] = (("validate", "validate.yml"),)
# The phase that judges the nodes' error counters against their last reading (readings.py).
COUNTERS_PHASE = "validate"
SMOKE_PHASE = ("smoke", "smoke.yml")
# Run by the smoke phase before it builds the wheelhouse: the GPU nodes' Python and machine as
# they are now (facts cached by an earlier run may predate a node's reinstall).
FACTS_PHASE = ("facts", "facts.yml")

DisplayFactory = Callable[[str], AbstractContextManager[ProgressCallback]]


@dataclass(frozen=True)
class RunOptions:
    limit: str | None = None
    timeout_s: int = 7200
    check_mode: bool = False
    reboot_ok: bool = False
    # With reboot_ok: nodes rebooted at once ("N" or "P%", the role's default 10% when None)
    # and how long each may take to come back (the role's default when None).
    reboot_batch: str | None = None
    reboot_timeout_s: int | None = None
    # How the smoke job starts: "direct" (torchrun on every node) or "slurm" (srun).
    launcher: str = "direct"
    # Which smoke job runs: "pytorch" (torchrun, DDP) or "tensorflow" (MultiWorkerMirrored).
    framework: str = "pytorch"
    # With the slurm launcher: the OCI bundle (a path on the nodes) srun --container runs the
    # smoke job in; None runs it on the node itself.
    container: str | None = None
    # How many nodes the run may lose (failed or unreachable) and go on with the others:
    # "N" or "P%" of the nodes it targets; None is the default policy (allowed_losses).
    max_fail: str | None = None
    # --retry-failed: the phases before validate run on these hosts only; validate and what
    # follows run on the whole cluster again.
    retry_hosts: tuple[str, ...] = ()
    # Before each phase's artifact name (`upgrade` runs the same phases once per batch).
    ident_prefix: str = ""
    # `up --executors`: the per-node phases run on these machines, a shard of nodes each.
    executors: Executors | None = None
    # With executors and --limit: the hosts the limit matches (resolved on the controller).
    limit_hosts: tuple[str, ...] | None = None


# The Slurm phase (provisioner.slurm.SCHEDULER_PHASE): never limited to a subset of nodes.
SCHEDULER = "scheduler"
# Phases from which a retried run goes back to the whole cluster.
WHOLE_CLUSTER_FROM = "validate"


@dataclass(frozen=True)
class Retry:
    """What `up --retry-failed RUN` reruns: the hosts RUN lost and the phase they stopped in."""

    run_id: str
    hosts: tuple[str, ...]
    phase: str


def _same_inventory(a: Path, b: Path) -> bool:
    """The same inventory, given as a file or as its directory (`-i inv` and `-i inv/hosts.yml`
    name one inventory when the file is in that directory); two files must be the same file."""
    a, b = a.resolve(), b.resolve()
    if a == b:
        return True
    if a.is_dir() != b.is_dir():
        directory, file = (a, b) if a.is_dir() else (b, a)
        return file.parent == directory
    return False


def retry_of(previous: Mapping[str, Any], inventory: str) -> Retry:
    """The hosts a saved report lost (failed, unreachable or with a failed check) and the
    earliest phase one of them stopped in. One InputError line when there is nothing to retry
    or the report belongs to another inventory."""
    from provisioner.errors import InputError
    from provisioner.slurm import SCHEDULER_PHASE

    run_id = str(previous.get("run_id"))
    if previous.get("command") != "up":
        raise InputError(f"run {run_id} is a `{previous.get('command')}` run: "
                         "--retry-failed resumes an `up` run")
    if not _same_inventory(Path(str(previous.get("inventory"))), Path(inventory)):
        raise InputError(f"run {run_id} was on inventory {previous.get('inventory')}, "
                         f"not {inventory}: give the same inventory")
    order = [name for name, _playbook in (*UP_PHASES, SCHEDULER_PHASE, SMOKE_PHASE)]
    stopped: dict[str, str] = {}
    for host, why in (previous.get("lost_hosts") or {}).items():
        stopped[str(host)] = str(why.get("phase", "preflight"))
    for phase in previous.get("phases") or []:
        for host, stats in (phase.get("hosts") or {}).items():
            if (stats.get("failed") or stats.get("unreachable")) and host not in stopped:
                stopped[str(host)] = str(phase.get("name"))
    if not stopped:
        raise InputError(f"run {run_id} lost no host (none failed or unreachable): "
                         "nothing to retry; run `provisioner up` again instead")
    first = min(order.index(p) if p in order else 0 for p in stopped.values())
    return Retry(run_id=run_id, hosts=tuple(sorted(stopped)), phase=order[first])


# The default loss policy: on a small cluster every node matters (a 2-node job without one of
# them proves nothing), on a fleet one dead node in twenty must not stop the other nineteen.
SMALL_CLUSTER = 8
DEFAULT_MAX_FAIL_PERCENT = 5


def parse_max_fail(text: str) -> str:
    """``N`` (a count) or ``P%`` (a share of the targeted nodes, 0-100); the text, checked."""
    value = text.strip()
    number = value[:-1] if value.endswith("%") else value
    if not number.isdigit() or (value.endswith("%") and int(number) > 100):
        raise ValueError(f"{text!r} is not a node count (N) or a percentage (P%, 0-100)")
    return value


def allowed_losses(max_fail: str | None, targeted: int) -> int:
    """How many of ``targeted`` nodes may be lost before the run aborts."""
    if max_fail is None:
        if targeted <= SMALL_CLUSTER:
            return 0
        return targeted * DEFAULT_MAX_FAIL_PERCENT // 100
    if max_fail.endswith("%"):
        return targeted * int(max_fail[:-1]) // 100
    return int(max_fail)


def _limit_without(limit: str | None, lost: Mapping[str, Any]) -> str | None:
    """The Ansible host pattern of the run minus the lost nodes (``base:!a:!b``). Ansible
    splits a pattern on commas when it has one, else on colons: a limit with commas gets
    ``,!a,!b``, or its last part would read ``c:!a`` as one host name and match nothing."""
    if not lost:
        return limit
    sep = "," if limit and "," in limit else ":"
    return sep.join([limit or "all", *(f"!{host}" for host in sorted(lost))])


# preflight.yml's last task: when it fails, the node it ran on is the messenger, not lost.
POLICY_TASK = "Preflight | Judge the nodes lost against the loss policy"


def _losses(result: PlaybookResult, checks: Sequence[Check], phase: str) -> dict[str, Any]:
    """The nodes this phase lost: unreachable, a failed task, or a failed check of its own."""
    out: dict[str, Any] = {}
    last_failure = {f.host: f for f in result.failures if f.task != POLICY_TASK}
    messengers = {f.host for f in result.failures if f.task == POLICY_TASK}
    for host, stats in sorted(result.stats.items()):
        if stats.healthy or (host in messengers and host not in last_failure
                             and stats.failed == 1 and not stats.unreachable):
            continue
        failure = last_failure.get(host)
        out[host] = {"phase": phase,
                     "reason": "unreachable" if stats.unreachable else "failed",
                     "task": failure.task if failure else "",
                     "message": failure.message if failure else ""}
    for check in checks:
        if check.status == "fail" and check.host not in out:
            out[check.host] = {"phase": phase, "reason": "check failed", "task": check.name,
                               "message": f"measured {check.measured}, expected "
                                          f"{check.expected}"}
    return out


def start_report(plan: ClusterPlan, command: str) -> tuple[Report, Path]:
    """The run's report, started from the plan, and its private run directory."""
    run_id = new_run_id()
    run_dir = private_dir(private_dir(runs_dir()) / run_id)
    inv_hosts = plan.inventory.hosts.values()
    connections = {e.name: e.connection for e in inv_hosts}
    report = Report.start(
        run_id, command, str(plan.inventory.source), plan.simulated,
        inventory_secrets=secrets_in([e.vars for e in inv_hosts]
                                     + [e.connection for e in inv_hosts]),
        host_key_checking_off=host_key_checking_off(connections),
        connection=connection_settings(connections),
        driver_lifecycle=[{"stack": note.stack, "branch": note.branch, "end_of_life": note.end,
                           "kind": note.kind, "hosts": list(note.hosts)}
                          for note in plan.lifecycle],
        notes=[*(note.text for note in plan.lifecycle), *plan.notes],
        hosts={name: {"kind": host.kind, "profile": host.profile.name if host.profile else None,
                      "stack": host.stack.as_vars() if host.stack else None}
               for name, host in plan.hosts.items()})
    return report, run_dir


def _executor_shards(plan: ClusterPlan, report: Report,
                     executors: Executors) -> dict[str, list[str]]:
    """`up --executors`: every host of the inventory, in its order, cut into one contiguous
    shard per executor (each phase then runs the part of a shard it targets); the report names
    each host's executor."""
    from provisioner.executors import shard

    shards = shard(list(plan.inventory.hosts), executors.names)
    report.record_executors(shards)
    return shards


def run_phases(plan: ClusterPlan, report: Report, run_dir: Path,
               phases: Sequence[tuple[str, str]], options: RunOptions,
               display: DisplayFactory) -> bool:
    """Run phases in order. A node that fails or cannot be reached is lost: the phases after
    go on without it while the run has lost no more nodes than the policy allows
    (``options.max_fail``), and stop when it has. True when every phase passed on every node."""
    try:
        if options.executors is None:
            return _run_phases(plan, report, run_dir, phases, options, display, None)
        with bundled() as project:
            sharding = _Sharding(options.executors, project,
                                 _executor_shards(plan, report, options.executors))
            return _run_phases(plan, report, run_dir, phases, options, display, sharding)
    finally:
        _record_reboots(report, run_dir)


# Where the driver role's rolling_reboot appends each reboot of the run (one JSON line each).
REBOOT_RECORD = "reboots.jsonl"


def reboots_down_at_once(reboots: Sequence[Mapping[str, Any]]) -> int:
    """The most nodes that were down at the same time: each reboot spans its started_at to its
    ended_at (a lost node's reboot ends when its wait gave up)."""
    edges = sorted([(r["started_at"], 1) for r in reboots if r.get("outcome") != "withheld"]
                   + [(r["ended_at"], -1) for r in reboots if r.get("outcome") != "withheld"],
                   key=lambda edge: (edge[0], edge[1]))  # an end before a start at one instant
    most = down = 0
    for _at, step in edges:
        down += step
        most = max(most, down)
    return most


def _record_reboots(report: Report, run_dir: Path) -> None:
    """The run's reboots into the report, and one note: how many, what came of them, and how
    many nodes were down at once."""
    path = run_dir / REBOOT_RECORD
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return
    reboots = [json.loads(line) for line in lines if line.strip()]
    reboots.sort(key=lambda r: str(r.get("started_at")))
    outcomes = Counter(str(r.get("outcome")) for r in reboots)
    # A run of several batches (upgrade) reads the record after each: one note, the latest.
    report.record_reboots(reboots, (
        f"{len(reboots)} reboot(s): " + ", ".join(f"{n} {what}" for what, n in
                                                 sorted(outcomes.items()))
        + f"; at most {reboots_down_at_once(reboots)} node(s) down at once"))


@dataclass(frozen=True)
class _Sharding:
    """`up --executors`: who runs the per-node phases, the collection they are sent, and
    every host's shard."""

    executors: Executors
    project: Path
    shards: dict[str, list[str]]


@dataclass(frozen=True)
class PhaseHooks:
    """What a phase of ``up`` does beyond running its playbook on the run's nodes.

    ``every_node``: it runs on every node the run has not lost, --limit or not (the scheduler:
    slurm.conf is one file for the whole cluster, written from every compute node's facts; on
    converged nodes it changes nothing). ``measures_cluster``: the first phase that measures
    the whole cluster (a retried run goes back to every node from it; in check mode it skips
    the nodes an earlier phase would change). ``extravars``: variables it needs from the plan
    and the report so far. ``after``: what the run takes from its result (checks, notes).
    ``runs_itself``: the phase is not one playbook (the smoke job: run_smoke)."""

    every_node: bool = False
    measures_cluster: bool = False
    extravars: Callable[[ClusterPlan, Report], dict[str, Any]] | None = None
    after: Callable[[ClusterPlan, Report, PlaybookResult, bool, RunOptions], None] | None = None
    runs_itself: bool = False


def _counter_readings(plan: ClusterPlan, report: Report) -> dict[str, Any]:
    return {readings.EXTRA_VAR: last_counter_readings(plan, report)}


def _judge_stack(plan: ClusterPlan, report: Report, result: PlaybookResult, ok: bool,
                 options: RunOptions) -> None:
    # Judged even when the phase failed: a role publishes what it measured before it fails the
    # host on a mismatch, and the report must show that check as failed. Check mode installs
    # nothing, so there is nothing to judge.
    if options.check_mode:
        return
    report.add_checks(stack_checks(plan, result.reports, completed=ok,
                                   hosts_run=set(result.stats)))


def _monitoring_notes(plan: ClusterPlan, report: Report, result: PlaybookResult,
                      _ok: bool, _options: RunOptions) -> None:
    report.add_notes(monitoring_notes(plan, result.reports))


PHASE_HOOKS: dict[str, PhaseHooks] = {
    "stack": PhaseHooks(after=_judge_stack),
    SCHEDULER: PhaseHooks(every_node=True),
    WHOLE_CLUSTER_FROM: PhaseHooks(measures_cluster=True, extravars=_counter_readings),
    "monitoring": PhaseHooks(after=_monitoring_notes),
    SMOKE_PHASE[0]: PhaseHooks(runs_itself=True),
}


def _driver_extravars(plan: ClusterPlan, options: RunOptions, run_dir: Path) -> dict[str, Any]:
    """The reboot policy of the run, as the driver role's variables."""
    extravars: dict[str, Any] = {"nvidia_driver_reboot_ok": options.reboot_ok}
    if options.reboot_batch is not None:
        extravars["nvidia_driver_reboot_batch"] = options.reboot_batch
    if options.reboot_timeout_s is not None:
        extravars["nvidia_driver_reboot_timeout"] = options.reboot_timeout_s
    if options.reboot_ok:
        # The run's --max-fail policy is also how many nodes may fail to come back from a
        # reboot before the driver role withholds the reboots it has not started yet.
        extravars["nvidia_driver_reboot_max_lost"] = allowed_losses(options.max_fail,
                                                                    len(plan.hosts))
        extravars["nvidia_driver_reboot_record"] = str(run_dir / REBOOT_RECORD)
    if options.max_fail is not None:
        # preflight.yml's last play applies the policy to the nodes it targeted.
        extravars["gpuc_max_fail"] = options.max_fail
    return extravars


@dataclass
class _RunState:
    """What the phases of one run share as they go."""

    inventories: list[Path]
    extravars: dict[str, Any]
    retrying: bool
    allowed: int | None = None
    # Check mode: the nodes an earlier phase would change. Nothing was changed, so validate
    # would measure them as they are, not as the run would leave them: it skips them.
    would_change: set[str] = field(default_factory=set)


def _run_phases(plan: ClusterPlan, report: Report, run_dir: Path,
                phases: Sequence[tuple[str, str]], options: RunOptions,
                display: DisplayFactory, sharding: _Sharding | None) -> bool:
    plan_inventory = plan.write_inventory(run_dir / "plan.yml")
    plan_inventory.chmod(0o600)
    state = _RunState([plan.inventory.source, plan_inventory],
                      _driver_extravars(plan, options, run_dir), bool(options.retry_hosts))
    lost = report.lost_hosts
    for index, (name, playbook) in enumerate(phases):
        hooks = PHASE_HOOKS.get(name, PhaseHooks())
        if hooks.measures_cluster:
            state.retrying = False
        base = ":".join(options.retry_hosts) if state.retrying else options.limit
        limit = _limit_without(None if hooks.every_node else base, lost)
        unjudged = _unjudged(plan, report, name, hooks, options, state)
        if unjudged is None:
            continue  # nobody left to measure (a limit matching no host is an error)
        limit = _limit_without(limit, dict.fromkeys(unjudged)) if unjudged else limit
        if hooks.runs_itself:
            if not run_smoke(plan, report, run_dir, state.inventories, index,
                             replace(options, limit=limit), display):
                return False
            continue
        phase_vars = {**state.extravars,
                      **(hooks.extravars(plan, report) if hooks.extravars else {})}
        with display(f"{name} ({playbook})") as progress:
            result = _run_phase_playbook(playbook, f"{options.ident_prefix}{index:02d}-{name}",
                                         name, run_dir, options, state, sharding, phase_vars,
                                         limit, lost, unjudged, progress)
        checks_before = len(report.checks)
        phase = report.add_phase(name, result)
        if options.check_mode:
            state.would_change.update(h for h, stats in result.stats.items() if stats.changed)
        secure_run_dir(run_dir, report)
        raise_if_cancelled()
        if hooks.after is not None:
            hooks.after(plan, report, result, phase.ok, options)
        if not _go_on(plan, report, name, result, report.checks[checks_before:], phase.ok,
                      options, state):
            return False
    return not lost


def _unjudged(plan: ClusterPlan, report: Report, name: str, hooks: PhaseHooks,
              options: RunOptions, state: _RunState) -> list[str] | None:
    """Check mode, the phase that measures the cluster: the nodes it skips (an earlier phase
    would change them), noted; None when that leaves nobody to measure."""
    lost = report.lost_hosts
    if not (options.check_mode and hooks.measures_cluster and state.would_change - set(lost)):
        return []
    unjudged = sorted(state.would_change - set(lost))
    report.add_note(
        f"check mode: {name} skips {', '.join(unjudged)}: an earlier phase would change "
        "them first, so what it measures now is not what the run would leave")
    if not set(plan.hosts) - set(lost) - set(unjudged):
        return None
    return unjudged


def _run_phase_playbook(playbook: str, ident: str, name: str, run_dir: Path,
                        options: RunOptions, state: _RunState, sharding: _Sharding | None,
                        phase_vars: dict[str, Any], limit: str | None,
                        lost: Mapping[str, Any], unjudged: Sequence[str],
                        progress: ProgressCallback) -> PlaybookResult:
    """The phase's playbook from the controller, or over the executors when it is sharded."""
    if sharding is None or name not in SHARDED_PHASES:
        return run_playbook(playbook, state.inventories, run_dir, ident, extravars=phase_vars,
                            limit=limit, timeout=options.timeout_s,
                            check_mode=options.check_mode, on_progress=progress)
    wanted = set(options.retry_hosts) if state.retrying else (
        set(options.limit_hosts) if options.limit_hosts is not None else None)
    mine = {executor: [h for h in hosts if (wanted is None or h in wanted)
                       and h not in lost and h not in unjudged]
            for executor, hosts in sharding.shards.items()}
    # The loss policy over the whole run, as a count: each executor's preflight judges its
    # shard against it, the controller the sum (_go_on).
    targeted = sum(len(hosts) for hosts in mine.values())
    return run_sharded(playbook, state.inventories, run_dir, ident, mine, sharding.executors,
                       sharding.project,
                       extravars={**phase_vars, "gpuc_max_fail": str(
                           allowed_losses(options.max_fail, targeted))},
                       timeout=options.timeout_s, check_mode=options.check_mode,
                       on_progress=progress)


def _go_on(plan: ClusterPlan, report: Report, name: str, result: PlaybookResult,
           new_checks: Sequence[Check], ok: bool, options: RunOptions,
           state: _RunState) -> bool:
    """The loss policy after a phase: whether the run goes on, the nodes it lost recorded and
    noted."""
    if state.allowed is None:
        state.allowed = allowed_losses(options.max_fail, len(result.stats) or len(plan.hosts))
    newly = _losses(result, new_checks, name)
    report.record_lost(newly)
    lost = report.lost_hosts
    if ok and not newly:
        return True
    survivors = [host for host in result.stats if host not in lost]
    if not survivors or not newly:
        return False  # nobody left to go on with, or the playbook itself failed
    if len(lost) > state.allowed:
        report.add_note(
            f"stopped after {name}: {len(lost)} node(s) lost ({', '.join(sorted(lost))}), "
            f"the run may lose {state.allowed} (--max-fail "
            f"{options.max_fail or 'default: 0 up to 8 nodes, else 5%'})")
        return False
    report.add_note(f"{name}: going on without {', '.join(sorted(newly))} "
                    f"({len(lost)} lost, the run may lose {state.allowed})")
    return True


def last_counter_readings(plan: ClusterPlan, report: Report) -> dict[str, dict[str, Any]]:
    """Each GPU node's last error counter reading: this run's own (an earlier validate phase of
    it), else the newest saved report's of this inventory; validate judges the rise since."""
    gpu_nodes = [name for name, host in plan.hosts.items() if host.kind == "gpu"]
    source = Path(plan.inventory.source)
    found = readings.last_readings(runs_dir(), lambda named: _same_inventory(Path(named), source),
                                   gpu_nodes, skip_run=report.run_id)
    found.update({h: r for h, r in readings.readings_in(report.hosts).items() if h in gpu_nodes})
    return found


def monitoring_notes(plan: ClusterPlan, reports: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Where Prometheus listens (the monitoring role publishes its URL per server host), or
    why there is none: the lines `up` prints at its end and keeps in the report."""
    if not any(MONITORING_GROUP in entry.groups for entry in plan.inventory.hosts.values()):
        return [f"no [{MONITORING_GROUP}] group in the inventory: Prometheus and Alertmanager "
                "were not installed (gpuc-health and the exporters were); put a host in "
                f"[{MONITORING_GROUP}] to get them"]
    # ansible_host of a simulated node is its container's address on the podman network.
    where = (" (the container's address on the simulated cluster's podman network, reachable "
             "from this machine)") if plan.simulated else ""
    notes = []
    for host, sections in sorted(reports.items()):
        published = sections.get("monitoring")
        if not isinstance(published, Mapping) or not published.get("prometheus_url"):
            continue
        url = str(published["prometheus_url"])
        notes.append(f"Prometheus on {host}: {url}{where}; alerts page "
                     f"{published.get('alerts_url', url)}, Alertmanager "
                     f"{published.get('alertmanager_url', '?')}")
    return notes


def run_smoke(plan: ClusterPlan, report: Report, run_dir: Path, inventories: list[Path],
              index: int, options: RunOptions, display: DisplayFactory) -> bool:
    """The smoke job phase: smoke_launch prepares it (the GPU nodes' platforms gathered afresh
    by facts.yml, the wheelhouse built and served for them, the role's variables), smoke.yml
    runs, every pass is judged."""
    from provisioner.smoke_launch import fold_results, prepared

    lost_before = len(report.lost_hosts)
    gather = functools.partial(_gather_platforms, plan, report, run_dir, inventories, index,
                               options, display)
    with prepared(plan, report, run_dir, options.limit, gather, launcher=options.launcher,
                  framework=options.framework, container=options.container) as launch:
        if launch is None:
            return False
        with display("smoke (smoke.yml)") as progress:
            result = run_playbook(SMOKE_PHASE[1], inventories, run_dir, f"{index:02d}-smoke",
                                  extravars=launch.extravars, limit=launch.limit,
                                  timeout=options.timeout_s, on_progress=progress)
    phase = report.add_phase("smoke", result)
    secure_run_dir(run_dir, report)
    raise_if_cancelled()
    unreachable = sorted(h for h, s in result.stats.items() if s.unreachable)
    judged = fold_results(plan, report, run_dir, result.reports, unreachable,
                          launcher=options.launcher, framework=options.framework,
                          container=options.container)
    return phase.ok and judged and len(report.lost_hosts) == lost_before


def _gather_platforms(plan: ClusterPlan, report: Report, run_dir: Path,
                      inventories: list[Path], index: int, options: RunOptions,
                      display: DisplayFactory) -> FactsGathered | None:
    """facts.yml on the smoke run's GPU nodes: what they publish and the smoke job's limit. A
    node the play cannot reach or fails on is lost, as in the other phases, and left out of
    the job; None when no node is left or the play itself failed."""
    from provisioner.smoke_launch import FactsGathered

    name, playbook = FACTS_PHASE
    with display(f"{name} ({playbook})") as progress:
        result = run_playbook(playbook, inventories, run_dir,
                              f"{options.ident_prefix}{index:02d}-{name}",
                              limit=options.limit, timeout=options.timeout_s,
                              on_progress=progress)
    phase = report.add_phase(name, result)
    secure_run_dir(run_dir, report)
    raise_if_cancelled()
    # Recorded as lost in the smoke phase: `up --retry-failed` reruns that phase, this play
    # included.
    newly = _losses(result, [], SMOKE_PHASE[0])
    report.record_lost(newly)
    reached = [host for host in result.stats if host not in newly]
    failed = not phase.ok and not newly  # the play itself, not a node
    if failed or not reached:
        report.add_note(f"the smoke job did not run: {playbook} "
                        + ("failed" if failed else "reached no GPU node"))
        return None
    if newly:
        report.add_note(f"{name}: the smoke job goes on without "
                        f"{', '.join(sorted(newly))} ({len(report.lost_hosts)} lost)")
    gpu = [host for host in reached if host in plan.hosts and plan.hosts[host].kind == "gpu"]
    return FactsGathered(_limit_without(options.limit, newly), gpu, result.reports)


def secure_run_dir(run_dir: Path, report: Report) -> None:
    """After each phase: everything in the run directory is made private (0700/0600), and the
    inventory's secrets are masked in what it holds for people (task output may quote a
    credentialed URL). plan.yml and the fact cache keep their secrets: later phases read them."""
    make_private(run_dir)
    redact_tree(run_dir, report._secrets)
