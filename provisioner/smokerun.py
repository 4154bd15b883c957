"""Driving the distributed smoke job: wheelhouse, variables for the smoke_job role, and turning
the per-node results into report sections judged against the profile's busbw floors."""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from provisioner.errors import InputError
from provisioner.plan import ClusterPlan
from provisioner.report import Check, Report
from provisioner.smoke import judge, load_smoke_result
from provisioner.wheelhouse import ensure_wheelhouse

SIM_NPROC_PER_NODE = 2
SIM_SOCKET_IFNAME = "eth0"
# gloo on a handful of CPU ranks needs seconds; a dead peer should end the job quickly.
SIM_TIMEOUT_S = 90


def _first_gpu_host(plan: ClusterPlan) -> str:
    return next(h for h, hp in plan.hosts.items() if hp.kind == "gpu")


@contextlib.contextmanager
def wheelhouse_url(plan: ClusterPlan, cache: Path) -> Iterator[str]:
    """The URL nodes install PyTorch from. When the package mirror is a directory of this
    controller (``gpu_package_source_dir``, as on the simulated cluster), the wheelhouse goes
    into it and the mirror serves it; otherwise the controller serves the wheelhouse itself
    for the length of the run."""
    first = plan.inventory.hosts[_first_gpu_host(plan)]
    mirror_dir = first.vars.get("gpu_package_source_dir")
    if mirror_dir:
        ensure_wheelhouse(Path(str(mirror_dir)) / "wheels")
        yield str(first.vars.get("gpu_package_source", "")).rstrip("/") + "/wheels/"
        return
    house = ensure_wheelhouse(cache / "wheelhouse")
    target = str(first.vars.get("ansible_host") or first.name)
    handler = functools.partial(_QuietHandler, directory=str(house))
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{_local_address_towards(target)}:{server.server_address[1]}/"
    finally:
        server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


def _local_address_towards(host: str) -> str:
    """The controller's address on the route to ``host`` (a UDP connect sends no packet)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((socket.gethostbyname(host), 9))
            return str(sock.getsockname()[0])
    except OSError:
        return socket.gethostname()


def extravars(plan: ClusterPlan, run_id: str, run_dir: Path, url: str) -> dict[str, Any]:
    first = plan.hosts[_first_gpu_host(plan)]
    gpus = first.profile.gpu_count if first.profile else 0
    out: dict[str, Any] = {
        "smoke_job_wheelhouse_url": url,
        "smoke_job_run_id": run_id,
        "smoke_job_artifacts_dir": str(run_dir / "smoke"),
    }
    if plan.simulated:
        # Simulated GPUs cannot run CUDA: gloo on CPU processes, no GPU count to expect.
        out.update(smoke_job_backend="gloo", smoke_job_nproc_per_node=SIM_NPROC_PER_NODE,
                   smoke_job_expect_gpus_per_node=0, smoke_job_socket_ifname=SIM_SOCKET_IFNAME,
                   smoke_job_timeout_s=SIM_TIMEOUT_S)
    else:
        out.update(smoke_job_nproc_per_node=gpus, smoke_job_expect_gpus_per_node=gpus)
    return out


def fold_results(plan: ClusterPlan, report: Report, run_dir: Path,
                 reports: Mapping[str, Mapping[str, Any]],
                 unreachable: list[str]) -> bool:
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
                continue
            (out_dir / f"{host}-{name}.log").write_text("\n".join(result.get("log") or []) + "\n")
            if name == "inter" and not result.get("result") and _inter_result_elsewhere(reports):
                continue  # rank 0 (wherever the rendezvous put it) holds the result
            floor = None
            if profile is not None:
                floor = (profile.busbw_floor_intra_gbps if name == "intra"
                         else profile.busbw_floor_inter_gbps)
            run = _judge_pass(host, name, result, floor, plan.simulated, out_dir, unreachable)
            ok = ok and run["verdict"]["passed"]
            runs.append(run)
            report.checks.append(Check(
                host=host, phase="smoke", name=f"{name}_node",
                status="pass" if run["verdict"]["passed"] else "fail",
                measured=_round(run["verdict"]["best_busbw_gbps"]),
                expected="n/a (simulated)" if plan.simulated else floor,
                detail=run["verdict"]["summary"]))
    if not runs:
        ok = False
        report.notes.append("the smoke job produced no results"
                            + (f" (unreachable: {', '.join(unreachable)})" if unreachable else ""))
    report.smoke = {"simulated": plan.simulated, "runs": runs}
    return ok and not unreachable


def _nccl_tests_run(host: str, result: Mapping[str, Any], profile: Any) -> dict[str, Any]:
    """all_reduce_perf's table from one node, against the single-node floor."""
    from provisioner.paths import enable_module_utils

    enable_module_utils()
    import importlib

    parser = importlib.import_module("gpucluster.nccl_tests")
    parsed = parser.parse_nccl_tests(str(result.get("output") or ""))
    rows = [{"bytes": r["size_bytes"], "time_us": r["out_of_place"]["time_us"] or 0.0,
             "algbw_gbps": r["out_of_place"]["algbw_gbps"] or 0.0,
             "busbw_gbps": r["out_of_place"]["busbw_gbps"] or 0.0,
             "correct": not r["out_of_place"].get("wrong")}
            for r in parsed.get("rows") or [] if r.get("out_of_place")]
    floor = profile.busbw_floor_intra_gbps if profile is not None else None
    big = [r["busbw_gbps"] for r in rows if r["bytes"] >= 1 << 30]
    best = max(big) if big else None
    wrong = [r["bytes"] for r in rows if not r["correct"]]
    passed = result.get("rc") == 0 and bool(rows) and not wrong and (
        floor is None or (best is not None and best >= floor))
    summary = (f"nccl-tests all_reduce_perf: best busbw {best} GB/s at >= 1 GiB vs floor "
               f"{floor} GB/s" if best is not None else
               f"nccl-tests all_reduce_perf exit {result.get('rc')}, no size >= 1 GiB measured")
    if wrong:
        summary += f"; wrong results at {len(wrong)} size(s) (first: {wrong[0]} bytes)"
    return {"label": f"nccl-tests {host}", "host": host, "backend": "nccl",
            "world_size": len(parsed.get("ranks") or []), "nnodes": 1, "allreduce": rows,
            "verdict": {"passed": passed, "summary": ("PASS: " if passed else "FAIL: ") + summary,
                        "best_busbw_gbps": best, "floor_gbps": floor, "floor_skipped": None}}


def _inter_result_elsewhere(reports: Mapping[str, Mapping[str, Any]]) -> bool:
    return any(((s.get("smoke_job") or {}).get("passes") or {}).get("inter", {}).get("result")
               for s in reports.values())


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _judge_pass(host: str, name: str, result: Mapping[str, Any], floor: float | None,
                simulated: bool, out_dir: Path, unreachable: list[str]) -> dict[str, Any]:
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
    floor_text = (f"floor skipped: {verdict.floor.skipped_reason}" if verdict.floor.skipped_reason
                  else f"best busbw {verdict.floor.best_busbw_gbps:.2f} GB/s vs floor "
                       f"{verdict.floor.floor_gbps:g} GB/s")
    summary = ("PASS: correct all-reduce, DDP loss decreased, parameters identical; "
               + floor_text) if verdict.passed else "FAIL: " + "; ".join(verdict.failures)
    return {
        "label": label, "host": host, "backend": parsed.backend,
        "world_size": parsed.world_size, "nnodes": parsed.nnodes, "nodes": parsed.nodes,
        "allreduce": [asdict(r) for r in verdict.rows],
        "ddp": parsed.ddp.model_dump() if parsed.ddp else None,
        "verdict": {"passed": verdict.passed, "summary": summary,
                    "best_busbw_gbps": verdict.floor.best_busbw_gbps,
                    "floor_gbps": verdict.floor.floor_gbps,
                    "floor_skipped": verdict.floor.skipped_reason},
    }
