"""What the commands share: the consoles, the option helpers and argument types, where progress
goes (``_chatter``, ``_display_factory``), the confirmation prompt and the plan every command
that touches hosts starts from.

Handlers print through ``common.console`` and ``common.errconsole`` (looked up when they print,
so a test may replace them here)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from provisioner.errors import InputError

if TYPE_CHECKING:  # heavy imports stay out of `provisioner --help`
    from provisioner.plan import ClusterPlan
    from provisioner.results import ProgressCallback, ProgressEvent

EXIT_OK, EXIT_FAILED, EXIT_INPUT = 0, 1, 2


def _console(stderr: bool = False) -> Console:
    """Wide tables in logs (CI, pipes): rich would otherwise squeeze them to 80 columns."""
    probe = Console(stderr=stderr)
    width = None if probe.is_terminal or os.environ.get("COLUMNS") else 160
    return Console(stderr=stderr, highlight=False, width=width)


console = _console()
errconsole = _console(stderr=True)
_silent = Console(quiet=True)


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 like every other bad input. An
    epilog given as ``lazy_epilog`` is computed only when the help is shown."""

    lazy_epilog: Callable[[], str] | None = None

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(f"{self.prog}: {message}")

    def format_help(self) -> str:
        if self.lazy_epilog is not None and self.epilog is None:
            self.epilog = self.lazy_epilog()
        return super().format_help()


def _global_options(parser: argparse.ArgumentParser, *, command: bool) -> None:
    """-v/-q, accepted before the command and after it (``provisioner -q up`` and
    ``provisioner up -q``). A command's copy defaults to SUPPRESS so that it never overwrites
    what was given before the command name."""
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument("-v", "--verbose", action="count",
                          default=argparse.SUPPRESS if command else 0,
                          help="more detail (repeat for more): each task as it starts, passed "
                          "checks, plan variables; ansible-playbook runs at that verbosity "
                          "(its output: runs/<run-id>/ansible/artifacts/*/stdout)")
    loudness.add_argument("-q", "--quiet", action="store_true",
                          default=argparse.SUPPRESS if command else False,
                          help="no progress, banners or tables: errors and the final verdict "
                          "line only")


def _seconds(text: str) -> int:
    """A timeout: a whole number of seconds above zero (argparse turns the error into usage)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def _max_fail(text: str) -> str:
    from provisioner.bringup import parse_max_fail

    try:
        return parse_max_fail(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _batch_size(text: str) -> str:
    from provisioner.upgrade import parse_batch_size

    try:
        return parse_batch_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    """A whole number above zero."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number above 0")
    return int(text)


def _json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true",
                        help=f"print {what} as one JSON document on stdout (progress and "
                        "notices go to stderr)")


def _container_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--container", metavar="BUNDLE",
                        help="run the smoke job in Slurm's OCI container BUNDLE (srun "
                        "--container; an absolute path to an OCI bundle that exists on every "
                        "GPU node, whose rootfs has the smoke job's Python; needs Slurm and its "
                        "slurm_node_oci_runtime)")


def _container(value: str | None, launcher: str) -> str | None:
    """--container's bundle, refused in one line where srun cannot use it."""
    if value is None:
        return None
    if not value.startswith("/"):
        raise InputError(f"--container {value}: the bundle must be an absolute path on the "
                         "nodes (Slurm does not copy it there)")
    if launcher != "slurm":
        raise InputError(f"--container {value}: the smoke job runs in a container only "
                         "through Slurm (srun --container); this inventory's launcher is "
                         f"{launcher}")
    return value


def _framework_option(parser: argparse.ArgumentParser) -> None:
    # The choices are provisioner.wheelhouse.FRAMEWORKS (not imported here: `--help` stays light;
    # tests/integration checks they agree).
    parser.add_argument("--framework", choices=["pytorch", "tensorflow"], default="pytorch",
                        help="the smoke job's framework: PyTorch DDP under torchrun (default) "
                        "or TensorFlow's MultiWorkerMirroredStrategy, one worker per node")


def _executor_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executors", metavar="HOST[,HOST...]",
                        help="run the per-node phases from these machines (ssh destinations "
                        "with the project installed), a contiguous shard of the nodes each, "
                        "through ansible-runner's worker protocol; the report names each "
                        "host's executor")
    parser.add_argument("--executor-ssh-config", metavar="FILE",
                        help="with --executors: the ssh_config (ssh -F) that says how to reach "
                        "them")


def _chatter(args: argparse.Namespace) -> Console:
    """Where progress, banners and notices go: beside the results, on stderr under --json,
    nowhere under -q."""
    if args.quiet:
        return _silent
    return errconsole if getattr(args, "json", False) else console


def _display_factory(args: argparse.Namespace) -> Callable[
        [str], AbstractContextManager[ProgressCallback]]:
    """Live progress per phase on the chatter console; -v adds a line per task."""
    out = _chatter(args)

    @contextmanager
    def display(title: str) -> Iterator[ProgressCallback]:
        from provisioner.progress import ProgressDisplay

        if args.quiet:
            yield lambda _event: None
            return
        with ProgressDisplay(out, title) as disp:
            if not args.verbose:
                yield disp
                return

            def each_task(event: ProgressEvent) -> None:
                disp(event)
                if event.kind == "task":
                    from provisioner.untrusted import printable

                    out.print(escape(printable(f"  task: {event.task}")))

            yield each_task

    return display


def _confirm(args: argparse.Namespace, cp: ClusterPlan, question: str) -> None:
    """Real hosts are changed only with --yes or a yes at the prompt (on a terminal)."""
    if cp.simulated or args.yes:
        return
    if not sys.stdin.isatty():
        raise InputError(f"{args.command} changes real hosts: pass --yes to run "
                         "non-interactively")
    # The question goes to stderr: stdout is for results (and for --json, only JSON).
    try:
        answer = errconsole.input(escape(f"{question} [y/N] "))
    except EOFError:
        raise InputError("aborted: no answer (end of input at the confirmation prompt); "
                         "nothing was changed") from None
    if answer.strip().lower() not in ("y", "yes"):
        raise InputError("aborted: nothing was changed")


def _executors(args: argparse.Namespace, cp: ClusterPlan) -> tuple[Any, tuple[str, ...] | None]:
    """`up --executors`: parsed, the --limit resolved to hosts (the shards are host lists),
    and every executor asked over ssh whether it can run a phase, before any node is touched."""
    if not args.executors:
        if args.executor_ssh_config:
            raise InputError("--executor-ssh-config says how to reach --executors: add "
                             "--executors, or leave it out")
        return None, None
    if getattr(args, "reboot", False):
        # The reboot ledger and Ansible's throttle are per executor: N executors would reboot
        # N batches at once, N times the nodes --batch-size allows.
        raise InputError("--reboot and --executors do not go together: each executor would "
                         "keep its own reboot limit, so the cluster could lose that many "
                         "batches at once; reboot without --executors")
    from provisioner import executors as ex
    from provisioner.inventory import hosts_matching

    executors = ex.parse(args.executors, args.executor_ssh_config)
    limit_hosts = None
    if args.limit:
        limit_hosts = tuple(hosts_matching(Path(cp.inventory.source), args.limit))
        if not limit_hosts:
            raise InputError(f"--limit {args.limit}: matches no host of the inventory")
    ex.check(executors)
    return executors, limit_hosts


def _with_source(rows: list[dict[str, Any]], key: str,
                 sources: Mapping[str, str]) -> list[dict[str, Any]]:
    """Each row with where its entry came from: built-in or the site file."""
    return [{**row, "source": sources.get(str(row[key]), "built-in")} for row in rows]


def _shown(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows: the source column only when a site added or replaced an entry."""
    if any(row["source"] != "built-in" for row in rows):
        return rows
    return [{k: v for k, v in row.items() if k != "source"} for row in rows]


def _data_title(name: str) -> str:
    from provisioner import site

    where = f"provisioner/data/{name}"
    return where if site.active() is None else f"{where} and the site's {site.active()}"


def _build(inventory: str, stack: str | None = None) -> ClusterPlan:
    """The plan (``stack``: every GPU node's gpu_stack, see plan.build), refused when
    simulation is not a property of the whole run: a simulated profile on a host of an
    inventory whose hosts are not all ``provisioner_simulated``."""
    from provisioner import plan as plan_mod

    cp = plan_mod.build(inventory, stack=stack)
    for note in cp.lifecycle:
        errconsole.print(escape(note.text), soft_wrap=True)
    for line in cp.notes:
        errconsole.print(escape(f"note: {line}"), soft_wrap=True)
    if not cp.inventory.simulated:
        sim = sorted(n for n, h in cp.hosts.items() if h.profile is not None
                     and h.profile.simulated)
        if sim:
            raise InputError(f"inventory {inventory}: host {sim[0]} uses the simulated profile "
                             f"{cp.hosts[sim[0]].profile.name}"  # type: ignore[union-attr]
                             " but the inventory is not a simulated cluster (provisioner_"
                             "simulated: true on every host); use a real hardware profile")
    return cp
