"""`up --executors`: the per-node phases run on other machines, each driving a shard of the
nodes, through ansible-runner's own remote protocol, the one AWX runs under Receptor::

    ansible-runner transmit  ->  ssh EXECUTOR ansible-runner worker  ->  ansible-runner process

The controller plans, checks the executors, cuts the targeted nodes into contiguous shards (one
per executor, in inventory order: a rack-ordered inventory keeps a rack on one executor) and
merges the event streams into the one live display and the one report, which names the
executor of every host. Each phase's private data directory carries the playbooks and roles
(the collection), the run's inventories, the shard (a ``--limit @file``) and the extra
variables (a 0600 file: they may hold mirror credentials); the worker unpacks it in a private
temporary directory and removes it when the phase ends.

What an executor needs: SSH from the controller (``ssh EXECUTOR``, with ``--executor-ssh-config``
when the controller's ``~/.ssh/config`` does not say how), ansible-runner, ansible-core and the
collections the roles use installed as on the controller (``PROVISIONER_EXECUTOR_BIN``, default
the directory of the controller's own Python, names where), and whatever the inventory points
at on the controller's disk (SSH keys, known_hosts files) at the same paths.

Not sharded: the scheduler phase (slurm.conf is one file written from every compute node's
facts) and the smoke job (one job across all nodes): they run from the controller.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from provisioner.errors import EnvironmentProblem, InputError
from provisioner.paths import COLLECTION_NAME, COLLECTION_NAMESPACE, collection_root
from provisioner.results import HostStats, PlaybookResult, ProgressCallback, TaskFailure
from provisioner.run_cancel import PEXPECT_TIMEOUT_S, cancel_requested, stoppable
from provisioner.run_events import EventSink
from provisioner.runner import stream
from provisioner.ssh_policy import passthrough_env
from provisioner.untrusted import redact

# What the worker's runs need from the collection (the rest of a checkout is the controller's).
BUNDLE_PARTS = ("ansible.cfg", "galaxy.yml", "meta", "playbooks", "roles", "plugins")
CONNECT_TIMEOUT_S = 10
CHECK_TIMEOUT_S = 60
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@:-]*$")
# ssh's own messages (the executor could not be reached): the last lines say why.
STDERR_KEEP = 4000


@dataclass(frozen=True)
class Executors:
    """The executors of a run and how the controller reaches them."""

    names: tuple[str, ...]
    ssh_config: Path | None = None
    # Where ansible-runner and ansible-playbook are on every executor.
    bin_dir: str = ""

    def ssh(self, name: str, remote: str) -> list[str]:
        cmd = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}",
               "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
        if self.ssh_config is not None:
            cmd += ["-F", str(self.ssh_config)]
        return [*cmd, "--", name, remote]

    def worker_command(self) -> str:
        """The remote command: ansible-runner's worker, with ansible-playbook on its PATH. The
        worker unpacks each phase in a temporary directory of its own and removes it after."""
        bin_dir = shlex.quote(self.bin_dir)
        return f'PATH={bin_dir}:"$PATH" exec {bin_dir}/ansible-runner worker'


def parse(text: str, ssh_config: str | None = None) -> Executors:
    """``--executors a,b`` (SSH destinations, ``[user@]host``): one InputError line when bad."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise InputError("--executors: name at least one executor (ssh destination), e.g. "
                         "--executors exec1,exec2")
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise InputError(f"--executors: {bad[0]!r} is not an ssh destination ([user@]host)")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise InputError(f"--executors: {dup} is named twice")
    config = None
    if ssh_config is not None:
        config = Path(ssh_config).expanduser()
        if not config.is_file():
            raise InputError(f"--executor-ssh-config: {ssh_config} is not a file")
    bin_dir = os.environ.get("PROVISIONER_EXECUTOR_BIN") or str(Path(sys.executable).parent)
    return Executors(names=names, ssh_config=config, bin_dir=bin_dir)


def shard(hosts: Sequence[str], names: Sequence[str]) -> dict[str, list[str]]:
    """Contiguous, balanced shards of ``hosts`` in their order: executor i gets the i-th run
    of ``len(hosts) // len(names)`` hosts, the first ``len(hosts) % len(names)`` one more.
    An executor left without a host gets an empty list."""
    size, extra = divmod(len(hosts), len(names))
    out: dict[str, list[str]] = {}
    start = 0
    for i, name in enumerate(names):
        end = start + size + (1 if i < extra else 0)
        out[name] = list(hosts[start:end])
        start = end
    return out


def check(executors: Executors) -> None:
    """Before any node is touched: every executor answers over SSH and has ansible-runner
    where ``bin_dir`` says. One EnvironmentProblem line naming the first that does not."""
    remote = f"{shlex.quote(executors.bin_dir)}/ansible-runner --version"
    procs = {name: subprocess.Popen(executors.ssh(name, remote), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in executors.names}
    for name, proc in procs.items():
        try:
            _out, err = proc.communicate(timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise EnvironmentProblem(f"executor {name}: no answer over ssh within "
                                     f"{CHECK_TIMEOUT_S}s; nothing was changed") from None
        if proc.returncode != 0:
            why = _last_line(err) or f"exit {proc.returncode}"
            if proc.returncode != 255:  # ssh itself says 255; else the command ran and failed
                why = (f"{executors.bin_dir}/ansible-runner does not run there ({why}); set "
                       "PROVISIONER_EXECUTOR_BIN to where it is installed")
            raise EnvironmentProblem(f"executor {name}: {why}; nothing was changed")


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return redact(lines[-1])[:300] if lines else ""


@contextlib.contextmanager
def bundled() -> Iterator[Path]:
    """The collection as the workers run it, made once per run in a private temporary
    directory (not the run directory, whose files are rewritten to mask secrets after each
    phase) and removed after: a project directory holding what BUNDLE_PARTS names and the link
    ansible.cfg's collections_path expects
    (.ansible/collections/ansible_collections/gpucluster/provisioner -> the project)."""
    root = collection_root()
    with tempfile.TemporaryDirectory(prefix="gpuc-executors-") as tmp:
        out = Path(tmp) / "project"
        out.mkdir()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ansible")
        for part in BUNDLE_PARTS:
            src = root / part
            if src.is_dir():
                shutil.copytree(src, out / part, ignore=ignore, symlinks=True)
            elif src.is_file():
                shutil.copy2(src, out / part)
        link = out / ".ansible" / "collections" / "ansible_collections" / COLLECTION_NAMESPACE
        link.mkdir(parents=True)
        (link / COLLECTION_NAME).symlink_to(os.path.relpath(out, link), target_is_directory=True)
        yield out


def _copy_inventory(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=False,
                        ignore=shutil.ignore_patterns(".*", "*.retry", "*~"))
    else:
        shutil.copy2(src, dst)


@dataclass
class _Shard:
    name: str
    hosts: list[str]
    pdd: Path
    proc: subprocess.Popen[bytes] | None = None
    status: str = "unstarted"
    stderr: str = ""
    error: str = ""


def _prepare(shard_: _Shard, project: Path, playbook: str, inventories: Sequence[Path],
             extravars: Mapping[str, Any]) -> list[str]:
    """The private data directory transmitted to the executor; the inventory arguments."""
    pdd = shard_.pdd
    shutil.rmtree(pdd, ignore_errors=True)
    pdd.mkdir(mode=0o700, parents=True)
    # Hard links: one copy of the collection on the controller's disk for every phase.
    shutil.copytree(project, pdd / "project", symlinks=True, copy_function=os.link)
    inv_dir = pdd / "inventories"
    inv_dir.mkdir(mode=0o700)
    args: list[str] = []
    for i, src in enumerate(inventories):
        dst = inv_dir / f"{i}-{Path(src).name}"
        _copy_inventory(Path(src), dst)
        args += ["-i", f"../inventories/{dst.name}"]
    (pdd / "limit.txt").write_text("".join(f"{h}\n" for h in shard_.hosts))
    env_dir = pdd / "env"
    env_dir.mkdir(mode=0o700)
    fd = os.open(env_dir / "extravars", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(dict(extravars), handle)
    if not (project / "playbooks" / playbook).is_file():
        raise EnvironmentProblem(f"playbook {playbook} is not in the collection")
    return args


def _env() -> dict[str, str]:
    """The workers' Ansible environment: paths relative to the project (the worker's cwd);
    the caller's ANSIBLE_* tuning as for a local run."""
    return {
        "ANSIBLE_CONFIG": "ansible.cfg",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        **passthrough_env(),
    }


def run_sharded(playbook: str, inventories: Sequence[Path], run_dir: Path, ident: str,
                shards: Mapping[str, Sequence[str]], executors: Executors, project: Path, *,
                extravars: Mapping[str, Any] | None = None, timeout: int = 7200,
                check_mode: bool = False,
                on_progress: ProgressCallback | None = None) -> PlaybookResult:
    """Run ``playbooks/<playbook>`` on each executor for its shard (executors with no host are
    left out), all at once; one PlaybookResult over every shard. ``project``: bundled()."""
    result = PlaybookResult(playbook=playbook, status="unstarted", rc=-1, duration_s=0.0,
                            artifact_dir=run_dir / "executors")
    sink = EventSink(result, on_progress)
    lock = threading.Lock()

    def handler(event: Mapping[str, Any]) -> bool:
        with lock:
            return sink(event)

    started = time.monotonic()
    work = [_Shard(name, list(hosts), run_dir / "executors" / name / ident)
            for name, hosts in shards.items() if hosts]
    threads: list[threading.Thread] = []
    cancelled = False
    with stoppable():
        try:
            for s in work:
                threads += _start_shard(s, executors, project, playbook, inventories,
                                        extravars or {}, ident, timeout, check_mode, handler)
            cancelled = _wait(threads, work)
        finally:
            for s in work:
                _stop(s)
                _scrub(s.pdd, ident)
    result.duration_s = time.monotonic() - started
    result.executors = {host: s.name for s in work for host in s.hosts}
    statuses = ["canceled" if cancelled else s.status for s in work]
    result.status = ("successful" if statuses and all(st == "successful" for st in statuses)
                     else next((st for st in ("canceled", "timeout", "error", "failed")
                                if st in statuses), "failed" if work else "unstarted"))
    result.rc = 0 if result.status == "successful" else max(
        [_rc(s.pdd / "artifacts" / ident) for s in work] + [1])
    _record_unreached(result, work, cancelled)
    return result


def _start_shard(s: _Shard, executors: Executors, project: Path, playbook: str,
                 inventories: Sequence[Path], extravars: Mapping[str, Any], ident: str,
                 timeout: int, check_mode: bool, handler: Any) -> list[threading.Thread]:
    """Prepare shard ``s``'s private data directory, start the worker on its executor over
    ssh and the threads that send the phase, read its events and keep its stderr; return
    those threads."""
    inv_args = _prepare(s, project, playbook, inventories, extravars)
    cmdline = " ".join(shlex.quote(a) for a in inv_args) + (
        " --check --diff" if check_mode else "")
    s.proc = subprocess.Popen(executors.ssh(s.name, executors.worker_command()),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
    kwargs = dict(private_data_dir=str(s.pdd), playbook=f"playbooks/{playbook}",
                  ident=ident, limit="@../limit.txt", timeout=timeout, quiet=True,
                  envvars=_env(), cmdline=cmdline, suppress_env_files=True,
                  settings={"suppress_ansible_output": True,
                            "pexpect_timeout": PEXPECT_TIMEOUT_S})
    threads: list[threading.Thread] = []
    for target in (_transmit, _process, _stderr):
        t = threading.Thread(target=target, args=(s, kwargs, handler), daemon=True)
        t.start()
        threads.append(t)
    return threads


def _wait(threads: list[threading.Thread], work: list[_Shard]) -> bool:
    """Wait until every thread has ended; at a stop request, end every shard's ssh session
    (once). Return whether the run was stopped."""
    cancelled = False
    while any(t.is_alive() for t in threads):
        if not cancelled and cancel_requested():
            cancelled = True
            for s in work:
                _stop(s)
        for t in threads:
            t.join(timeout=0.2)
    return cancelled


def _record_unreached(result: PlaybookResult, work: list[_Shard], cancelled: bool) -> None:
    """Record the nodes of every shard whose worker failed (ssh, the worker, the stream) as
    unreachable in ``result``, with the reason, unless the run was stopped. Returns None."""
    for s in work:
        # 255: ssh itself failed (could not connect, or the connection dropped): its own
        # message says why better than the stream's end does.
        ssh_failed = s.proc is not None and s.proc.returncode == 255
        if not cancelled and (s.status in ("error", "unstarted") or ssh_failed):
            why = ((_last_line(s.stderr) if ssh_failed else "") or s.error
                   or _last_line(s.stderr) or f"the worker ended {s.status}")
            why = redact(" ".join(why.split()))[:600]
            # The shard's nodes were not reached through their executor: unreachable for this
            # run (the loss policy counts them, --retry-failed resumes them); the rest of the
            # cluster goes on as it would without any unreachable node.
            for host in s.hosts:
                if host not in result.stats:
                    result.stats[host] = HostStats(unreachable=1)
                    result.failures.append(TaskFailure(host, f"executor {s.name}", why,
                                                       unreachable=True))


def _transmit(s: _Shard, kwargs: dict[str, Any], _handler: Any) -> None:
    assert s.proc is not None and s.proc.stdin is not None
    try:
        stream("transmit", _output=s.proc.stdin, **kwargs)
    except (BrokenPipeError, OSError, ValueError) as exc:
        s.error = s.error or f"could not send the phase to the executor: {exc}"
    finally:
        with contextlib.suppress(OSError):
            s.proc.stdin.close()


def _process(s: _Shard, kwargs: dict[str, Any], handler: Any) -> None:
    assert s.proc is not None and s.proc.stdout is not None

    def status(data: Mapping[str, Any], runner_config: Any = None) -> None:
        s.status = str(data.get("status", s.status))
        if s.status == "error" and data.get("job_explanation"):
            s.error = str(data["job_explanation"])

    processor = stream(
        "process", _input=s.proc.stdout, private_data_dir=str(s.pdd),
        ident=kwargs["ident"], quiet=True, event_handler=handler, status_handler=status,
        cancel_callback=lambda: False)
    s.status = str(processor.status)


def _stderr(s: _Shard, _kwargs: Any, _handler: Any) -> None:
    assert s.proc is not None and s.proc.stderr is not None
    stream: IO[bytes] = s.proc.stderr
    for line in iter(stream.readline, b""):
        s.stderr = (s.stderr + line.decode("utf-8", "replace"))[-STDERR_KEEP:]
    s.proc.wait()


def _stop(s: _Shard) -> None:
    """End the ssh session (the worker on the executor loses its stdin and stdout)."""
    if s.proc is None or s.proc.poll() is not None:
        return
    try:
        os.killpg(s.proc.pid, 15)
    except ProcessLookupError:
        return
    try:
        s.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(s.proc.pid, 9)


def _rc(artifacts: Path) -> int:
    try:
        return int((artifacts / "rc").read_text().strip())
    except (OSError, ValueError):
        return 1


def _scrub(pdd: Path, ident: str) -> None:
    """Keep the artifacts (events, stdout); remove what was sent: the extra variables, the
    inventories (they may carry secrets), the collection's copy, and the `command` artifact
    (the worker's whole environment)."""
    for part in ("env", "inventories", "project"):
        shutil.rmtree(pdd / part, ignore_errors=True)
    (pdd / "limit.txt").unlink(missing_ok=True)
    (pdd / "artifacts" / ident / "command").unlink(missing_ok=True)
