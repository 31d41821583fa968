"""Partition-layer benchmarks on a whole stamp of their own (3 lock, 3 SM, 9 EN, 2 PM, 2 PS):

- `log-append`: 1, 8 and 32 concurrent appenders of 1 KiB records, one record per call and
  batches of 100 -> records/s, MB/s, p50/p99 ms per call. Targets (issue 6): 32 appenders of
  single records >= 5,000 records/s; batches of 100 >= 50,000 records/s; 1 appender p50 <= 3 ms.
- `partition-load`: the time a PS takes to load a partition holding 10 MB, then 1 GB, of
  checkpointed data (the partition is moved between the two PSs; the load is timed by the
  PS). Target: ratio <= 1.5.
- `ps-failover`: SIGKILL the PS serving a log -> first acknowledged append on the new owner.
  Target: <= 3 s.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import uvloop

from common import rpc
from common.config import KiB, MiB
from common.errors import StampError
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.client import AsyncPartitionClient
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import latency_metrics, row
from tools.local_stamp import LocalStamp

Progress = Callable[[str], None]
RECORD_BYTES = 1 * KiB


def _with_stamp(config_text: str, body: Callable[[LocalStamp], Any], progress: Progress
                ) -> Any:
    return with_fresh_stamp(config_text, body, progress, stream_layer_only=False)


def _client(stamp: LocalStamp) -> AsyncPartitionClient:
    return AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                stamp.config.partition)


# ---- log-append ------------------------------------------------------------------------------

def run_log_append(seconds: float = 5.0, progress: Progress = lambda _: None
                   ) -> list[dict[str, Any]]:
    return _with_stamp("", lambda stamp: uvloop.run(_log_append(stamp, seconds, progress)),
                       progress)


async def _log_append(stamp: LocalStamp, seconds: float, progress: Progress
                      ) -> list[dict[str, Any]]:
    client = _client(stamp)
    rows = []
    try:
        await client.append("bench", "warm-up", [b"x"])
        for batch in (1, 100):
            for clients in (1, 8, 32):
                progress(f"{clients} appenders, {batch} record(s) per append, {seconds:g} s")
                rows.append(await _append_phase(client, clients, batch, seconds))
    finally:
        await client.close()
    return rows


async def _append_phase(client: AsyncPartitionClient, clients: int, batch: int,
                        seconds: float) -> dict[str, Any]:
    records = [os.urandom(RECORD_BYTES) for _ in range(batch)]
    latencies: list[float] = []
    stop_at = time.monotonic() + seconds

    async def appender(index: int) -> None:
        log = f"bench-{clients}-{batch}-{index}"
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            await client.append("bench", log, records)
            latencies.append(time.perf_counter() - started)

    started = time.monotonic()
    await asyncio.gather(*(appender(i) for i in range(clients)))
    elapsed = time.monotonic() - started
    total = len(latencies) * batch
    return row({"clients": clients, "batch": batch, "record_bytes": RECORD_BYTES},
               {"records_per_s": round(total / elapsed, 1),
                "mb_per_s": round(total * RECORD_BYTES / elapsed / 1e6, 2),
                **latency_metrics(latencies)})


# ---- partition-load --------------------------------------------------------------------------

def run_partition_load(sizes_mb: tuple[int, ...] = (10, 1000), trials: int = 3,
                       progress: Progress = lambda _: None) -> list[dict[str, Any]]:
    return _with_stamp("", lambda stamp: uvloop.run(
        _partition_load(stamp, sizes_mb, trials, progress)), progress)


async def _partition_load(stamp: LocalStamp, sizes_mb: tuple[int, ...], trials: int,
                          progress: Progress) -> list[dict[str, Any]]:
    client = _client(stamp)
    rows: list[dict[str, Any]] = []
    written = 0
    value = os.urandom(60 * KiB)  # below the blob threshold: the rows hold the bytes
    try:
        for size_mb in sizes_mb:
            target = size_mb * 1_000_000
            progress(f"writing up to {size_mb} MB of rows")
            written = await _fill(client, written, target, value, progress)
            times = []
            for trial in range(trials):
                times.append(await _move_and_time_load(stamp, client))
                progress(f"{size_mb} MB: load {trial + 1}/{trials} took {times[-1]:.3f} s")
            rows.append(row({"data_mb": size_mb, "trials": trials},
                            {"load_seconds": round(statistics.median(times), 4),
                             "max_seconds": round(max(times), 4)}))
        if len(rows) == 2:
            ratio = rows[1]["metrics"]["load_seconds"] / max(rows[0]["metrics"]["load_seconds"],
                                                             1e-6)
            rows.append(row({"compare": f"{sizes_mb[1]} MB vs {sizes_mb[0]} MB"},
                            {"ratio": round(ratio, 3)}))
    finally:
        await client.close()
    return rows


async def _fill(client: AsyncPartitionClient, written: int, target: int, value: bytes,
                progress: Progress) -> int:
    per_call = 16
    next_report = written + 100_000_000

    async def writer(index: int) -> None:
        nonlocal written, next_report
        n = 0
        while written < target:
            rows = [("put", f"w{index}-{written}-{n}-{i}", value) for i in range(per_call)]
            await client.batch("bench", f"fill-{index}", rows)
            written += per_call * len(value)
            n += 1
            if written >= next_report:
                progress(f"  {written / 1e6:,.0f} MB written")
                next_report += 100_000_000
    await asyncio.gather(*(writer(i) for i in range(4)))
    return written


async def _move_and_time_load(stamp: LocalStamp, client: AsyncPartitionClient) -> float:
    current, _ = await client.partition_map()
    entry = current.get(1)
    target = next(r for r in stamp.partition_servers() if r.name != entry.server)
    for manager in stamp.partition_managers():
        stub = pb_grpc.PartitionManagerStub(rpc.aio_channel(manager.address, 16 * MiB))
        try:
            await rpc.call(stub.Move(pb.MoveRequest(partition_id=1, server=target.name),
                                     timeout=300))
            break
        except StampError:
            continue
    ps = pb_grpc.PartitionServerStub(rpc.aio_channel(target.address, 16 * MiB))
    report = await rpc.call(ps.Load(pb.LoadRequest(partition_id=1, range=entry.range_pb()),
                                    timeout=60))
    await client.refresh_map()
    return report.seconds


# ---- ps-failover -----------------------------------------------------------------------------

def run_ps_failover(trials: int = 5, progress: Progress = lambda _: None
                    ) -> list[dict[str, Any]]:
    return _with_stamp("", lambda stamp: uvloop.run(_ps_failover(stamp, trials, progress)),
                       progress)


async def _ps_failover(stamp: LocalStamp, trials: int, progress: Progress
                       ) -> list[dict[str, Any]]:
    client = _client(stamp)
    gaps: list[float] = []
    try:
        for trial in range(trials):
            await client.append("bench", "failover", [b"before"])
            current, _ = await client.partition_map()
            victim = current.get(1).server
            stamp.kill(victim)
            killed = time.monotonic()
            await client.append("bench", "failover", [b"after"])
            gaps.append(time.monotonic() - killed)
            progress(f"trial {trial + 1}/{trials}: {gaps[-1]:.3f} s to the first append on "
                     f"the new owner")
            await asyncio.to_thread(stamp.start, victim)
    finally:
        await client.close()
    return [row({"trials": trials}, {"p50_seconds": round(statistics.median(gaps), 3),
                                     "max_seconds": round(max(gaps), 3)})]
