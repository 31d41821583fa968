"""A geo bootstrap's partition-layer half (issue 30; partition_layer/geo_copy.py): a name
cleared at the secondary as replicated deletes, a partition's copy of an account's rows to
it, and the shipper waiting while a copy runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from common.errors import PreconditionFailed, Unavailable
from common.proto import partition_pb2 as pb
from location.geo_auth import GeoSettings
from partition_layer import geo_copy, keys
from partition_layer.geo_copy import Copier
from partition_layer.geo_link import GeoLink, Placement
from partition_layer.geo_shipper import GeoShipper, Position
from partition_layer.geo_shipping import start_position
from partition_layer.requests import handle
from partition_layer.rows import Row, encode_row
from tests.support.geo import BIG, LIMITS, Side, append, put

USERS = 5


class Secondary(Side):
    """A secondary's partition taking calls as its front end's door would: one request per
    name and call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.sizes: list[int] = []

    async def send(self, target: str, requests: list[pb.Request]) -> None:
        assert target == "east-1"
        names = [r.pname for r in requests]
        assert len(names) == len(set(names)), names
        self.calls.append(names)
        self.sizes.append(sum(r.ByteSize() for r in requests))
        for request in requests:
            request.id = next(self.ids)
            response = await handle(request, self.server.find, LIMITS)
            assert not response.error, (response.error, response.message)


async def write(side: Side, tag: str, n: int = 12) -> None:
    for i in range(n):
        await side.ok("orders", append=append(f"{tag}{i}".encode()))
        value = BIG if i == 3 else f"{tag}{i}".encode()
        await side.ok("users", put=put(f"u{i % USERS}".encode(), value))


async def state(side: Side, names: tuple[str, ...] = ("orders", "users", "only-here")
                ) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in names:
        read = await side.ask(name, read=pb.ReadOp(limit=1000))
        found[name] = ([r.data for r in read.records], read.error)
        found[name + "/rows"] = [(u.value, u.etag, u.error) for u in [
            await side.ask(name, get=pb.GetOp(row=f"u{i}".encode())) for i in range(USERS)]]
    return found


async def clear(side: Side, *names: str) -> None:
    for name in names:
        await side.ok(name, replicate=pb.ReplicateOp(clear=True))


async def fixed_target(account: str) -> str:
    return "east-1"


def test_a_cleared_secondary_given_the_copy_holds_the_primary_and_nothing_else() -> None:
    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        await write(primary, "p")
        await write(secondary, "diverged", 7)  # its own copy: behind and diverged
        await secondary.ok("only-here", append=append(b"never at the primary"))
        await clear(secondary, "orders", "users", "only-here")
        emptied = await state(secondary)
        assert all(not records for records, _ in
                   (emptied[n] for n in ("orders", "users", "only-here")))
        report = await Copier(fixed_target, secondary.send)(primary.partition, "acct")
        assert report.lsn == primary.partition.applied_lsn and report.rows > 0
        assert report.target == "east-1"
        assert await state(secondary) == await state(primary)

    asyncio.run(scenario())


def test_a_large_name_is_cleared_and_copied_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(geo_copy, "CLEAR_ROWS_MAX", 3)
    monkeypatch.setattr(geo_copy, "REPLICATE_ROWS_MAX", 4)
    monkeypatch.setattr(geo_copy, "COPY_CALL_BYTES", 200)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        await write(primary, "p", 30)
        await write(secondary, "s", 20)
        lsn = secondary.partition.applied_lsn
        await clear(secondary, "orders", "users")
        assert secondary.partition.applied_lsn - lsn > 2  # commits of at most 3 deletes
        await Copier(fixed_target, secondary.send)(primary.partition, "acct")
        assert len(secondary.calls) > 3
        assert await state(secondary) == await state(primary)

    asyncio.run(scenario())


def test_large_values_travel_in_calls_of_bounded_bytes(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Values in blob data travel inline: a call is cut by their bytes, not only its rows
    (one log of many large appends had made one request past a front end's limit)."""
    monkeypatch.setattr(geo_copy, "COPY_CALL_BYTES", 3 * len(BIG))

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        for i in range(10):
            await primary.ok("orders", append=append(bytes([i]) + BIG))
            await primary.ok("users", put=put(f"u{i % USERS}".encode(), BIG + bytes([i])))
        await Copier(fixed_target, secondary.send)(primary.partition, "acct")
        assert len(secondary.calls) >= 6
        assert max(secondary.sizes) <= 3 * len(BIG) + len(BIG) + 4096  # one row past, at most
        assert await state(secondary) == await state(primary)

    asyncio.run(scenario())


def test_a_copy_needs_a_secondary_to_copy_to() -> None:
    async def nowhere(account: str) -> None:
        return None

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        await write(primary, "p", 2)
        with pytest.raises(PreconditionFailed):
            await Copier(nowhere, secondary.send)(primary.partition, "acct")
        assert secondary.calls == []

    asyncio.run(scenario())


def test_shipping_waits_while_a_copy_runs() -> None:
    """No batch lands during a copy: an operation past its snapshot must not land before
    the copy of a row it changed."""
    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        shipper = GeoShipper(primary.partition, fixed_target, secondary.send, Position(0, None))
        primary.partition.shipper = shipper
        task = asyncio.get_running_loop().create_task(shipper.run())
        release = asyncio.Event()
        copying = asyncio.Event()

        async def slow_copy() -> str:
            copying.set()
            await release.wait()
            return "copied"

        copy = asyncio.ensure_future(shipper.between_batches(slow_copy))
        await copying.wait()
        await write(primary, "p", 4)
        for _ in range(20):
            await asyncio.sleep(0.005)
        assert secondary.calls == [] and shipper.lag_ops() > 0  # waiting for the copy
        release.set()
        assert await copy == "copied"
        deadline = asyncio.get_running_loop().time() + 10
        while shipper.lag_ops():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.005)
        assert await state(secondary) == await state(primary)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_a_copy_fails_when_shipping_stops() -> None:
    """One queued when the partition stops, and one asked after, fail Unavailable rather than
    wait for a loop that no longer runs."""
    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        shipper = GeoShipper(primary.partition, fixed_target, secondary.send, Position(0, None))
        release = asyncio.Event()

        async def blocked() -> None:
            await release.wait()

        task = asyncio.get_running_loop().create_task(shipper.run())
        running = asyncio.ensure_future(shipper.between_batches(blocked))
        queued = asyncio.ensure_future(shipper.between_batches(blocked))
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for copy in (running, queued):
            with pytest.raises(Unavailable):
                await copy
        with pytest.raises(Unavailable):
            await shipper.between_batches(blocked)

    asyncio.run(scenario())


def test_an_unavailable_answer_is_not_trusted_once_old_and_the_location_gone() -> None:
    """Operations of an account whose secondary is unavailable count as shipped: the answer
    that says so is asked again after 1 s, and not used when the location does not answer
    (a bootstrap's mark would never be seen); other answers stand while it is down."""
    now = [0.0]
    link = GeoLink(lambda: GeoSettings("east-1", ("127.0.0.1:1",), b"s" * 32),
                   now=lambda: now[0])
    answers: list[Any] = [Placement("east-1", "west-1", ("127.0.0.2:1",), 2, "unavailable")]

    async def resolve(settings: GeoSettings, account: str, fresh: bool = False) -> Placement:
        answer = answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    link._resolve = resolve  # type: ignore[method-assign]

    async def scenario() -> None:
        assert await link.targets("acct") is None
        answers[0] = Placement("east-1", "west-1", ("127.0.0.2:1",), 2, "bootstrapping")
        now[0] = 0.5
        assert await link.targets("acct") is None  # still fresh enough
        now[0] = 1.6
        assert await link.targets("acct") == "west-1"  # the mark, seen within a second
        answers[0] = Unavailable("location down")
        now[0] = 100.0
        assert await link.targets("acct") == "west-1"  # a shipping answer stands
        link._placements.clear()
        answers[0] = Placement("east-1", "west-1", ("127.0.0.2:1",), 2, "unavailable")
        assert await link.targets("acct") is None
        answers[0] = Unavailable("location down")
        now[0] = 200.0
        with pytest.raises(Unavailable):
            await link.targets("acct")

    asyncio.run(scenario())


def test_a_shipper_never_starts_before_an_operation_applied_from_another_stamp() -> None:
    """Operations written here before one replicated here belong to an earlier tenure as the
    primary: shipped again after a restart (a mark older than them), with none of the
    replicated ones after, they took the new secondary back to an old state (found by
    `stamp chaos --geo`: a stamp primary, then secondary, then primary again)."""
    async def scenario() -> None:
        side = Side()
        await write(side, "old", 3)  # this stamp's writes as the primary, long ago
        assert start_position(side.partition)[0].lsn == 0  # never checkpointed: no mark
        request = pb.Request(account="acct", pname="users", replicate=pb.ReplicateOp(
            keys=[keys.encode_key("acct", "users", keys.KIND_ENTITY, b"u0")],
            rows=[encode_row(Row(99, value=b"from the other stamp"))]))
        await side.ok("users", replicate=request.replicate)
        replicated = side.partition.applied_lsn
        await write(side, "new", 2)  # primary again
        assert side.partition.replicated_lsn == replicated
        position, _ = start_position(side.partition)
        assert position.lsn == replicated and position.resume_from is None

    asyncio.run(scenario())
