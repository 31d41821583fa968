"""A Grafana dashboard for a stamp (issue 31), over the Prometheus metrics every process
serves (tools/local_watch.py writes the scrape configuration; `stamp up` writes this beside
it as DASHBOARD_FILE): front ends' requests and refusals, partition servers' operations and
latency, partitions by load and size, extent nodes' journals, disks and CURP witnesses, the
stream manager's repair backlog, the Raft groups, the maintenance jobs (last success,
backlog, outcome), and every process's CPU and memory.

Import it in Grafana (Dashboards, New, Import) with a Prometheus data source that scrapes the
stamp; the data source is a variable of the dashboard. Jobs are the process kinds of the
scrape configuration, and `process` labels each process.

Contract: `dashboard()` is plain JSON data (Grafana's dashboard model, schema 39); every
query names only metrics a stamp exports (`metric_names` lists them; a probe test checks them
against a running stamp's scrape).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from common import durable_fs

DASHBOARD_FILE = "grafana-dashboard.json"
RATE = "[1m]"
_METRIC = re.compile(r"\b(?:stamp|process)_[a-z0-9_]+\b")
_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# A job scheduler's gauge as the active one reports it (a standby's record may be stale).
_ACTIVE = "max by (job) ({} and on (process) (stamp_job_scheduler_active == 1))"

# (row title, [(panel title, unit, [(query, legend)])])
PANELS: list[tuple[str, list[tuple[str, str, list[tuple[str, str]]]]]] = [
    ("Front ends", [
        ("Requests per second", "reqps", [
            (f"sum by (process) (rate(stamp_fe_requests_total{RATE}))", "{{process}}")]),
        ("Refused and throttled per second", "reqps", [
            (f"sum by (process, reason) (rate(stamp_fe_refused_total{RATE}))",
             "{{process}} {{reason}}"),
            (f"sum by (process) (rate(stamp_fe_throttled_total{RATE}))",
             "{{process}} throttled")]),
    ]),
    ("Partition servers", [
        ("Operations per second", "ops", [
            (f"sum by (process, op, outcome) (rate(stamp_ps_ops_total{RATE}))",
             "{{process}} {{op}} {{outcome}}")]),
        ("Operation latency p50 and p99", "s", [
            (f"histogram_quantile(0.5, sum by (le, op) "
             f"(rate(stamp_ps_op_seconds_bucket{RATE})))", "p50 {{op}}"),
            (f"histogram_quantile(0.99, sum by (le, op) "
             f"(rate(stamp_ps_op_seconds_bucket{RATE})))", "p99 {{op}}")]),
        ("Errors per second", "ops", [
            (f'sum by (process, outcome) (rate(stamp_ps_ops_total{{outcome!="ok"}}{RATE}))',
             "{{process}} {{outcome}}")]),
        ("Partitions served", "short", [
            ("stamp_ps_partitions", "{{process}}")]),
    ]),
    ("Partitions", [
        ("Busiest partitions (operations per second)", "ops", [
            ("topk(10, stamp_partition_ops_per_second)", "partition {{partition}}")]),
        ("p99 latency by partition", "s", [
            ("topk(10, stamp_partition_p99_seconds)", "partition {{partition}}")]),
        ("Size and memtable", "bytes", [
            ("stamp_partition_size_bytes", "size {{partition}}"),
            ("stamp_partition_memtable_bytes", "memtable {{partition}}")]),
        ("Commit queue", "short", [
            ("stamp_partition_queue_ops", "partition {{partition}}")]),
        ("Partition map changes (5 min)", "short", [
            ("max(changes(stamp_pm_map_version[5m]))", "map versions")]),
    ]),
    ("Extent nodes", [
        ("Journal fsync p99", "s", [
            (f"histogram_quantile(0.99, sum by (le, process) "
             f"(rate(stamp_journal_fsync_seconds_bucket{RATE})))", "{{process}}")]),
        ("Records made durable per second", "ops", [
            (f"sum by (process) (rate(stamp_en_journal_records_total{RATE}))",
             "{{process}}")]),
        # Beside the journal, the CURP witness's records (issue 32): writes their owners have
        # not synced yet; at the witness bounds, fast writes are refused (FULL) and go the
        # sync way.
        ("Bytes on disk, in the journal and held by the witness", "bytes", [
            ("stamp_en_bytes", "extents {{process}}"),
            ("stamp_en_journal_bytes", "journal {{process}}"),
            ("stamp_en_pending_file_bytes", "not yet in files {{process}}"),
            ("stamp_en_witness_bytes", "witness {{process}}")]),
        ("CURP witness records held", "short", [
            ("stamp_en_witness_records", "{{process}}")]),
    ]),
    ("Stream manager and Raft", [
        ("Repair backlog", "short", [
            ("max by (kind) (stamp_sm_repair_backlog)", "{{kind}}"),
            ("max(stamp_sm_repairs_in_flight)", "in flight")]),
        ("Extents by state", "short", [
            ("max by (state) (stamp_sm_extents)", "{{state}}")]),
        ("Raft commit index", "short", [
            ("stamp_raft_commit_index", "{{process}}")]),
        ("Lock-service leases", "short", [
            ("max(stamp_lock_leases)", "leases")]),
    ]),
    ("Maintenance jobs (the active job scheduler)", [
        ("Time since each job's last success", "s", [
            (f"time() - ({_ACTIVE.format('stamp_job_last_success_timestamp_seconds')} > 0)",
             "{{job}}")]),
        ("Backlog", "short", [
            (_ACTIVE.format("stamp_job_backlog"), "{{job}}")]),
        ("Last run succeeded (1) or failed (0)", "short", [
            (_ACTIVE.format("stamp_job_last_run_ok"), "{{job}}")]),
        ("Runs going", "short", [
            ("max by (job) (stamp_job_running)", "{{job}}"),
            ("sum(stamp_job_scheduler_active)", "active schedulers")]),
    ]),
    ("Processes", [
        ("CPU (cores)", "short", [
            (f"sum by (job) (rate(process_cpu_seconds_total{RATE}))", "{{job}}")]),
        ("Resident memory", "bytes", [
            ("sum by (job) (process_resident_memory_bytes)", "{{job}}")]),
    ]),
]


def dashboard(title: str = "Stamp") -> dict[str, Any]:
    """The dashboard (module contract): rows of time series, two panels a line."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row_title, row_panels in PANELS:
        panels.append({"type": "row", "title": row_title, "collapsed": False,
                       "id": len(panels) + 1, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
                       "panels": []})
        y += 1
        for i, (title_of_panel, unit, queries) in enumerate(row_panels):
            panels.append(_panel(len(panels) + 1, title_of_panel, unit, queries,
                                 x=12 * (i % 2), y=y + 8 * (i // 2)))
        y += 8 * ((len(row_panels) + 1) // 2)
    return {
        "title": title, "uid": "stamp-overview", "schemaVersion": 39, "version": 1,
        "editable": True, "refresh": "10s", "time": {"from": "now-30m", "to": "now"},
        "tags": ["stamp"],
        "templating": {"list": [{"name": "datasource", "label": "Prometheus",
                                 "type": "datasource", "query": "prometheus"}]},
        "panels": panels,
    }


def _panel(panel_id: int, title: str, unit: str, queries: list[tuple[str, str]], x: int,
           y: int) -> dict[str, Any]:
    return {
        "type": "timeseries", "id": panel_id, "title": title, "datasource": _DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": 12, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(ord("A") + i), "datasource": _DATASOURCE, "expr": expr,
                     "legendFormat": legend} for i, (expr, legend) in enumerate(queries)],
    }


def queries(board: dict[str, Any]) -> list[str]:
    """Every query of `board`."""
    return [target["expr"] for panel in board["panels"] for target in panel.get("targets", ())]


def metric_names(exprs: Iterable[str]) -> set[str]:
    """The metric (sample) names the queries read."""
    return {name for expr in exprs for name in _METRIC.findall(expr)}


def write_dashboard(data_dir: Path, title: str = "Stamp") -> Path:
    """Write the dashboard into `data_dir` (beside prometheus.yml); its path."""
    path = Path(data_dir) / DASHBOARD_FILE
    durable_fs.replace_file(path, (json.dumps(dashboard(title), indent=1) + "\n").encode())
    return path
