"""The cost of metrics (issue 19): `stamp bench log-append --metrics compare`.

Two stamps of the default shape run side by side, one with metrics on (every process serves
Prometheus metrics, the RPC interceptor counts and times, the servers record) and one with
`[watch] metrics_enabled = false`. The log-append loads (1 KiB records; 1, 8 and 32
appenders; single records and batches of 100) go to each in turn, alternating which goes
first, in turns of about a second (this shared machine's speed drifts within seconds;
`front_end.turns_for`), on the same logs from turn to turn. Every process of the metrics
stamp is scraped as the scrape configuration asks (every `watch.scrape_interval_ms` of its
turns), so a scrape's cost is counted rather than hidden. Target: ratio on/off >= 0.97
(at most 3% fewer records/s).

Throughput on a machine shared with other work swings by more than the 3% measured (the
same code gave ratios from 0.4 to 1.3 in fe-append's history). So each turn also counts the
CPU time the serving stamp's processes spent (/proc, user + system): CPU per record is what
metrics add, and other load hardly inflates it. `cpu_ratio` = CPU per record off / on is the
throughput ratio a CPU-bound stamp would see. Last, what recording one operation costs in
this process (timed, best of 9): a partition server's per-operation record with metrics on,
the same calls on the null objects of metrics off, and prometheus-client's own Histogram.
"""

from __future__ import annotations

import asyncio
import math
import time
import timeit
from collections.abc import Callable
from typing import Any

import uvloop
from prometheus_client import CollectorRegistry, Histogram

from common import metrics
from partition_layer.client import AsyncPartitionClient
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.front_end import cpu_seconds, phase, turns_for
from tools.bench.measure import latency_metrics, row
from tools.local_stamp import LocalStamp
from tools.scrape import scrape_many

Progress = Callable[[str], None]
RECORD_BYTES = 1024
LOADS = ((1, 1), (8, 1), (32, 1), (1, 100), (8, 100), (32, 100))  # (appenders, batch)
METRICS_OFF = "[watch]\nmetrics_enabled = false\n"
TARGET_RATIO = 0.97


def run_metrics_compare(seconds: float = 5.0, progress: Progress = lambda _: None
                        ) -> list[dict[str, Any]]:
    progress("two stamps: one with metrics on, one with metrics off")
    return with_fresh_stamp("", lambda on: with_fresh_stamp(
        METRICS_OFF, lambda off: uvloop.run(_compare(on, off, seconds, progress)), progress,
        stream_layer_only=False), progress, stream_layer_only=False)


async def _compare(on: LocalStamp, off: LocalStamp, seconds: float, progress: Progress
                   ) -> list[dict[str, Any]]:
    assert all(r.metrics_address for r in on.records.values())
    assert not any(r.metrics_address for r in off.records.values())
    stamps = {"on": on, "off": off}
    clients = {"on": _client(on), "off": _client(off)}
    scraped = 0
    on_s, scrape_every_s = 0.0, on.config.watch.scrape_interval_ms / 1000
    next_scrape_s = 0.0
    rows: list[dict[str, Any]] = []
    try:
        for name, client in clients.items():
            await client.append("bench", f"warm-{name}", [b"x"])
        rows.append(await _idle(stamps, seconds))
        for appenders, batch in LOADS:
            found: dict[str, list[tuple[int, list[float], float]]] = {"on": [], "off": []}
            cpu_s = {"on": 0.0, "off": 0.0}
            turns = turns_for(seconds)
            for turn in range(turns):
                order = ("on", "off") if turn % 2 == 0 else ("off", "on")
                for name in order:
                    progress(f"{appenders}x{batch} metrics {name}, turn {turn + 1}/{turns}")
                    client = clients[name]
                    before = _stamp_cpu_s(stamps[name])
                    found[name].append(await phase(
                        lambda log, records, c=client: c.append("bench", log, records),
                        "m", appenders, batch, seconds / turns))
                    if name == "on":
                        on_s += found[name][-1][2]
                        if on_s >= next_scrape_s:
                            scraped += await _scrape_once(on)
                            next_scrape_s = on_s + scrape_every_s
                    cpu_s[name] += _stamp_cpu_s(stamps[name]) - before
            rows.extend(_rows(found, cpu_s, appenders, batch))
    finally:
        for client in clients.values():
            await client.close()
    rows.append(overall(rows))
    rows.append(row({"compare": "scrapes of the metrics stamp"}, {"scrapes": scraped}))
    rows.append(recording_cost())
    return rows


RECORDINGS_TIMED = 100_000


def recording_cost() -> dict[str, Any]:
    """Nanoseconds to record one operation (a latency and a count), as the PS does."""
    clock = time.perf_counter
    timing, count = metrics.Timing(metrics.LATENCY_BUCKETS_S), metrics.Count()
    reference = Histogram("bench_h", "reference", buckets=metrics.LATENCY_BUCKETS_S,
                          registry=CollectorRegistry())

    def on() -> None:
        started = clock()
        timing.observe(clock() - started)
        count.inc()

    def off() -> None:
        started = clock()
        metrics.NULL.observe(clock() - started)
        metrics.NULL.inc()

    def client_library() -> None:
        started = clock()
        reference.observe(clock() - started)

    def ns(body: Callable[[], None]) -> float:
        best = min(timeit.repeat(body, number=RECORDINGS_TIMED, repeat=9))
        return round(best / RECORDINGS_TIMED * 1e9, 1)
    return row({"compare": "recording one operation, in process"},
               {"metrics_on_ns": ns(on), "metrics_off_ns": ns(off),
                "prometheus_client_histogram_ns": ns(client_library)})


def overall(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The geometric mean of each load's ratios: one figure for the whole run, in which one
    load's luck (a turn that met the machine's other work) weighs as much as another's."""
    compared = [r["metrics"] for r in rows if "ratio" in r["metrics"]]

    def mean(key: str) -> float:
        return round(math.prod(m[key] for m in compared) ** (1 / len(compared)), 3)
    return row({"compare": f"metrics on vs off, all {len(compared)} loads (geometric mean)"},
               {"ratio": mean("ratio"), "cpu_ratio": mean("cpu_ratio")})


def _client(stamp: LocalStamp) -> AsyncPartitionClient:
    return AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                stamp.config.partition)


async def _idle(stamps: dict[str, LocalStamp], seconds: float) -> dict[str, Any]:
    """CPU both stamps spend doing nothing asked of them (heartbeats, leases, health checks;
    the metrics stamp scraped once), over the same `seconds`: what the per-record CPU of a
    light load mostly is."""
    before = {name: _stamp_cpu_s(stamp) for name, stamp in stamps.items()}
    await _scrape_once(stamps["on"])
    await asyncio.sleep(seconds)
    used = {name: _stamp_cpu_s(stamp) - before[name] for name, stamp in stamps.items()}
    return row({"compare": f"idle, both stamps over the same {seconds:g} s"},
               {"on_cpu_percent": round(100 * used["on"] / seconds, 1),
                "off_cpu_percent": round(100 * used["off"] / seconds, 1)})


def _stamp_cpu_s(stamp: LocalStamp) -> float:
    """CPU seconds every process of `stamp` has used so far."""
    total = 0.0
    for rec in stamp.records.values():
        try:
            total += cpu_seconds(rec.pid)
        except (OSError, IndexError, ValueError):  # gone: it has no more to add
            continue
    return total


async def _scrape_once(stamp: LocalStamp) -> int:
    found = await scrape_many(r.metrics_address for r in stamp.records.values())
    return sum(1 for samples in found.values() if samples is not None)


def _rows(found: dict[str, list[tuple[int, list[float], float]]], cpu_s: dict[str, float],
          appenders: int, batch: int) -> list[dict[str, Any]]:
    rows, figures = [], {}
    for name, phases in found.items():
        total = sum(p[0] for p in phases)
        elapsed = sum(p[2] for p in phases)
        figures[name] = {"records_per_s": round(total / elapsed, 1),
                         "mb_per_s": round(total * RECORD_BYTES / elapsed / 1e6, 2),
                         "server_cpu_us_per_record": round(cpu_s[name] * 1e6 / max(total, 1),
                                                           2),
                         **latency_metrics([x for p in phases for x in p[1]])}
        rows.append(row({"metrics": name, "clients": appenders, "batch": batch,
                         "record_bytes": RECORD_BYTES, "turns": len(phases)}, figures[name]))
    ratio = figures["on"]["records_per_s"] / max(figures["off"]["records_per_s"], 1e-9)
    rows.append(row({"compare": f"metrics on vs off, {appenders}x{batch}"},
                    {"ratio": round(ratio, 3),
                     "cpu_ratio": round(figures["off"]["server_cpu_us_per_record"]
                                        / max(figures["on"]["server_cpu_us_per_record"], 1e-9),
                                        3),
                     "added_p50_ms": round(figures["on"]["p50_ms"] - figures["off"]["p50_ms"],
                                           3)}))
    return rows
