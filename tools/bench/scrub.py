"""`stamp bench scrub`: MB/s the scrub job verifies (every replica read and checked where it
lies) against the disk's own sequential read rate, measured in the same run, taking turns
(issue 18 target: ratio >= 0.5).

A stream-layer stamp of its own (3 SMs, 9 ENs) gets SCRUB_BENCH_MB of sealed extents
(3-way replicated: three times that on disk). Before every turn the page cache is told to
drop the extent files and the probe file (posix_fadvise DONTNEED, after a checkpoint made
them durable), so both read from the disk. Scrub MB/s counts every replica's bytes over the
job's time on an already started Spark (start-up, the session and a first dry-run job
that starts the Python workers, is reported apart)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from spark.driver import job_session, run_job
from stream_layer.client import AsyncStreamClient
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.measure import drop_page_cache, row
from tools.local_stamp import LocalStamp

MiB = 1 << 20
# Sealed data written (each byte on 3 replicas). A scrub job has a fixed cost (its Spark job
# and tasks, about 0.3 s here) that a real scrub spreads over whole nodes: with 256 MB it was
# a third of the job's time (907 MB/s, against 1,784 MB/s with 768 MB in the same hour).
SCRUB_BENCH_MB = 768
SCRUB_BLOCK_BYTES = 1 * MiB
SCRUB_STREAMS = 4
SCRUB_EXTENT_BYTES = 32 * MiB  # several extents: several Spark tasks
PROBE_CHUNK_BYTES = 8 * MiB
SCRUB_MASTER = "local[2]"
CONFIG = f"[extent_node]\nextent_bytes_max = {SCRUB_EXTENT_BYTES}\n"


def run_scrub(rounds: int = 2, progress: Any = lambda _: None) -> list[dict[str, Any]]:
    return with_fresh_stamp(CONFIG, lambda stamp: _bench(stamp, rounds, progress), progress,
                            stream_layer_only=True)


def _bench(stamp: LocalStamp, rounds: int, progress: Any) -> list[dict[str, Any]]:
    progress(f"writing {SCRUB_BENCH_MB} MB into {SCRUB_STREAMS} streams, sealed")
    asyncio.run(_write(stamp))
    probe = stamp.data_dir / "disk-probe.dat"
    _write_probe(probe, SCRUB_BENCH_MB * MiB)
    began = time.perf_counter()
    session = job_session(SCRUB_MASTER, app_name="stamp-bench-scrub")
    startup_s = time.perf_counter() - began
    rows: list[dict[str, Any]] = []
    try:
        # The first job on a session also starts Spark's Python workers: start-up too.
        began = time.perf_counter()
        run_job("scrub", str(stamp.data_dir), SCRUB_MASTER, dry_run=True, session=session)
        startup_s += time.perf_counter() - began
        disk, scrub = [], []
        for turn in range(rounds):
            drop_page_cache([probe])
            disk.append(_read_probe(probe))
            progress(f"turn {turn + 1}: disk sequential read {disk[-1]:.1f} MB/s")
            rows.append(row({"what": "disk_sequential_read", "turn": turn + 1,
                             "bytes": probe.stat().st_size}, {"mb_per_s": round(disk[-1], 1)}))
            drop_page_cache(_extent_files(stamp))
            report = run_job("scrub", str(stamp.data_dir), SCRUB_MASTER, session=session)
            totals = report.totals
            if totals["items"] != totals["ok"]:
                raise RuntimeError(f"scrub found trouble on a fresh stamp: {totals}")
            scrub.append(totals["bytes"] / report.seconds / 1e6)
            progress(f"turn {turn + 1}: scrub {scrub[-1]:.1f} MB/s over {totals['items']} "
                     f"extents")
            rows.append(row({"what": "scrub", "turn": turn + 1, "master": SCRUB_MASTER,
                             "extents": totals["items"], "bytes": totals["bytes"]},
                            {"mb_per_s": round(scrub[-1], 1),
                             "seconds": round(report.seconds, 3)}))
    finally:
        session.stop()
    rows.append(row({"what": "scrub_vs_disk"},
                    {"ratio": round(sum(scrub) / sum(disk), 3),
                     "spark_startup_seconds": round(startup_s, 3)}))
    return rows


async def _write(stamp: LocalStamp) -> None:
    client = AsyncStreamClient([r.address for r in stamp.stream_managers()],
                               stamp.config.extent_node, stamp.config.stream_manager)
    try:
        per_stream = SCRUB_BENCH_MB * MiB // SCRUB_STREAMS // SCRUB_BLOCK_BYTES

        async def fill(n: int) -> None:
            stream = await client.create_stream(f"bench-scrub-{n}")
            block = os.urandom(SCRUB_BLOCK_BYTES)
            for _ in range(per_stream):
                await stream.append([block])
            await stream.seal_last()
        await asyncio.gather(*(fill(n) for n in range(SCRUB_STREAMS)))
        for node in stamp.extent_nodes():  # everything in the extent files, durable
            await client.extents.checkpoint(node.address)
        await _until_sealed(client)
    finally:
        await client.close()


async def _until_sealed(client: AsyncStreamClient, timeout_s: float = 60.0) -> None:
    """Every replica of every sealed extent sealed on its node (the SM seals them after
    recording the length): scrub leaves unsealed ones unjudged."""
    deadline = time.monotonic() + timeout_s
    for info in await client.sm.list_extents():
        if info.state != "sealed":
            continue
        for address in info.addresses:
            while not (await client.extents.commit_length(address, info.extent_id))[1]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"extent {info.extent_id} not sealed on {address}")
                await asyncio.sleep(0.05)
            await client.extents.checkpoint(address)


def _extent_files(stamp: LocalStamp) -> list[Path]:
    return [p for node in stamp.extent_nodes()
            for p in (Path(node.dir) / "extents").glob("*.dat")]


def _write_probe(path: Path, size: int) -> None:
    chunk = os.urandom(PROBE_CHUNK_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(size // PROBE_CHUNK_BYTES):
            os.write(fd, chunk)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_probe(path: Path) -> float:
    """MB/s reading the probe file start to end in PROBE_CHUNK_BYTES reads."""
    fd = os.open(path, os.O_RDONLY)
    total = 0
    began = time.perf_counter()
    try:
        while data := os.read(fd, PROBE_CHUNK_BYTES):
            total += len(data)
    finally:
        os.close(fd)
    return total / (time.perf_counter() - began) / 1e6
