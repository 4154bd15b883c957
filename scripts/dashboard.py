"""Build the Grafana dashboard of the monitoring role with grafana-foundation-sdk.

    python scripts/dashboard.py           # rewrite roles/monitoring/files/dashboards/*.json
    python scripts/dashboard.py --check    # exit 1 when the committed file differs

The committed JSON is this script's output (tests/monitoring/test_dashboard.py compares them),
and every PromQL expression in it is evaluated against a live Prometheus by the e2e tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard, heatmap, prometheus, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

OUTPUT = Path(__file__).resolve().parents[1] / "roles/monitoring/files/dashboards/gpucluster.json"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
PER_GPU = "{{Hostname}} GPU {{gpu}}"


def query(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> Any:
    q = prometheus.Dataquery().expr(expr).ref_id(ref).legend_format(legend or "__auto")
    if instant:
        q = q.instant().format(PromQueryFormat.TABLE)
    return q


def series(title: str, unit: str, *targets: Any, span: int = 12) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).datasource(DATASOURCE).height(8).span(span)
    for target in targets:
        panel = panel.with_target(target)
    return panel


def build() -> dict[str, Any]:
    health_table = (
        table.Panel().title("Cluster health (gpuc-health)").datasource(DATASOURCE)
        .height(8).span(24)
        .with_target(query("max by (instance) (gpucluster_health_status)", ref="A",
                           instant=True))
        .with_target(query("max by (instance) (time() - "
                           "gpucluster_health_last_run_timestamp_seconds)", ref="B",
                           instant=True))
        .with_target(query("sum by (instance) (1 - gpucluster_health_ok)", ref="C",
                           instant=True))
        .with_target(query("max by (instance, stack, driver, cuda, nccl) "
                           "(gpucluster_stack_info)", ref="D", instant=True))
    )
    latency = (
        heatmap.Panel().title("Node-to-node latency (ping probe)").datasource(DATASOURCE)
        .height(8).span(12)
        .with_target(query("gpucluster_peer_latency_seconds", "{{instance}} -> {{peer}}"))
    )
    builder = (
        dashboard.Dashboard("GPU cluster").uid("gpucluster-overview")
        .tags(["gpu-cluster-provisioner", "gpu", "dcgm"])
        .refresh("30s").time("now-6h", "now").timezone("browser")
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source")
                       .type("prometheus"))
        .with_row(dashboard.Row("Health"))
        .with_panel(health_table)
        .with_panel(series("Exporters up", "none", query("up", "{{job}} {{instance}}"),
                           span=24))
        .with_row(dashboard.Row("GPUs (DCGM)"))
        .with_panel(series("GPU utilisation", "percent",
                           query("DCGM_FI_DEV_GPU_UTIL", PER_GPU)))
        .with_panel(series("GPU memory used", "percentunit",
                           query("DCGM_FI_DEV_FB_USED / "
                                 "(DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE)", PER_GPU)))
        .with_panel(series("GPU temperature", "celsius",
                           query("DCGM_FI_DEV_GPU_TEMP", PER_GPU)))
        .with_panel(series("GPU power", "watt", query("DCGM_FI_DEV_POWER_USAGE", PER_GPU)))
        .with_row(dashboard.Row("Fabric"))
        .with_panel(series("NVLink throughput", "none",
                           query("sum by (instance) "
                                 "(rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[5m]))",
                                 "{{instance}}")))
        .with_panel(series("NVLink and InfiniBand checks failing", "none",
                           query('sum by (instance) '
                                 '(1 - gpucluster_health_ok{check=~"gpu[0-9]+_nvlink"})',
                                 "{{instance}} NVLink", ref="A"),
                           query('sum by (instance) (1 - gpucluster_health_ok{check=~"ib_.+"})',
                                 "{{instance}} InfiniBand", ref="B")))
        .with_panel(series("Last Xid per GPU", "none",
                           query("DCGM_FI_DEV_XID_ERRORS", PER_GPU)))
        .with_panel(latency)
    )
    text = json.dumps(builder.build(), cls=JSONEncoder, sort_keys=True)
    return dict(json.loads(text))


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def expressions(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard (panels in rows included)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                found.append(node["expr"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(board.get("panels", []))
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    opts = parser.parse_args(argv)
    text = render()
    if opts.check:
        same = OUTPUT.is_file() and OUTPUT.read_text() == text
        if not same:
            sys.stderr.write(f"{OUTPUT} is not the generator's output: run "
                             "python scripts/dashboard.py\n")
        return 0 if same else 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
