"""The checkpointer writes a run without holding the event loop (pure logic, in-memory
stream): the partition's commits interleave with a long run write. And a whole checkpoint on
a site of its own (`CheckpointSite`, no RangePartition)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from common.config import PartitionLimits
from partition_layer.cache import LruCache
from partition_layer.checkpoint import ROWS_PER_YIELD, Checkpointer
from partition_layer.keys import KeyRange
from partition_layer.memtable import Memtable
from partition_layer.merge import aiter_sync
from partition_layer.operations import record_key
from partition_layer.partition_meta import PartitionMeta, decode_meta
from partition_layer.rows import Row, encode_row
from partition_layer.run_cache import IndexCache, Run
from partition_layer.runs import block_cache
from stream_layer.framing import Location
from tests.unit.test_pl_runs import FakeStream


def test_a_run_write_lets_other_tasks_run_between_rows() -> None:
    rows = 40 * ROWS_PER_YIELD
    memtable = Memtable()
    for n in range(rows):
        memtable.put(record_key("acct", "log", n), encode_row(Row(n + 1, value=b"v" * 100)))
    stream = FakeStream()
    partition = SimpleNamespace(meta=PartitionMeta(1, KeyRange(b"", None)),
                                range=KeyRange(b"", None), streams={"row": stream},
                                limits=PartitionLimits())

    async def scenario() -> tuple[int, int]:
        turns = 0
        done = False

        async def other_work() -> None:  # stands for the committer
            nonlocal turns
            while not done:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.get_running_loop().create_task(other_work())
        await asyncio.sleep(0)
        info = await Checkpointer(partition)._write_run(  # type: ignore[arg-type]
            [aiter_sync(memtable.items())], drop_tombstones=True)
        done = True
        await other
        assert info is not None
        return info.key_count, turns

    key_count, turns = asyncio.run(scenario())
    assert key_count == rows
    # The in-memory stream never suspends: every turn the other task got was a yield.
    assert turns >= rows // ROWS_PER_YIELD


EVERYTHING = KeyRange(b"", None)


class MemorySite:
    """A CheckpointSite on in-memory streams: the fields the checkpointer swaps and
    publishes, and a record of how it held the commits back."""

    def __init__(self, limits: PartitionLimits, key_range: KeyRange = EVERYTHING,
                 streams: dict[str, FakeStream] | None = None) -> None:
        self.id, self.limits, self.range = 7, limits, key_range
        self.streams = streams or {"row": FakeStream(), "meta": FakeStream()}
        self.memtable, self.frozen = Memtable(), None
        self.meta: PartitionMeta | None = PartitionMeta(7, key_range)
        self.readers: list[Run] = []
        self.row_cache = LruCache(1 << 20)
        self.indexes = IndexCache(1 << 20, self.streams["row"].read, block_cache(1 << 20))
        self.applied_lsn, self.last_commit, self.log_bytes = 0, None, 0
        self.commits: list[str] = []
        self.stopped_for: list[str] = []

    async def drain_commits(self) -> None:
        self.commits.append("drain")

    def resume_commits(self) -> None:
        self.commits.append("resume")

    async def stop(self, reason: str) -> None:
        self.stopped_for.append(reason)


def test_a_checkpoint_publishes_a_run_and_the_replay_point_through_its_site() -> None:
    """Rows in the memtable, the replay point at LSN 3: a checkpoint holds the commits back
    only while it freezes, writes one run, appends the metadata record naming it and the
    replay point, then the site reads from the run and its memtable is fresh."""
    site = MemorySite(PartitionLimits())
    for n in range(3):
        site.memtable.put(record_key("acct", "log", n), encode_row(Row(n + 1, value=b"v")))
    site.applied_lsn, site.log_bytes = 3, 300
    site.last_commit = Location(1, 200, 100)
    site.row_cache.put(b"stale", b"x")

    async def scenario() -> bytes | None:
        await Checkpointer(site).checkpoint_now()  # type: ignore[arg-type]
        return await site.readers[0].get(record_key("acct", "log", 2))

    found = asyncio.run(scenario())
    assert site.commits == ["drain", "resume"]
    assert site.frozen is None and len(site.memtable) == 0 and site.log_bytes == 0
    assert site.meta is not None and len(site.meta.runs) == 1
    assert (site.meta.replay_from, site.meta.applied_lsn) == (Location(1, 200, 100), 3)
    assert [r.info for r in site.readers] == site.meta.runs
    assert found == encode_row(Row(3, value=b"v"))
    (record,) = site.streams["meta"].blocks.values()
    assert decode_meta(record) == site.meta, "the record in the stream is the one in force"
    assert len(site.row_cache) == 0 and site.stopped_for == []
