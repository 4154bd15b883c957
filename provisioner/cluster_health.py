"""The cluster's health, as `provisioner health` reports it: every GPU node's own health command
(gpuc-health, installed by the node_health role) run through ansible-runner in parallel, folded
into one table.

Never prints: the CLI renders :class:`HealthSummary`. Node statuses are gpuc-health's exit
statuses (0 healthy, 1 degraded, 2 unhealthy, 3 could not check); a node that could not be
reached counts as 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.plan import ClusterPlan
from provisioner.report import new_run_id, runs_dir
from provisioner.results import ProgressCallback, TaskFailure
from provisioner.runner import run_playbook

HEALTHY, DEGRADED, UNHEALTHY, UNKNOWN = 0, 1, 2, 3
STATUS_NAMES = {HEALTHY: "healthy", DEGRADED: "degraded", UNHEALTHY: "unhealthy",
                UNKNOWN: "unknown"}
PLAYBOOK = "health.yml"


@dataclass(frozen=True)
class NodeHealth:
    host: str
    status: int
    failing: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    detail: str = ""

    @property
    def status_name(self) -> str:
        return STATUS_NAMES.get(self.status, "unknown")

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "status": self.status, "status_name": self.status_name,
                "failing": list(self.failing), "warnings": list(self.warnings),
                "problems": list(self.problems), "detail": self.detail}


@dataclass
class HealthSummary:
    run_id: str
    run_dir: Path
    simulated: bool
    nodes: list[NodeHealth] = field(default_factory=list)

    @property
    def worst(self) -> int:
        return max((n.status for n in self.nodes), default=UNKNOWN)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "simulated": self.simulated, "status": self.worst,
                "status_name": STATUS_NAMES[self.worst],
                "nodes": [n.to_dict() for n in self.nodes]}


def node_health(host: str, report: Mapping[str, Any] | None,
                failure: TaskFailure | None = None) -> NodeHealth:
    """One node's verdict from the ``node_health`` report its play published (gpuc-health's
    JSON), or UNKNOWN with the reason it has none."""
    if not report:
        why = failure.message if failure else "no result (the play did not reach the node)"
        return NodeHealth(host, UNKNOWN, problems=(why,), detail=why)
    try:
        status = int(report.get("status", UNKNOWN))
    except (TypeError, ValueError):
        status = UNKNOWN
    if status not in STATUS_NAMES:
        status = UNKNOWN
    checks = [c for c in report.get("checks") or [] if isinstance(c, Mapping)]
    failing = tuple(str(c.get("name")) for c in checks if c.get("status") == "fail")
    warnings = tuple(str(c.get("name")) for c in checks if c.get("status") == "warn")
    problems = tuple(str(p) for p in report.get("problems") or [])
    first = next((c for c in checks if c.get("status") == "fail"), None) or next(
        (c for c in checks if c.get("status") == "warn"), None)
    detail = problems[0] if problems else str(first.get("detail", "")) if first else ""
    return NodeHealth(host, status, failing, warnings, problems, detail)


def run(plan: ClusterPlan, on_progress: ProgressCallback | None = None,
        limit: str | None = None, timeout_s: int = 300) -> HealthSummary:
    """Run playbooks/health.yml on the plan's GPU nodes; one verdict per GPU node."""
    run_id = new_run_id()
    run_dir = runs_dir() / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    result = run_playbook(PLAYBOOK, [plan.inventory.source], run_dir, "00-health",
                          limit=limit, timeout=timeout_s, on_progress=on_progress)
    failures = {f.host: f for f in result.failures}
    gpu_hosts = sorted(h.name for h in plan.hosts.values() if h.kind == "gpu")
    if limit:
        gpu_hosts = [h for h in gpu_hosts if h in result.stats or h in failures]
    summary = HealthSummary(run_id, run_dir, plan.simulated)
    for host in gpu_hosts:
        report = result.reports.get(host, {}).get("node_health")
        failure = failures.get(host) or failures.get("controller")
        summary.nodes.append(node_health(host, report, failure))
    return summary
