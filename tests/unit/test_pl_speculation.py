"""CURP's early answers at a partition's owner (partition_layer/speculation.py, committer.py),
on in-memory streams whose commit-log appends a test holds back: which writes are answered
before their block is durable and at which version, which wait, and reads that wait for
them (curp.py steps 3-5)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from common.config import PartitionLimits
from common.errors import Unavailable
from partition_layer.operations import EntityWrite, Write, entity_key, meta_key
from partition_layer.partition import RangePartition
from partition_layer.rows import etag_of
from partition_layer.speculation import Speculative
from partition_layer.witness_set import set_epoch
from tests.support.partitions import log_append, serving_partition

HINT = 1 << 50  # a front end's hybrid clock: far above the LSNs of a new partition


def put(row: bytes, token: str, value: bytes = b"v") -> EntityWrite:
    return EntityWrite("acct", "group", (Write("put", row, value),), token, 0)


class HeldLog:
    """The partition's commit log with appends held until `release()`."""

    def __init__(self, p: RangePartition) -> None:
        self.gate = asyncio.Event()
        stream = p.streams["log"]
        append = stream.append

        async def held(blocks: list[bytes]) -> Any:
            await self.gate.wait()
            return await append(blocks)
        stream.append = held  # type: ignore[method-assign]

    def release(self) -> None:
        self.gate.set()


async def answered_within(future: Awaitable[Any], seconds: float = 2.0) -> Any:
    return await asyncio.wait_for(asyncio.shield(future), seconds)


async def unanswered(future: asyncio.Future[Any]) -> bool:
    """True if `future` stays unanswered while the loop turns a few times."""
    for _ in range(20):
        await asyncio.sleep(0)
    return not future.done()


# Each operation decided as it comes, its block sent while others are in flight (no wait for
# a fuller block): what an op read may then be in flight.
LIMITS = dataclasses.replace(PartitionLimits(), commit_batch_ops_min=1, commit_linger_ms=0)


def run(scenario: Callable[[RangePartition], Awaitable[None]]) -> None:
    async def main() -> None:
        p = serving_partition(LIMITS)
        p.committer.speculation.epoch = set_epoch(p.epoch)  # as a set of witnesses would
        try:
            await scenario(p)
        finally:
            await p.stop("test over")
            await p.closed()
    asyncio.run(main())


def test_an_entity_write_with_a_hint_is_answered_before_durable_at_the_hints_version():
    async def scenario(p: RangePartition) -> None:
        await p.committer.submit(put(b"r0", "t0"), 64)  # the group exists, durable
        log = HeldLog(p)
        answer = await answered_within(p.committer.submit_nowait(put(b"r1", "t1"), 64, HINT))
        assert isinstance(answer, Speculative)
        assert answer.result == [etag_of(HINT)] and answer.epoch == set_epoch(p.epoch)
        assert answer.lsn == p.applied_lsn + 1  # the next write the log will hold
        # A read of the row waits for the write to be durable; another row's does not.
        speculation = p.committer.speculation
        await answered_within(speculation.until_rows_durable(
            [entity_key("acct", "group", b"r0")]))
        read = asyncio.ensure_future(speculation.until_rows_durable(
            [entity_key("acct", "group", b"r1")]))
        sync = asyncio.ensure_future(speculation.until_durable(answer.lsn))
        assert await unanswered(read) and await unanswered(sync)
        log.release()
        await answered_within(read)
        await answered_within(sync)
        row = await p.get_row(entity_key("acct", "group", b"r1"))
        assert row is not None and row.version == HINT
    run(scenario)


def test_a_write_that_read_a_row_in_flight_is_answered_only_when_durable():
    """Its answer would rest on a write a crash may take back: the sync path, with the
    committer's version (above the hint now in the floor)."""
    async def scenario(p: RangePartition) -> None:
        await p.committer.submit(put(b"r0", "t0"), 64)
        log = HeldLog(p)
        first = await answered_within(p.committer.submit_nowait(put(b"r1", "t1"), 64, HINT))
        assert isinstance(first, Speculative)
        again = p.committer.submit_nowait(put(b"r1", "t2", b"w"), 64, HINT + 10)
        assert await unanswered(again)
        log.release()
        assert await answered_within(again) == [etag_of(HINT + 1)]
    run(scenario)


def test_a_hint_at_or_below_the_floor_takes_the_sync_path():
    """Its version could repeat an ETag the row once had: the front end's clock is behind."""
    async def scenario(p: RangePartition) -> None:
        await p.committer.submit(put(b"r0", "t0"), 64)
        log = HeldLog(p)
        assert isinstance(await answered_within(
            p.committer.submit_nowait(put(b"r1", "t1"), 64, HINT)), Speculative)
        behind = p.committer.submit_nowait(put(b"r2", "t2"), 64, HINT)
        assert await unanswered(behind)
        log.release()
        etags = await answered_within(behind)
        assert etags == [etag_of(HINT + 1)]
    run(scenario)


def test_the_first_write_of_a_group_makes_the_next_ones_wait():
    """A new group's mark is in flight: the next write of the group reads it."""
    async def scenario(p: RangePartition) -> None:
        log = HeldLog(p)
        assert isinstance(await answered_within(
            p.committer.submit_nowait(put(b"r1", "t1"), 64, HINT)), Speculative)
        second = p.committer.submit_nowait(put(b"r2", "t2"), 64, HINT + 1)
        assert await unanswered(second)
        assert p.committer.speculation.last_lsn == 1
        meta_wait = asyncio.ensure_future(p.committer.speculation.until_rows_durable(
            [meta_key("acct", "group")]))
        assert await unanswered(meta_wait)
        log.release()
        await answered_within(second)
        await answered_within(meta_wait)
    run(scenario)


def test_appends_answer_early_with_the_committers_versions():
    async def scenario(p: RangePartition) -> None:
        log = HeldLog(p)
        futures = [p.committer.submit_nowait(log_append("acct", f"log-{i}", (b"r",),
                                                        token=f"a{i}"), 64, HINT)
                   for i in range(3)]
        answers = [await answered_within(f) for f in futures]
        assert [a.result for a in answers] == [0, 0, 0]
        assert [a.lsn for a in answers] == [1, 2, 3]
        # The same log again: it read the log's meta row in flight.
        same = p.committer.submit_nowait(log_append("acct", "log-0", (b"r",), token="b"),
                                         64, HINT)
        assert await unanswered(same)
        log.release()
        assert await answered_within(same) == 1
        assert p.committer.speculation.last_lsn == 3
    run(scenario)


def test_a_retry_answered_from_its_token_is_final_at_once():
    """A retry writes nothing: its answer rests on durable rows and needs no sync."""
    async def scenario(p: RangePartition) -> None:
        assert await p.committer.submit(log_append("acct", "log", (b"r",), token="t"), 64) == 0
        HeldLog(p)
        retry = p.committer.submit_nowait(log_append("acct", "log", (b"r",), token="t"),
                                          64, HINT)
        assert await answered_within(retry) == 0
    run(scenario)


def test_waits_for_early_answers_fail_when_the_partition_stops():
    async def scenario(p: RangePartition) -> None:
        await p.committer.submit(put(b"r0", "t0"), 64)
        HeldLog(p)
        answer = await answered_within(p.committer.submit_nowait(put(b"r1", "t1"), 64, HINT))
        sync = asyncio.ensure_future(p.committer.speculation.until_durable(answer.lsn))
        assert await unanswered(sync)
        await p.stop("deposed")
        with pytest.raises(Unavailable):
            await answered_within(sync)
        with pytest.raises(Unavailable):  # and any wait begun after
            await p.committer.speculation.until_durable(answer.lsn)
    run(scenario)


def test_the_witnesses_drop_the_records_of_writes_once_durable():
    """curp.py step 6: a block's hinted writes leave the witnesses once durable; a plain one
    has no record to drop (a fast write's retry, without its hint, is left to the sweep)."""
    async def scenario(p: RangePartition) -> None:
        dropped: list[bytes] = []
        p.committer.speculation.drop = dropped.extend
        await p.committer.submit(put(b"r0", "plain"), 64)
        await p.committer.submit(put(b"r8", "hinted"), 64, HINT - 1)  # answered early
        await p.committer.speculation.until_all_durable()
        log = HeldLog(p)
        early = p.committer.submit_nowait(put(b"r1", "fast"), 64, HINT)
        appended = p.committer.submit_nowait(log_append("acct", "log", (b"r",), token="app"),
                                             64, HINT)
        await answered_within(early)
        await answered_within(appended)
        assert dropped == [b"hinted"]  # the others are not durable yet: a crash needs them
        log.release()
        await p.committer.speculation.until_all_durable()
        await p.committer.submit(put(b"r9", "after"), 64, HINT + 1)  # the blocks before ended
        assert sorted(dropped) == [b"after", b"app", b"fast", b"hinted"]
    run(scenario)


def test_an_owner_that_moved_on_after_a_hinted_write_still_answers_it():
    """Its answer would name the owner's witnesses; if the partition is no longer found
    here by then (unloading, split), the answer goes untaught rather than never."""
    async def scenario(p: RangePartition) -> None:
        from types import SimpleNamespace

        from common.errors import NotOwner
        from common.proto import partition_pb2 as pb
        from partition_layer.client_requests import put_request
        from partition_layer.requests import handle

        async def close() -> None:
            return None
        p.witnesses = SimpleNamespace(  # type: ignore[assignment]
            members=SimpleNamespace(addresses=("a:1", "b:2", "c:3")), close=close,
            epoch=set_epoch(p.epoch))
        found = 0

        def find(key: bytes) -> RangePartition:
            nonlocal found
            found += 1
            if found > 1:
                raise NotOwner("moved on")
            return p
        request = put_request("acct", "group", "r1", b"v", None, None, "t1")
        request.version_hint = HINT  # naming no epoch: its answer would teach the witnesses
        response = await asyncio.wait_for(handle(request, find, p.limits), 5)
        assert isinstance(response, pb.Response) and not response.error
        assert not response.witnesses
    run(scenario)


def test_a_read_that_waited_for_an_early_write_answers_only_if_still_the_owner():
    """DESIGN §8 invariant 7: the lease may run out while the read waits for the write."""
    async def scenario(p: RangePartition) -> None:
        from common.proto import partition_pb2 as pb
        from partition_layer.requests import handle

        valid = True
        p.lease_valid = lambda: valid  # type: ignore[method-assign]
        await p.committer.submit(put(b"r0", "t0"), 64)
        log = HeldLog(p)
        await answered_within(p.committer.submit_nowait(put(b"r1", "t1"), 64, HINT))
        get = asyncio.ensure_future(handle(pb.Request(account="acct", pname="group",
                                                      get=pb.GetOp(row=b"r1")),
                                           lambda _key: p, p.limits))
        assert await unanswered(get)
        valid = False
        log.release()
        assert (await answered_within(get)).error == "NotOwner"
    run(scenario)


def test_a_condemned_write_or_one_without_a_set_is_answered_only_when_durable():
    """The owner's sweep took a write's records (witness_sweep.py): the committer answers it
    only once durable, never early; nor anything while the owner has no set in use (one
    being replaced: witness_repick.py)."""
    async def scenario(p: RangePartition) -> None:
        await p.committer.submit(put(b"r0", "t0"), 64)
        speculation = p.committer.speculation
        log = HeldLog(p)
        condemned = put(b"r1", "t1")
        speculation.condemn(condemned.token_key, until_s=1e12)
        swept = p.committer.submit_nowait(condemned, 64, HINT)
        assert await unanswered(swept)
        speculation.epoch = 0  # no set in use
        unset = p.committer.submit_nowait(put(b"r2", "t2"), 64, HINT + 1)
        assert await unanswered(unset)
        log.release()
        assert not isinstance(await answered_within(swept), Speculative)
        assert not isinstance(await answered_within(unset), Speculative)
    run(scenario)


def test_a_request_names_the_sets_epoch_and_a_sync_the_owners():
    """Front ends name the epoch of the set they recorded at (witness_set.set_epoch), not
    the owner's: only that one is answered early, another is taught the set; a SyncOp naming
    any set of this owner waits, one naming an older owner's is refused."""
    async def scenario(p: RangePartition) -> None:
        from types import SimpleNamespace

        from common.proto import partition_pb2 as pb
        from partition_layer import requests
        from partition_layer.client_requests import put_request

        async def close() -> None:
            return None
        epoch = set_epoch(p.epoch, 2)
        p.witnesses = SimpleNamespace(  # type: ignore[assignment]
            members=SimpleNamespace(addresses=("a:1", "b:2", "c:3")), close=close, epoch=epoch)
        request = put_request("acct", "group", "r1", b"v", None, None, "t1")
        request.version_hint, request.curp_epoch = HINT, epoch
        assert requests._curp_hint(request, p) == HINT
        assert not requests._teaches(request, p)
        for other in (p.epoch, set_epoch(p.epoch, 1), 0):
            request.curp_epoch = other
            assert requests._curp_hint(request, p) == 0 and requests._teaches(request, p)
        await requests._sync(pb.SyncOp(epoch=set_epoch(p.epoch, 1), lsn=0), p)
        with pytest.raises(Unavailable, match="is gone"):
            await requests._sync(pb.SyncOp(epoch=set_epoch(p.epoch - 1, 5), lsn=0), p)
    run(scenario)
