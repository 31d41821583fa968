"""A deposed primary's tail (issue 30; partition_layer/geo_tail.py, geo_link.py,
geo_shipper.py): after an unplanned failover made another stamp an account's primary, the
operations this stamp took and never shipped are set aside in a durable report, never sent
to the new primary and never dropped; the stamp makes itself the account's secondary."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.errors import Unavailable
from common.proto import partition_pb2 as pb
from frontend import accounts
from location.geo_auth import GeoSettings
from partition_layer import geo_link, geo_shipper
from partition_layer.geo_link import GeoLink, Placement
from partition_layer.geo_shipper import GeoShipper, Position
from partition_layer.geo_tail import Deposed, TailReport, read_tail, request_of, tail_path
from partition_layer.requests import handle
from tests.support.geo import LIMITS, Side, append, put

DEADLINE_S = 10.0


class Secondary(Side):
    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    async def send(self, target: str, requests: list[pb.Request]) -> None:
        self.sent += len(requests)
        await self.apply(requests)

    async def apply(self, requests: list[pb.Request]) -> None:
        for request in requests:
            request.id = next(self.ids)
            response = await handle(request, self.server.find, LIMITS)
            assert not response.error, (response.error, response.message)


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"not within {DEADLINE_S} s: {what}"
        await asyncio.sleep(0.005)


async def write(primary: Side, n: int, tag: str) -> None:
    for i in range(n):
        await primary.ok("orders", append=append(f"o{tag}{i}".encode()))
        await primary.ok("users", put=put(f"u{i % 3}".encode(), f"v{tag}{i}".encode()))


async def state(side: Side) -> tuple[object, ...]:
    read = await side.ok("orders", read=pb.ReadOp(limit=1000))
    users = [await side.ask("users", get=pb.GetOp(row=f"u{i}".encode())) for i in range(3)]
    return [r.data for r in read.records], [(u.value, u.etag) for u in users]


def test_a_deposed_accounts_unshipped_operations_are_set_aside_not_sent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(geo_shipper, "RETRY_MAX_S", 0.01)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()
        deposed = {"now": False}

        async def targets(account: str) -> str | Deposed | None:
            return Deposed("east-1", 2) if deposed["now"] else "east-1"

        report = TailReport(tmp_path)
        shipper = GeoShipper(_site(primary), targets, secondary.send, Position(0, None),
                             set_aside=report.set_aside)
        primary.partition.shipper = shipper
        task = asyncio.get_running_loop().create_task(shipper.run())
        await write(primary, 10, "a")
        await until(lambda: shipper.lag_ops() == 0, "shipped")
        sent = secondary.sent
        deposed["now"] = True
        await write(primary, 6, "b")  # taken here after the failover: the tail
        await until(lambda: shipper.lag_ops() == 0, "set aside")
        assert secondary.sent == sent  # none of it went to the new primary
        lines = read_tail(tmp_path, "acct")
        assert {line["pname"] for line in lines} == {"orders", "users"}
        assert all(line["primary"] == "east-1" and line["epoch"] == 2 for line in lines)
        # The report holds every row: applied on top of what was shipped, it is the primary.
        await secondary.apply([request_of(line) for line in lines])
        assert await state(secondary) == await state(primary)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_without_a_report_a_deposed_batch_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(geo_shipper, "RETRY_MAX_S", 0.01)

    async def scenario() -> None:
        primary, secondary = Side(), Secondary()

        async def targets(account: str) -> Deposed:
            return Deposed("east-1", 2)

        shipper = GeoShipper(_site(primary), targets, secondary.send, Position(0, None))
        primary.partition.shipper = shipper
        task = asyncio.get_running_loop().create_task(shipper.run())
        await write(primary, 3, "a")
        await until(lambda: shipper.failures >= 3, "it retries")
        assert shipper.shipped_lsn == 0 and secondary.sent == 0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_read_tail_keeps_one_line_per_batch_name_and_skips_a_torn_one(tmp_path: Path) -> None:
    async def scenario() -> None:
        request = pb.Request(account="acct", pname="orders")
        report = TailReport(tmp_path)
        for _ in range(2):  # a retry writes the batch again
            await report.set_aside(7, 42, [(Deposed("east-1", 3), request)])
        await report.set_aside(7, 43, [(Deposed("east-1", 3), request)])

    asyncio.run(scenario())
    with open(tail_path(tmp_path, "acct"), "ab") as out:
        out.write(b'{"torn": ')
    assert [line["lsn"] for line in read_tail(tmp_path, "acct")] == [42, 43]


class Roles:
    def __init__(self, role: str, epoch: int) -> None:
        self.role, self.epoch = role, epoch
        self.demoted: list[tuple[str, str, int]] = []

    def held(self, account: str) -> tuple[str, int]:
        return self.role, self.epoch

    def demote(self, account: str, primary: str, epoch: int) -> None:
        self.demoted.append((account, primary, epoch))


@pytest.mark.parametrize(("role", "epoch", "deposed", "demoted"), [
    ("primary", 2, False, False),  # failed over to this stamp: the location catches up
    ("primary", 3, False, False),
    ("primary", 1, True, True),  # deposed while it was gone: made the secondary
    ("secondary", 2, True, False),  # a write taken before the front ends saw the demotion
])
def test_the_held_role_decides_whether_another_primary_deposed_this_stamp(
        role: str, epoch: int, deposed: bool, demoted: bool) -> None:
    roles = Roles(role, epoch)
    link = GeoLink(lambda: GeoSettings("west-1", ("127.0.0.1:1",), b"s" * 32), roles=roles)

    async def resolve(settings: GeoSettings, account: str) -> Placement:
        return Placement("east-1", "west-1", ("127.0.0.3:1",), 2)

    link._resolve = resolve  # type: ignore[method-assign]

    async def scenario() -> object:
        try:
            return await link.targets("acct")
        except Unavailable:
            return None

    answer = asyncio.run(scenario())
    assert (answer == Deposed("east-1", 2)) is deposed
    assert roles.demoted == ([("acct", "east-1", 2)] if demoted else [])
    assert geo_link.PRIMARY == accounts.PRIMARY  # the role names are the records'


def _site(side: Side) -> Any:
    """The partition as the shipper's ShipSite; it is handed every operation as it commits
    (the shipper starts before the first), so its log is never read."""

    class Site:
        id = side.partition.id
        range = side.partition.range
        streams = {"log": None}

        @property
        def applied_lsn(self) -> int:
            return side.partition.applied_lsn

        async def read_blob(self, row: Any) -> bytes:
            return await side.partition.read_blob(row)

        def lease_valid(self) -> bool:
            return True

    return Site()


def test_nothing_ships_to_an_unavailable_secondary() -> None:
    """After an unplanned failover the old primary is the secondary, unavailable (its copy
    diverged): nothing is shipped to it, nor kept for it, until a bootstrap."""
    link = GeoLink(lambda: GeoSettings("east-1", ("127.0.0.1:1",), b"s" * 32))

    async def resolve(settings: GeoSettings, account: str) -> Placement:
        return Placement("east-1", "west-1", ("127.0.0.2:1",), 2, "unavailable")

    link._resolve = resolve  # type: ignore[method-assign]
    assert asyncio.run(link.targets("acct")) is None
