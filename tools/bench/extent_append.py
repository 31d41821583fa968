"""`stamp bench extent-append`: one extent, 3 replicas on 3 extent node processes, appends
through the real client and protocol.

Phases (each on a fresh extent): 4 KiB blocks with 1, 8 and 32 concurrent appenders, then
1 MiB blocks with 4 and 8; and, for comparison, the disk's own 4 KiB append+fsync rate measured on
the journal directory. Targets (issue 2): 32 appenders >= 5,000 appends/s (above the fsync
rate: group commit), one sequential appender p50 <= 2 ms, 1 MiB blocks >= 100 MB/s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

from common.checksums import crc32c
from common.config import ExtentNodeSpec, GiB, KiB, MiB, default_config
from common.ids import random_extent_id
from stream_layer.extent_client import AsyncExtentClient
from tools.bench.measure import latency_metrics, row
from tools.local_stamp import LocalStamp

PHASES = [(4 * KiB, 1), (4 * KiB, 8), (4 * KiB, 32), (1 * MiB, 4), (1 * MiB, 8)]
WARMUP_S = 0.5
# Long phases of 1 MiB appends outgrow the default 256 MiB extent; the bench measures one
# extent's append path, not rollover, so it gives its nodes a larger limit.
BENCH_EXTENT_BYTES_MAX = 8 * GiB


def run(seconds: float = 5.0, progress: Callable[[str], None] = lambda _: None
        ) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="stamp-bench-") as tmp:
        config_path = Path(tmp) / "bench.toml"
        config_path.write_text(f"[extent_node]\nextent_bytes_max = {BENCH_EXTENT_BYTES_MAX}\n")
        config = dataclasses.replace(
            default_config(),
            extent_node=dataclasses.replace(default_config().extent_node,
                                            extent_bytes_max=BENCH_EXTENT_BYTES_MAX),
            extent_nodes=tuple(ExtentNodeSpec(f"en-{i}", f"fd-{i}", f"ud-{i}", 0)
                               for i in (1, 2, 3)),
            stream_managers=(), lock_servers=(), partition_managers=(), partition_servers=())
        stamp = LocalStamp(Path(tmp) / "stamp", config, str(config_path))
        progress("starting 3 extent nodes")
        stamp.up()
        try:
            journal_dir = Path(stamp.record("en-1").dir) / "journal"
            progress(f"disk: 4 KiB append+fsync on {journal_dir}")
            rows = [disk_fsync_rate(journal_dir, min(seconds, 3.0))]
            addresses = [n.address for n in stamp.extent_nodes()]
            rows += uvloop.run(_phases(addresses, seconds, progress))
        finally:
            stamp.down()
    return rows


async def _phases(addresses: list[str], seconds: float,
                  progress: Callable[[str], None]) -> list[dict[str, Any]]:
    client = AsyncExtentClient()
    rows = []
    try:
        for block_bytes, clients in PHASES:
            progress(f"{clients} appenders x {block_bytes} B blocks for {seconds:g}s")
            rows.append(await _append_phase(client, addresses, block_bytes, clients, seconds))
    finally:
        await client.close()
    return rows


async def _append_phase(client: AsyncExtentClient, addresses: list[str], block_bytes: int,
                        clients: int, seconds: float) -> dict[str, Any]:
    extent_id = random_extent_id()
    await client.create_replicated(extent_id, addresses)
    payload = os.urandom(block_bytes)
    crc = crc32c(payload)
    latencies: list[float] = []
    measuring = False
    stop_at = time.monotonic() + WARMUP_S + seconds

    async def appender() -> None:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            await client.append(addresses[0], extent_id, [payload], [crc])
            if measuring:
                latencies.append(time.perf_counter() - started)

    workers = [asyncio.ensure_future(appender()) for _ in range(clients)]
    await asyncio.sleep(WARMUP_S)
    measuring = True
    began = time.perf_counter()
    await asyncio.gather(*workers)
    elapsed = time.perf_counter() - began
    count = len(latencies)
    return row({"block_bytes": block_bytes, "clients": clients, "replicas": 3},
               {"appends_per_s": round(count / elapsed, 1),
                "mb_per_s": round(count * block_bytes / elapsed / 1e6, 1),
                **latency_metrics(latencies), "seconds": round(elapsed, 2)})


def disk_fsync_rate(directory: Path, seconds: float) -> dict[str, Any]:
    """The disk's own rate of sequential 4 KiB append+fdatasync, for comparison."""
    path = directory / "bench-fsync.tmp"
    block = os.urandom(4 * KiB)
    latencies = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        stop_at = time.perf_counter() + seconds
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    total = sum(latencies)
    return row({"block_bytes": 4 * KiB, "clients": 1, "replicas": 0, "system": "disk-fsync"},
               {"appends_per_s": round(len(latencies) / total, 1),
                "mb_per_s": round(len(latencies) * 4 * KiB / total / 1e6, 1),
                **latency_metrics(latencies), "seconds": round(total, 2),
                "mean_ms": round(statistics.fmean(latencies) * 1000, 3)})
