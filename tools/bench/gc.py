"""`stamp bench gc`: extents examined and deleted per second by `stamp job gc`, and the bytes
it reclaims (measured on the extent nodes' disks, before and after).

A stamp of its own (3 lock replicas for the marks, 3 SMs, 9 ENs; no partition layer) with a
zero grace period gets GC_BENCH_STREAMS streams of small extents, then every stream but one
is deleted. A first run marks (examining every copy on every node and every extent in the
stream manager), a second sweeps; both on one Spark session started before (start-up, the
session and a dry run that starts its Python workers, is reported apart)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from common.config import load_config
from spark.driver import job_session, run_job
from stream_layer.client import AsyncStreamClient
from tools.bench.measure import row
from tools.local_stamp import LocalStamp

MiB = 1 << 20
GC_BENCH_STREAMS = 32
GC_BENCH_STREAM_BYTES = 8 * MiB
GC_BLOCK_BYTES = 256 * 1024
GC_EXTENT_BYTES = 2 * MiB      # 4+ extents per stream
GC_MASTER = "local[2]"
CONFIG = (f"[extent_node]\nextent_bytes_max = {GC_EXTENT_BYTES}\n"
          "[jobs]\ngc_grace_s = 0\n[partition_manager]\nbalance_interval_s = 0\n")


def run_gc(progress: Any = lambda _: None) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="stamp-bench-") as tmp:
        config_path = Path(tmp) / "bench.toml"
        config_path.write_text(CONFIG)
        config = dataclasses.replace(load_config(config_path).with_ephemeral_ports(),
                                     partition_managers=(), partition_servers=(),
                                     front_ends=(), job_schedulers=())
        progress("starting 3 lock, 3 SM, 9 EN")
        stamp = LocalStamp(Path(tmp) / "stamp", config, str(config_path))
        try:
            stamp.up()
            return _bench(stamp, progress)
        finally:
            stamp.down()


def _bench(stamp: LocalStamp, progress: Any) -> list[dict[str, Any]]:
    progress(f"writing {GC_BENCH_STREAMS} streams of {GC_BENCH_STREAM_BYTES // MiB} MiB, "
             f"then deleting all but one")
    extents = asyncio.run(_write_and_delete(stamp))
    before = _disk_bytes(stamp)
    began = time.perf_counter()
    session = job_session(GC_MASTER, app_name="stamp-bench-gc")
    startup_s = time.perf_counter() - began
    try:
        mark = run_job("gc", str(stamp.data_dir), GC_MASTER, session=session)
        progress(f"mark run: {mark.seconds:.2f} s over {extents} extents")
        # A dry run of the sweep starts Spark's Python workers: start-up too.
        began = time.perf_counter()
        run_job("gc", str(stamp.data_dir), GC_MASTER, dry_run=True, session=session)
        startup_s += time.perf_counter() - began
        sweep = run_job("gc", str(stamp.data_dir), GC_MASTER, session=session)
    finally:
        session.stop()
    after = _disk_bytes(stamp)
    totals = sweep.totals
    progress(f"sweep run: {totals['done']} items in {sweep.seconds:.2f} s")
    deleted = sum(1 for r in sweep.results if r.detail.startswith("extent deleted"))
    return [row({"what": "mark", "extents": extents, "master": GC_MASTER},
                {"seconds": round(mark.seconds, 3),
                 "extents_examined_per_s": round(extents / mark.seconds, 1)}),
            row({"what": "sweep", "extents": extents, "master": GC_MASTER},
                {"seconds": round(sweep.seconds, 3), "extents_deleted": deleted,
                 "extents_deleted_per_s": round(deleted / sweep.seconds, 1),
                 "bytes_reclaimed": before - after, "bytes_left": after,
                 "spark_startup_seconds": round(startup_s, 3)})]


async def _write_and_delete(stamp: LocalStamp) -> int:
    client = AsyncStreamClient([r.address for r in stamp.stream_managers()],
                               stamp.config.extent_node, stamp.config.stream_manager)
    try:
        block = os.urandom(GC_BLOCK_BYTES)

        async def fill(n: int) -> None:
            stream = await client.create_stream(f"bench-gc-{n}")
            for _ in range(GC_BENCH_STREAM_BYTES // GC_BLOCK_BYTES):
                await stream.append([block])
        await asyncio.gather(*(fill(n) for n in range(GC_BENCH_STREAMS)))
        count = len(await client.sm.list_extents())
        for n in range(1, GC_BENCH_STREAMS):
            await client.sm.delete_stream(f"bench-gc-{n}")
        return count
    finally:
        await client.close()


def _disk_bytes(stamp: LocalStamp) -> int:
    return sum(p.stat().st_size for node in stamp.extent_nodes()
               for p in (Path(node.dir) / "extents").glob("*.dat"))
