"""The bench's own logic (no timings asserted): the profiling recap parser on real
profile_tasks/profile_roles output, the headline keys from cluster rows, and the controller
and node (gpuc-health on simulated tools) measures on a small scale."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import cluster, controller, profiling  # noqa: E402

# ansible-playbook 2.19 with ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks,
# ansible.posix.profile_roles (ansible.posix 2.1.0), end of its output.
RECAP = """\
PLAY RECAP *********************************************************************
gpu-1                      : ok=93   changed=0    unreachable=0    failed=0    skipped=12


TASKS RECAP ********************************************************************
Monday 23 November 2026  07:03:26 +0000 (0:00:02.097)       0:00:02.190 *******
===============================================================================
gpucluster.provisioner.nvidia_driver : Driver | Install packages -------- 4.10s
gpucluster.provisioner.cuda_toolkit : CUDA | Install toolkit ------------- 2.25s
Gathering Facts --------------------------------------------------------- 0.90s

ROLES RECAP ********************************************************************
Monday 23 November 2026  07:03:26 +0000 (0:00:02.097)       0:00:02.180 *******
===============================================================================
gpucluster.provisioner.nvidia_driver ------------------------------------ 4.10s
gpucluster.provisioner.cuda_toolkit ------------------------------------- 2.25s
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
total ------------------------------------------------------------------- 7.25s
"""


def test_recaps_are_parsed_into_tasks_and_roles() -> None:
    recaps = profiling.parse_recaps(RECAP)
    assert recaps["tasks"] == [
        ("gpucluster.provisioner.nvidia_driver : Driver | Install packages", 4.10),
        ("gpucluster.provisioner.cuda_toolkit : CUDA | Install toolkit", 2.25),
        ("Gathering Facts", 0.90)]
    assert recaps["roles"] == [("gpucluster.provisioner.nvidia_driver", 4.10),
                               ("gpucluster.provisioner.cuda_toolkit", 2.25)]


def test_top_tasks_span_every_playbook_of_a_run(tmp_path: Path) -> None:
    for ident, scale in (("stack", 1.0), ("validate", 2.0)):
        out = tmp_path / "ansible" / "artifacts" / ident
        out.mkdir(parents=True)
        (out / "stdout").write_text(RECAP.replace("4.10s", f"{4.1 * scale:.2f}s"))
    best = profiling.top(tmp_path, n=3)
    assert [(t["run"], t["seconds"]) for t in best["tasks"]] == [
        ("validate", 8.2), ("stack", 4.1), ("validate", 2.25)]
    assert best["roles"][0] == {"role": "gpucluster.provisioner.nvidia_driver",
                                "seconds": 12.3}


def test_the_profiling_callbacks_ship_with_the_ansible_package() -> None:
    from ansible_collections.ansible import posix

    callbacks = Path(posix.__path__[0]) / "plugins" / "callback"
    for name in profiling.PROFILE_ENV["ANSIBLE_CALLBACKS_ENABLED"].split(","):
        assert (callbacks / f"{name.rsplit('.', 1)[-1]}.py").is_file()


def test_headline_keys_come_from_the_node_rows_with_reasons_for_gaps() -> None:
    result = {"special_nodes": 3, "nodes": {
        "1": {"up_first_s": 40.0, "up_rerun_s": 20.0, "stack_rerun_s": 6.0,
              "floor_fresh_s": 3.0},
        "3": {"up_first_s": 24.0, "up_first_bringup_phases_s": 19.5, "up_rerun_s": 25.0,
              "up_rerun_stock_s": 60.0}},
        "unreachable": {"cost_s": 9.5}}
    keys, why = cluster.headline(result)
    assert keys == {"stack_rerun_over_floor": 2.0, "rerun_8_over_1": None,
                    "tuned_over_stock": 0.42, "up_3_nodes_s": 24.0,
                    "up_3_nodes_bringup_phases_s": 19.5, "unreachable_node_cost_s": 9.5}
    assert why == {"rerun_8_over_1": "needs node counts 1 and 8 (--nodes)"}


def test_display_bench_counts_every_event_it_fed() -> None:
    measured = controller.display_bench(hosts=50, tasks=4, budget_s=30)
    assert measured["events"] == measured["events_offered"] == 1 + 4 * 51
    assert measured["us_per_event"] > 0
    assert measured["memory_after_all_events_kb"] > 0


def test_event_bench_folds_every_event_through_the_runners_sink() -> None:
    measured = controller.event_bench(count=2000)
    assert measured["events"] == 2000 and measured["events_per_s"] > 0
    # Every 997th event is a failure: 0 and 997 and 1994; all kept (under MAX_FAILURES).
    assert measured["failures_kept"] == 3 and measured["failures_counted"] == 0


def test_the_mixed_inventory_plans(tmp_path: Path) -> None:
    import yaml

    from provisioner import plan as plan_mod

    path = tmp_path / "mixed.yml"
    path.write_text(yaml.safe_dump(controller.mixed_inventory(100)))
    cp = plan_mod.build(path)
    assert len(cp.inventory.gpu_hosts) == 100
    assert {h.profile.name for h in cp.hosts.values() if h.profile} == {
        "hgx-h100-8gpu", "hgx-h200-8gpu", "hgx-b200-8gpu"}


def test_the_bringup_phases_are_summed_from_the_report(tmp_path: Path) -> None:
    import json

    run = tmp_path / "20261126-000000-abcd"
    run.mkdir()
    (run / "report.json").write_text(json.dumps({"phases": [
        {"name": "preflight", "duration_s": 1.5}, {"name": "stack", "duration_s": 10.0},
        {"name": "fabric", "duration_s": 4.0}, {"name": "validate", "duration_s": 2.0},
        {"name": "monitoring", "duration_s": 7.0}, {"name": "smoke", "duration_s": None}]}))
    phases = cluster.phase_durations(tmp_path)
    assert phases == {"preflight": 1.5, "stack": 10.0, "fabric": 4.0, "validate": 2.0,
                      "monitoring": 7.0}
    assert sum(phases[p] for p in cluster.BRINGUP_PHASES) == 17.5


def test_the_node_health_bench_runs_both_modes_on_a_healthy_simulated_node() -> None:
    from bench import node_health, run

    measured = node_health.quick_bench(repeat=1)
    assert measured["quick_checks"] < measured["full_checks"]
    assert measured["quick_best_s"] > 0 and measured["full_best_s"] > 0
    text = run.report({"timestamp": "t", "mode": "controller-only", "cores": 2,
                       "load_average_at_start": [0.0], "not_measured": {},
                       "health_quick_sim_s": measured["quick_best_s"],
                       "controller": {"plan": {"repeat": 1, **{
                           name: dict.fromkeys(("cli_wall_s", "cli_cpu_s", "build_first_s",
                                                "build_best_s"), 1.0)
                           for name in ("uniform", "mixed")}},
                           "display": dict.fromkeys((
                               "hosts", "events", "us_per_event", "memory_after_every_host_kb",
                               "memory_after_all_events_kb", "memory_growth_bytes_per_event",
                               "memory_peak_kb"), 1),
                           "events": dict.fromkeys(("events", "events_per_s", "peak_kb",
                                                    "failures_kept", "failures_counted"), 1)},
                       "node_health": measured})
    assert "health_quick_sim_s" in text and "gpuc-health on a SIMULATED sim-h100-8gpu" in text
