"""`stamp bench geo` (issue 30): inter-stamp replication on a location of two small stamps of
its own (tools/local_location.py), through the SDK.

- For the `log-append` loads 32x1 and 32x100 (1 KiB records): the primary's records/s for an
  account replicated to its secondary against an account of the same stamp that is in no
  location (nothing shipped), the two taking turns (this machine's speed drifts); on the
  replicated turns, the replication lag sampled every LAG_SAMPLE_S: how far the account's
  last sync time (the oldest of its partitions' at the primary) is behind now, p50 and p99.
  Targets: p99 <= 1 s at 32x1; ratio replicated / not >= 0.85. Then how long after the
  writers stop the secondary has every write (`catch_up_s`).
- A planned failover under FAILOVER_WRITERS single-record SDK writers: the longest pause a
  writer saw (between two acknowledged appends), and the failover's own time. Target: pause
  <= 2 s.
- Last, an unplanned failover: a burst of writes, every process of the primary stamp
  SIGKILLed, then the failover (tools/geo_account.unplanned_failover): from its start to the
  first write a fresh SDK client has acknowledged at the new primary (target <= 5 s), and the
  seconds of writes the location could not vouch for (from the account's last sync time it
  had to the kill: the report interval, the heartbeat and the lag).
(A migration: `stamp bench geo-migrate`, tools/bench/geo_migrate.py.)
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stampsdk.aio import Client as AsyncClient

from common import rpc
from common.errors import Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from tools.bench.front_end import RECORD_BYTES, Append, Phase, phase, turns_for
from tools.bench.measure import latency_metrics, percentile, row
from tools.geo_account import (
    accounts_at,
    planned_failover,
    shipping_in,
    shipping_of,
    stamps_of,
    unplanned_failover,
    unplanned_risk,
)
from tools.local_location import LocalLocation

Progress = Callable[[str], None]
LOADS = ((32, 1), (32, 100))
LAG_SAMPLE_S = 0.05
FAILOVER_WRITERS = 8
REPLICATED, ALONE = "replicated", "not replicated"
CATCH_UP_TIMEOUT_S = 600.0


def run_geo(seconds: float = 5.0, progress: Progress = lambda _: None,
            ship_pace_ms: int | None = None) -> list[dict[str, Any]]:
    """`ship_pace_ms`: the stamps' partition.geo_ship_pace_ms (None: the default)."""
    directory = Path(tempfile.mkdtemp(prefix="stamp-bench-geo-"))
    settings = "" if ship_pace_ms is None else \
        f"[partition]\ngeo_ship_pace_ms = {ship_pace_ms}\n"
    location = LocalLocation(directory / "location", stamp_settings=settings)
    try:
        progress("starting a location of two stamps")
        location.up()
        return asyncio.run(_geo(location, seconds, progress))
    finally:
        location.down()
        shutil.rmtree(directory, ignore_errors=True)


async def _geo(location: LocalLocation, seconds: float, progress: Progress
               ) -> list[dict[str, Any]]:
    from tools.cmd_location import create_account

    placement, account = await asyncio.to_thread(create_account, location, "geo-bench")
    primary = stamps_of(location)[placement.primary]
    with accounts_at(primary) as accounts:
        alone = accounts.create("solo-bench")  # a stand-alone account: nothing ships
    progress("waiting until the primary's partitions ship")
    await _shipping(primary)
    fronts = [r.address for r in primary.front_ends()]
    text = (f"Location={','.join(location.location_endpoints())};Account=geo-bench;"
            f"Key={base64.b64encode(account.keys[0]).decode()}")
    rows: list[dict[str, Any]] = []
    async with AsyncClient.from_connection_string(text) as replicated, \
            AsyncClient(fronts, "solo-bench", key=alone.keys[0]) as solo:
        paths: dict[str, Append] = {REPLICATED: replicated.append, ALONE: solo.append}
        for name, append in paths.items():
            await append(f"warm-{name.replace(' ', '-')}", [b"x"])
        for clients, batch in LOADS:
            rows += await _load(primary, paths, clients, batch, seconds, progress)
            # What is left to ship once the writers stop: how long the secondary takes to
            # have it all (and the next load, or the failover, starts from no lag).
            progress(f"{clients}x{batch}: waiting until the secondary has every write")
            started = time.monotonic()
            await _shipping(primary, timeout_s=CATCH_UP_TIMEOUT_S)
            rows[-1]["metrics"]["catch_up_s"] = round(time.monotonic() - started, 3)
        rows.append(await _failover(location, text, progress))
    rows.append(await _unplanned(location, text, progress))
    return rows


async def _load(primary: Any, paths: dict[str, Append], clients: int, batch: int,
                seconds: float, progress: Progress) -> list[dict[str, Any]]:
    found: dict[str, list[Phase]] = {p: [] for p in paths}
    lags: list[float] = []
    turns = turns_for(seconds)
    for turn in range(turns):
        order = list(paths.items())
        for name, append in order if turn % 2 == 0 else reversed(order):
            progress(f"{clients}x{batch}, {name}, turn {turn + 1}/{turns}")
            sampler = (asyncio.get_running_loop().create_task(_sample_lag(primary, lags))
                       if name == REPLICATED else None)
            found[name].append(await phase(append, name.replace(" ", "-"), clients, batch,
                                           seconds / turns))
            if sampler is not None:
                sampler.cancel()
                await asyncio.gather(sampler, return_exceptions=True)
    figures = {name: _figures(phases) for name, phases in found.items()}
    ordered = sorted(lags)
    rows = [row({"path": name, "clients": clients, "batch": batch,
                 "record_bytes": RECORD_BYTES, "turns": turns}, figures[name])
            for name in paths]
    rows.append(row({"compare": f"{REPLICATED} vs {ALONE}, {clients}x{batch}"}, {
        "ratio": round(figures[REPLICATED]["records_per_s"]
                       / max(figures[ALONE]["records_per_s"], 1e-9), 3),
        "lag_p50_s": round(percentile(ordered, 0.5), 3),
        "lag_p99_s": round(percentile(ordered, 0.99), 3),
        "lag_max_s": round(ordered[-1], 3) if ordered else 0.0,
        "lag_samples": len(ordered)}))
    return rows


def _figures(phases: Sequence[Phase]) -> dict[str, Any]:
    total = sum(p[0] for p in phases)
    elapsed = sum(p[2] for p in phases)
    return {"records_per_s": round(total / elapsed, 1),
            **latency_metrics([latency for p in phases for latency in p[1]])}


async def _shipping(primary: Any, timeout_s: float = 30.0) -> None:
    """Until the account's partitions at the primary ship, caught up (they attach within
    5 s of the stamp joining its location)."""
    deadline = time.monotonic() + timeout_s
    while True:
        shipping = await shipping_of(primary, "geo-bench")
        if shipping is not None and shipping.lag_ops == 0:
            return
        if time.monotonic() > deadline:
            raise Unavailable(f"the primary's partitions do not ship ({shipping})")
        await asyncio.sleep(0.2)


async def _sample_lag(primary: Any, lags: list[float]) -> None:
    """How far the account's last sync time is behind now, every LAG_SAMPLE_S (from the
    primary's partition servers, over channels kept open)."""
    channels = [rpc.aio_channel(r.address, 16 << 20) for r in primary.partition_servers()]
    try:
        stubs = [pb_grpc.PartitionServerStub(channel) for channel in channels]
        while True:
            loads = [await rpc.call(stub.Status(pb.ServerStatusRequest(), timeout=5))
                     for stub in stubs]
            shipping = shipping_in(loads, "geo-bench")
            if shipping is not None:
                lags.append(max(0.0, time.time() - shipping.synced_s))
            await asyncio.sleep(LAG_SAMPLE_S)
    finally:
        for channel in channels:
            await channel.close()


class PauseWatch:
    """`count` single-record SDK writers, each to its own log, until `stop`: the gaps between
    two acknowledged appends of a writer (the longest is the pause it saw), and errors."""

    def __init__(self, text: str, count: int, prefix: str) -> None:
        self.gaps: list[float] = []
        self.errors: list[str] = []
        self._stop = asyncio.Event()
        self._tasks = [asyncio.get_running_loop().create_task(self._write(text, f"{prefix}-{i}"))
                       for i in range(count)]

    async def _write(self, text: str, log: str) -> None:
        async with AsyncClient.from_connection_string(text, timeout_s=60) as client:
            last = time.monotonic()
            while not self._stop.is_set():
                try:
                    await client.append(log, [b"r" * RECORD_BYTES])
                except Exception as exc:  # a writer's error is a result to report
                    self.errors.append(repr(exc))
                    return
                now = time.monotonic()
                self.gaps.append(now - last)
                last = now

    async def stop(self) -> dict[str, Any]:
        """Stop the writers; the pause figures."""
        self._stop.set()
        await asyncio.gather(*self._tasks)
        gaps = self.gaps
        return {"pause_max_s": round(max(gaps), 3) if gaps else 0.0,
                "pause_p50_ms": round(statistics.median(gaps) * 1000, 3) if gaps else 0.0,
                "writer_errors": len(self.errors)}


async def _failover(location: LocalLocation, text: str, progress: Progress) -> dict[str, Any]:
    """FAILOVER_WRITERS writers; a planned failover among them: the longest pause."""
    watch = PauseWatch(text, FAILOVER_WRITERS, "failover")
    await asyncio.sleep(1.0)
    progress("planned failover under load")
    report = await asyncio.to_thread(planned_failover, location, "geo-bench")
    await asyncio.sleep(2.0)  # writers go on at the new primary
    pauses = await watch.stop()
    return row({"failover": "planned", "writers": FAILOVER_WRITERS}, {
        "pause_max_s": pauses["pause_max_s"], "pause_p50_ms": pauses["pause_p50_ms"],
        "failover_s": round(report.total_s, 3),
        "front_end_cache_wait_s": round(report.fenced_wait_s, 3),
        "drain_s": round(report.drain_s, 3),
        "writer_errors": pauses["writer_errors"]})


async def _unplanned(location: LocalLocation, text: str, progress: Progress
                     ) -> dict[str, Any]:
    """The primary stamp SIGKILLed whole, then an unplanned failover (module docstring)."""
    async with AsyncClient.from_connection_string(text) as client:
        for _ in range(200):
            await client.append("unplanned", [b"r" * RECORD_BYTES])
    risk_before = await asyncio.to_thread(unplanned_risk, location, "geo-bench")
    progress(f"unplanned failover: SIGKILL every process of {risk_before.placement.primary}")
    await asyncio.to_thread(stamps_of(location)[risk_before.placement.primary].kill_all)
    killed_s = time.time()
    started = time.monotonic()
    risk = await asyncio.to_thread(unplanned_risk, location, "geo-bench")
    report = await asyncio.to_thread(unplanned_failover, location, "geo-bench", risk)
    async with AsyncClient.from_connection_string(text, timeout_s=30) as fresh:
        await fresh.append("unplanned", [b"first at the new primary"])
    return row({"failover": "unplanned"}, {
        "command_to_first_write_s": round(time.monotonic() - started, 3),
        "failover_s": round(report.total_s, 3),
        "at_risk_s": round(killed_s - risk.synced_s, 3) if risk.synced_s else None,
        "old_primary": report.fenced})
