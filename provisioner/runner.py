"""The one module that imports ansible_runner: run a playbook, stream its events, judge it.

Events are consumed as a stream: per-host counters, the last task per host, a bounded list of
failures and the ``<role>_report`` facts roles publish. Nothing grows with the number of
events, and ansible-runner is told not to keep ok/changed/skipped events on disk either (failed
and unreachable ones stay in the artifacts for debugging).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from provisioner.errors import EnvironmentProblem
from provisioner.paths import collection_root, collections_path
from provisioner.results import (
    HostStats,
    PlaybookResult,
    ProgressCallback,
    ProgressEvent,
    TaskFailure,
)
from provisioner.untrusted import redact


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (SIGINT, SIGTERM, SIGHUP); the CLI exits 128 + signum.
    A KeyboardInterrupt, so that nothing which catches Exception swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class _Cancel:
    """A stop requested by a signal. While a playbook runs, the request is only recorded:
    ansible-runner polls it (every PEXPECT_TIMEOUT_S) and kills ansible-playbook's process
    group, which pexpect made a session of its own, so no ansible-playbook outlives us."""

    signum: int | None = None
    running: bool = False


PEXPECT_TIMEOUT_S = 0.5


def request_cancel(signum: int) -> bool:
    """Record a stop request; True when a playbook is running and will be stopped (the signal
    handler must then return), False when nothing runs (the handler raises Interrupted)."""
    _Cancel.signum = signum
    return _Cancel.running


GRACE_S = 5.0


def cancel_requested() -> bool:
    """ansible-runner's cancel callback. ansible-runner would SIGKILL ansible-playbook's
    process group only, but ansible's workers call setsid(): they and the task processes they
    started would live on. So the whole process tree is stopped here first: SIGTERM to
    ansible-playbook (it tells its workers, which kill their own sessions), then SIGKILL to
    whatever of the tree is left after a grace period."""
    if _Cancel.signum is None:
        return False
    tree = _descendants(os.getpid())
    for pid in _children_map().get(os.getpid(), []):  # ansible-playbook itself
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(pid) for pid in tree):
        time.sleep(0.1)
    for pid in [*tree, *_descendants(os.getpid())]:
        _signal(pid, signal.SIGKILL)
    return True


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _descendants(root: int) -> list[int]:
    """Every process below ``root``, parents before children (Linux /proc; none elsewhere)."""
    children = _children_map()
    out: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signum)


def raise_if_cancelled() -> None:
    """Called between phases: turn a recorded stop request into Interrupted."""
    if _Cancel.signum is not None:
        raise Interrupted(_Cancel.signum)


def reset_cancel() -> None:
    _Cancel.signum = None
    _Cancel.running = False


# Roles publish report data as a fact named <role>_report (a dict); the section is <role>.
REPORT_SUFFIX = "_report"
MAX_FAILURES = 200
MAX_MESSAGE = 600


class EventSink:
    """Folds the event stream into a PlaybookResult; constant memory per host."""

    def __init__(self, result: PlaybookResult, on_progress: ProgressCallback | None) -> None:
        self.result = result
        self.on_progress = on_progress

    def __call__(self, event: Mapping[str, Any]) -> bool:
        self.result.events_seen += 1
        kind = str(event.get("event", ""))
        data: Mapping[str, Any] = event.get("event_data") or {}
        host = data.get("host")
        task = data.get("task")
        keep = False
        if kind == "playbook_on_play_start":
            self._emit(ProgressEvent("play", task=str(data.get("play", ""))))
        elif kind == "playbook_on_task_start":
            self._emit(ProgressEvent("task", task=str(task)))
        elif kind == "runner_on_ok":
            res = data.get("res") or {}
            self._collect_reports(str(host), res)
            self._emit(ProgressEvent("changed" if res.get("changed") else "ok", str(host),
                                     str(task)))
        elif kind == "runner_on_skipped":
            self._emit(ProgressEvent("skipped", str(host), str(task)))
        elif kind in ("runner_on_failed", "runner_on_unreachable"):
            res = data.get("res") or {}
            unreachable = kind == "runner_on_unreachable"
            if kind == "runner_on_failed" and data.get("ignore_errors"):
                return False
            self._collect_reports(str(host), res)
            self._record_failure(str(host), str(task), res, unreachable)
            self._emit(ProgressEvent("unreachable" if unreachable else "failed", str(host),
                                     str(task)))
            keep = True
        elif kind == "playbook_on_stats":
            self._collect_stats(data)
        return keep

    def _emit(self, ev: ProgressEvent) -> None:
        if self.on_progress is not None:
            self.on_progress(ev)

    def _collect_reports(self, host: str, res: Mapping[str, Any]) -> None:
        facts = res.get("ansible_facts") or {}
        for key, value in facts.items():
            if key.endswith(REPORT_SUFFIX) and isinstance(value, Mapping):
                section = key[: -len(REPORT_SUFFIX)]
                self.result.reports.setdefault(host, {})[section] = dict(value)

    def _record_failure(self, host: str, task: str, res: Mapping[str, Any],
                        unreachable: bool) -> None:
        if len(self.result.failures) >= MAX_FAILURES:
            self.result.dropped_failures += 1
            return
        msg = str(res.get("msg") or res.get("stderr") or res.get("reason") or "failed")
        detail = str(res.get("stderr") or res.get("stdout") or "").strip()
        if detail and detail not in msg:
            msg = f"{msg}: {detail.splitlines()[-1]}"
        msg = redact(" ".join(msg.split()))
        if len(msg) > MAX_MESSAGE:
            msg = msg[: MAX_MESSAGE - 3] + "..."
        self.result.failures.append(TaskFailure(host, task, msg, unreachable))

    def _collect_stats(self, data: Mapping[str, Any]) -> None:
        fields = {"ok": "ok", "changed": "changed", "failures": "failed",
                  "dark": "unreachable", "skipped": "skipped", "rescued": "rescued",
                  "ignored": "ignored"}
        for src, dst in fields.items():
            for host, count in (data.get(src) or {}).items():
                stats = self.result.stats.setdefault(str(host), HostStats())
                setattr(stats, dst, int(count))


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
    env = _playbook_env(root)
    vars_file = _write_extravars(data_dir, ident, extravars)
    cmdline = f"-e @{vars_file}" + (" --check --diff" if check_mode else "")
    started = time.monotonic()
    _Cancel.running = True
    try:
        if _Cancel.signum is not None:  # stopped before this phase could start
            raise Interrupted(_Cancel.signum)
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
            settings={"suppress_ansible_output": True, "pexpect_timeout": PEXPECT_TIMEOUT_S},
        )
    finally:
        _Cancel.running = False
        vars_file.unlink(missing_ok=True)
        # ansible-runner's `command` artifact holds the whole controller environment.
        (data_dir / "artifacts" / ident / "command").unlink(missing_ok=True)
    _finish(result, runner, playbook, started)
    return result


def _playbook_env(root: Path) -> dict[str, str]:
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


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """Around a phase that is not one ansible-runner run (provisioner.executors): a signal is
    recorded for ``cancel_requested`` to see, as during run_playbook, instead of raised at once
    (the phase stops its own processes; the caller raises Interrupted after it)."""
    if _Cancel.signum is not None:  # stopped before this phase could start
        raise Interrupted(_Cancel.signum)
    _Cancel.running = True
    try:
        yield
    finally:
        _Cancel.running = False


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
