"""What `stamp top` shows (tools/cmd_top.py): every process and its health, ops/s and p99
per partition server, the partitions by load, disk and CURP witness per extent node, and the
repair backlog.

Everything shown comes from the processes' health service and their Prometheus metrics
(common/health.py, common/metrics.py), scraped all at once each frame; rates and
percentiles are over the interval between two frames (the first frame shows the servers'
own sliding-window figures). A process that does not answer is shown as such, never waited
for beyond the scrape deadline.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.text import Text

from common import health
from tools import tables
from tools.local_stamp import (
    KIND_EXTENT_NODE,
    KIND_PARTITION_SERVER,
    KIND_STREAM_MANAGER,
    LocalStamp,
)
from tools.scrape import Samples, scrape_many

MiB_F = 1024.0 * 1024.0
HEALTH_STYLE = {health.SERVING: "green", health.NOT_SERVING: "yellow",
                health.UNREACHABLE: "red"}


@dataclass
class Frame:
    """One look at every process: its health and its metrics (None: no answer)."""

    at: float
    health: dict[str, str] = field(default_factory=dict)
    samples: dict[str, Samples | None] = field(default_factory=dict)

    def of(self, name: str) -> Samples | None:
        return self.samples.get(name)


async def take_frame(stamp: LocalStamp) -> Frame:
    watch = stamp.config.watch
    records = list(stamp.records.values())
    healths, scraped = await asyncio.gather(
        health.check_many([r.address for r in records], watch.health_rpc_timeout_ms / 1000),
        scrape_many([r.metrics_address for r in records], watch))
    frame = Frame(time.monotonic())
    for rec in records:
        frame.health[rec.name] = healths.get(rec.address, health.UNREACHABLE)
        frame.samples[rec.name] = scraped.get(rec.metrics_address)
    return frame


# ---- figures between two frames (pure) --------------------------------------------------------

def rate(now: Samples | None, before: Samples | None, seconds: float, name: str,
         **labels: str) -> float | None:
    """Per second of the counter `name` between two scrapes (None: not both, or reset)."""
    if now is None or before is None or seconds <= 0:
        return None
    delta = now.value(name, **labels) - before.value(name, **labels)
    return delta / seconds if delta >= 0 else None


def quantile(now: dict[float, float], before: dict[float, float], q: float) -> float | None:
    """The `q` quantile of the observations a histogram took between two scrapes, as the
    upper bound of the bucket it falls in (cumulative buckets, bound -> count; the +Inf
    bucket reports the largest finite bound). None: no observation in between."""
    bounds = sorted(now)
    if not bounds:
        return None
    deltas = [now[b] - before.get(b, 0.0) for b in bounds]
    total = deltas[-1]
    if total <= 0:
        return None
    for bound, seen in zip(bounds, deltas, strict=True):
        if seen >= q * total:
            return bound if bound != float("inf") else max(
                (b for b in bounds if b != float("inf")), default=bound)
    return None


# ---- drawing ------------------------------------------------------------------------------------

def render(stamp: LocalStamp, frame: Frame, before: Frame | None) -> Group:
    seconds = frame.at - before.at if before is not None else 0.0
    serving = sum(1 for s in frame.health.values() if s == health.SERVING)
    title = Text(f"stamp {stamp.data_dir} | {time.strftime('%H:%M:%S')} | "
                 f"{serving}/{len(frame.health)} processes serving | ^C to stop",
                 style="bold")
    return Group(title, _processes(stamp, frame, before, seconds),
                 _partition_servers(stamp, frame, before, seconds),
                 _partitions(stamp, frame), _extent_nodes(stamp, frame, before),
                 _repairs(stamp, frame))


def _health_text(status: str) -> Text:
    return Text(status, style=HEALTH_STYLE.get(status, ""))


def _processes(stamp: LocalStamp, frame: Frame, before: Frame | None,
               seconds: float) -> Any:
    rows = []
    for rec in stamp.records.values():  # the stamp's order: lock, SM, EN, PM, PS, FE
        now = frame.of(rec.name)
        cpu = rate(now, before.of(rec.name) if before else None, seconds,
                   "process_cpu_seconds_total")
        rss = now.value("process_resident_memory_bytes") / MiB_F if now else None
        rows.append([rec.name, rec.kind, rec.pid or None, rec.address,
                     _health_text(frame.health[rec.name]),
                     None if cpu is None else f"{100 * cpu:.0f}",
                     None if rss is None else f"{rss:.0f}"])
    return _table(["NAME", "KIND", "PID", "ADDRESS", "HEALTH", "CPU %", "RSS MiB"], rows,
                  "processes", ["PID", "CPU %", "RSS MiB"])


def _partition_servers(stamp: LocalStamp, frame: Frame, before: Frame | None,
                       seconds: float) -> Any:
    rows = []
    for rec in _of_kind(stamp, KIND_PARTITION_SERVER):
        now = frame.of(rec.name)
        then = before.of(rec.name) if before else None
        ops = rate(now, then, seconds, "stamp_ps_ops_total")
        p99 = None
        if now is not None and then is not None:
            p99 = quantile(now.buckets("stamp_ps_op_seconds"),
                           then.buckets("stamp_ps_op_seconds"), 0.99)
        if now is not None and ops is None:  # the first frame: the server's own window
            ops = now.value("stamp_partition_ops_per_second")
            p99 = max((v for _, v in now.series("stamp_partition_p99_seconds")), default=None)
        rows.append([rec.name, _health_text(frame.health[rec.name]),
                     _int(now and now.value("stamp_ps_partitions")), _num(ops),
                     _ms(p99)])
    return _table(["SERVER", "HEALTH", "PARTITIONS", "OPS/S", "P99 MS"], rows,
                  "partition servers", ["PARTITIONS", "OPS/S", "P99 MS"])


def _partitions(stamp: LocalStamp, frame: Frame) -> Any:
    found: list[tuple[float, list[Any]]] = []
    for rec in _of_kind(stamp, KIND_PARTITION_SERVER):
        now = frame.of(rec.name)
        if now is None:
            continue
        for labels, ops in now.series("stamp_partition_ops_per_second"):
            pid = labels.get("partition", "?")
            found.append((ops, [pid, rec.name, _num(ops),
                                _num(now.value("stamp_partition_bytes_per_second",
                                               partition=pid)),
                                _ms(now.value("stamp_partition_p99_seconds", partition=pid)),
                                _int(now.value("stamp_partition_size_bytes", partition=pid)),
                                _int(now.value("stamp_partition_queue_ops", partition=pid))]))
    found.sort(key=lambda item: (-item[0], item[1][0]))
    limit = stamp.config.watch.top_partitions_max
    title = f"partitions by load ({len(found)}" + (f", top {limit})" if len(found) > limit
                                                   else ")")
    return _table(["PARTITION", "SERVER", "OPS/S", "BYTES/S", "P99 MS", "SIZE", "QUEUE"],
                  [row for _, row in found[:limit]], title,
                  ["OPS/S", "BYTES/S", "P99 MS", "SIZE", "QUEUE"])


def _extent_nodes(stamp: LocalStamp, frame: Frame, before: Frame | None) -> Any:
    rows = []
    for rec in _of_kind(stamp, KIND_EXTENT_NODE):
        now = frame.of(rec.name)
        then = before.of(rec.name) if before else None
        fsync = None
        if now is not None:
            fsync = quantile(now.buckets("stamp_journal_fsync_seconds"),
                             then.buckets("stamp_journal_fsync_seconds") if then else {}, 0.99)
        rows.append([rec.name, rec.fault_domain or None, _health_text(frame.health[rec.name]),
                     _int(now and now.value("stamp_en_extents")),
                     _mib(now and now.value("stamp_en_bytes")),
                     _mib(now and now.value("stamp_en_journal_bytes")), _ms(fsync),
                     _int(now and now.value("stamp_en_witness_records")),
                     _mib(now and now.value("stamp_en_witness_bytes"))])
    return _table(["NODE", "FD", "HEALTH", "EXTENTS", "DATA MiB", "JOURNAL MiB",
                   "FSYNC P99 MS", "WITNESS RECORDS", "WITNESS MiB"], rows,
                  "extent nodes (disk, CURP witness)",
                  ["EXTENTS", "DATA MiB", "JOURNAL MiB", "FSYNC P99 MS", "WITNESS RECORDS",
                   "WITNESS MiB"])


def _repairs(stamp: LocalStamp, frame: Frame) -> Any:
    """From the stream manager leader (any replica that answers, else)."""
    answering = [(rec.name, frame.of(rec.name)) for rec in _of_kind(stamp, KIND_STREAM_MANAGER)]
    answering = [(name, s) for name, s in answering if s is not None]
    answering.sort(key=lambda item: -item[1].value("stamp_raft_leader"))
    if not answering:
        return Text("repair backlog: no stream manager answers", style="red")
    name, sm = answering[0]
    return _table(["FROM", "REPLICAS TO COPY", "FRAGMENTS TO REBUILD", "IN FLIGHT",
                   "NODES ALIVE", "NODES DEAD", "EXTENTS"],
                  [[name, _int(sm.value("stamp_sm_repair_backlog", kind="replica")),
                    _int(sm.value("stamp_sm_repair_backlog", kind="fragment")),
                    _int(sm.value("stamp_sm_repairs_in_flight")),
                    _int(sm.value("stamp_sm_nodes", state="alive")),
                    _int(sm.value("stamp_sm_nodes", state="dead")),
                    _int(sm.value("stamp_sm_extents"))]],
                  "repair backlog", ["REPLICAS TO COPY", "FRAGMENTS TO REBUILD", "IN FLIGHT",
                                     "NODES ALIVE", "NODES DEAD", "EXTENTS"])


def _table(columns: list[str], rows: list[list[Any]], title: str, right: list[str]) -> Any:
    table = tables.table(columns, [], title, right)
    for row in rows:  # cells may be rich Text (health in colour)
        table.add_row(*(c if isinstance(c, Text) else Text("-" if c is None else str(c))
                        for c in row))
    return table


def _of_kind(stamp: LocalStamp, kind: str) -> list[Any]:
    return sorted((r for r in stamp.records.values() if r.kind == kind),
                  key=lambda r: _order(r.name))


def _order(name: str) -> tuple[str, int]:
    prefix, _, number = name.rpartition("-")
    return (prefix, int(number)) if number.isdigit() else (name, 0)


def _num(value: float | None) -> str | None:
    return None if value is None else f"{value:,.1f}"


def _int(value: float | None) -> str | None:
    return None if value is None else f"{int(value):,}"


def _ms(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds * 1000:,.2f}"


def _mib(nbytes: float | None) -> str | None:
    return None if nbytes is None else f"{nbytes / MiB_F:,.1f}"
