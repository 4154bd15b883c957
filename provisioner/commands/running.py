"""Running phases on a plan: the run lock, the stop signals (a signal stops the run and its
report is still saved), the report saved and printed."""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from provisioner.commands import common
from provisioner.commands.common import EXIT_FAILED, EXIT_OK, _chatter, _display_factory
from provisioner.errors import InputError, ProvisionerError

if TYPE_CHECKING:
    from provisioner.bringup import RunOptions
    from provisioner.plan import ClusterPlan


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _on_stop_signal(signum: int, _frame: object) -> None:
    """Stop the run: while a playbook runs, the runner kills ansible-playbook's process group
    and the phase ends; otherwise stop here. Either way Interrupted reaches _run."""
    from provisioner import run_cancel

    if run_cancel.request_cancel(signum):
        return
    raise run_cancel.Interrupted(signum)


@contextmanager
def _stop_signals() -> Iterator[None]:
    from provisioner import run_cancel

    run_cancel.reset_cancel()
    previous = {s: signal.signal(s, _on_stop_signal) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        run_cancel.reset_cancel()


@contextmanager
def _signals_held() -> Iterator[None]:
    """While the report is written after a stop: a second Ctrl-C does not cut it in half."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _refuse_insecure_env(cp: ClusterPlan) -> None:
    """ANSIBLE_* variables that turn off SSH host key checking are refused unless the
    inventory itself turns it off for every host (explicit, and then the report says so)."""
    from provisioner import ssh_policy

    bad = ssh_policy.insecure_env()
    if not bad:
        return
    off = set(ssh_policy.host_key_checking_off(
        {e.name: e.connection for e in cp.inventory.hosts.values()}))
    if off != set(cp.inventory.hosts):
        raise InputError(f"{bad[0]} in the environment would turn off SSH host key checking; "
                         "unset it, or set ansible_host_key_checking: false in the inventory "
                         "if you mean it (the report then says so)")


def _run(args: argparse.Namespace, cp: ClusterPlan, command: str,
         phases: Sequence[tuple[str, str]], options: RunOptions, resumes: Any = None,
         execute: Callable[..., bool] | None = None) -> int:
    """Run phases on a validated plan, save the report, print it; the exit code of the run.
    The report is saved whatever stops the run (a signal, an error of ours). ``execute``
    runs them instead of bringup.run_phases, with the same arguments (`upgrade`'s batches)."""
    from provisioner import bringup, render, run_cancel, runlock
    from provisioner.report import runs_dir

    _refuse_insecure_env(cp)
    if args.verbose:
        # ansible-runner hands ANSIBLE_* variables to ansible-playbook
        # (ssh_policy.passthrough_env); its output lands in the run's artifacts, not on our
        # console.
        os.environ.setdefault("ANSIBLE_VERBOSITY", str(min(args.verbose, 4)))
    lock = runlock.acquire(runs_dir(), cp.inventory, command)
    try:
        with _stop_signals():
            report, run_dir = bringup.start_report(cp, command)
            if resumes is not None:
                report.record_resume(resumes.run_id, resumes.hosts)
                report.add_note(
                    f"resumes run {resumes.run_id}: {', '.join(resumes.hosts)} from "
                    f"{resumes.phase}, then {bringup.WHOLE_CLUSTER_FROM} and after on every node")
            if lock.stale:
                report.add_note(
                    f"took over a stale lock of PID {lock.stale.get('pid')} (started "
                    f"{lock.stale.get('started_at', '?')}), which is no longer running")
            if cp.simulated:
                render.simulated_banner(_chatter(args))
            if report.host_key_checking_off:
                _chatter(args).print(escape(f"warning: {report.notes[0]}"), soft_wrap=True)
            try:
                ok = (execute or bringup.run_phases)(cp, report, run_dir, phases, options,
                                                     _display_factory(args))
            except run_cancel.Interrupted as exc:
                with _signals_held():
                    report.add_note(f"interrupted by {exc.name}: ansible-playbook was "
                                    "stopped; the phases after it did not run")
                    report.finish(128 + exc.signum, "interrupted")
                    vars(exc)["report_path"] = _save_quietly(report, run_dir)
                raise
            except BaseException as exc:
                with _signals_held():
                    code = exc.exit_code if isinstance(exc, ProvisionerError) else EXIT_FAILED
                    report.add_note(f"the run stopped on an error: {type(exc).__name__}: "
                                    f"{' '.join(str(exc).split())[:300]}")
                    report.finish(code, "error")
                    _save_quietly(report, run_dir)
                raise
            report.finish(EXIT_OK if ok else EXIT_FAILED)
            path = report.save(run_dir)
            bringup.secure_run_dir(run_dir, report)
    finally:
        lock.release()
    data = report.to_dict()
    data["report_path"] = str(path)
    show_report(args, data)
    return report.exit_code


def _save_quietly(report: Any, run_dir: Path) -> str | None:
    """Save after a stop; the stop, not a failed save, is the error the user sees (a failed
    save is noted on stderr)."""
    from provisioner import bringup

    try:
        path = report.save(run_dir)
        bringup.secure_run_dir(run_dir, report)
    except ProvisionerError as exc:
        common.errconsole.print(escape(f"warning: {exc}"), soft_wrap=True)
        return None
    return str(path)


def show_report(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """A report as --json, -q (the verdict line only), or the full console view."""
    from provisioner import render

    if args.json:
        print(render.as_json(data))
    elif args.quiet:
        render.verdict(common.console, data)
    else:
        render.report(common.console, data, verbose=bool(args.verbose))
