"""`up`, `validate` and `smoke` as library calls: phases run through ansible-runner, results
folded into a Report. Never prints: progress goes to the callback the CLI supplies."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.judge import stack_checks
from provisioner.plan import ClusterPlan
from provisioner.report import (
    Report,
    make_private,
    new_run_id,
    private_dir,
    redact_tree,
    runs_dir,
)
from provisioner.results import ProgressCallback
from provisioner.runner import host_key_checking_off, raise_if_cancelled, run_playbook
from provisioner.untrusted import secrets_in

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
MONITORING_GROUP = "monitoring"
VALIDATE_PHASES: tuple[tuple[str, str], ...] = (("validate", "validate.yml"),)
SMOKE_PHASE = ("smoke", "smoke.yml")

DisplayFactory = Callable[[str], AbstractContextManager[ProgressCallback]]


@dataclass(frozen=True)
class RunOptions:
    limit: str | None = None
    timeout_s: int = 7200
    check_mode: bool = False
    reboot_ok: bool = False
    # How the smoke job starts: "direct" (torchrun on every node) or "slurm" (srun).
    launcher: str = "direct"


def start_report(plan: ClusterPlan, command: str) -> tuple[Report, Path]:
    from datetime import UTC, datetime

    run_id = new_run_id()
    run_dir = private_dir(private_dir(runs_dir()) / run_id)
    report = Report(run_id=run_id, command=command, inventory=str(plan.inventory.source),
                    simulated=plan.simulated,
                    started_at=datetime.now(UTC).isoformat(timespec="seconds"))
    inv_hosts = plan.inventory.hosts.values()
    report._secrets = secrets_in([e.vars for e in inv_hosts] + [e.connection for e in inv_hosts])
    report.host_key_checking_off = host_key_checking_off(
        {e.name: e.connection for e in inv_hosts})
    if report.host_key_checking_off:
        report.notes.append(f"SSH host key checking is OFF for {len(report.host_key_checking_off)}"
                            f" host(s) ({', '.join(report.host_key_checking_off[:5])}): the "
                            "inventory turns it off")
    for name, host in plan.hosts.items():
        report.hosts[name] = {
            "kind": host.kind,
            "profile": host.profile.name if host.profile else None,
            "stack": host.stack.as_vars() if host.stack else None,
        }
    return report, run_dir


def run_phases(plan: ClusterPlan, report: Report, run_dir: Path,
               phases: Sequence[tuple[str, str]], options: RunOptions,
               display: DisplayFactory) -> bool:
    """Run phases in order; stop at the first that fails. True when all passed."""
    plan_inventory = plan.write_inventory(run_dir / "plan.yml")
    plan_inventory.chmod(0o600)
    inventories = [plan.inventory.source, plan_inventory]
    extravars: dict[str, Any] = {"nvidia_driver_reboot_ok": options.reboot_ok}
    for index, (name, playbook) in enumerate(phases):
        if name == "smoke":
            if not run_smoke(plan, report, run_dir, inventories, index, options, display):
                return False
            continue
        with display(f"{name} ({playbook})") as progress:
            result = run_playbook(playbook, inventories, run_dir, f"{index:02d}-{name}",
                                  extravars=extravars, limit=options.limit,
                                  timeout=options.timeout_s, check_mode=options.check_mode,
                                  on_progress=progress)
        phase = report.add_phase(name, result)
        secure_run_dir(run_dir, report)
        raise_if_cancelled()
        if name == "stack" and not options.check_mode:
            # Judged even when the phase failed: a role publishes what it measured before it
            # fails the host on a mismatch, and the report must show that check as failed.
            report.checks.extend(stack_checks(plan, result.reports, completed=phase.ok,
                                              hosts_run=set(result.stats)))
        if name == "monitoring":
            report.notes.extend(monitoring_notes(plan, result.reports))
        if not phase.ok or any(c.status == "fail" for c in report.checks):
            return False
    return True


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
    """The smoke job phase: serve the wheelhouse, run smoke.yml, judge every pass."""
    from provisioner.paths import cache_dir
    from provisioner.smokerun import extravars, fold_results, wheelhouse_url

    with wheelhouse_url(plan, cache_dir()) as url, display("smoke (smoke.yml)") as progress:
        result = run_playbook(SMOKE_PHASE[1], inventories, run_dir, f"{index:02d}-smoke",
                              extravars=extravars(plan, report.run_id, run_dir, url,
                                                  launcher=options.launcher),
                              limit=options.limit, timeout=options.timeout_s,
                              on_progress=progress)
    phase = report.add_phase("smoke", result)
    secure_run_dir(run_dir, report)
    raise_if_cancelled()
    unreachable = sorted(h for h, s in result.stats.items() if s.unreachable)
    judged = fold_results(plan, report, run_dir, result.reports, unreachable,
                          launcher=options.launcher)
    return phase.ok and judged


def secure_run_dir(run_dir: Path, report: Report) -> None:
    """After each phase: what ansible-runner wrote is made private (0700/0600) and the
    inventory's secrets are masked in it (task output may quote a credentialed URL)."""
    ansible_dir = run_dir / "ansible"
    if ansible_dir.is_dir():
        make_private(ansible_dir)
    redact_tree(run_dir, report._secrets)
