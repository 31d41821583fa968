"""Runs read through their views (issue 17, run_cache.Run): a key outside a run's view is not
in the run for the partition listing it — for point reads (without touching the index),
scans, block scans, and the partition's own reads on top of them (get_row, scan, the scan
snapshot)."""

from __future__ import annotations

import asyncio
import dataclasses

from common.config import PartitionLimits
from partition_layer.keys import KIND_ENTITY, KIND_META, KeyRange, encode_key
from partition_layer.rows import Row, encode_row
from partition_layer.run_cache import IndexCache, Run
from partition_layer.runs import block_cache
from partition_layer.scan_snapshot import Snapshot
from tests.support.partitions import serving_partition
from tests.support.runs import collect, row, write_run
from tests.support.streams import FakeStream

ITEMS = [(b"k%04d" % i, row(i)) for i in range(500)]


def viewed(info, low: bytes, high: bytes | None):  # type: ignore[no-untyped-def]
    return dataclasses.replace(info, view_low=low, view_high=high)


def test_get_scan_and_scan_blocks_see_only_the_view() -> None:
    async def body() -> None:
        stream = FakeStream()
        info = await write_run(stream, ITEMS, run_id=1, block_bytes_target=512)
        assert info.data_blocks > 10
        cache = IndexCache(1 << 20, stream.read, block_cache(0))
        run = Run(viewed(info, b"k0100", b"k0300"), cache)
        for outside in (b"k0000", b"k0099", b"k0300", b"k0450"):
            assert await run.get(outside) is None
        assert cache.loads == 0, "a key outside the view needs no index"
        assert await run.get(b"k0100") == ITEMS[100][1]
        assert await run.get(b"k0299") == ITEMS[299][1]
        assert await collect(run.scan()) == ITEMS[100:300]
        assert await collect(run.scan(b"k0250", None)) == ITEMS[250:300]
        assert await collect(run.scan(b"", b"k0120")) == ITEMS[100:120]
        assert await collect(run.scan(b"k0150", b"k0160")) == ITEMS[150:160]
        blocks = [r async for r in run.scan_blocks()]
        assert [item for rows in blocks for item in rows] == ITEMS[100:300]
        assert [item for rows in [r async for r in run.scan_blocks(b"k0290", b"k0999")]
                for item in rows] == ITEMS[290:300]

        fresh = IndexCache(1 << 20, stream.read, block_cache(0))
        right = Run(viewed(info, b"k0300", None), fresh)
        assert await collect(right.scan(b"", b"k0300")) == []
        assert [r async for r in right.scan_blocks(b"k0100", b"k0200")] == []
        assert fresh.loads == 0, "a scan that misses the view needs no index"
        # The same physical run listed twice (a merged partition): one index, two views.
        left = Run(dataclasses.replace(viewed(info, b"", b"k0300"), run_id=2), fresh)
        assert await collect(left.scan()) == ITEMS[:300]
        assert await collect(right.scan()) == ITEMS[300:]
        assert fresh.loads == 1
        assert right.loaded_index() is left.loaded_index() is not None
    asyncio.run(body())


def entity(name: str) -> bytes:
    return encode_key("acct", name, KIND_ENTITY, b"row")


def test_a_split_child_reads_only_its_half_of_the_parents_run() -> None:
    """Partition D = [m,) lists its parent's run (keys a..z) with view [m,): its get_row,
    scan and scan snapshot see m..z only, whatever bounds they are asked for."""
    names = "abcdefghijklmnopqrstuvwxyz"
    parent_rows = [(entity(n), encode_row(Row(i + 1, value=n.encode()))) for i, n in
                   enumerate(names)]
    split = encode_key("acct", "m", KIND_META, b"")
    mine = [(k, v) for k, v in parent_rows if k >= split]

    async def body() -> None:
        p = serving_partition(PartitionLimits())
        p.range = KeyRange(split, None)
        info = await write_run(p.streams["row"], parent_rows, run_id=1,  # type: ignore[arg-type]
                               block_bytes_target=64)
        p.readers = [Run(viewed(info, split, None), p.indexes)]  # type: ignore[arg-type]
        p.memtable.put(entity("y"), encode_row(Row(99, value=b"new y")))
        assert await p.get_row(entity("c")) is None
        assert await p.get_row(entity("n")) == Row(14, value=b"n")
        rows, more = await p.scan(b"", None, 100)
        expected = dict(mine)
        expected[entity("y")] = encode_row(Row(99, value=b"new y"))
        assert [(k, encode_row(r)) for k, r in rows] == sorted(expected.items())
        assert not more
        batches = [b async for b in Snapshot.of(p, b"", b"\xff").batches(b"")]
        assert [item for batch in batches for item in batch] == sorted(expected.items())
        await p.stop("test over")
        await p.closed()
    asyncio.run(body())
