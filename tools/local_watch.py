"""Watching a local stamp (issue 19), for tools/local_stamp.py: each process's Prometheus
metrics port, planned once like its gRPC port and recorded in `stamp.json`
(`metrics_address`), and the Prometheus scrape configuration `stamp up` writes beside it.

A process gets `--metrics-port` only while the config's `[watch] metrics_enabled` holds when
it is first planned: a stamp's command lines are fixed once (restarts reuse them).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from common import durable_fs, process

if TYPE_CHECKING:
    from tools.local_stamp import LocalStamp

SCRAPE_CONFIG_FILE = "prometheus.yml"
METRICS_PATH = "/metrics"


def plan(stamp: LocalStamp) -> None:
    """Give every planned process without one a metrics port, on its own host: its
    configured gRPC port + `watch.metrics_port_offset` when that is fixed (every host that
    plans the stamp from the same config agrees on it), else a free one picked now."""
    watch = stamp.config.watch
    if not watch.metrics_enabled:
        return
    fixed = stamp.config.fixed_ports()
    for rec in stamp.records.values():
        if rec.metrics_address or "--metrics-port" in rec.argv:
            continue
        host = stamp.config.host_of(rec.name)
        port = (fixed[rec.name] + watch.metrics_port_offset if fixed.get(rec.name)
                else process.free_port(host))
        rec.argv += ["--metrics-port", str(port)]
        rec.metrics_address = f"{host}:{port}"


def scrape_config(stamp: LocalStamp) -> str:
    """Prometheus's scrape configuration for the stamp: one job per kind of process, each
    target labelled with its process name (and fault domain, for extent nodes)."""
    interval_s = stamp.config.watch.scrape_interval_ms / 1000
    lines = ["# Written by `stamp up`: Prometheus scrape configuration for this stamp.",
             f"# prometheus --config.file={stamp.data_dir / SCRAPE_CONFIG_FILE}",
             "global:", f"  scrape_interval: {interval_s:g}s", "scrape_configs:"]
    kinds: dict[str, list] = {}
    for rec in sorted(stamp.records.values(), key=lambda r: r.name):
        if rec.metrics_address:
            kinds.setdefault(rec.kind, []).append(rec)
    for kind, records in kinds.items():
        lines += [f"  - job_name: {kind}", f"    metrics_path: {METRICS_PATH}",
                  "    static_configs:"]
        for rec in records:
            lines += [f'      - targets: ["{rec.metrics_address}"]', "        labels:",
                      f"          process: {rec.name}"]
            if rec.fault_domain:
                lines.append(f"          fault_domain: {rec.fault_domain}")
    return "\n".join(lines) + "\n"


def write_scrape_config(stamp: LocalStamp) -> Path:
    path = stamp.data_dir / SCRAPE_CONFIG_FILE
    durable_fs.replace_file(path, scrape_config(stamp).encode())
    return path
