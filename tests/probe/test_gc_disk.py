"""The disk-usage test of issue 18: "Disk usage after trimming a log written with 1 GB and one
gc run is within 10% (plus a fixed overhead stated in the note) of the live data."

A log gets TOTAL_RECORDS 1 MiB records (three to an append: each append is one value in blob
data), is trimmed to its last LIVE_RECORDS records, and one `stamp job gc` run (its grace
period short and waited out within the run: jobs.gc_wait_grace_max_s) releases the extents
the partition no longer needs and deletes them. The extent nodes' directories (extent files,
journals, logs: everything) then hold at most 1.1 x the live bytes x 3 replicas, plus
FIXED_OVERHEAD_BYTES: per replica, one blob extent only partly trimmed (extent_bytes_max),
the open extents of the partition's four streams and its small log, row and metadata
extents, and the nodes' journals and logs (measured: see the test's print). Every
untrimmed record reads back afterwards.

The log is 256 MiB, not the issue's 1 GB: writing 1 GiB took 32 s of the test's 35 s, and
the claim is a ratio. The trimmed share is the same (7/8 of the log goes, as with 1 GiB and
128 MiB kept); the log still spans some 17 blob extents (five 3 MiB appends to a 16 MiB
extent), of which the gc run must release and delete all but the last three. The bound's
fixed overhead does not shrink with the data, so it is as strict in absolute terms: 178 MiB
allowed of the 774 MiB written (x3 replicas each), and a gc run that deleted nothing, or
only half, still fails it by hundreds of MiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import Trimmed
from common.proto import partition_pb2 as pb
from spark.driver import run_job
from tests.conftest import config_toml, stamp_config
from tests.probe.ps_direct import DirectPS, append_request
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
RECORD_BYTES = 1 * MiB
RECORDS_PER_APPEND = 3
TOTAL_RECORDS = 256  # 256 MiB (module docstring: why not 1 GiB)
LIVE_RECORDS = 32    # kept: 32 MiB, 1/8 of the log as with 1 GiB and 128 MiB
APPENDS_IN_FLIGHT = 4
REPLICAS = 3
EXTENT_BYTES = 16 * MiB
EXTENTS = {"extent_bytes_max": EXTENT_BYTES}
# Per replica: one blob extent partly trimmed, and 8 MiB for the rest (the four streams' open
# and small extents, journals, logs).
FIXED_OVERHEAD_BYTES = REPLICAS * (EXTENT_BYTES + 8 * MiB)
JOBS = {"gc_grace_s": 2.0, "gc_wait_grace_max_s": 10.0}
PNAME = "big"


@pytest.fixture
def stamp(tmp_path: Path) -> Iterator[LocalStamp]:
    """3 ENs, 1 SM, 1 lock replica, 1 PS; 16 MiB extents; one gc run sweeps what it marks."""
    config = stamp_config(3, 1, extent_node=EXTENTS, lock_servers=1, partition_servers=1)
    path = tmp_path / "stamp.toml"
    path.write_text(config_toml(extent_node=EXTENTS, jobs=JOBS))
    local = LocalStamp(tmp_path / "stamp", config, str(path))
    try:
        local.up()
        yield local
    finally:
        local.kill_all()


def record(append: int, i: int) -> bytes:
    """Record i of append `append`: its own bytes (no 256 MiB kept in memory to check)."""
    head = f"{append}/{i}/".encode()
    return (head * (RECORD_BYTES // len(head) + 1))[:RECORD_BYTES]


def du(path: Path) -> int:
    """Bytes the files under `path` occupy on disk (allocated blocks, as du counts)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def nodes_usage(stamp: LocalStamp) -> int:
    return sum(du(Path(stamp.record(n.name).dir)) for n in stamp.extent_nodes())


def test_disk_usage_after_trimming_a_log_and_one_gc_run_is_near_the_live_data(
        stamp: LocalStamp) -> None:
    appends = -(-TOTAL_RECORDS // RECORDS_PER_APPEND)
    first_seq: dict[int, int] = {}  # append -> its first seq

    async def fill() -> None:
        ps = DirectPS(stamp, "ps-1")
        slots = asyncio.Semaphore(APPENDS_IN_FLIGHT)

        async def one(n: int) -> None:
            async with slots:
                batch = [record(n, i) for i in range(RECORDS_PER_APPEND)]
                reply = await ps.call(append_request(PNAME, batch, f"a{n}"))
                first_seq[n] = reply.first_seq
        try:
            await ps.load(1, create=True)
            started = time.monotonic()
            await asyncio.gather(*(one(n) for n in range(appends)))
            print(f"wrote {appends * RECORDS_PER_APPEND} MiB in "
                  f"{time.monotonic() - started:.1f} s")
            total = appends * RECORDS_PER_APPEND
            await ps.call(pb.Request(pname=PNAME, trim=pb.TrimOp(
                upto_seq=total - LIVE_RECORDS)))
        finally:
            await ps.close()

    asyncio.run(fill())
    total = appends * RECORDS_PER_APPEND
    written = nodes_usage(stamp)
    assert written >= REPLICAS * total * RECORD_BYTES, written

    started = time.monotonic()
    report = run_job("gc", str(stamp.data_dir), "local[2]")
    live = REPLICAS * LIVE_RECORDS * RECORD_BYTES

    def settled() -> int:
        # Deleted replicas' files go as the nodes answer: measure until the figure holds.
        deadline = time.monotonic() + 30
        while True:
            used = nodes_usage(stamp)
            if used <= 1.1 * live + FIXED_OVERHEAD_BYTES or time.monotonic() > deadline:
                return used
            time.sleep(0.5)
    used = settled()
    print(f"gc: {time.monotonic() - started:.1f} s, totals {report.totals}; disk before "
          f"{written / MiB:.0f} MiB, after {used / MiB:.0f} MiB, live {live / MiB:.0f} MiB "
          f"(x{REPLICAS} replicas), overhead beyond it {(used - live) / MiB:.1f} MiB")
    assert report.totals["released"] > 0 and report.totals["done"] > 0, report.totals
    assert used <= 1.1 * live + FIXED_OVERHEAD_BYTES, (used, live)

    async def reads_back() -> None:
        ps = DirectPS(stamp, "ps-1")
        try:
            by_seq = {seq + i: (n, i) for n, seq in first_seq.items()
                      for i in range(RECORDS_PER_APPEND)}
            seq = total - LIVE_RECORDS
            while seq < total:
                reply = await ps.call(pb.Request(pname=PNAME, read=pb.ReadOp(
                    from_seq=seq, limit=16)))
                assert reply.records, seq
                for r in reply.records:
                    assert r.seq == seq and r.data == record(*by_seq[seq]), seq
                    seq += 1
            with pytest.raises(Trimmed):
                await ps.call(pb.Request(pname=PNAME, read=pb.ReadOp(from_seq=0, limit=1)))
        finally:
            await ps.close()
    asyncio.run(reads_back())
