"""Partition-layer benchmarks on a whole stamp of their own (3 lock, 3 SM, 9 EN, 2 PM, 2 PS):

- `log-append`: 1, 8 and 32 concurrent appenders of 1 KiB records, one record per call and
  batches of 100 -> records/s, MB/s, p50/p99 ms per call. Targets (issue 6): 32 appenders of
  single records >= 5,000 records/s; batches of 100 >= 50,000 records/s; 1 appender p50 <= 3 ms.
- `partition-load`: SIGKILL the PS serving a partition of 10 MB, then 1 GB (`sizes_mb`),
  with a commit log tail since its last checkpoint -> the first read of a random old key
  answered by the new owner (detection, reassignment, load, tail replay and the index load
  of that key's run all included), as a polling client sees it. Target: ratio (largest /
  smallest) <= 1.5, p50 <= 3 s.
- `ps-failover`: SIGKILL the PS serving a log -> first acknowledged append on the new owner:
  the rest of the dead server's session (1.1-1.5 s), the PM's pass, the load (the dead
  server's partition lease ended at once), the client's next map fetch. Target (issue 29):
  <= 1.5 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from common import rpc
from common.checksums import crc32c
from common.config import KiB, MiB
from common.errors import StampError
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.client import AsyncPartitionClient
from partition_layer.requests import route_key
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import drop_page_cache, latency_metrics, row
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

def run_log_append(seconds: float = 5.0, progress: Progress = lambda _: None,
                   config_text: str = "") -> list[dict[str, Any]]:
    return _with_stamp(config_text,
                       lambda stamp: uvloop.run(_log_append(stamp, seconds, progress)),
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

# A failover is timed from the SIGKILL: each read attempt gives up after this long, so a
# client that polls the new owner sees it serve within one poll of when it does.
POLL_ATTEMPT_MS = 250
POLL_PAUSE_S = 0.01
FAILOVER_DEADLINE_S = 60.0


def run_partition_load(sizes_mb: tuple[int, ...] = (10, 1000), tail_mb: int = 4,
                       trials: int = 3, progress: Progress = lambda _: None
                       ) -> list[dict[str, Any]]:
    """For each size: fill a partition to it, checkpoint it once by a move (so every size
    starts with the same state), write `tail_mb` more into its commit log, then `trials`
    times: SIGKILL the serving PS and time until a read of a random old key (in the
    checkpoints, so its run's index must be loaded) is answered by the new owner. The tail
    is never checkpointed away: each new owner replays it (DESIGN §4: load time grows with
    the commit log since the last checkpoint, not with the partition's size)."""
    return _with_stamp("", lambda stamp: uvloop.run(
        _partition_load(stamp, sizes_mb, tail_mb, trials, progress)), progress)


async def _partition_load(stamp: LocalStamp, sizes_mb: tuple[int, ...], tail_mb: int,
                          trials: int, progress: Progress) -> list[dict[str, Any]]:
    client = _client(stamp)
    poller = AsyncPartitionClient([r.address for r in stamp.partition_managers()],
                                  dataclasses.replace(stamp.config.partition,
                                                      client_timeout_ms=POLL_ATTEMPT_MS))
    rng = random.Random(0)
    rows: list[dict[str, Any]] = []
    written: list[tuple[str, str, int]] = []  # (pname, row, crc32c of the value)
    try:
        for size_mb in sizes_mb:
            progress(f"writing up to {size_mb} MB of rows")
            await _fill(client, written, size_mb * 1_000_000, progress)
            old = list(written)
            await _move(stamp, client, old[0])  # everything so far into checkpoints
            progress(f"writing a {tail_mb} MB commit log tail (not checkpointed)")
            await _fill(client, written, size_mb * 1_000_000 + tail_mb * 1_000_000, progress)
            times = []
            for trial in range(trials):
                times.append(await _kill_and_time_first_read(stamp, client, poller,
                                                             rng.choice(old)))
                progress(f"{size_mb} MB: SIGKILL -> first read of an old key on the new "
                         f"owner {trial + 1}/{trials}: {times[-1]:.3f} s")
            rows.append(row({"data_mb": size_mb, "tail_mb": tail_mb, "trials": trials},
                            {"p50_seconds": round(statistics.median(times), 3),
                             "max_seconds": round(max(times), 3)}))
        if len(rows) >= 2:
            small, large = rows[0]["metrics"], rows[-1]["metrics"]
            rows.append(row({"compare": f"{sizes_mb[-1]} MB vs {sizes_mb[0]} MB"},
                            {"ratio": round(large["p50_seconds"]
                                            / max(small["p50_seconds"], 1e-6), 3)}))
    finally:
        await client.close()
        await poller.close()
    return rows


async def _fill(client: AsyncPartitionClient, written: list[tuple[str, str, int]],
                target: int, progress: Progress) -> None:
    """Put rows of 60 KiB (below the blob threshold: the rows hold the bytes) until the
    partition holds `target` bytes of values; `written` records (pname, row, crc32c of the
    value): a gigabyte of values is checked without being kept."""
    per_call = 16
    value_bytes = 60 * KiB
    next_report = len(written) * value_bytes + 100_000_000

    async def writer(index: int) -> None:
        nonlocal next_report
        while len(written) * value_bytes < target:
            pname = f"fill-{index}"
            batch = [(pname, f"w{index}-{len(written)}-{i}", os.urandom(value_bytes))
                     for i in range(per_call)]
            await client.batch("bench", pname, [("put", r, v) for _, r, v in batch])
            written.extend((p, r, crc32c(v)) for p, r, v in batch)
            if len(written) * value_bytes >= next_report:
                progress(f"  {len(written) * value_bytes / 1e6:,.0f} MB written")
                next_report += 100_000_000
    await asyncio.gather(*(writer(i) for i in range(4)))


async def _move(stamp: LocalStamp, client: AsyncPartitionClient,
                key: tuple[str, str, int]) -> None:
    """Move partition 1 to the other PS (it checkpoints on the way); wait until `key` is
    served there."""
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
    await client.refresh_map()
    await client.get("bench", key[0], key[1])


async def _kill_and_time_first_read(stamp: LocalStamp, client: AsyncPartitionClient,
                                    poller: AsyncPartitionClient,
                                    key: tuple[str, str, int]) -> float:
    """SIGKILL the owner of `key`'s partition; seconds until the first read of it is
    answered (by the new owner, with the right value). The killed PS is restarted after."""
    pname, row_key, value_crc = key
    current, _ = await client.partition_map()
    victim = current.lookup(route_key("bench", pname)).server
    # A cold load: the new owner reads the checkpoints' indexes from disk, not from the
    # pages the writes and earlier loads left cached.
    await asyncio.to_thread(drop_page_cache, _extent_node_files(stamp))
    stamp.kill(victim)
    killed = time.monotonic()
    while True:
        if time.monotonic() - killed > FAILOVER_DEADLINE_S:
            raise StampError(f"{pname}/{row_key}: no owner answered within "
                             f"{FAILOVER_DEADLINE_S:g} s of the kill")
        try:
            got, _ = await poller.get("bench", pname, row_key)
            elapsed = time.monotonic() - killed
            break
        except StampError:
            await asyncio.sleep(POLL_PAUSE_S)
            with contextlib.suppress(StampError):
                await poller.refresh_map()
    if crc32c(got) != value_crc:
        raise StampError(f"{pname}/{row_key}: read back other bytes after the failover")
    await asyncio.to_thread(stamp.start, victim)
    return elapsed


def _extent_node_files(stamp: LocalStamp) -> list[Path]:
    return [p for node in stamp.extent_nodes() for p in Path(node.dir).rglob("*")
            if p.is_file()]


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
