"""The checkpointer writes a run without holding the event loop (pure logic, in-memory
stream): the partition's commits interleave with a long run write. And a whole checkpoint on
a site of its own (`CheckpointSite`, no RangePartition)."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import pytest

from common.config import PartitionLimits
from partition_layer import checkpoint
from partition_layer.checkpoint import MERGE_SIZE_RATIO, ROWS_PER_YIELD, Checkpointer
from partition_layer.keys import KIND_ENTITY, KIND_META, KeyRange, encode_key
from partition_layer.memtable import Memtable
from partition_layer.merge import aiter_sync, merge
from partition_layer.operations import record_key
from partition_layer.partition_meta import PartitionMeta, decode_meta
from partition_layer.rows import Row, decode_row, encode_row
from partition_layer.run_cache import IndexCache, Run
from partition_layer.runs import RunIndex, RunInfo, RunReader, block_cache
from stream_layer.framing import Location
from tests.support.checkpoint_site import MemorySite
from tests.support.streams import FakeStream


def test_a_run_write_lets_other_tasks_run_between_rows() -> None:
    rows = 40 * ROWS_PER_YIELD
    memtable = Memtable()
    for n in range(rows):
        memtable.put(record_key("acct", "log", n), encode_row(Row(n + 1, value=b"v" * 100)))
    stream = FakeStream()
    partition = SimpleNamespace(meta=PartitionMeta(1, KeyRange(b"", None)),
                                range=KeyRange(b"", None), streams={"row": stream},
                                limits=PartitionLimits(), indexes=None, witnesses=None,
                                recovering=False)

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


def test_a_derived_partitions_first_record_waits_a_moment_and_later_ones_wait_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A split child's first own record goes out FIRST_RECORD_DELAY_S after it serves (not
    in the first commits' way); a checkpoint meanwhile publishes after it, never before."""
    monkeypatch.setattr(checkpoint, "FIRST_RECORD_DELAY_S", 0.3)
    site = MemorySite(PartitionLimits())
    site.memtable.put(record_key("acct", "log", 0), encode_row(Row(1, value=b"v")))
    site.applied_lsn, site.last_commit = 1, Location(1, 0, 100)

    async def scenario() -> float:
        checkpointer = Checkpointer(site)  # type: ignore[arg-type]
        checkpointer.publish_first()
        for _ in range(10):
            await asyncio.sleep(0)
        assert not site.streams["meta"].blocks, "the first record waits"
        started = asyncio.get_running_loop().time()
        await checkpointer.checkpoint_now()
        return asyncio.get_running_loop().time() - started

    waited = asyncio.run(scenario())
    first, second = (decode_meta(b) for b in site.streams["meta"].blocks.values())
    assert (first.runs, len(second.runs)) == ([], 1) and waited >= 0.25


# ---- runs through views: split children and a merged partition (issue 17) ---------------------

M = encode_key("acct", "m", KIND_META, b"")  # the split key: the start of name "m"
LEFT, RIGHT = KeyRange(b"", M), KeyRange(M, None)


def entity(name: str) -> bytes:
    return encode_key("acct", name, KIND_ENTITY, b"row")


def derived(site: MemorySite, runs: list[RunInfo], next_run_id: int) -> None:
    """Give a site the metadata a split or merge derives (split17.md "Loading")."""
    site.meta = dataclasses.replace(site.meta, runs=runs, next_run_id=next_run_id)
    site.readers = [Run(info, site.indexes) for info in runs]


def narrowed(runs: list[RunInfo], key_range: KeyRange) -> list[RunInfo]:
    """A split child's runs: each view cut to the child's range (none here is left empty)."""
    out = []
    for info in runs:
        low = max(info.view_low, key_range.low)
        high = min((h for h in (info.view_high, key_range.high) if h is not None), default=None)
        out.append(dataclasses.replace(info, view_low=low, view_high=high))
    return out


async def visible(site: MemorySite) -> dict[bytes, bytes]:
    """What reads of the site's runs find: point reads newest run first (as
    RangePartition.row_from_checkpoints) must agree with a merged scan (as its scan)."""
    scanned = {k: v async for k, v in merge([r.scan() for r in site.readers],
                                             drop_tombstones=True)}
    for name in "abcdefghijklmnopqrstuvwxyz":
        found = None
        for reader in site.readers:
            found = await reader.get(entity(name))
            if found is not None:
                break
        live = None if found is None or decode_row(found).tombstone else found
        assert live == scanned.get(entity(name)), name
    return scanned


async def physical_keys(site: MemorySite, info: RunInfo) -> list[bytes]:
    """Every key the run holds in the stream, whatever any view says."""
    reader = RunReader(await RunIndex.load(info, site.streams["row"].read),
                       site.streams["row"].read)
    return [k async for k, _ in reader.scan()]


def split_and_merge_sites(merge_left: bool) -> tuple[dict[bytes, bytes], MemorySite]:
    """Parent P holds a..z in run R; split at "m": C=[,m) deletes "c" and writes a big "b"
    (merging its runs down to one when `merge_left`: the tombstone goes), D=[m,) writes "x";
    then E = C + D lists C's runs then D's (R among them with view [m,)), renumbered as a
    merge derives them. Returns what E sees before its own merge, and E."""
    limits = PartitionLimits()
    shared = {"row": FakeStream(), "meta": FakeStream()}  # children share the parent's extents
    parent = MemorySite(limits, streams=shared)
    for n, name in enumerate("abcdefghijklmnopqrstuvwxyz"):
        parent.memtable.put(entity(name), encode_row(Row(n + 1, value=b"old " + name.encode())))

    async def scenario() -> tuple[dict[bytes, bytes], MemorySite]:
        await Checkpointer(parent).checkpoint_now()  # type: ignore[arg-type]
        assert parent.meta is not None
        (r,) = parent.meta.runs
        assert await physical_keys(parent, r) == [entity(c) for c in
                                                  "abcdefghijklmnopqrstuvwxyz"]

        left = MemorySite(limits, LEFT, streams=shared)
        derived(left, narrowed(parent.meta.runs, LEFT), parent.meta.next_run_id)
        left.memtable.put(entity("c"), encode_row(Row(100, tombstone=True)))
        left.memtable.put(entity("b"), encode_row(Row(101, value=b"B" * 4000)))
        left.applied_lsn = left.log_bytes = 2
        await Checkpointer(left).checkpoint_now()  # type: ignore[arg-type]
        assert left.meta is not None and len(left.meta.runs) == 2
        if merge_left:
            await Checkpointer(left)._merge_runs()  # type: ignore[arg-type]
            (merged,) = left.meta.runs  # it reached the oldest run: the tombstone is gone
            assert (merged.view_low, merged.view_high) == (LEFT.low, LEFT.high)
            assert await physical_keys(left, merged) == [entity(c) for c in "abdefghijkl"], \
                "a merge writes only the partition's keys, and drops the tombstone"

        right = MemorySite(limits, RIGHT, streams=shared)
        derived(right, narrowed(parent.meta.runs, RIGHT), parent.meta.next_run_id)
        right.memtable.put(entity("x"), encode_row(Row(200, value=b"new x")))
        right.applied_lsn = right.log_bytes = 1
        await Checkpointer(right).checkpoint_now()  # type: ignore[arg-type]
        assert right.meta is not None and len(right.meta.runs) == 2

        whole = MemorySite(limits, KeyRange(b"", None), streams=shared)
        runs = [dataclasses.replace(info, run_id=n + 1) for n, info in
                enumerate([*left.meta.runs, *right.meta.runs])]
        derived(whole, runs, len(runs) + 1)
        return await visible(whole), whole

    return asyncio.run(scenario())


def expected_after_merge() -> dict[bytes, bytes]:
    rows = {entity(name): encode_row(Row(n + 1, value=b"old " + name.encode()))
            for n, name in enumerate("abcdefghijklmnopqrstuvwxyz")}
    del rows[entity("c")]
    rows[entity("b")] = encode_row(Row(101, value=b"B" * 4000))
    rows[entity("x")] = encode_row(Row(200, value=b"new x"))
    return rows


@pytest.mark.parametrize("merge_left", [True, False])
def test_a_merged_partition_reads_its_parents_runs_through_their_views(merge_left: bool
                                                                       ) -> None:
    """The case views exist for: C deleted "c" and (merge_left) merged its runs down to one,
    dropping the tombstone, while R — still listed by D — holds "c". E lists R with D's view
    [m,): "c" must not come back, D's "x" and R's old keys of both halves are seen, and
    merging E's runs down to one keeps exactly that. Without merge_left, E lists R twice
    (views [,m) and [m,)), and its index is loaded once."""
    seen, whole = split_and_merge_sites(merge_left)
    expected = expected_after_merge()
    assert seen == expected
    assert whole.meta is not None
    if not merge_left:
        physical = {r.index_blocks for r in whole.meta.runs}
        assert len(physical) == len(whole.meta.runs) - 1, "R is listed twice"

    physical_runs = {r.index_blocks for r in whole.meta.runs}
    assert whole.indexes.loads == len(physical_runs), "one index load per physical run"

    async def merge_whole() -> dict[bytes, bytes]:
        checkpointer = Checkpointer(whole)  # type: ignore[arg-type]
        while len(whole.meta.runs) > 1:
            before = len(whole.meta.runs)
            await checkpointer._merge_runs()
            assert len(whole.meta.runs) < before, "each merge takes at least two runs"
        (only,) = whole.meta.runs
        assert (only.view_low, only.view_high) == (b"", None)
        assert await physical_keys(whole, only) == sorted(expected)
        return await visible(whole)

    assert asyncio.run(merge_whole()) == expected
    assert whole.stopped_for == []


def test_a_split_child_sizes_its_parents_run_by_its_view_when_choosing_a_merge() -> None:
    """Child C = [,m) lists its parent's run R (a..z) with half its keys in view, and
    checkpoints a run of its own: too small to merge with all of R (data_bytes) but big
    enough for C's half of it, which is what a merge would rewrite. C merges, and its one
    run no longer shares R."""
    limits = dataclasses.replace(PartitionLimits(), data_block_bytes=2048)
    shared = {"row": FakeStream(), "meta": FakeStream()}
    parent = MemorySite(limits, streams=shared)
    for n, name in enumerate("abcdefghijklmnopqrstuvwxyz"):
        parent.memtable.put(entity(name), encode_row(Row(n + 1, value=b"p" * 1000)))

    async def scenario() -> None:
        await Checkpointer(parent).checkpoint_now()  # type: ignore[arg-type]
        assert parent.meta is not None
        left = MemorySite(limits, LEFT, streams=shared)
        derived(left, narrowed(parent.meta.runs, LEFT), parent.meta.next_run_id)
        for n, name in enumerate("abc"):
            left.memtable.put(entity(name), encode_row(Row(100 + n, value=b"c" * 3000)))
        left.applied_lsn = left.log_bytes = 3
        checkpointer = Checkpointer(left)  # type: ignore[arg-type]
        await checkpointer.checkpoint_now()
        assert left.meta is not None
        mine, r = left.meta.runs
        assert r.data_bytes > MERGE_SIZE_RATIO * mine.data_bytes, "by data_bytes: no merge"
        for reader in left.readers:
            await reader.warm()
        await checkpointer._merge_runs()
        (merged,) = left.meta.runs
        assert await physical_keys(left, merged) == [entity(c) for c in "abcdefghijkl"]
    asyncio.run(scenario())


class GatedStream(FakeStream):
    """A row-data stream whose appends from the `hold_from`th on wait at a gate that never
    opens: a run merge caught in the middle of writing its run."""

    def __init__(self) -> None:
        super().__init__()
        self.hold_from = 1 << 30
        self.waiting = asyncio.Event()
        self.gate = asyncio.Event()

    async def append(self, blocks: list[bytes]) -> list[Location]:
        if len(self.appends) >= self.hold_from:
            self.waiting.set()
            await self.gate.wait()
        return await super().append(blocks)


def test_a_split_abandons_a_run_merge_instead_of_waiting_for_it() -> None:
    """Four small runs and a merge of them stuck writing (its next append never returns):
    abort_merge ends it at once, the record in force still lists the four runs, and every
    row reads as before. Without abort_merge a split waited for the whole merge (24 s on a
    1 GB partition in `stamp bench split`)."""
    rows = PartitionLimits()
    site = MemorySite(dataclasses.replace(rows, runs_max=3))
    site.streams["row"] = GatedStream()
    site.indexes = IndexCache(1 << 20, site.streams["row"].read, block_cache(1 << 20))

    async def scenario() -> None:
        checkpointer = Checkpointer(site)  # type: ignore[arg-type]
        row_stream = site.streams["row"]
        for n, name in enumerate("abcd"):
            site.memtable.put(entity(name), encode_row(Row(n + 1, value=name.encode())))
            site.applied_lsn = site.log_bytes = n + 1
            await checkpointer.checkpoint_now()
            if n == 0:  # each checkpoint's run takes this many appends; the merge's get stuck
                row_stream.hold_from = 4 * len(row_stream.appends)
        await asyncio.wait_for(site.streams["row"].waiting.wait(), 5)
        assert checkpointer._merge is not None, "four runs over runs_max=3 start a merge"
        before = site.meta
        await asyncio.wait_for(checkpointer.abort_merge(), 5)
        assert checkpointer._merge is None
        await asyncio.wait_for(checkpointer.closed(), 5)
        assert site.meta == before and len(site.meta.runs) == 4
        assert site.stopped_for == [], "an abandoned merge is no failure of the partition"
        seen = await visible(site)
        assert seen == {entity(name): encode_row(Row(n + 1, value=name.encode()))
                        for n, name in enumerate("abcd")}

    async def bounded() -> None:
        async with asyncio.timeout(20):
            await scenario()

    asyncio.run(bounded())


def test_a_run_id_handed_out_while_a_record_is_published_is_not_handed_out_again() -> None:
    """A run merge publishes its record while a checkpoint writes its run: the id the
    checkpoint took while the record's append was under way must stay taken. The record
    in force used to be put back as it was before the append, with the older next run id,
    and the checkpoint's record then named two runs of one id (or one at next_run_id): an
    assertion stopped the partition (a small-memtable stamp with runs_max 2, issue 18)."""
    site = MemorySite(PartitionLimits())
    meta_stream = GatedStream()
    site.streams["meta"] = meta_stream

    async def scenario() -> None:
        checkpointer = Checkpointer(site)  # type: ignore[arg-type]
        site.memtable.put(entity("a"), encode_row(Row(1, value=b"a")))
        site.applied_lsn = site.log_bytes = 1
        await checkpointer.checkpoint_now()
        meta_stream.hold_from = len(meta_stream.appends)  # the next record waits
        site.memtable.put(entity("b"), encode_row(Row(2, value=b"b")))
        site.applied_lsn = site.log_bytes = 2
        publishing = asyncio.get_running_loop().create_task(checkpointer.checkpoint_now())
        await asyncio.wait_for(meta_stream.waiting.wait(), 5)
        other = await checkpointer._write_run(
            [aiter_sync([(entity("c"), encode_row(Row(3, value=b"c")))])],
            drop_tombstones=False)
        assert other is not None
        meta_stream.gate.set()
        await asyncio.wait_for(publishing, 5)
        assert site.meta is not None and site.meta.next_run_id > other.run_id
        await checkpointer._publish([other, *site.meta.runs], None, 3)
        assert [r.run_id for r in site.meta.runs] == [3, 2, 1]

    asyncio.run(scenario())


@pytest.mark.parametrize("serving", [True, False])
def test_a_checkpoint_starts_a_run_merge_only_while_the_partition_serves(
        serving: bool) -> None:
    """Past runs_max, a checkpoint starts a run merge, and every row reads as before it;
    not a checkpoint of a split or merge of the partition (`serving` false after_load): the
    operation would abandon it at once (split_merge.py `_checkpoint_fully`)."""
    site = MemorySite(dataclasses.replace(PartitionLimits(), runs_max=3))

    async def scenario() -> int:
        checkpointer = Checkpointer(site)  # type: ignore[arg-type]
        checkpointer.after_load(derived=False, serving=lambda: serving)
        for n, name in enumerate("abcd"):
            site.memtable.put(entity(name), encode_row(Row(n + 1, value=name.encode())))
            site.applied_lsn = site.log_bytes = n + 1
            await checkpointer.checkpoint_now()
        async with asyncio.timeout(5):
            await checkpointer.closed()
        assert checkpointer.merges == (1 if serving else 0)
        assert await visible(site) == {entity(name): encode_row(Row(n + 1, value=name.encode()))
                                       for n, name in enumerate("abcd")}
        return len(site.meta.runs)  # type: ignore[union-attr]

    assert asyncio.run(scenario()) == (1 if serving else 4)


@pytest.mark.parametrize(("applied", "due"), [(102, False), (103, True)])
def test_a_checkpoint_is_due_after_so_many_operations_however_small(applied: int,
                                                                     due: bool) -> None:
    """Three small operations past the record in force (LSN 100): due at three with
    commit_log_ops_max 3, though neither the memtable's nor the log's bytes are near
    their thresholds; a load's replay goes by operations."""
    site = MemorySite(PartitionLimits(commit_log_ops_max=3))
    site.meta = PartitionMeta(7, EVERYTHING, applied_lsn=100)
    site.applied_lsn, site.log_bytes = applied, 30 * (applied - 100)
    for lsn in range(101, applied + 1):
        site.memtable.put(record_key("acct", "log", lsn), encode_row(Row(lsn, value=b"v")))
    checkpointer = Checkpointer(site)  # type: ignore[arg-type]
    assert checkpointer.ops_to_replay() == applied - 100
    assert checkpointer.due() is due
