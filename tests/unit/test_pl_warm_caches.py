"""What a partition keeps warm across a checkpoint and hands to its split or merge children
(pure logic, on in-memory streams): a checkpoint installs the index of the run it wrote and
keeps the meta rows it flushed in the row cache, so the appends after it read nothing back
from the extent nodes; a child derived from its parents starts with their cached rows in
its range, their loaded run indexes and their data blocks — the first appends after a split
or merge then wait for none of them while the range was unavailable (issue 17)."""

from __future__ import annotations

import asyncio
import dataclasses

from common.config import PartitionLimits
from partition_layer import keys
from partition_layer import partition as partition_module
from partition_layer.keys import KeyRange
from partition_layer.run_cache import IndexCache
from partition_layer.warm_start import inherit_caches
from tests.support.partitions import log_append, serving_partition

LOGS = [f"log-{i}" for i in range(8)]
LIMITS = dataclasses.replace(PartitionLimits(), memtable_bytes_max=64 << 20)


async def _append_round(p: partition_module.RangePartition, round_: int) -> None:
    await asyncio.gather(*(p.committer.submit_nowait(
        log_append("acct", log, (b"r" * 300,), token=f"t-{round_}-{log}"), 400)
        for log in LOGS))


def _meta_key(log: str) -> bytes:
    return keys.encode_key("acct", log, keys.KIND_META, b"")


def test_appends_after_a_checkpoint_load_no_index_and_find_their_meta_rows_cached() -> None:
    async def scenario() -> None:
        p = serving_partition(LIMITS)
        for round_ in range(3):
            await _append_round(p, round_)
        await p.checkpointer.checkpoint_now()
        assert len(p.readers) == 1 and not len(p.memtable)
        # The meta rows the checkpoint flushed are cached; the records and tokens are not.
        cached = {key for key, _ in p.row_cache.items()}
        assert cached == {_meta_key(log) for log in LOGS}
        reads = p.streams["row"].reads  # type: ignore[attr-defined]
        await _append_round(p, 3)  # new tokens: looked up in the run (its bloom filter)
        assert p.indexes is not None and p.indexes.loads == 0
        assert p.indexes.peek(p.readers[0].info) is not None
        # Every meta row came from the cache; a token's bloom false positive may read one
        # data block, never the index.
        assert p.streams["row"].reads - reads <= 1  # type: ignore[attr-defined]
        for log in LOGS:
            state = await p.log_state("acct", log)
            assert state.next_seq == 4
        await p.stop("test over")
        await p.closed()

    asyncio.run(scenario())


def _child_of(parent: partition_module.RangePartition, key_range: KeyRange
              ) -> partition_module.RangePartition:
    child = partition_module.RangePartition(2, key_range, None,  # type: ignore[arg-type]
                                            LIMITS, epoch=1, lease_valid=lambda: True)
    child.streams = parent.streams
    child.indexes = IndexCache(LIMITS.index_cache_bytes_max, parent.streams["row"].read,
                               child.block_cache)
    return child


def test_a_child_starts_with_its_parents_rows_in_its_range_indexes_and_blocks() -> None:
    async def scenario() -> None:
        parent = serving_partition(LIMITS)
        for round_ in range(2):
            await _append_round(parent, round_)
        await parent.checkpointer.checkpoint_now()
        assert parent.indexes is not None
        # A read brings a data block into the parent's block cache.
        token = keys.encode_key("acct", "log-2", keys.KIND_TOKEN, b"t-1-log-2")
        assert await parent.get_row(token) is not None and len(parent.block_cache)
        cut = keys.encode_key("acct", "log-4", keys.KIND_META, b"")
        left = _child_of(parent, KeyRange(b"", cut))
        inherit_caches(left, [parent])
        assert {key for key, _ in left.row_cache.items()} == {
            *(_meta_key(log) for log in LOGS[:4]), token}
        info = parent.readers[0].info
        assert left.indexes is not None and left.indexes.peek(info) is not None
        assert len(left.block_cache) == len(parent.block_cache) > 0
        # A parent that committed past its last checkpoint hands over nothing.
        await _append_round(parent, 2)
        right = _child_of(parent, KeyRange(cut, None))
        inherit_caches(right, [parent])
        assert not len(right.row_cache) and right.indexes is not None
        assert right.indexes.peek(info) is None and not len(right.block_cache)
        await parent.stop("test over")
        await parent.closed()

    asyncio.run(scenario())
