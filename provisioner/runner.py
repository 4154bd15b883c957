"""Running a playbook: the one module that imports ansible_runner.

``run_playbook`` runs ``playbooks/<playbook>`` with ansible-runner in a private data directory
under the run's directory and returns its PlaybookResult; ``stream`` is one step of
ansible-runner's remote protocol for provisioner.executors. What it builds on, each in its own
module: the event sink that folds the event stream into the result (provisioner.run_events),
stopping a run on a signal (provisioner.run_cancel), and the SSH policy and environment the
runs get (provisioner.ssh_policy).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from provisioner.errors import EnvironmentProblem
from provisioner.paths import collection_root
from provisioner.results import PlaybookResult, ProgressCallback, TaskFailure
from provisioner.run_cancel import PEXPECT_TIMEOUT_S, cancel_requested, stoppable
from provisioner.run_events import MAX_MESSAGE, EventSink
from provisioner.ssh_policy import passthrough_env, playbook_env


def run_playbook(
    playbook: str,
    inventories: Sequence[Path],
    run_dir: Path,
    ident: str,
    *,
    extravars: Mapping[str, Any] | None = None,
    limit: str | None = None,
    timeout: int = 7200,
    check_mode: bool = False,
    on_progress: ProgressCallback | None = None,
) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` with ansible-runner in a private data dir under run_dir."""
    try:
        import ansible_runner
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise EnvironmentProblem("ansible-runner is not installed: run `make deps`") from exc

    root = collection_root()
    book = root / "playbooks" / playbook
    if not book.is_file():
        raise EnvironmentProblem(f"playbook {book} does not exist")
    data_dir = run_dir / "ansible"
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    result = PlaybookResult(playbook=playbook, status="unstarted", rc=-1, duration_s=0.0,
                            artifact_dir=data_dir / "artifacts" / ident)
    sink = EventSink(result, on_progress)
    env = playbook_env(root)
    vars_file = _write_extravars(data_dir, ident, extravars)
    cmdline = f"-e @{vars_file}" + (" --check --diff" if check_mode else "")
    started = time.monotonic()
    try:
        with stoppable():  # Interrupted at once when stopped before this phase could start
            runner = ansible_runner.run(
                private_data_dir=str(data_dir),
                project_dir=str(root),
                playbook=str(book),
                inventory=[str(Path(p).resolve()) for p in inventories],
                ident=ident,
                limit=limit,
                timeout=timeout,
                quiet=True,
                envvars={**env, **passthrough_env()},
                event_handler=sink,
                cancel_callback=cancel_requested,
                cmdline=cmdline,
                # No env/ dump of the variables and environment in the private data dir.
                suppress_env_files=True,
                settings={"suppress_ansible_output": True,
                          "pexpect_timeout": PEXPECT_TIMEOUT_S},
            )
    finally:
        vars_file.unlink(missing_ok=True)
        # ansible-runner's `command` artifact holds the whole controller environment.
        (data_dir / "artifacts" / ident / "command").unlink(missing_ok=True)
    _finish(result, runner, playbook, started)
    return result


def _write_extravars(data_dir: Path, ident: str, extravars: Mapping[str, Any] | None) -> Path:
    """Write the extra variables to a new 0600 file in ``data_dir``; return its path (the
    caller removes it after the run)."""
    # Extra variables (a wheelhouse URL may carry mirror credentials) go through a 0600 file
    # that is removed after the run, not ansible-playbook's argv (which `ps` shows everyone).
    vars_file = data_dir / f".extravars-{ident}.json"
    fd = os.open(vars_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(dict(extravars or {}), handle)
    return vars_file


def _finish(result: PlaybookResult, runner: Any, playbook: str, started: float) -> None:
    """Record the ended run's duration, status and exit code in ``result``; a run that failed
    before any host ran gets the controller's error as its one failure. Returns None."""
    result.duration_s = time.monotonic() - started
    result.status = str(runner.status)
    result.rc = int(runner.rc) if runner.rc is not None else -1
    if result.rc != 0 and not result.stats:
        result.failures.append(TaskFailure("controller", playbook, _controller_error(result)))


def stream(streamer: str, **kwargs: Any) -> Any:
    """One step of ansible-runner's remote protocol (``transmit`` or ``process``) for
    provisioner.executors: this module stays the one that imports ansible_runner."""
    import ansible_runner

    return ansible_runner.run(streamer=streamer, **kwargs)


def _controller_error(result: PlaybookResult) -> str:
    """Ansible stopped before any host ran (syntax error, missing role, timeout): the first
    error lines of its output say why."""
    if result.status == "timeout":
        return "the run hit its timeout"
    if result.status == "canceled":
        return "stopped by a signal: ansible-playbook and its workers were killed"
    try:
        lines = (result.artifact_dir / "stdout").read_text(errors="replace").splitlines()
    except OSError:
        return f"ansible-playbook exited {result.rc} before any host ran"
    errors = [i for i, ln in enumerate(lines) if ln.startswith(("[ERROR]", "ERROR!"))]
    if not errors:
        return f"ansible-playbook exited {result.rc}: " + " ".join(lines[-3:])[:MAX_MESSAGE]
    first = errors[0]
    origin = next((ln.strip() for ln in lines[first:first + 4] if ln.startswith("Origin:")), "")
    return f"{lines[first].strip()} {origin}"[:MAX_MESSAGE]
