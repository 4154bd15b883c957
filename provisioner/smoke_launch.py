"""Launching the distributed smoke job from the controller: the phase prepared in one call
(:func:`prepared`: the nodes' platforms, the wheelhouse, variables for the smoke_job role), and
turning the per-node results into report sections judged against the profile's busbw floors
(:func:`fold_results`)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from provisioner.busbw import CPU_SIZES, FLOOR_MIN_BYTES, GPU_SIZES, human_size
from provisioner.errors import EnvironmentProblem, InputError
from provisioner.plan import ClusterPlan
from provisioner.report import Check, Report
from provisioner.smoke_judge import NO_FLOOR_REASON, judge, load_smoke_result, training_name
from provisioner.wheelhouse import (
    NodePlatform,
    controller_platform,
    ensure_wheelhouse,
    framework_requirements,
    framework_subdir,
    platform_from_facts,
)
from provisioner.wheellock import (
    Lock,
    LockedWheel,
    load_lock,
    locked_wheels,
    merged,
    requirements_text,
    set_name,
)

SIM_NPROC_PER_NODE = 2
SIM_SOCKET_IFNAME = "eth0"
# gloo on a handful of CPU ranks needs seconds; a dead peer should end the job quickly.
SIM_TIMEOUT_S = 90


def _first_gpu_host(plan: ClusterPlan) -> str:
    return next(h for h, hp in plan.hosts.items() if hp.kind == "gpu")


@dataclass(frozen=True)
class FactsGathered:
    """What playbooks/facts.yml found for the smoke job (the phase runs the play and judges
    the nodes it lost): the job's limit without those nodes, the GPU nodes it reached, and what
    each node published (host -> report sections)."""

    limit: str | None
    gpu_hosts: list[str]
    reports: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class SmokeLaunch:
    """What smoke.yml runs with: the smoke_job role's variables and the nodes it runs on."""

    extravars: dict[str, Any]
    limit: str | None


@contextlib.contextmanager
def prepared(plan: ClusterPlan, report: Report, run_dir: Path, limit: str | None,
             gather: Callable[[], FactsGathered | None], *, launcher: str = "direct",
             framework: str = "pytorch", container: str | None = None,
             cache: Path | None = None) -> Iterator[SmokeLaunch | None]:
    """The smoke phase made ready, for as long as the ``with`` lasts (the wheelhouse is served
    that long). Unless the inventory names a site index (:func:`builds_wheelhouse`), ``gather``
    first reads the GPU nodes' platforms afresh: the wheelhouse is built for what they publish
    now (a note names the nodes that publish none), with each platform's locked requirements,
    and the job leaves out the nodes it lost. None when ``gather`` finds no node to run on (its
    note is in the report). ``cache``: where a wheelhouse the controller serves is built
    (default: the provisioner's cache directory)."""
    from provisioner.paths import cache_dir

    platforms: list[NodePlatform] = []
    locked: dict[str, str] = {}
    if builds_wheelhouse(plan):
        gathered = gather()
        if gathered is None:
            yield None
            return
        platforms, notes = platforms_of(gathered.reports, gathered.gpu_hosts)
        report.add_notes(notes)
        limit = gathered.limit
        locked = locked_requirements(plan, platforms, framework)
    with wheelhouse_url(plan, cache or cache_dir(), platforms, framework=framework) as url:
        yield SmokeLaunch(extravars(plan, report.run_id, run_dir, url, launcher=launcher,
                                    framework=framework, locked=locked, container=container),
                          limit)


def builds_wheelhouse(plan: ClusterPlan) -> bool:
    """False when the inventory names a site index (``smoke_job_pip_index_url``): nodes install
    from there, so no wheelhouse is built and the nodes' platforms do not matter."""
    return not plan.inventory.hosts[_first_gpu_host(plan)].vars.get("smoke_job_pip_index_url")


# The section playbooks/facts.yml publishes per GPU node (``node_platform_report``): its
# ansible_facts['python'] and ['architecture'] as the smoke phase found them.
PLATFORM_SECTION = "node_platform"
# How many node names a note lists before it says "and N more".
_NAMED = 10


def platforms_of(reports: Mapping[str, Mapping[str, Any]],
                 hosts: Sequence[str]) -> tuple[list[NodePlatform], list[str]]:
    """The distinct platforms of the GPU nodes ``hosts``, from what facts.yml published for
    each (``reports``: host -> report sections), and the report's notes. A node that
    published no usable platform is taken to match the controller, and a note says so: its
    pip refuses those wheels when its Python or machine differs."""
    platforms: set[NodePlatform] = set()
    missing = []
    for host in hosts:
        published = (reports.get(host) or {}).get(PLATFORM_SECTION)
        found = platform_from_facts(published) if isinstance(published, Mapping) else None
        if found is None:
            missing.append(host)
        else:
            platforms.add(found)
    if not missing:
        return sorted(platforms), []
    guess = controller_platform()
    platforms.add(guess)
    named = ", ".join(missing[:_NAMED]) + (
        f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else "")
    return sorted(platforms), [
        f"wheelhouse: no Python version or known machine (x86_64, aarch64) from {named}: "
        f"their wheels were built for the controller's platform ({guess.key}), which pip on "
        "those nodes refuses if their Python or machine differs"]


def wheel_lock(plan: ClusterPlan) -> Lock:
    """The project's reviewed lock, and the site's (``smoke_job_wheel_lock``, a file on the
    controller) over it where the inventory names one."""
    site = plan.inventory.hosts[_first_gpu_host(plan)].vars.get("smoke_job_wheel_lock")
    if not site:
        return load_lock()
    return merged(load_lock(), load_lock(Path(str(site))))


def locked_requirements(plan: ClusterPlan, platforms: Sequence[NodePlatform] = (),
                        framework: str = "pytorch") -> dict[str, str]:
    """{platform key: requirements text with the locked hashes}: what each node installs,
    handed to it over the Ansible connection (smoke_job_locked_requirements). An unlocked
    platform is refused before any node is touched."""
    lock, name = wheel_lock(plan), set_name(framework, plan.simulated)
    return {node.key: requirements_text(locked_wheels(lock, name, node.key))
            for node in sorted(set(platforms)) or [controller_platform()]}


@contextlib.contextmanager
def wheelhouse_url(plan: ClusterPlan, cache: Path,
                   platforms: Sequence[NodePlatform] = (),
                   framework: str = "pytorch") -> Iterator[str]:
    """The URL of the wheelhouse nodes install the smoke job's ``framework`` from (one
    directory per node platform under it, holding the wheels and a hashed requirements.txt;
    TensorFlow's under ``tensorflow/``, apart from PyTorch's). ``platforms``: the GPU nodes'
    (:func:`platforms_of`); none given, the controller's. When the package mirror is a
    directory of this controller (``gpu_package_source_dir``, as on the simulated cluster), the
    wheelhouse goes into it and the mirror serves it; otherwise the controller serves the
    wheelhouse itself for the length of the run, on the address the nodes route to only.
    Empty when the inventory names a site index (``smoke_job_pip_index_url``): nodes install
    from there and nothing is built or served."""
    first = plan.inventory.hosts[_first_gpu_host(plan)]
    if not builds_wheelhouse(plan):
        yield ""
        return
    lock, name = wheel_lock(plan), set_name(framework, plan.simulated)

    def wheels_for(node: NodePlatform) -> list[LockedWheel]:
        return locked_wheels(lock, name, node.key)

    sub = framework_subdir(framework)
    mirror_dir = first.vars.get("gpu_package_source_dir")
    if mirror_dir:
        ensure_wheelhouse(Path(str(mirror_dir)) / "wheels" / sub, wheels_for=wheels_for,
                          platforms=platforms)
        yield (str(first.vars.get("gpu_package_source", "")).rstrip("/") + "/wheels/"
               + (f"{sub}/" if sub else ""))
        return
    house = ensure_wheelhouse(cache / "wheelhouse" / sub, wheels_for=wheels_for,
                              platforms=platforms)
    target = str(first.vars.get("ansible_host") or first.name)
    address = _local_address_towards(target)
    handler = functools.partial(_QuietHandler, directory=str(house))
    server = http.server.ThreadingHTTPServer((address, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


def _local_address_towards(host: str) -> str:
    """The controller's address on the route to ``host`` (a UDP connect sends no packet): the
    wheelhouse listens there only, never on every interface."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((socket.gethostbyname(host), 9))
            return str(sock.getsockname()[0])
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot find the controller's address towards node {host} ({exc.strerror or exc}); "
            "check the node's ansible_host resolves and is routable from here") from None


def extravars(plan: ClusterPlan, run_id: str, run_dir: Path, url: str,
              launcher: str = "direct", framework: str = "pytorch",
              locked: Mapping[str, str] | None = None,
              container: str | None = None) -> dict[str, Any]:
    first = plan.hosts[_first_gpu_host(plan)]
    gpus = first.profile.gpu_count if first.profile else 0
    out: dict[str, Any] = {
        "smoke_job_wheelhouse_url": url,
        # The reviewed hashes per node platform: the node installs with these, never with
        # hashes read from the server that serves the wheels.
        "smoke_job_locked_requirements": dict(locked or {}),
        "smoke_job_run_id": run_id,
        "smoke_job_artifacts_dir": str(run_dir / "smoke"),
        "smoke_job_launcher": launcher,
        "smoke_job_framework": framework,
        # What a site index (smoke_job_pip_index_url) installs: the build the wheelhouse has.
        "smoke_job_tensorflow_requirements": list(
            framework_requirements("tensorflow", plan.simulated)),
        # srun allocates the profile's GPUs per node (GRES), on the simulated cluster too,
        # where the job itself then runs on CPUs.
        "smoke_job_slurm_gpus_per_node": gpus,
    }
    if container:
        # srun --container: the job runs in this OCI bundle on every node (Slurm's oci.conf).
        out["smoke_job_container"] = container
    if plan.simulated:
        # Simulated GPUs cannot run CUDA: gloo on CPU processes, no GPU count to expect.
        out.update(smoke_job_backend="gloo", smoke_job_sizes=CPU_SIZES,
                   smoke_job_nproc_per_node=SIM_NPROC_PER_NODE,
                   smoke_job_expect_gpus_per_node=0, smoke_job_socket_ifname=SIM_SOCKET_IFNAME,
                   smoke_job_timeout_s=SIM_TIMEOUT_S)
    else:
        out.update(smoke_job_sizes=GPU_SIZES, smoke_job_nproc_per_node=gpus,
                   smoke_job_expect_gpus_per_node=gpus)
    return out


def fold_results(plan: ClusterPlan, report: Report, run_dir: Path,
                 reports: Mapping[str, Mapping[str, Any]],
                 unreachable: list[str], launcher: str = "direct",
                 framework: str = "pytorch", container: str | None = None) -> bool:
    """Judge each pass and put tables, checks and logs in the report. True when all passed."""
    out_dir = run_dir / "smoke"
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    ok = True
    for host, sections in sorted(reports.items()):
        smoke = sections.get("smoke_job") or {}
        hp = plan.hosts.get(host)
        profile = hp.profile if hp else None
        for name, result in (smoke.get("passes") or {}).items():
            if name == "nccl_tests":
                run = _nccl_tests_run(host, result, profile)
                ok = ok and run["verdict"]["passed"]
                runs.append(run)
                verdict = run["verdict"]
                report.add_check(Check(
                    host=host, phase="smoke", name="nccl_tests_busbw",
                    status=("fail" if not verdict["passed"] else
                            "skip" if verdict["floor_skipped"] else "pass"),
                    measured=_round(verdict["best_busbw_gbps"]),
                    expected=verdict["floor_gbps"], detail=verdict["summary"]))
                continue
            (out_dir / f"{host}-{name}.log").write_text("\n".join(result.get("log") or []) + "\n")
            if name == "inter" and not result.get("result") and _inter_result_elsewhere(reports):
                continue  # rank 0 (wherever the rendezvous put it) holds the result
            floor, no_floor = None, None
            if profile is not None:
                key = "busbw_floor_intra_gbps" if name == "intra" else "busbw_floor_inter_gbps"
                floor = getattr(profile, key)
                no_floor = _no_floor_reason(profile, key) if floor is None else None
            run = _judge_pass(host, name, result, floor, plan.simulated, out_dir, unreachable,
                              no_floor)
            ok = ok and run["verdict"]["passed"]
            runs.append(run)
            report.add_check(Check(
                host=host, phase="smoke", name=f"{name}_node",
                status="pass" if run["verdict"]["passed"] else "fail",
                measured=_round(run["verdict"]["best_busbw_gbps"]),
                expected="n/a (simulated)" if plan.simulated else floor,
                detail=run["verdict"]["summary"]))
    if not runs:
        ok = False
        report.add_note("the smoke job produced no results"
                        + (f" (unreachable: {', '.join(unreachable)})" if unreachable else ""))
    report.record_smoke({"simulated": plan.simulated, "launcher": launcher,
                         "framework": framework, "runs": runs,
                         **({"container": container} if container else {})})
    return ok and not unreachable


def _nccl_tests_run(host: str, result: Mapping[str, Any], profile: Any) -> dict[str, Any]:
    """all_reduce_perf's table from one node, judged against the single-node floor by the
    same policy as the smoke job (provisioner.busbw), or the reason it did not run."""
    label = f"nccl-tests {host}"
    if result.get("skipped"):
        return {"label": label, "host": host, "backend": "nccl", "allreduce": [],
                "verdict": {"passed": True, "best_busbw_gbps": None, "floor_gbps": None,
                            "floor_skipped": str(result["skipped"]),
                            "summary": f"SKIPPED: {result['skipped']}"}}
    floor = profile.busbw_floor_intra_gbps if profile is not None else None
    no_floor = (_no_floor_reason(profile, "busbw_floor_intra_gbps")
                if profile is not None and floor is None else None)
    return judge_nccl_tests(label, host, str(result.get("output") or ""), result.get("rc"),
                            floor, no_floor)


def _no_floor_reason(profile: Any, key: str) -> str:
    """Why a busbw floor was not applied: the host's profile has none (e.g. one detected from a
    machine's tool outputs, before a healthy node was measured)."""
    return f"profile {profile.name} has no {key}, so busbw is reported, not judged"


def judge_nccl_tests(label: str, host: str, output: str, rc: Any,
                     floor: float | None, no_floor: str | None = None) -> dict[str, Any]:
    """One all_reduce_perf log -> a smoke run entry with its verdict (parse -> judge).
    ``no_floor``: why there is no floor, when the host's profile has none (the entry's
    ``floor_skipped``; the busbw is reported, not judged)."""
    from provisioner.inspect import NCCL_TESTS, nccl_tests_point, parse_text

    try:
        parsed = parse_text(output, NCCL_TESTS)
    except ValueError as exc:
        return {"label": label, "host": host, "backend": "nccl", "allreduce": [],
                "verdict": {"passed": False, "best_busbw_gbps": None, "floor_gbps": floor,
                            "floor_skipped": None,
                            "summary": f"FAIL: all_reduce_perf exit {rc}: {exc}"}}
    rows = [{"bytes": r["size_bytes"], "time_us": r["out_of_place"]["time_us"] or 0.0,
             "algbw_gbps": r["out_of_place"]["algbw_gbps"] or 0.0,
             "busbw_gbps": r["out_of_place"]["busbw_gbps"] or 0.0,
             "correct": not r["out_of_place"].get("wrong")}
            for r in parsed.get("rows") or [] if r.get("out_of_place")]
    point = nccl_tests_point(parsed)
    wrong = [human_size(r["bytes"]) for r in rows if not r["correct"]]
    problems = [f"all_reduce_perf exit {rc}"] if rc != 0 else []
    problems += [f"wrong results at {', '.join(wrong)}"] if wrong else []
    if parsed.get("out_of_bounds_ok") is False:
        problems.append(f"{parsed['out_of_bounds']} out-of-bounds values")
    if point is None:
        problems.append(f"no size >= {human_size(FLOOR_MIN_BYTES)} measured")
        summary = "no busbw to judge"
    else:
        summary = (f"busbw {point.busbw_gbps:.2f} GB/s at {human_size(point.size_bytes)} vs "
                   f"floor {floor:g} GB/s" if floor is not None else
                   f"busbw {point.busbw_gbps:.2f} GB/s at {human_size(point.size_bytes)}, "
                   + (no_floor or "no floor configured"))
        if floor is not None and point.busbw_gbps < floor:
            problems.append("below the floor")
    passed = not problems
    return {"label": label, "host": host, "backend": "nccl",
            "world_size": len(parsed.get("ranks") or []), "nnodes": 1, "allreduce": rows,
            "verdict": {"passed": passed,
                        "summary": ("PASS: " if passed else "FAIL: ") + "; ".join(
                            [f"nccl-tests all_reduce_perf: {summary}", *problems]),
                        "best_busbw_gbps": point.busbw_gbps if point else None,
                        "floor_gbps": floor,
                        "floor_skipped": no_floor if floor is None else None}}


def _inter_result_elsewhere(reports: Mapping[str, Mapping[str, Any]]) -> bool:
    return any(((s.get("smoke_job") or {}).get("passes") or {}).get("inter", {}).get("result")
               for s in reports.values())


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _judge_pass(host: str, name: str, result: Mapping[str, Any], floor: float | None,
                simulated: bool, out_dir: Path, unreachable: list[str],
                no_floor: str | None = None) -> dict[str, Any]:
    label = f"{name}-node" if name == "inter" else f"intra-node {host}"
    data = result.get("result")
    if not data:
        why = " ".join((result.get("log") or [])[-2:]) or f"exit {result.get('rc')}"
        dead = f"; unreachable during the job: {', '.join(unreachable)}" if unreachable else ""
        return {"label": label, "host": host, "allreduce": [], "verdict": {
            "passed": False, "best_busbw_gbps": None,
            "summary": f"no result from rank 0 on {host}: {why}{dead}"}}
    path = out_dir / f"{host}-{name}.json"
    path.write_text(json.dumps(data, indent=2))
    try:
        parsed = load_smoke_result(path)
    except InputError as exc:
        return {"label": label, "host": host, "allreduce": [], "verdict": {
            "passed": False, "best_busbw_gbps": None, "summary": str(exc)}}
    verdict = judge(parsed, floor, simulated)
    skipped = verdict.floor.skipped_reason
    if skipped == NO_FLOOR_REASON and no_floor:
        skipped = no_floor  # the profile has no floor: say which, and that busbw is unjudged
    at = human_size(verdict.floor.size_bytes) if verdict.floor.size_bytes else "no size >= 1 GiB"
    best = verdict.floor.best_busbw_gbps
    measured = (f"busbw {best:.2f} GB/s at {at}; "
                if no_floor and skipped == no_floor and best is not None else "")
    floor_text = (f"{measured}floor skipped: {skipped}" if skipped
                  else f"busbw {verdict.floor.best_busbw_gbps or 0.0:.2f} GB/s at {at} vs floor "
                       f"{verdict.floor.floor_gbps or 0.0:g} GB/s")
    summary = (f"PASS: correct all-reduce, {training_name(parsed.framework)} loss decreased, "
               "parameters identical; "
               + floor_text) if verdict.passed else "FAIL: " + "; ".join(verdict.failures)
    return {
        "label": label, "host": host, "backend": parsed.backend,
        "world_size": parsed.world_size, "nnodes": parsed.nnodes, "nodes": parsed.nodes,
        # Who the ranks ran as, as they said it (the role runs them as smoke_job_user).
        "run_as": sorted({r.user for r in parsed.ranks if r.user}),
        "allreduce": [asdict(r) for r in verdict.rows],
        "ddp": parsed.ddp.model_dump() if parsed.ddp else None,
        "verdict": {"passed": verdict.passed, "summary": summary,
                    "best_busbw_gbps": verdict.floor.best_busbw_gbps,
                    "floor_gbps": verdict.floor.floor_gbps,
                    "floor_skipped": skipped},
    }
