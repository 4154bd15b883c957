# PYTHON_ARGCOMPLETE_OK  (argcomplete: this entry point completes itself)
"""Command line: argument parsing, printing, and the one place exceptions become exit codes.

Where lines go: results on stdout; progress and banners on stdout too, on stderr under
``--json`` (stdout then carries one JSON document and nothing else), nowhere under ``-q``;
errors always on stderr, one line.

Exit codes: 0 passed, 1 failed, 2 bad input (nothing touched); a run stopped by a signal exits
128 + the signal's number (SIGINT 130, SIGTERM 143, SIGHUP 129) after saving its report and
killing ansible-playbook's process group.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import argcomplete
from argcomplete.completers import FilesCompleter
from rich.console import Console
from rich.markup import escape

from provisioner.errors import InputError, ProvisionerError

if TYPE_CHECKING:  # heavy imports stay out of `provisioner --help`
    from provisioner.bringup import RunOptions
    from provisioner.burnin import BurnIn
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


class _LazyChoices(Sequence[str]):
    """argparse ``choices`` read when a value is checked or the help is shown: the simulator's
    modules stay unimported for every command but ``sim`` (`plan` starts faster)."""

    def __init__(self, load: Callable[[], Sequence[str]]) -> None:
        self._load = load
        self._items: tuple[str, ...] | None = None

    def _get(self) -> tuple[str, ...]:
        if self._items is None:
            self._items = tuple(self._load())
        return self._items

    def __contains__(self, value: object) -> bool:
        return value in self._get()

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __getitem__(self, index: Any) -> Any:
        return self._get()[index]


def _fault_help() -> str:
    from provisioner.sim.faults import help_text

    return help_text()


def _node_oses() -> Sequence[str]:
    from provisioner.sim.image import NODE_OSES

    return NODE_OSES


class _VersionAction(argparse.Action):
    """``--version``: computed only when asked (it reads galaxy.yml and imports ansible)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        print("\n".join(f"{name} {version}" for name, version in versions().items()))
        parser.exit(EXIT_OK)


def versions() -> dict[str, str]:
    """This package, the collection it runs (galaxy.yml of ``collection_root()``), and the
    ansible-core it drives."""
    from importlib import metadata

    import yaml

    from provisioner.paths import COLLECTION_FQCN, collection_root

    def dist(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    galaxy = collection_root() / "galaxy.yml"
    try:
        collection = str(yaml.safe_load(galaxy.read_text())["version"])
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise InputError(f"{galaxy}: no readable collection version ({exc})") from exc
    return {"provisioner": dist("gpu-cluster-provisioner"),
            COLLECTION_FQCN: f"{collection} ({galaxy.parent})",
            "ansible-core": dist("ansible-core")}


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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="provisioner", description="Bring up a multi-node GPU cluster and prove "
                "it works (Ansible, driven by ansible-runner).")
    p.add_argument("--version", action=_VersionAction,
                   help="print the versions of provisioner, its Ansible collection and "
                   "ansible-core, then exit")
    _global_options(p, command=False)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    up = sub.add_parser("up", help="validate, preflight, install the stack, check, "
                        "monitoring, smoke job")
    up.add_argument("--inventory", "-i", required=True)
    up.add_argument("--limit", help="Ansible host pattern to restrict the run to")
    up.add_argument("--skip-smoke", action="store_true", help="do not run the smoke job")
    _framework_option(up)
    up.add_argument("--yes", "-y", action="store_true",
                    help="do not ask before changing real (non-simulated) hosts")
    up.add_argument("--timeout", type=_seconds, default=7200, help="per-phase timeout (s)")
    up.add_argument("--reboot", action="store_true",
                    help="reboot nodes whose new driver needs it (default: report them)")
    up.add_argument("--batch-size", type=_batch_size, default=None, metavar="N|P%",
                    help="with --reboot: how many nodes reboot at once, N or P%% of the nodes "
                    "the run targets, rounded up (default 10%%); a node that does not come "
                    "back is reported and the others go on")
    up.add_argument("--reboot-timeout", type=_seconds, default=None, metavar="SECONDS",
                    help="with --reboot: how long a node may take to come back (default 1800)")
    up.add_argument("--retry-failed", metavar="RUN",
                    help="resume run RUN (its id, or its directory under the runs dir): rerun "
                    "only the hosts it lost, from the phase they stopped in, then validate "
                    "and the smoke job on the whole cluster")
    up.add_argument("--max-fail", type=_max_fail, default=None, metavar="N|P%",
                    help="how many nodes (or what share of them) the run may lose, failed or "
                    "unreachable, and go on with the others (default: 0 up to 8 nodes, else "
                    "5%%); the run still exits 1 and the report names every lost node")
    up.add_argument("--check", action="store_true",
                    help="dry run (ansible --check): report what would change, change nothing")
    up.add_argument("--fast", action="store_true",
                    help="run the phases with Mitogen for Ansible (strategy mitogen_linear): "
                    "fewer round trips per task; the report says which strategy ran")
    _executor_options(up)
    _json_option(up, "the run's report")

    upg = sub.add_parser("upgrade", help="another stack on the GPU nodes, a batch at a time: "
                         "drain in Slurm, wait for the jobs, install, validate, resume")
    upg.add_argument("--inventory", "-i", required=True)
    upg.add_argument("--stack", required=True,
                     help="the stack every GPU node gets (provisioner stacks); planned and "
                     "checked like gpu_stack before any host is touched")
    upg.add_argument("--batch-size", type=_batch_size, default="1", metavar="N|P%",
                     help="nodes upgraded at a time: N nodes or P%% of the GPU nodes, rounded "
                     "up (default 1)")
    upg.add_argument("--drain-timeout", type=_seconds, default=3600, metavar="SECONDS",
                     help="how long to wait for the jobs on a drained batch to end; then the "
                     "upgrade stops, the batch stays drained (default 3600)")
    upg.add_argument("--force", action="store_true",
                     help="cancel the jobs still running on a batch after --drain-timeout "
                     "(scancel) instead of stopping")
    upg.add_argument("--max-failed-batches", type=_count, default=1, metavar="N",
                     help="stop after N failed batches; later batches are not touched "
                     "(default 1)")
    upg.add_argument("--reboot", action="store_true",
                     help="reboot nodes whose new driver needs it (default: report them)")
    upg.add_argument("--yes", "-y", action="store_true",
                     help="do not ask before changing real (non-simulated) hosts")
    upg.add_argument("--timeout", type=_seconds, default=7200, help="per-phase timeout (s)")
    _json_option(upg, "the run's report")

    stacks = sub.add_parser("stacks", help="the matrix of known-good stacks; `stacks verify` "
                            "checks its pins against a repository's own index")
    stacks.add_argument("action", nargs="?", choices=["list", "show", "verify"], default="list")
    stacks.add_argument("name", nargs="?", help="the stack to show")
    stacks.add_argument("--index", metavar="DIR|URL",
                        help="verify: an apt repository's directory (Packages[.gz]) or a dnf "
                             "repository's (repodata/)")
    stacks.add_argument("--os", dest="os_dir", metavar="OS",
                        help="verify: the OS whose pins to check (debian12, ubuntu2404, rhel9, "
                             "...); default: the OS directory the index path names")
    stacks.add_argument("--stack", dest="only_stack", metavar="NAME",
                        help="verify: this stack only")
    _json_option(stacks, "the list, the stack or the verification")

    profs = sub.add_parser("profiles", help="the hardware profiles (GPU, minimum driver, "
                           "fabric); `profiles detect` writes one from a machine's tools")
    profs.add_argument("action", nargs="?", choices=["list", "detect"], default="list")
    profs.add_argument("files", nargs="*", metavar="FILE",
                       help="detect: saved outputs of one machine (nvidia-smi -q -x, the plain "
                       "nvidia-smi table, nvidia-smi nvlink -s, nvidia-smi topo -m, ibstat, "
                       "ibv_devinfo, a flattened /sys/class/infiniband), recognised by content")
    profs.add_argument("--inventory", "-i",
                       help="detect: read a live node of this inventory instead (read-only)")
    profs.add_argument("--limit", metavar="HOST", help="detect --inventory: the node")
    profs.add_argument("--name", help="detect: the profile's name (default: site-profile)")
    profs.add_argument("--output", "-o", metavar="FILE",
                       help="detect: write the profile YAML here (default: standard output)")
    _json_option(profs, "the list, or what detect found")

    insp = sub.add_parser("inspect", help="parse saved outputs (nvidia-smi -q -x, nvlink -s, "
                          "topo -m, ibstat, IB sysfs dump, the plain nvidia-smi table, "
                          "ibv_devinfo, "
                          "all_reduce_perf, dmesg, dcgmi diag)")
    insp.add_argument("files", nargs="+")
    insp.add_argument("--profile", help="also judge the facts against this hardware profile")
    _json_option(insp, "the parsed facts (and checks)")

    smk = sub.add_parser("smoke", help="run the distributed smoke job only")
    smk.add_argument("--inventory", "-i", required=True)
    smk.add_argument("--limit")
    smk.add_argument("--timeout", type=_seconds, default=1800, help="phase timeout (s)")
    smk.add_argument("--launcher", choices=["direct", "slurm"], default=None,
                     help="how the job starts: srun through Slurm (the default when the "
                     "inventory has Slurm) or torchrun on every node directly")
    _framework_option(smk)
    _json_option(smk, "the run's report")

    val = sub.add_parser("validate", help="check every GPU node against its hardware profile "
                         "(read-only)")
    val.add_argument("--inventory", "-i", required=True)
    val.add_argument("--limit")
    _executor_options(val)
    _json_option(val, "the run's report")

    hlt = sub.add_parser("health", help="run every GPU node's health command (gpuc-health) "
                         "in parallel, one table; exit status: the worst node's (0 healthy, "
                         "1 degraded, 2 unhealthy, 3 could not check)")
    hlt.add_argument("--inventory", "-i", required=True)
    hlt.add_argument("--limit")
    hlt.add_argument("--timeout", type=_seconds, default=300, help="run timeout (s)")
    _json_option(hlt, "every node's verdict")

    cert = sub.add_parser("certify", help="measure the network between pairs of nodes (TCP "
                          "both ways at once, rounds of disjoint pairs) and name the node or "
                          "link that is slow in every pair it is in; read-only unless --drain; "
                          "exit 1 when there is a suspect")
    cert.add_argument("--inventory", "-i", required=True)
    cert.add_argument("--drain", action="store_true",
                      help="with Slurm: drain each suspect node, the check as the reason")
    cert.add_argument("--margin", type=float, default=25.0, metavar="PERCENT",
                      help="how far below the fleet's median best pair a node or link is a "
                           "suspect (default 25: one short TCP measurement per pair varies by "
                           "up to about 15%% between healthy nodes)")
    cert.add_argument("--outlier-margin", type=float, default=10.0, metavar="PERCENT",
                      help="flag (warn, not fail) a node this far below the fleet's median "
                           "best pair, and beyond 3 robust standard deviations of the fleet's "
                           "spread, or this far below the median of its own recent runs "
                           "(default 10)")
    cert.add_argument("--seconds", type=_seconds, default=4,
                      help="how long each pair sends (default 4)")
    cert.add_argument("--level", choices=["quick", "burn-in"], default="quick",
                      help="quick (default): the pairs alone; burn-in: then every GPU node runs "
                           "DCGM's diagnostic (level 3), copy bandwidth per GPU (nvbandwidth or "
                           "PyTorch), a sustained load sampled for hardware clock slowdown, an "
                           "NCCL all-reduce soak and an Xid check; a failure names the GPU")
    cert.add_argument("--burn-seconds", type=_seconds, default=60,
                      help="with --level burn-in: how long the sustained load and the NCCL "
                           "soak each run (default 60)")
    _json_option(cert, "the certify section of the run's report")

    rem = sub.add_parser("remediate", help="take the drained GPU nodes back into service: reset "
                         "their GPUs (reboot with --reboot where that fails), validate, resume "
                         "in Slurm only the nodes that pass; the others stay drained with why")
    rem.add_argument("--inventory", "-i", required=True)
    rem.add_argument("--reboot", action="store_true",
                     help="reboot a node whose GPUs cannot be reset (a batch at a time, "
                          "withheld once one does not come back)")
    rem.add_argument("--any-reason", action="store_true",
                     help="also take nodes drained for a reason the provisioner did not write "
                          "(by default those are left as they are)")
    rem.add_argument("--timeout", type=_seconds, default=3600, help="run timeout (s)")
    rem.add_argument("--yes", "-y", action="store_true",
                     help="do not ask for confirmation before changing real hosts")
    _json_option(rem, "the run's report")

    hist = sub.add_parser("history", help="each node's certify figures over its runs (the "
                          "ledger under the runs directory)")
    hist.add_argument("--host", help="one node's figures only")
    _json_option(hist, "the figures by node")

    plan = sub.add_parser("plan", help="validate the inventory and show the resolved stack "
                          "per host (no host contact)")
    plan.add_argument("--inventory", "-i", required=True)
    plan.add_argument("-o", "--output", metavar="PATH",
                      help="also write the plan as an inventory file, for plain "
                      "ansible-playbook: -i INVENTORY -i PATH playbooks/site.yml")
    _json_option(plan, "the plan")

    exp = sub.add_parser("export", help="hand the planned cluster over to another system "
                         "(files only, no host contact)")
    expsub = exp.add_subparsers(dest="export_command", metavar="TARGET", required=True,
                                parser_class=_Parser)
    k8s = expsub.add_parser("k8s", help="Kubernetes: node labels, a kubectl label script and "
                            "GPU Operator Helm values for nodes that already have the driver, "
                            "container toolkit and DCGM")
    k8s.add_argument("--inventory", "-i", required=True)
    k8s.add_argument("-o", "--output", metavar="DIR", default="k8s-handoff",
                     help="the directory to write node-labels.yaml, label-nodes.sh and "
                     "gpu-operator-values.yaml into (created if missing; those files are "
                     "overwritten; default: ./k8s-handoff)")
    _json_option(k8s, "the files written and the labels")

    rep = sub.add_parser("report", help="show a saved report")
    rep.add_argument("run_id", nargs="?")
    rep.add_argument("--html", action="store_true",
                     help="write the run's page, index.html beside its report.json (one "
                     "self-contained file: phases, checks, busbw charts, certify heatmap and "
                     "trends; no scripts, nothing fetched), print its path and exit 0")
    _json_option(rep, "the saved report.json (with --html: the page's path)")

    sim = sub.add_parser("sim", help="the local simulated cluster (podman)")
    simsub = sim.add_subparsers(dest="sim_command", required=True, parser_class=_Parser)
    simup = simsub.add_parser("up", help="start (or reuse) the simulated cluster",
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    simup.lazy_epilog = _fault_help
    simup.add_argument("--nodes", type=int, default=3,
                       help="total nodes: 1 CPU login node + N-1 GPU nodes (default 3); "
                       "--nodes 1 is a single GPU node")
    simup.add_argument("--profile", default="sim-h100-8gpu")
    simup.add_argument("--fault", action="append", default=[], metavar="[NODE:]FAULT",
                       help="inject a simulated fault on every GPU node (gpu3-nvlink-down) or one "
                       "(sim-gpu-2:gpu3-nvlink-down); repeatable; the faults are listed below")
    simup.add_argument("--inventory-dir", default=None,
                       help="where to write hosts.yml (default: inventories/sim)")
    simup.add_argument("--recreate", action="store_true")
    simup.add_argument("--os", default="debian12", choices=_LazyChoices(_node_oses),
                       metavar="OS",
                       help="the OS of every node: %(choices)s (default debian12); the others "
                       "are imitated on a Debian userland")
    simsub.add_parser("down", help="remove the simulated cluster's containers and network")
    simexec = simsub.add_parser("executors", help="replace the simulated executors (for `up "
                                "--executors`) beside the running simulated cluster")
    simexec.add_argument("--count", type=int, default=2,
                         help="how many (default 2; 0 removes them)")
    _finish(p)
    return p


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield child
                yield from _subparsers(child)


# The commands that read profiles or stacks, and so take --site (provisioner/site.py).
SITE_COMMANDS = frozenset(("up", "upgrade", "stacks", "profiles", "inspect", "smoke", "validate",
                           "health", "certify", "remediate", "plan", "export k8s", "sim up"))

# Completers by destination, so a new command's --inventory or --profile completes too.
_COMPLETERS: dict[str, Callable[..., Any]] = {
    "inventory": FilesCompleter(),
    "inventory_dir": FilesCompleter(directories=True),
    "site": FilesCompleter(directories=True),
    "output": FilesCompleter(),
    "files": FilesCompleter(),
}


def _finish(parser: argparse.ArgumentParser) -> None:
    """Give every command -v/-q and the completers of its arguments."""
    completers = {**_COMPLETERS, "profile": profile_names, "stack": stack_names,
                  "only_stack": stack_names}
    for child in _subparsers(parser):
        if not any("--verbose" in a.option_strings for a in child._actions):
            _global_options(child, command=True)
        if child.prog.split(" ", 1)[-1] in SITE_COMMANDS:
            child.add_argument("--site", metavar="DIR", default=None,
                               help="the site's own profiles.yml and stacks.yml, added to the "
                               "built-in ones (default: site/ beside the inventory, when it "
                               "has either)")
        for action in child._actions:
            completer = stack_names if (child.prog.endswith(" stacks")
                                        and action.dest == "name") else completers.get(
                                            action.dest)
            if completer is not None:
                # argcomplete reads a `completer` attribute off the argparse action.
                vars(action)["completer"] = completer


def stack_names(**_: Any) -> list[str]:
    """Completer for ``stacks show NAME``."""
    from provisioner import matrix as stacks

    return [s.name for s in stacks.load_matrix().stacks_by_cuda()]


def profile_names(**_: Any) -> list[str]:
    """Completer for ``--profile``."""
    from provisioner.profiles import load_profiles

    return sorted(load_profiles())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        # Options are offered once a `-` is typed, as bash completes other tools.
        argcomplete.autocomplete(parser, always_complete_options=False)
        args = parser.parse_args(argv)
        return _dispatch(args)
    except ProvisionerError as exc:
        errconsole.print(f"[bold red]error:[/bold red] {escape(_one_line(str(exc)))}",
                         soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        signum = int(getattr(exc, "signum", signal.SIGINT))
        saved = getattr(exc, "report_path", None)
        where = f"; report saved: {saved}" if saved else ""
        errconsole.print(escape(f"error: interrupted by {signal.Signals(signum).name}{where}"),
                         soft_wrap=True)
        return 128 + signum
    except Exception as exc:  # a bug of ours: say so in one line, details on request
        if os.environ.get("PROVISIONER_DEBUG"):
            raise
        what = escape(_one_line(f"{type(exc).__name__}: {exc}"))
        errconsole.print(f"[bold red]internal error:[/bold red] {what} "
                         "(rerun with PROVISIONER_DEBUG=1 for the traceback)", soft_wrap=True)
        return EXIT_FAILED


def _one_line(text: str) -> str:
    """An error line: no terminal control sequences (it may quote a host's text), no
    credentials, one line."""
    from provisioner.untrusted import printable, redact

    return " ".join(redact(printable(text)).split())


def _dispatch(args: argparse.Namespace) -> int:
    if args.verbose and args.quiet:
        raise InputError("-v/--verbose and -q/--quiet exclude each other: give one of them")
    from provisioner import site

    site.activate(site.resolve(getattr(args, "site", None),
                               getattr(args, "inventory", None)
                               or getattr(args, "inventory_dir", None)))
    if args.command == "plan":
        return _plan(args)
    if args.command == "up":
        return _up(args)
    if args.command == "upgrade":
        return _upgrade(args)
    if args.command == "validate":
        return _validate(args)
    if args.command == "smoke":
        return _smoke(args)
    if args.command == "health":
        return _health(args)
    if args.command == "certify":
        return _certify(args)
    if args.command == "history":
        return _history(args)
    if args.command == "remediate":
        return _remediate(args)
    if args.command == "export":
        return _export(args)
    if args.command == "report":
        return _report(args)
    if args.command == "sim":
        return _sim(args)
    if args.command == "stacks":
        return _stacks(args)
    if args.command == "profiles":
        return _profiles(args)
    if args.command == "inspect":
        return _inspect(args)
    raise InputError(f"unknown command {args.command}")


def _chatter(args: argparse.Namespace) -> Console:
    """Where progress, banners and notices go: beside the results, on stderr under --json,
    nowhere under -q."""
    if args.quiet:
        return _silent
    return errconsole if getattr(args, "json", False) else console


def _plan(args: argparse.Namespace) -> int:
    from provisioner import render

    cp = _build(args.inventory)
    written = _write_plan(cp, Path(args.output)) if args.output is not None else None
    tag = " (SIMULATED)" if cp.simulated else ""
    verdict = (f"inventory OK{tag}: {len(cp.hosts)} host(s), "
               f"{len(cp.inventory.gpu_hosts)} GPU node(s)")
    if args.json:
        print(render.as_json({
            "inventory": str(cp.inventory.source),
            "simulated": cp.simulated,
            "plan_inventory": str(written) if written else None,
            "hosts": [{"host": name, "kind": h.kind,
                       "profile": h.profile.name if h.profile else None,
                       "variables": h.variables()} for name, h in cp.hosts.items()],
        }))
        _chatter(args).print(escape(verdict))
    elif not args.quiet:
        render.plan(console, _plan_rows(cp), cp.simulated)
        if args.verbose:
            import yaml

            for name, h in cp.hosts.items():
                console.print(escape(f"{name}:\n" + yaml.safe_dump(h.variables(),
                                                                   sort_keys=True)))
    if not args.json:
        console.print(escape(verdict))
    if written:
        (errconsole if args.json else console).print(
            escape(f"plan inventory written to {written}: ansible-playbook -i "
                   f"{args.inventory} -i {written} playbooks/site.yml"), soft_wrap=True)
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    """`export k8s`: plan as `plan` does, then write the Kubernetes hand-off files."""
    from provisioner import k8s, render

    cp = _build(args.inventory)
    handoff = k8s.write_handoff(cp, Path(args.output))
    out = _chatter(args)
    if args.json:
        print(render.as_json({"inventory": str(cp.inventory.source),
                              "simulated": cp.simulated, **handoff.to_dict()}))
    elif not args.quiet:
        rows = [{"node": host, **{key.rpartition("/")[2]: value for key, value in labels.items()}}
                for host, labels in handoff.labels.items()]
        if len(rows) > render.MAX_PLAN_ROWS and not args.verbose:
            render.rows_table(console, f"Kubernetes node labels of {len(rows)} nodes, one row "
                              "per distinct set (-v lists every node)",
                              render.group_rows(rows, "node"))
        else:
            render.rows_table(console, "Kubernetes node labels", rows)
    for note in handoff.notes:
        out.print(escape(f"note: {note}"), soft_wrap=True)
    tag = " (SIMULATED)" if cp.simulated else ""
    verdict = (f"Kubernetes hand-off{tag} for {len(handoff.labels)} GPU node(s) written to "
               f"{args.output}: {', '.join(handoff.files)}; apply with "
               f"sh {Path(args.output) / k8s.LABEL_SCRIPT} and helm install --values "
               f"{Path(args.output) / k8s.VALUES_FILE}")
    (out if args.json else console).print(escape(verdict), soft_wrap=True)
    return EXIT_OK


def _plan_rows(cp: ClusterPlan) -> list[dict[str, str]]:
    rows = []
    for name, h in cp.hosts.items():
        v = h.stack.as_vars() if h.stack else {}
        rows.append({
            "host": name, "kind": h.kind,
            "profile": h.profile.name if h.profile else "-",
            "stack": str(v.get("gpu_stack", "-")),
            "driver": f"{v.get('nvidia_driver_version', '-')} "
                      f"({v.get('nvidia_driver_module_flavor', '-')})" if v else "-",
            "cuda": str(v.get("cuda_toolkit_version", "-")),
            "cudnn": str(v.get("cudnn_version", "-")),
            "nccl": str(v.get("nccl_version", "-")),
            "ctk": str(v.get("nvidia_container_toolkit_version", "-")),
            "fabric mgr": (str(v.get("nvidia_fabricmanager_version"))
                           if v.get("nvidia_fabricmanager_enabled") else "-"),
        })
    return rows


def _write_plan(cp: ClusterPlan, path: Path) -> Path:
    """The plan as an inventory file; an unwritable path is bad input (exit 2)."""
    if path.is_dir():
        raise InputError(f"plan -o {path}: is a directory; name a file, e.g. {path / 'plan.yml'}")
    try:
        return cp.write_inventory(path)
    except OSError as exc:
        raise InputError(f"plan -o {path}: cannot write the plan inventory "
                         f"({exc.strerror or exc})") from exc


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


def _up(args: argparse.Namespace) -> int:
    from provisioner import bringup

    if not args.reboot and (args.batch_size or args.reboot_timeout):
        raise InputError("--batch-size and --reboot-timeout say how `up --reboot` reboots: "
                         "add --reboot, or leave them out")
    cp = _build(args.inventory)
    executors, limit_hosts = _executors(args, cp)
    if args.fast:
        from provisioner.runner import use_fast

        use_fast()
    _confirm(args, cp, f"Provision {len(cp.hosts)} host(s) from {args.inventory}?")
    from provisioner import slurm

    scheduler = (slurm.SCHEDULER_PHASE,) if slurm.configured(cp) else ()
    phases = (*bringup.UP_PHASES, *scheduler) if args.skip_smoke or args.check else (
        *bringup.UP_PHASES, *scheduler, bringup.SMOKE_PHASE)
    retry = _retry(args, str(cp.inventory.source), [name for name, _ in phases])
    if retry is not None:
        phases = phases[[name for name, _ in phases].index(retry.phase):]
    options = bringup.RunOptions(
        limit=args.limit, timeout_s=args.timeout, check_mode=args.check, reboot_ok=args.reboot,
        reboot_batch=args.batch_size, reboot_timeout_s=args.reboot_timeout,
        max_fail=args.max_fail, launcher=slurm.choose_launcher(cp, None),
        framework=args.framework, retry_hosts=retry.hosts if retry else (),
        executors=executors, limit_hosts=limit_hosts)
    return _run(args, cp, "up", phases, options, resumes=retry)


def _executors(args: argparse.Namespace, cp: ClusterPlan) -> tuple[Any, tuple[str, ...] | None]:
    """`up --executors`: parsed, the --limit resolved to hosts (the shards are host lists),
    and every executor asked over ssh whether it can run a phase, before any node is touched."""
    if not args.executors:
        if args.executor_ssh_config:
            raise InputError("--executor-ssh-config says how to reach --executors: add "
                             "--executors, or leave it out")
        return None, None
    if getattr(args, "fast", False):
        raise InputError("--fast and --executors do not go together yet (Mitogen runs on the "
                         "controller only): leave one out")
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


def _upgrade(args: argparse.Namespace) -> int:
    """`upgrade`: the plan with --stack on every GPU node (refused like `up` would refuse it,
    before any host is touched), then the batches."""
    from functools import partial

    from provisioner import bringup, slurm, upgrade

    cp = _build(args.inventory, stack=args.stack)
    slurm.configured(cp)  # slurm_enabled without a host for slurmctld: refused here, not midway
    _confirm(args, cp, f"Upgrade {len(cp.inventory.gpu_hosts)} GPU node(s) of "
             f"{args.inventory} to {args.stack}, {args.batch_size} at a time?")
    settings = upgrade.UpgradeSettings(
        stack=args.stack, batch_size=args.batch_size, drain_timeout_s=args.drain_timeout,
        force=args.force, max_failed_batches=args.max_failed_batches)
    options = bringup.RunOptions(timeout_s=args.timeout, reboot_ok=args.reboot)
    return _run(args, cp, "upgrade", upgrade.BATCH_PHASES, options,
                execute=partial(upgrade.run, settings=settings))


def _retry(args: argparse.Namespace, inventory: str, phase_names: list[str]) -> Any:
    """`--retry-failed RUN`: the saved run's lost hosts and where they stopped (or None)."""
    if not args.retry_failed:
        return None
    from provisioner import bringup, report

    if args.limit:
        raise InputError("--retry-failed picks the hosts itself: drop --limit")
    run_id = Path(args.retry_failed.rstrip("/")).name
    if run_id == "report.json":
        run_id = Path(args.retry_failed).parent.name
    retry = bringup.retry_of(report.load(run_id), inventory)
    if retry.phase not in phase_names:
        raise InputError(f"run {retry.run_id} lost its hosts in {retry.phase}, which this run "
                         "does not have (drop --skip-smoke?)")
    return retry


def _stacks(args: argparse.Namespace) -> int:
    from provisioner import matrix as stacks
    from provisioner import render

    matrix = stacks.load_matrix()
    if args.action == "verify":
        return _stacks_verify(args, matrix)
    if args.index or args.os_dir or args.only_stack:
        raise InputError("--index, --os and --stack belong to `provisioner stacks verify`")
    if args.action == "show":
        if not args.name:
            raise InputError("stacks show: name a stack, e.g. `provisioner stacks show "
                             f"{matrix.default_stack}`")
        from provisioner.profiles import load_profiles

        detail = stacks.stack_detail(matrix, args.name, load_profiles())
        if args.json:
            print(render.as_json(detail))
        else:
            render.mapping(console, f"stack {args.name}", detail)
        return EXIT_OK
    if args.name:
        raise InputError(f"stacks list takes no name (got {args.name!r}); to see one stack: "
                         f"`provisioner stacks show {args.name}`")
    rows = _with_source(stacks.stack_rows(matrix), "stack", stacks.stack_sources())
    if args.json:
        print(render.as_json(rows))
    else:
        render.rows_table(console, f"known-good stacks ({_data_title('stacks.yml')})",
                          _shown(rows))
    return EXIT_OK


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


def _stacks_verify(args: argparse.Namespace, matrix: Any) -> int:
    """Every pin of the matrix for one OS against a repository's index: one line per problem,
    a summary table (or --json); exit 1 when a pin is missing."""
    from provisioner import render
    from provisioner.matrix import index as index_mod
    from provisioner.matrix import verify as verify_mod

    if args.name:
        raise InputError(f"stacks verify takes no name (got {args.name!r}); to check one stack: "
                         f"--stack {args.name}")
    if not args.index:
        raise InputError("stacks verify: give --index DIR|URL, the repository whose index the "
                         "pins are checked against")
    os_dir = args.os_dir or verify_mod.infer_os(matrix, args.index)
    if os_dir is None:
        raise InputError(f"stacks verify: the index path {args.index} names no OS of stacks.yml; "
                         f"give --os (one of {', '.join(sorted(matrix.repositories.cuda))})")
    result = verify_mod.verify(matrix, index_mod.load_index(args.index), os_dir,
                               args.only_stack)
    if args.json:
        print(render.as_json(result.as_dict()))
    else:
        for check in result.checks:
            if check.status != "present":
                console.print(escape(check.line(os_dir)), soft_wrap=True)
        render.rows_table(console, f"pins of {os_dir} against {args.index}", result.summary())
        if result.not_carried:
            console.print(escape(f"not in this repository (check them against its own): "
                                 f"{', '.join(result.not_carried)}"), soft_wrap=True)
    missing = len(result.missing)
    verdict = (f"{missing} pin(s) missing from the index" if missing
               else f"every pin of {os_dir} is in the index")
    (errconsole if args.json else console).print(escape(verdict))
    return EXIT_FAILED if missing else EXIT_OK


def _profiles(args: argparse.Namespace) -> int:
    from provisioner import matrix as stacks
    from provisioner import render
    from provisioner.profiles import load_profiles, profile_sources

    if args.action == "detect":
        return _profiles_detect(args)
    if args.files or args.inventory or args.limit or args.name or args.output:
        raise InputError("FILE, --inventory, --limit, --name and --output belong to "
                         "`provisioner profiles detect`")

    matrix = stacks.load_matrix()
    rows = []
    sources = profile_sources()
    for name, p in sorted(load_profiles().items()):
        arch = matrix.architectures.get(p.architecture)
        branch = f"R{arch.min_driver_branch}" if arch is not None else "-"
        rows.append({
            "profile": name, "gpu": f"{p.gpu_count}x {p.gpu_model}",
            "pci_ids": ", ".join(p.pci_device_ids), "architecture": p.architecture,
            "min_driver": p.min_driver or f"{branch} (architecture)",
            "nvswitch": f"gen {p.nvswitch_generation}" if p.nvswitch_generation else "no",
            "fabric": f"{p.ib_hcas}x {p.ib_rate_gbps} Gb/s {p.fabric}" if p.ib_hcas else p.fabric,
            "simulated": "yes" if p.simulated else "",
            "source": sources.get(name, "built-in"),
        })
    if args.json:
        print(render.as_json(rows))
    else:
        render.rows_table(console, f"hardware profiles ({_data_title('profiles.yml')})",
                          _shown(rows))
    return EXIT_OK


def _profiles_detect(args: argparse.Namespace) -> int:
    """A profile from saved outputs or a live node: YAML on stdout (or -o), what it could not
    see on stderr, one line each."""
    from provisioner import detect, render

    name = args.name or "site-profile"
    if bool(args.files) == bool(args.inventory):
        raise InputError("profiles detect: give saved output FILEs or --inventory X --limit "
                         "HOST, one of the two")
    if args.inventory:
        from provisioner import detect_node

        with _display_factory(args)("detect (detect.yml)") as progress:
            node = detect_node.detect_node(Path(args.inventory), args.limit, name, progress)
        found, where = node.detected, f"{node.host} (outputs kept in {node.run_dir})"
        for key, why in node.silent.items():
            errconsole.print(escape(f"{node.host}: {key} {why}"), soft_wrap=True)
    else:
        found, where = detect.detect_profile([Path(f) for f in args.files], name), "the files"
    text = detect.render_profile_yaml(found, name)
    if args.json:
        print(render.as_json({"name": name, "from": where, "facts": found.facts,
                              "sources": found.sources, "missing": found.missing,
                              "reasons": found.reasons, "withheld": found.withheld,
                              "unused": found.unused}))
    elif args.output:
        from provisioner.report import write_private

        write_private(Path(args.output), text)
        errconsole.print(escape(f"profile {name} written to {args.output}, read from {where}"),
                         soft_wrap=True)
    else:
        print(text, end="")
    for field_name in found.missing:
        why = found.withheld.get(field_name) or found.reasons.get(field_name) or "not shown"
        errconsole.print(escape(f"not detected: {field_name}: {why}"), soft_wrap=True)
    for unused in found.unused:
        errconsole.print(escape(f"not used: {unused} (says nothing of a profile)"),
                         soft_wrap=True)
    return EXIT_OK


def _inspect(args: argparse.Namespace) -> int:
    from provisioner import render
    from provisioner.inspect import check_against_profile, inspect_file

    profile = None
    if args.profile:
        from provisioner.profiles import load_profiles

        profiles = load_profiles()
        if args.profile not in profiles:
            raise InputError(f"inspect: unknown --profile {args.profile!r}; choose one of "
                             f"{', '.join(sorted(profiles))}")
        profile = profiles[args.profile]
    results = [inspect_file(Path(f)) for f in args.files]
    failed = 0
    if profile is not None:
        for result in results:
            result["checks"] = check_against_profile(result, profile)
            failed += sum(c["status"] == "fail" for c in result["checks"])
    if args.json:
        print(render.as_json(results if len(results) > 1 else results[0]))
        return EXIT_FAILED if failed else EXIT_OK
    if not args.quiet:
        for result in results:
            render.mapping(console, f"{result['file']} ({result['format']})", result["facts"])
            if result.get("checks"):
                render.rows_table(console, f"{result['file']} against {args.profile}",
                                  [{k: str(c.get(k, "")) for k in ("name", "status", "measured",
                                                                   "expected", "detail")}
                                   for c in result["checks"]])
    judged = f": {failed} check(s) failed against {args.profile}" if profile else ""
    console.print(escape(f"inspected {len(results)} file(s){judged}"))
    return EXIT_FAILED if failed else EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    from provisioner import bringup

    cp = _build(args.inventory)
    executors, limit_hosts = _executors(args, cp)
    return _run(args, cp, "validate", bringup.VALIDATE_PHASES,
                bringup.RunOptions(limit=args.limit, executors=executors,
                                   limit_hosts=limit_hosts))


def _health(args: argparse.Namespace) -> int:
    from provisioner import health, render
    from provisioner import plan as plan_mod

    cp = plan_mod.build(args.inventory)
    if cp.simulated:
        render.simulated_banner(_chatter(args))
    with _display_factory(args)("health (health.yml)") as progress:
        summary = health.run(cp, progress, limit=args.limit, timeout_s=args.timeout)
    if args.json:
        print(render.as_json(summary.to_dict()))
    else:
        render.rows_table(console, f"node health (run {summary.run_id})", [
            {"node": n.host, "status": n.status_name,
             "failing": ", ".join(n.failing) or "-", "warnings": ", ".join(n.warnings) or "-",
             "detail": n.detail or "-"} for n in summary.nodes])
        console.print(f"worst: {health.STATUS_NAMES[summary.worst]} (exit {summary.worst})")
    return summary.worst


def _certify(args: argparse.Namespace) -> int:
    from provisioner import certify, render

    cp = _build(args.inventory)
    certify.check_input(cp, args.margin / 100, args.outlier_margin / 100, args.level)
    if cp.simulated:
        render.simulated_banner(_chatter(args))
    books = "certify.yml" + (", certify_burnin.yml" if args.level == certify.BURN_IN else "")
    with _display_factory(args)(f"certify ({books})") as progress:
        done = certify.run(cp, drain=args.drain, margin=args.margin / 100,
                           outlier_margin=args.outlier_margin / 100, seconds=args.seconds,
                           on_progress=progress, level=args.level,
                           burn_seconds=args.burn_seconds)
    section = done.report.certify or {}
    if args.json:
        print(render.as_json({"run_id": done.report.run_id, "simulated": cp.simulated,
                              "exit_code": done.report.exit_code, **section}))
        return done.report.exit_code
    render.rows_table(console, f"pairs, TCP both ways at once (run {done.report.run_id})", [
        {"round": str(p.round), "pair": f"{p.a} <-> {p.b}",
         "Gbit/s": f"{p.gbps:.3g}" if p.gbps is not None else "-",
         "detail": p.error or (f"measured again (first {p.first_gbps} Gbit/s)"
                               if p.retested else "-")} for p in done.pairs])
    reference = done.verdict.reference_gbps
    console.print(f"reference (median of each node's best pair): "
                  f"{reference:.3g} Gbit/s" if reference is not None else
                  "reference: nothing was measured")
    for s in done.verdict.suspects:
        console.print(f"SUSPECT {s.host} ({s.component}): {s.check} {s.measured} Gbit/s "
                      f"< {s.expected} Gbit/s; evidence: {'; '.join(s.evidence)}")
    if not done.verdict.suspects:
        console.print("no suspect: every node has a pair at the reference")
    if done.burn_in is not None:
        _certify_burn_in(done.burn_in)
    for node, reason in done.drained.items():
        console.print(f"drained {node} in Slurm: {reason}")
    for c in done.report.checks:
        if c.status == "warn":
            kind = c.name.rsplit(":", 1)[-1].upper()
            console.print(f"{kind} {escape(c.host)}: {escape(c.detail)}")
    console.print(f"report: {done.run_dir / 'report.json'}")
    return done.report.exit_code


def _certify_burn_in(burn: BurnIn) -> None:
    """The burn-in's checks that did not pass, one row each, and its suspects."""
    from provisioner import certify, render

    rows = [{"node": c.host, "check": c.name, "status": c.status.upper(),
             "detail": c.detail} for c in burn.checks if c.status != "pass"]
    passed = sum(c.status == "pass" for c in burn.checks)
    console.print(f"burn-in: {passed} of {len(burn.checks)} checks passed")
    render.rows_table(console, "burn-in checks that did not pass", rows)
    for s in certify.burn_in_suspects(burn):
        console.print(f"SUSPECT {escape(s.host)} ({s.component}): {s.check} measured "
                      f"{s.measured}, expected {s.expected}; {escape('; '.join(s.evidence))}")


def _remediate(args: argparse.Namespace) -> int:
    """`remediate`: the drained nodes reset, validated and resumed (see provisioner.remediate)."""
    from functools import partial

    from provisioner import bringup, remediate

    cp = _build(args.inventory)
    remediate.controller_of(cp)  # no Slurm: refused before anything starts
    _confirm(args, cp, f"Reset the GPUs of the drained nodes of {args.inventory} (reboot where "
             f"that fails: {'yes' if args.reboot else 'no'}) and resume those that validate?")
    settings = remediate.RemediateSettings(any_reason=args.any_reason, reboot=args.reboot)
    return _run(args, cp, "remediate", bringup.VALIDATE_PHASES,
                bringup.RunOptions(timeout_s=args.timeout, reboot_ok=args.reboot),
                execute=partial(remediate.run, settings=settings))


def _history(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from provisioner import history, render

    points = history.load(host=args.host)
    by_host = history.series(points)
    if args.host and not by_host:
        raise InputError(f"history: no certify figures for {args.host} under "
                         f"{history.ledger_path()}")
    if args.json:
        print(render.as_json({h: [asdict(p) for p in pts] for h, pts in by_host.items()}))
        return EXIT_OK
    if not by_host:
        console.print(f"no certify figures yet ({history.ledger_path()})")
        return EXIT_OK
    rows = [{"host": host, "run": p.run_id + (" (simulated)" if p.simulated else ""),
             "figure": f"{p.value:.3g} {p.unit}" if p.value is not None else "nothing measured",
             "fleet median": f"{p.reference:.3g}" if p.reference is not None else "-"}
            for host, pts in by_host.items() for p in pts]
    render.rows_table(console, f"certify figures by node (best pair, {history.ledger_path()})",
                      rows)
    for host, pts in by_host.items():
        ref = history.reference(pts[:-1])
        if ref is not None:
            console.print(escape(f"{host}: median of the {len(ref[1])} runs before the last: "
                                 f"{ref[0]:.3g} {pts[-1].unit}"))
    return EXIT_OK


def _smoke(args: argparse.Namespace) -> int:
    from provisioner import bringup, slurm

    cp = _build(args.inventory)
    return _run(args, cp, "smoke", (bringup.SMOKE_PHASE,),
                bringup.RunOptions(limit=args.limit, timeout_s=args.timeout,
                                   launcher=slurm.choose_launcher(cp, args.launcher),
                                   framework=args.framework))


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


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _on_stop_signal(signum: int, _frame: object) -> None:
    """Stop the run: while a playbook runs, the runner kills ansible-playbook's process group
    and the phase ends; otherwise stop here. Either way Interrupted reaches _run."""
    from provisioner import runner

    if runner.request_cancel(signum):
        return
    raise runner.Interrupted(signum)


@contextmanager
def _stop_signals() -> Iterator[None]:
    from provisioner import runner

    runner.reset_cancel()
    previous = {s: signal.signal(s, _on_stop_signal) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        runner.reset_cancel()


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
    from provisioner import runner

    bad = runner.insecure_env()
    if not bad:
        return
    off = set(runner.host_key_checking_off(
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
    from provisioner import bringup, render, runlock, runner
    from provisioner.report import runs_dir

    _refuse_insecure_env(cp)
    if args.verbose:
        # ansible-runner hands ANSIBLE_* variables to ansible-playbook (runner.passthrough_env);
        # its output lands in the run's artifacts, not on our console.
        os.environ.setdefault("ANSIBLE_VERBOSITY", str(min(args.verbose, 4)))
    lock = runlock.acquire(runs_dir(), cp.inventory, command)
    try:
        with _stop_signals():
            report, run_dir = bringup.start_report(cp, command)
            if resumes is not None:
                report.resumes, report.retried_hosts = resumes.run_id, list(resumes.hosts)
                report.notes.append(
                    f"resumes run {resumes.run_id}: {', '.join(resumes.hosts)} from "
                    f"{resumes.phase}, then {bringup.WHOLE_CLUSTER_FROM} and after on every node")
            if lock.stale:
                report.notes.append(
                    f"took over a stale lock of PID {lock.stale.get('pid')} (started "
                    f"{lock.stale.get('started_at', '?')}), which is no longer running")
            if cp.simulated:
                render.simulated_banner(_chatter(args))
            if report.host_key_checking_off:
                _chatter(args).print(escape(f"warning: {report.notes[0]}"), soft_wrap=True)
            try:
                ok = (execute or bringup.run_phases)(cp, report, run_dir, phases, options,
                                                     _display_factory(args))
            except runner.Interrupted as exc:
                with _signals_held():
                    report.notes.append(f"interrupted by {exc.name}: ansible-playbook was "
                                        "stopped; the phases after it did not run")
                    report.finish(128 + exc.signum, "interrupted")
                    vars(exc)["report_path"] = _save_quietly(report, run_dir)
                raise
            except BaseException as exc:
                with _signals_held():
                    code = exc.exit_code if isinstance(exc, ProvisionerError) else EXIT_FAILED
                    report.notes.append(f"the run stopped on an error: {type(exc).__name__}: "
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
        errconsole.print(escape(f"warning: {exc}"), soft_wrap=True)
        return None
    return str(path)


def show_report(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """A report as --json, -q (the verdict line only), or the full console view."""
    from provisioner import render

    if args.json:
        print(render.as_json(data))
    elif args.quiet:
        render.verdict(console, data)
    else:
        render.report(console, data, verbose=bool(args.verbose))


def _report(args: argparse.Namespace) -> int:
    from provisioner import report as report_mod

    data = report_mod.load(args.run_id)
    if args.html:
        return _report_html(args, data)
    show_report(args, data)
    return int(data.get("exit_code", 0))


def _report_html(args: argparse.Namespace, data: dict[str, Any]) -> int:
    """`report RUN --html`: the page beside the run's report.json; its path on stdout."""
    from provisioner import render, report_html
    from provisioner.report import runs_dir

    run_id = args.run_id or str(data["run_id"])
    run_dir = runs_dir() / run_id
    if Path(run_id).name != run_id or not (run_dir / "report.json").is_file():
        raise InputError(f"run {run_id!r}: no report.json under {runs_dir()} to draw a page "
                         "from (give the run id, the name of its directory)")
    path = report_html.write_page(run_dir, data)
    if args.json:
        print(render.as_json({"run_id": run_id, "html": str(path)}))
    else:
        print(path)
    return EXIT_OK


def _sim(args: argparse.Namespace) -> int:
    from provisioner.sim import cluster

    if args.sim_command == "down":
        n = cluster.down(lambda m: _chatter(args).print(escape(m)))
        console.print(f"simulated cluster removed ({n} container(s))")
        return EXIT_OK
    if args.sim_command == "executors":
        return _sim_executors(args)
    from provisioner.paths import workspace_root
    from provisioner.profiles import load_profiles

    profiles = load_profiles()
    if args.profile not in profiles:
        raise InputError(f"sim up: unknown --profile {args.profile!r}; choose one of "
                         f"{', '.join(sorted(profiles))}")
    if not 1 <= args.nodes <= 64:
        raise InputError("sim up: --nodes must be between 1 and 64")
    cpu_nodes = 1 if args.nodes >= 2 else 0
    spec = cluster.SimSpec(gpu_nodes=args.nodes - cpu_nodes, cpu_nodes=cpu_nodes,
                           profile=args.profile, faults=tuple(args.fault), os=args.os)
    inv_dir = Path(args.inventory_dir) if args.inventory_dir else (
        workspace_root() / "inventories" / "sim")
    sc = cluster.up(spec, inv_dir, profiles[args.profile].sim_json(),
                    progress=lambda m: _chatter(args).print(escape(m)), recreate=args.recreate)
    from provisioner import render

    render.simulated_banner(_chatter(args))
    for name, addr in sc.addresses.items():
        console.print(f"  {name:<14} {addr}")
    console.print(f"inventory: {inv_dir / 'hosts.yml'}")
    return EXIT_OK


def _sim_executors(args: argparse.Namespace) -> int:
    from provisioner.sim import executors

    addresses = executors.up(args.count, lambda m: _chatter(args).print(escape(m)))
    if not addresses:
        console.print("no simulated executor is running")
        return EXIT_OK
    for name, addr in addresses.items():
        console.print(f"  {name:<14} {addr}")
    console.print(escape(f"use: provisioner up ... --executors {','.join(addresses)} "
                         f"--executor-ssh-config {executors.ssh_config_path()}"))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
