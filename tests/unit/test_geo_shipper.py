"""A primary partition's shipper (partition_layer/geo_shipper.py, issue 30), on in-memory
partitions: what commits reaches the secondary, in order, handed over by the committer or read
back from the commit log (after a start, or when the hand-off queue overflowed); only the
accounts with a secondary; failed sends retried until they land; nothing past the applied LSN;
its position and last sync time as the contract says."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from common.checksums import crc32c
from common.errors import PreconditionFailed, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import geo_shipper
from partition_layer.geo_shipper import GeoShipper, Position
from partition_layer.partition import RangePartition
from partition_layer.requests import handle
from partition_layer.rows import Row
from stream_layer.framing import Location
from tests.support.geo import BIG, LIMITS, Side, append, put

DEADLINE_S = 10.0


class Site:
    """A RangePartition as the shipper's ShipSite, its FakeStream log read with `blocks`."""

    def __init__(self, partition: RangePartition) -> None:
        self.partition = partition
        self.id = partition.id
        self.range = partition.range
        self.streams = {"log": self}
        self.hold_back = 0  # report this many operations fewer as applied

    @property
    def applied_lsn(self) -> int:
        return self.partition.applied_lsn - self.hold_back

    async def read_blob(self, row: Row) -> bytes:
        return await self.partition.read_blob(row)

    def lease_valid(self) -> bool:
        return self.partition.lease_valid()

    async def blocks(self, start: Location | None = None
                     ) -> AsyncIterator[tuple[Location, bytes]]:
        fake = self.partition.streams["log"]
        for location in sorted(fake.blocks, key=lambda loc: loc.offset):  # type: ignore[attr-defined]
            if start is None or location.offset >= start.offset:
                yield location, fake.blocks[location]  # type: ignore[attr-defined]


class Secondary(Side):
    """The secondary stamp's partition, as the sender reaches it; sends counted, and made to
    fail while `failing` is positive."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: list[tuple[str, list[pb.Request]]] = []
        self.failing = 0

    def hold(self) -> asyncio.Event:
        """Sends wait for the event returned (set: they go through)."""
        gate = asyncio.Event()
        send = self.send

        async def held(target: str, requests: list[pb.Request]) -> None:
            await gate.wait()
            await send(target, requests)

        self.send = held  # type: ignore[method-assign]
        return gate

    async def send(self, target: str, requests: list[pb.Request]) -> None:
        if self.failing > 0:
            self.failing -= 1
            raise Unavailable("the secondary is down")
        self.sends.append((target, requests))
        for request in requests:
            request.id = next(self.ids)
            response = await handle(request, self.server.find, LIMITS)
            assert not response.error, (response.error, response.message)


async def targets(account: str) -> str | None:
    return "east-1" if account == "acct" else None  # "solo" has no secondary


async def until(check: Callable[[], bool], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not check():
        assert loop.time() < deadline, f"not within {DEADLINE_S} s: {what}"
        await asyncio.sleep(0.005)


async def writes(primary: Side, n: int, tag: str = "") -> None:
    for i in range(n):
        await primary.ok("orders", append=append(f"o{tag}{i}".encode()))
        await primary.ok("users", put=put(f"u{i % 3}".encode(), f"v{tag}{i}".encode()))
        solo = pb.Request(id=next(primary.ids), account="solo", pname="notes",
                          append=pb.AppendOp(records=[b"s"], crcs=[crc32c(b"s")]))
        assert not (await handle(solo, primary.server.find, LIMITS)).error


async def view(side: Side) -> Any:
    peek = await side.ok("orders", peek=pb.Empty())
    read = await side.ok("orders", read=pb.ReadOp(from_seq=0, limit=1000))
    users = [await side.ask("users", get=pb.GetOp(row=f"u{i}".encode())) for i in range(3)]
    return (peek.next_seq, [r.data for r in read.records],
            [(u.error, u.value, u.etag) for u in users])


async def running(primary: Side, secondary: Secondary, **kwargs: Any
                  ) -> tuple[GeoShipper, asyncio.Task[None]]:
    """A shipper from the start of the commit log, told of each block as it commits."""
    shipper = GeoShipper(Site(primary.partition), targets, secondary.send, Position(0, None),
                         **kwargs)
    primary.partition.shipper = shipper
    return shipper, asyncio.get_running_loop().create_task(shipper.run())


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def test_what_commits_reaches_the_secondary_for_accounts_with_one_only() -> None:
    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        shipper, task = await running(primary, secondary)
        await writes(primary, 30)
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        assert await view(secondary) == await view(primary)
        assert {target for target, _ in secondary.sends} == {"east-1"}
        assert all(r.account == "acct" for _, rs in secondary.sends for r in rs)
        solo = pb.Request(id=1, account="solo", pname="notes", peek=pb.Empty())
        assert (await handle(solo, secondary.server.find, LIMITS)).next_seq == 0
        # Batches, not a send per operation: each name squashed to one request per batch.
        assert shipper.batches <= 90 and all(
            len({(r.account, r.pname) for r in rs}) == len(rs) for _, rs in secondary.sends)
        await stopped(task)

    run(scenario)


def test_a_failed_send_is_retried_until_it_lands_and_nothing_is_skipped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(geo_shipper, "RETRY_MAX_S", 0.01)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        secondary.failing = 5
        shipper, task = await running(primary, secondary)
        await writes(primary, 20)
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        assert shipper.failures == 5
        assert await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)


def test_a_shipper_started_behind_reads_the_commit_log() -> None:
    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        await writes(primary, 25)  # before any shipper: nothing handed over
        shipper, task = await running(primary, secondary)
        await until(lambda: shipper.lag_ops() == 0, "caught up from the log")
        await writes(primary, 5, tag="x")  # then from the hand-off
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        assert await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)


def test_an_overflowing_hand_off_falls_back_to_the_log(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setattr(geo_shipper, "QUEUE_BYTES_MAX", 2_000)
    monkeypatch.setattr(geo_shipper, "RETRY_MAX_S", 0.01)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        secondary.failing = 1_000_000  # down while the queue overflows
        shipper, task = await running(primary, secondary)
        await writes(primary, 40)
        assert shipper._handed_bytes <= 2_000
        secondary.failing = 0
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        assert await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)


def test_nothing_past_the_applied_lsn_is_shipped() -> None:
    """A block in the commit log past what the partition applied (in flight, or junk a
    failed owner left) stays at the primary."""
    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        await writes(primary, 3)
        await primary.ok("users", put=put(b"late", b"in flight"))
        site = Site(primary.partition)
        site.hold_back = 1  # the last block: durable in the log, not applied yet
        shipper = GeoShipper(site, targets, secondary.send, Position(0, None))
        task = asyncio.get_running_loop().create_task(shipper.run())
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        assert shipper.shipped_lsn == primary.partition.applied_lsn - 1
        assert (await secondary.ask("users", get=pb.GetOp(row=b"late"))).error == "NotFound"
        await stopped(task)

    run(scenario)


def test_position_and_last_sync_time() -> None:
    async def scenario() -> None:
        clock = [1_000.0]
        primary, secondary = Side(), Secondary()
        gate = secondary.hold()
        shipper, task = await running(primary, secondary, wall=lambda: clock[0])
        assert shipper.last_sync_s() == 1_000.0  # nothing waiting: now
        clock[0] = 1_010.0
        await writes(primary, 1)  # committed at 1010, held at the gate
        clock[0] = 1_020.0
        # Every write acknowledged before the first one waiting was shipped.
        assert shipper.lag_ops() > 0 and shipper.last_sync_s() == 1_010.0
        safe = Location(1, 0, 10)
        shipper.checkpointed(safe, primary.partition.applied_lsn)
        assert shipper.position == Position(0, None)  # not shipped that far yet
        gate.set()
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        assert shipper.last_sync_s() == 1_020.0  # nothing waiting: now
        assert shipper.position == Position(primary.partition.applied_lsn, safe)
        # Held again: the last sync time stays at the last write shipped.
        gate.clear()
        clock[0] = 1_030.0
        await writes(primary, 1)
        clock[0] = 1_040.0
        assert shipper.lag_ops() > 0 and shipper.last_sync_s() == 1_030.0
        gate.set()
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        await stopped(task)

    run(scenario)


def test_a_new_owner_resumes_from_the_recorded_position() -> None:
    """What a partition's metadata keeps (`position`) lets a new owner go on where the
    last one stood: it reads the log from the recorded block and ships only what follows."""
    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        first, task = await running(primary, secondary)
        await writes(primary, 10)
        await until(lambda: first.lag_ops() == 0, "caught up")
        blocks = sorted(primary.partition.streams["log"].blocks,  # type: ignore[attr-defined]
                        key=lambda loc: loc.offset)
        first.checkpointed(blocks[-1], primary.partition.applied_lsn)
        recorded = first.position
        assert recorded == Position(primary.partition.applied_lsn, blocks[-1])
        await stopped(task)
        primary.partition.shipper = None  # the owner is gone; writes go on meanwhile
        await writes(primary, 5, tag="y")
        sent_before = len(secondary.sends)
        second = GeoShipper(Site(primary.partition), targets, secondary.send, recorded,
                            synced_s=123.0)
        assert second.last_sync_s() == 123.0  # the previous owner's figure, until it ships
        task = asyncio.get_running_loop().create_task(second.run())
        await until(lambda: second.lag_ops() == 0, "caught up")
        assert await view(secondary) == await view(primary)
        shipped = [r for _, rs in secondary.sends[sent_before:] for r in rs]
        orders = [r for r in shipped if r.pname == "orders"]
        # Only the five appends made since: their records rows (and the log's meta row).
        assert orders and sum(len(r.replicate.keys) for r in orders) == 5 + len(orders)
        await stopped(task)

    run(scenario)


def test_drained_waits_until_everything_applied_is_shipped() -> None:
    """What a merge waits for (split_merge._shipped_all): not before the secondary has it."""
    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        gate = secondary.hold()
        shipper, task = await running(primary, secondary)
        await shipper.drained()  # nothing committed: at once
        await writes(primary, 3)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(shipper.drained(), 0.2)
        gate.set()
        await asyncio.wait_for(shipper.drained(), DEADLINE_S)
        assert shipper.lag_ops() == 0 and await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)


def test_a_batch_refused_after_the_roles_moved_goes_where_the_location_now_says() -> None:
    """A failover moved the account's roles while a batch was in flight: the secondary
    refuses it (no longer this stamp's secondary), and asked again, the location says this
    stamp ships the account nowhere: the batch is done, nothing is retried for ever."""
    async def scenario() -> None:
        primary = Side()
        moved = {"yes": False}

        async def refusing(target: str, requests: list[pb.Request]) -> None:
            moved["yes"] = True
            raise PreconditionFailed("held here as primary")

        async def placed(account: str) -> str | None:
            return None if moved["yes"] else await targets(account)

        shipper = GeoShipper(Site(primary.partition), placed, refusing, Position(0, None))
        primary.partition.shipper = shipper
        task = asyncio.get_running_loop().create_task(shipper.run())
        await writes(primary, 3)
        await until(lambda: shipper.lag_ops() == 0, "done without the secondary")
        assert shipper.failures == 1
        await stopped(task)

    run(scenario)


def test_batches_stay_under_their_bound_however_far_behind(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A lag (the secondary was down) does not grow a batch past SHIP_BYTES_MAX: a front
    end refuses a message over its receive limit, and a batch refused that way would be
    sent again for ever. One operation larger than the bound goes alone."""
    monkeypatch.setattr(geo_shipper, "SHIP_BYTES_MAX", 3_000)
    monkeypatch.setattr(geo_shipper, "RETRY_MAX_S", 0.01)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        secondary.failing = 3
        shipper, task = await running(primary, secondary)
        await writes(primary, 60)
        await primary.ok("orders", append=append(b"z" * 5_000))  # larger than the bound
        for _ in range(3):  # values in blob data: pointers here, shipped with their bytes
            await primary.ok("orders", append=append(BIG))
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        sizes = [sum(len(k) + len(r) for q in requests
                     for k, r in zip(q.replicate.keys, q.replicate.rows, strict=True))
                 for _, requests in secondary.sends]
        assert len(sizes) > 3 and max(sizes) > 3_000
        # The large appends, each alone.
        assert sum(1 for size in sizes if size > 3_000) == 4, sizes
        assert await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)


def test_a_long_lag_never_loses_the_last_sync_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """More blocks wait than samples are kept: the last sync time may be reported older than
    it is, never newer, and never lost (it once fell back to 0 under a long 32x100 lag)."""
    monkeypatch.setattr(geo_shipper, "SYNC_SAMPLES_MAX", 4)

    async def scenario() -> None:
        clock = [1_000.0]
        primary, secondary = Side(), Secondary()
        gate = secondary.hold()
        shipper, task = await running(primary, secondary, wall=lambda: clock[0])
        await writes(primary, 1)
        gate.set()
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        clock[0] = 1_100.0
        assert shipper.last_sync_s() == 1_100.0
        gate.clear()
        for _ in range(20):  # 60 blocks, a second apart, none shipped
            clock[0] += 1.0
            await writes(primary, 1)
        synced = shipper.last_sync_s()
        assert 1_100.0 <= synced <= 1_101.0, synced
        gate.set()
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        assert shipper.last_sync_s() == clock[0]
        await stopped(task)

    run(scenario)


def test_a_split_child_ships_its_own_half_of_its_parents_log() -> None:
    """A split child's commit log begins with its parent's, whose operations touch both
    halves: it ships only the keys of its own range (its sibling ships the rest, in order
    with its own operations)."""
    from partition_layer.keys import KeyRange
    from partition_layer.operations import meta_key

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        await writes(primary, 5)  # "orders" and "users" of acct (and "notes" of solo)
        site = Site(primary.partition)
        site.range = KeyRange(b"", meta_key("acct", "p"))  # "orders" here, "users" not
        shipper = GeoShipper(site, targets, secondary.send, Position(0, None))
        task = asyncio.get_running_loop().create_task(shipper.run())
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        names = {r.pname for _, rs in secondary.sends for r in rs}
        assert names == {"orders"}
        await stopped(task)

    run(scenario)


def test_what_came_from_another_stamp_is_never_shipped_on() -> None:
    """Operations applied from the account's primary (operations.Replicated, marked in the
    commit log) are not shipped back or on: only what was written here is."""
    from partition_layer import keys
    from partition_layer.rows import encode_row

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        shipper, task = await running(primary, secondary)
        key = keys.encode_key("acct", "users", keys.KIND_ENTITY, b"from-afar")
        await primary.ok("users", replicate=pb.ReplicateOp(
            keys=[key], rows=[encode_row(Row(7, value=b"v"))]))
        await writes(primary, 2)
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        shipped = {k for _, rs in secondary.sends for r in rs for k in r.replicate.keys}
        assert key not in shipped and shipped
        await stopped(task)

    run(scenario)


def test_an_account_whose_target_is_not_known_yet_waits_and_is_never_skipped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The location still names another primary for an account whose writes this stamp
    took (a failover it has not heard of yet): the batch waits and asks again."""
    monkeypatch.setattr(geo_shipper, "RETRY_MAX_S", 0.01)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        unsure = {"left": 4}

        async def placed(account: str) -> str | None:
            if account == "acct" and unsure["left"] > 0:
                unsure["left"] -= 1
                raise Unavailable("the location names another primary: asking again")
            return await targets(account)

        shipper = GeoShipper(Site(primary.partition), placed, secondary.send,
                             Position(0, None))
        primary.partition.shipper = shipper
        task = asyncio.get_running_loop().create_task(shipper.run())
        await writes(primary, 10)
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        assert shipper.failures >= 4
        assert await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)


def test_a_names_squashed_rows_stay_under_what_a_partition_server_takes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Many appends to one log while the secondary lags: the batch stops before a name's
    ReplicateOp would pass REPLICATE_ROWS_MAX (a partition server refuses more, and the
    batch was sent again for ever: a stall found under a 32x100 burst)."""
    monkeypatch.setattr(geo_shipper, "REPLICATE_ROWS_MAX", 10)
    monkeypatch.setattr(geo_shipper, "RETRY_MAX_S", 0.01)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        secondary.failing = 2
        shipper, task = await running(primary, secondary)
        for i in range(20):
            await primary.ok("orders", append=append(f"o{i}".encode()))
        await until(lambda: shipper.lag_ops() == 0, "caught up")
        assert max(len(r.replicate.keys) for _, rs in secondary.sends for r in rs) <= 10
        assert await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)


def test_a_paced_shipper_gathers_what_commits_meanwhile_into_one_batch() -> None:
    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        shipper, task = await running(primary, secondary, pace_s=1.0)
        await primary.ok("orders", append=append(b"first"))
        await until(lambda: shipper.lag_ops() == 0, "the first write shipped")
        assert shipper.batches == 1
        for i in range(5):  # each commits while the shipper waits out its pace
            await primary.ok("orders", append=append(f"next-{i}".encode()))
        await until(lambda: shipper.lag_ops() == 0, "shipped")
        assert shipper.batches == 2  # unpaced, the first of them would have gone alone
        assert await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)


def test_a_paced_shipper_does_not_wait_when_a_full_batch_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst: what waits fills a batch, so pacing would only cap the rate it ships at."""
    monkeypatch.setattr(geo_shipper, "SHIP_OPS_MAX", 4)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        gate, sending = asyncio.Event(), asyncio.Event()
        send = secondary.send

        async def held(target: str, requests: list[pb.Request]) -> None:
            sending.set()
            await gate.wait()
            await send(target, requests)

        secondary.send = held  # type: ignore[method-assign]
        shipper, task = await running(primary, secondary, pace_s=60.0)
        await primary.ok("orders", append=append(b"first"))
        await until(sending.is_set, "the first batch is being sent")
        for i in range(12):  # three full batches wait behind it: none waits out the pace
            await primary.ok("orders", append=append(f"next-{i}".encode()))
        gate.set()
        await until(lambda: shipper.lag_ops() == 0, "the burst shipped, batch after batch")
        assert shipper.batches == 4
        assert await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)


def test_a_paced_shipper_reading_the_log_behind_ships_batch_after_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind (reading the commit log, nothing handed over): each batch cut short by its
    bounds is followed by the next at once (paced, 32x100 had fallen 7 s behind)."""
    monkeypatch.setattr(geo_shipper, "SHIP_OPS_MAX", 8)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        await writes(primary, 12)  # 36 operations before any shipper: read from the log
        shipper, task = await running(primary, secondary, pace_s=60.0)
        await until(lambda: shipper.lag_ops() == 0, "caught up from the log")
        assert shipper.batches == 5
        assert await view(secondary) == await view(primary)
        await stopped(task)

    run(scenario)
