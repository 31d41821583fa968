"""The group committer on a partition over in-memory streams (pure logic): appends commit in
order with consecutive sequence numbers, and the committer's own lookups (a log's meta row,
an append's token) put nothing in the row cache, even when they reach the checkpoints (the
checkpoints themselves put the meta rows they flushed there). Then
the committer on a site of its own (`CommitSite`, no RangePartition): a bug stops the
partition and every operation is answered; a stop ends the appends in flight."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Iterator

import pytest

from common import faults
from common.config import PartitionLimits
from common.errors import NotOwner, Unavailable
from partition_layer import keys
from partition_layer import partition as partition_module
from partition_layer.commit_log import CommitOp
from partition_layer.committer import GroupCommitter
from partition_layer.operations import LogAppend
from partition_layer.rows import Row, decode_row
from partition_layer.stats import LoadStats
from stream_layer.framing import Location
from tests.support.partitions import log_append, serving_partition
from tests.support.streams import FakeStream


def test_committed_appends_leave_no_row_cache_entries() -> None:
    limits = dataclasses.replace(PartitionLimits(), memtable_bytes_max=64 * 1024)

    async def scenario() -> None:
        p = serving_partition(limits)
        cached: list[bytes] = []
        put = p.row_cache.put

        def spy(key: bytes, value: object) -> None:
            cached.append(key)
            put(key, value)
        p.row_cache.put = spy  # type: ignore[method-assign]
        expected = {f"log-{i}": 0 for i in range(8)}
        for round_ in range(60):
            futures = [p.committer.submit_nowait(
                log_append("acct", log, (b"r" * 300,), token=f"t-{round_}-{log}"), 400)
                for log in expected]
            firsts = await asyncio.gather(*futures)
            assert firsts == list(expected.values())  # consecutive, per log
            for log in expected:
                expected[log] += 1
        assert p.checkpointer.checkpoints >= 2, "the test needs runs to look through"
        # Each lookup missed (tokens are new; meta rows were being written), and each key
        # was written by the commit right after: caching the misses would only churn. What
        # the cache took are the meta rows each checkpoint flushed (checkpoint.py
        # `_keep_flushed_rows`), never a token the committer looked up.
        assert cached and all(key[keys.kind_offset(key)] == keys.KIND_META for key in cached)
        for log, next_seq in expected.items():
            state = await p.log_state("acct", log)
            assert (state.first_seq, state.next_seq) == (0, next_seq)
        # A retried token still finds its original answer (in a run by now).
        retry = log_append("acct", "log-3", (b"r" * 300,), token="t-0-log-3")
        assert await p.committer.submit_nowait(retry, 400) == 0
        await p.stop("test over")
        await p.closed()

    asyncio.run(scenario())


def test_callbacks_are_answered_once_in_order_and_one_that_raises_spoils_nothing() -> None:
    """`submit_with` (the server's path for small appends): each callback hears its own first
    sequence number exactly once, when its commit is durable; a callback that raises is
    logged and the committer goes on answering the rest."""

    async def scenario() -> None:
        p = serving_partition(PartitionLimits())
        heard: list[tuple[int, int | None, object]] = []
        all_heard = asyncio.Event()

        def done(index: int, first: int | None, error: object) -> None:
            heard.append((index, first, error))
            if index == 1:
                raise RuntimeError("a broken callback")
            if len(heard) == 6:
                all_heard.set()
        for index in range(6):
            p.committer.submit_with(log_append("acct", f"log-{index % 2}", (b"r",),
                                              token=f"cb-{index}"), 64,
                                    functools.partial(done, index))
        await asyncio.wait_for(all_heard.wait(), 5)
        assert heard == [(0, 0, None), (1, 0, None), (2, 1, None), (3, 1, None),
                         (4, 2, None), (5, 2, None)]
        assert p.state == partition_module.SERVING  # the raising callback stopped nothing
        assert await p.committer.submit_nowait(
            log_append("acct", "log-0", (b"r",), token="after"), 64) == 3
        # Blocks are answered in order: every earlier answer has been given by now.
        assert len(heard) == 6  # nobody heard twice
        await p.stop("test over")
        await p.closed()

    asyncio.run(scenario())


def test_a_batch_caught_by_a_stop_while_reading_rows_is_answered_not_owner() -> None:
    """The committer takes a batch off the queue, then reads rows for it; if the partition
    stops then (its loop is cancelled), nothing of the batch was appended: each operation
    is answered NotOwner (retry elsewhere) rather than left waiting forever."""

    async def scenario() -> None:
        p = serving_partition(PartitionLimits())
        reading = asyncio.Event()

        async def stuck(key: bytes, remember_absent: bool = True) -> None:
            reading.set()
            await asyncio.Event().wait()  # a checkpoint read that never finishes
        p.row_from_checkpoints = stuck  # type: ignore[method-assign]
        heard: list[object] = []
        future = p.committer.submit_nowait(log_append("acct", "log", (b"r",), token="t1"), 64)
        p.committer.submit_with(log_append("acct", "log", (b"r",), token="t2"), 64,
                                lambda first, error: heard.append(error))
        await asyncio.wait_for(reading.wait(), 5)
        assert not p.committer.queue, "the batch is off the queue, being decided"
        await p.stop("lease lost (test)")
        with pytest.raises(NotOwner):
            await asyncio.wait_for(future, 5)
        assert len(heard) == 1 and isinstance(heard[0], NotOwner)
        assert p.streams["log"].blocks == {}, "nothing was appended"

    asyncio.run(scenario())


def test_settle_waits_for_a_batch_being_decided() -> None:
    """A split or merge settles the committer, checkpoints, then writes its intent. A batch
    taken off the queue and still reading rows from the checkpoints is neither queued nor
    in flight: if `settle` returned then, its operations would commit after the checkpoint,
    be acknowledged, and be skipped by the children (a merge lost acknowledged writes so)."""

    async def scenario() -> None:
        p = serving_partition(PartitionLimits())
        reading, release = asyncio.Event(), asyncio.Event()
        real = p.row_from_checkpoints

        async def slow(key: bytes, remember_absent: bool = True) -> Row | None:
            reading.set()
            await release.wait()
            return await real(key, remember_absent)
        p.row_from_checkpoints = slow  # type: ignore[method-assign]
        future = p.committer.submit_nowait(log_append("acct", "log", (b"r",), token="t1"), 64)
        await asyncio.wait_for(reading.wait(), 5)
        settled = asyncio.ensure_future(p.committer.settle())
        await asyncio.sleep(0.05)
        assert not settled.done(), "settle returned with a batch still being decided"
        release.set()
        await asyncio.wait_for(settled, 5)
        assert future.done() and future.result() == 0 and p.applied_lsn == 1
        await p.stop("test over")

    asyncio.run(scenario())


# ---- the committer on a site of its own (CommitSite): no RangePartition ---------------------


class MemorySite:
    """A CommitSite of a dict of rows and an in-memory commit log: all the committer needs.
    `stop` does what RangePartition.stop does to the committer."""

    def __init__(self, log_stream: FakeStream | None = None) -> None:
        self.id, self.epoch, self.limits = 7, 1, PartitionLimits()
        self.streams = {"log": log_stream or FakeStream()}
        self.applied_lsn, self.last_commit, self.log_bytes = 0, None, 0
        self.stats = LoadStats()
        self.shipper = None  # no inter-stamp replication here
        self.version_floor = 0
        self.rows: dict[bytes, Row] = {}
        self.stopped_for: list[str] = []
        self.committer = GroupCommitter(self)

    def committing(self) -> bool:
        return not self.stopped_for

    def gone(self) -> bool:
        return bool(self.stopped_for)

    def lease_valid(self) -> bool:
        return True

    def row_in_memory(self, key: bytes) -> tuple[bool, Row | None]:
        return True, self.rows.get(key)

    async def row_from_checkpoints(self, key: bytes, remember_absent: bool = True
                                   ) -> Row | None:
        return self.rows.get(key)

    def apply(self, op: CommitOp) -> None:
        assert op.lsn == self.applied_lsn + 1
        for key, encoded in op.mutations:
            self.rows[key] = decode_row(encoded)
        self.applied_lsn = op.lsn

    def wake_logs(self, ops: object) -> None:
        pass

    async def wait_for_room(self) -> None:
        pass

    def checkpoint_if_due(self) -> None:
        pass

    async def stop(self, reason: str) -> None:
        self.stopped_for.append(reason)
        self.committer.fail_queued(reason)
        self.committer.abort()


class StuckStream(FakeStream):
    """A commit log whose appends never come back (a stream layer that hangs)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = asyncio.Event()

    async def append(self, blocks: list[bytes]) -> list[Location]:
        self.sent.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def append_op(n: int) -> LogAppend:
    return log_append("acct", "log", (f"r{n}".encode(),), token=f"t{n}")


@pytest.fixture
def disarm() -> Iterator[None]:
    faults.disarm()
    yield
    faults.disarm()


def test_a_bug_deciding_a_batch_stops_the_partition_and_answers_every_operation(
        disarm: None) -> None:
    """An exception that is no Stamp error where the committer decides a block (a bug):
    the site is stopped, each operation of the batch and of the queue hears NotOwner (nothing
    was sent: a retry elsewhere is safe), and no task of the committer is left."""

    async def scenario() -> None:
        site = MemorySite()
        site.committer.start()
        assert await site.committer.submit_nowait(append_op(0), 64) == 0
        faults.arm("ps.commit.encode", "bug", times=1)
        futures = [site.committer.submit_nowait(append_op(n), 64) for n in range(1, 5)]
        results = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), 5)
        assert all(isinstance(r, NotOwner) for r in results), results
        assert len(site.stopped_for) == 1
        assert site.stopped_for[0].startswith("its group committer failed: FaultBug")
        assert len(site.streams["log"].blocks) == 1, "only the first block was sent"
        await asyncio.wait_for(site.committer.closed(), 5)

    asyncio.run(scenario())


def test_a_bug_after_a_durable_block_stops_the_partition_and_answers_unavailable() -> None:
    """Making a durable block visible fails (a bug): its operations hear Unavailable (it is
    in the log; the next load replays it) and the site is stopped."""

    async def scenario() -> None:
        site = MemorySite()

        def broken(op: CommitOp) -> None:
            raise RuntimeError("a bug in apply")
        site.apply = broken  # type: ignore[method-assign]
        site.committer.start()
        with pytest.raises(Unavailable):
            await asyncio.wait_for(site.committer.submit_nowait(append_op(0), 64), 5)
        assert site.stopped_for == ["its group committer failed: RuntimeError: a bug in apply"]
        assert len(site.streams["log"].blocks) == 1
        await asyncio.wait_for(site.committer.closed(), 5)

    asyncio.run(scenario())


def test_a_stop_with_a_block_in_flight_answers_it_unavailable_and_leaves_no_task() -> None:
    """The partition stops (lease lost, the server stopping) while a block's append hangs:
    its operations hear Unavailable (it may land: ambiguous), the queued ones NotOwner, and
    `closed()` returns: nothing waits on the append forever."""

    async def scenario() -> None:
        stream = StuckStream()
        site = MemorySite(stream)
        site.committer.start()
        sent = site.committer.submit_nowait(append_op(0), 64)
        await asyncio.wait_for(stream.sent.wait(), 5)
        site.limits = dataclasses.replace(site.limits, commit_pipeline_depth=1)
        site.committer.limits = site.limits  # the next one queues behind the stuck block
        queued = site.committer.submit_nowait(append_op(1), 64)
        await site.stop("server stopping (test)")
        with pytest.raises(Unavailable):
            await asyncio.wait_for(sent, 5)
        with pytest.raises(NotOwner):
            await asyncio.wait_for(queued, 5)
        await asyncio.wait_for(site.committer.closed(), 5)

    asyncio.run(scenario())


class GatedLog(FakeStream):
    """A commit log whose appends wait until the test opens their gate, one by one."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[asyncio.Event] = []
        self.sent = asyncio.Event()

    async def append(self, blocks: list[bytes]) -> list[Location]:
        gate = asyncio.Event()
        self.gates.append(gate)
        self.sent.set()
        await gate.wait()
        return await super().append(blocks)


def test_while_a_block_is_in_flight_the_next_waits_for_a_batch_worth_sending() -> None:
    """One block in flight: fewer than commit_batch_ops_min queued operations do not start a
    second block (each block costs an fsync on three nodes: spread over two partitions a
    stamp made 4-operation blocks at a third of the throughput); as many as that do; and
    when the pipeline empties, whatever is queued goes at once (one appender waits for no
    one)."""

    async def scenario() -> None:
        log = GatedLog()
        site = MemorySite(log)
        # No linger: a short block after a peak of 5 would wait for more (test_pl_linger).
        site.committer.limits = dataclasses.replace(site.limits, commit_batch_ops_min=4)
        site.committer._linger.linger_s = 0
        site.committer.start()
        first = site.committer.submit_nowait(append_op(0), 64)
        await asyncio.wait_for(log.sent.wait(), 5)
        few = [site.committer.submit_nowait(append_op(n), 64) for n in range(1, 4)]
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(log.gates) == 1, "3 queued operations wait for the block in flight"
        more = site.committer.submit_nowait(append_op(4), 64)
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(log.gates) == 2, "4 queued operations make a block of their own"
        log.gates[0].set()
        log.gates[1].set()
        assert await asyncio.wait_for(first, 5) == 0
        assert [await asyncio.wait_for(f, 5) for f in (*few, more)] == [1, 2, 3, 4]
        last = site.committer.submit_nowait(append_op(5), 64)  # nothing in flight now
        for _ in range(20):
            if len(log.gates) == 3:
                break
            await asyncio.sleep(0)
        assert len(log.gates) == 3, "with the pipeline empty one operation goes at once"
        log.gates[2].set()
        assert await asyncio.wait_for(last, 5) == 5
        site.committer.abort()
        await asyncio.wait_for(site.committer.closed(), 5)

    asyncio.run(scenario())
