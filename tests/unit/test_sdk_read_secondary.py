"""Read access to the secondary (issue 30, Azure's RA-GRS; stampsdk/aio.py's docstring):
`ReadFrom=secondary` in a connection string and `read_from=` of the clients, a client's reads
sent to the secondary's front ends and its writes to the primary's, reads refused while the
secondary is not live, the roles followed after a failover, `last_sync_time()`, and the Spark
data source's `readFrom` option. No process and no network: the location's answers are
scripted (the resolver's own question replaced), and so are the front ends (the client's
sessions and stream stubs). The same against real stamps: tests/probe/test_geo_failover.py."""

from __future__ import annotations

import asyncio
import base64
import random
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from stampsdk import Client, aio, location
from stampsdk import connection_string as cs
from stampsdk import sas as sdk_sas
from stampsdk import wire as sdk_wire
from stampsdk._proto import frontend_v1_pb2 as pb
from stampsdk.checksums import crc32c
from stampsdk.errors import InvalidArgument, SecondaryNotLive, Unavailable
from stampsdk.location import Resolution, StampAddress

from common.clock import ManualClock
from frontend import wire as fe_wire
from frontend.auth import WRITE_METHODS
from spark.datasource_access import Access, read_only_access

KEY = bytes(range(32))
KEY_B64 = base64.b64encode(KEY).decode()
LOCATION = "127.0.0.1:9"  # never dialled: the resolver's question is scripted
WEST = StampAddress("west-1", "west", ("127.0.0.2:1", "127.0.0.2:2"))
EAST = StampAddress("east-1", "east", ("127.0.0.3:1",))
TTL_S = 60.0


def placement(primary: StampAddress = WEST, secondary: StampAddress = EAST,
              state: str = "live", epoch: int = 1, last_sync_ms: int = 0) -> Resolution:
    return Resolution("acme", primary, secondary, state, epoch, TTL_S, last_sync_ms)


# ---- the connection string and the constructors ---------------------------------------------

def test_read_from_secondary_parses_formats_and_round_trips() -> None:
    text = f"Location=127.0.0.1:7000,127.0.0.1:7001;Account=acme;Key={KEY_B64}"
    parsed = cs.parse(text + ";ReadFrom=secondary")
    assert parsed.read_from == cs.SECONDARY and parsed.location == ("127.0.0.1:7000",
                                                                    "127.0.0.1:7001")
    assert parsed.format() == text + ";ReadFrom=secondary"
    assert cs.parse(parsed.format()) == parsed
    assert "read_from='secondary'" in repr(parsed) and KEY_B64 not in repr(parsed)
    # The default, written or not, is one connection string, spelled without it.
    assert cs.parse(text + ";ReadFrom=primary") == cs.parse(text)
    assert cs.parse(text).read_from == cs.PRIMARY and cs.parse(text).format() == text
    made = cs.make([], "acme", key=KEY, location=["127.0.0.1:7000"], read_from="secondary")
    assert made.read_from == cs.SECONDARY


@pytest.mark.parametrize("text, error", [
    ("Location=h:1;Account=acme;Key={k};ReadFrom=Secondary", "ReadFrom is primary or "
                                                              "secondary, not 'Secondary'"),
    ("Location=h:1;Account=acme;Key={k};ReadFrom=nearest", "not 'nearest'"),
    ("Location=h:1;Account=acme;Key={k};ReadFrom=", "ReadFrom is empty"),
    ("Location=h:1;Account=acme;Key={k};ReadFrom=secondary;ReadFrom=primary",
     "ReadFrom twice"),
    ("Location=h:1;Account=acme;Key={k};readfrom=secondary", "unknown setting 'readfrom'"),
])
def test_a_bad_read_from_is_refused_naming_the_rule(text: str, error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        cs.parse(text.format(k=KEY_B64))


def test_the_clients_take_read_from_as_a_keyword_checked_as_in_a_connection_string() -> None:
    made = aio.Client([], "acme", key=KEY, location=[LOCATION], read_from="secondary")
    assert made.read_from == "secondary"
    assert aio.Client([], "acme", key=KEY, location=[LOCATION]).read_from == "primary"
    # Front ends named instead of a location are read as the secondary's.
    assert aio.Client(["h:1"], "acme", key=KEY, read_from="secondary").read_from == "secondary"
    with pytest.raises(InvalidArgument, match="not 'both'"):
        aio.Client([], "acme", key=KEY, location=[LOCATION], read_from="both")
    text = f"Location={LOCATION};Account=acme;Key={KEY_B64};ReadFrom=secondary"
    assert aio.Client.from_connection_string(text).read_from == "secondary"
    with Client.from_connection_string(text) as blocking:
        assert blocking.read_from == "secondary" and blocking.aio.read_from == "secondary"
    with Client([], "acme", key=KEY, location=[LOCATION], read_from="secondary") as blocking:
        assert blocking.read_from == "secondary"


def test_the_sdks_read_ops_are_those_a_secondary_answers() -> None:
    """The Call ops sent to the secondary are exactly those whose method a geo secondary's
    front end does not refuse as a write (frontend/auth.py), and so are the streams."""
    methods = set(sdk_wire.METHODS.values())
    assert {sdk_wire.METHODS[op] for op in aio.READ_OPS} == methods - WRITE_METHODS
    streams = {sdk_wire.SUBSCRIBE, sdk_wire.SCAN, sdk_wire.LIST_LOGS, sdk_wire.SCAN_RANGES}
    assert not streams & WRITE_METHODS


def test_the_sdks_mark_is_the_one_a_front_end_reads() -> None:
    """The metadata the SDK sends with reads of the secondary is what frontend/wire.py
    takes as the mark (the two sides keep their own copies of the contract)."""
    assert fe_wire.secondary_read(sdk_wire.READ_FROM_METADATA)
    assert not fe_wire.secondary_read(()) and not fe_wire.secondary_read(None)
    assert not fe_wire.secondary_read((("stamp-read-from", "primary"),))


# ---- routing ------------------------------------------------------------------------------

class FrontEnds:
    """Every front end of a test, scripted: each Call session and stream answers at once
    and records (endpoint, what was asked) in `sent`, and what was asked marked as a read
    of the secondary (stampsdk/wire.py READ_FROM_METADATA) in `marked`."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.marked: list[str] = []

    def _record(self, endpoint: str, what: str, metadata: Any) -> None:
        self.sent.append((endpoint, what))
        if metadata == sdk_wire.READ_FROM_METADATA:
            self.marked.append(what)

    def session(self, endpoint: str, secondary_read: bool = False) -> Any:
        front_ends = self

        class Session:
            def submit(self, request: pb.Request, timeout_s: float, nbytes: int = 256
                       ) -> asyncio.Future[pb.Response]:
                op = request.WhichOneof("op")
                front_ends._record(endpoint, op, sdk_wire.READ_FROM_METADATA
                                   if secondary_read else None)
                future = asyncio.get_running_loop().create_future()
                future.set_result(answer(op))
                return future

            async def close(self) -> None:
                pass

        return Session()

    def stub(self, endpoint: str) -> Any:
        front_ends = self

        class Stub:
            def Scan(self, request: pb.ScanRequest, metadata: Any = None) -> Stream:
                front_ends._record(endpoint, "scan", metadata)
                return Stream([pb.ScanPage(items=[pb.ScanItem(
                    pname="users", row=b"alice", value=b"Oslo", etag="e1",
                    crc=crc32c(b"Oslo"))])])

            def Subscribe(self, request: pb.SubscribeRequest, metadata: Any = None
                          ) -> Stream:
                front_ends._record(endpoint, "subscribe", metadata)
                return Stream([pb.SubscribeReply(records=[pb.Record(
                    seq=0, data=b"r0", crc=crc32c(b"r0"))])])

            async def ScanRanges(self, request: pb.ScanRangesRequest, timeout: float,
                                 metadata: Any = None) -> pb.ScanRangesReply:
                front_ends._record(endpoint, "scan_ranges", metadata)
                return pb.ScanRangesReply(ranges=[pb.AccountRange(partition_id=1)])

        return Stub()


class Stream:
    """A server stream of a stub: its replies, then its end."""

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies

    async def _replies(self) -> AsyncIterator[Any]:
        for reply in self.replies:
            yield reply

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._replies()

    def cancel(self) -> None:
        pass


def answer(op: str | None) -> pb.Response:
    if op == "read":
        return pb.Response(records=[pb.Record(seq=0, data=b"r0", crc=crc32c(b"r0"))])
    if op == "get":
        return pb.Response(value=b"Oslo", value_crc=crc32c(b"Oslo"), etag="e1")
    return pb.Response(first_seq=0, next_seq=1, etag="e1", etags=["e1"])


class Channels:
    """The client's channel cache, replaced: a channel is its address (the stub's key)."""

    def get(self, address: str) -> str:
        return address

    async def close(self) -> None:
        pass


class Location:
    """The location's answers, scripted: `answer` is what it says now; `asked` counts."""

    def __init__(self, answer: Resolution) -> None:
        self.answer = answer
        self.asked = 0

    async def resolve(self, deadline: float, fresh: bool) -> Resolution:
        self.asked += 1
        return self.answer


def make(monkeypatch: pytest.MonkeyPatch, answer: Resolution, read_from: str = "secondary"
         ) -> tuple[aio.Client, FrontEnds, Location, ManualClock]:
    clock = ManualClock(time.time())
    front_ends, where = FrontEnds(), Location(answer)
    client = aio.Client([], "acme", key=KEY, location=[LOCATION], read_from=read_from,
                        timeout_s=5, clock=clock, rng=random.Random(0))
    assert client._resolver is not None
    client._resolver._resolve = where.resolve  # type: ignore[method-assign]
    client._channels = Channels()  # type: ignore[assignment]
    client._session = front_ends.session  # type: ignore[method-assign]
    monkeypatch.setattr(aio.fe_grpc, "FrontEndStub", front_ends.stub)
    return client, front_ends, where, clock


async def every_call(client: aio.Client) -> None:
    """Each write and each read of the client, once."""
    await client.append("orders", [b"r1"])
    await client.put("users", "alice", b"Oslo")
    await client.delete("users", "alice")
    await client.batch("users", [("put", "bob", b"Rome")])
    await client.trim("orders", 0)
    await client.seal("orders")
    assert await client.read("orders", 0) == [(0, b"r0")]
    assert await client.peek("orders") == (0, 1)
    assert await client.get("users", "alice") == (b"Oslo", "e1")
    assert [e.value async for e in client.scan("users")] == [b"Oslo"]
    assert [n async for n in client.list_logs()] == ["users"]
    assert len(await client.scan_ranges()) == 1
    assert [r async for r in client.subscribe("orders")] == [(0, b"r0")]


WRITES = ["append", "put", "delete", "batch", "trim", "seal"]
READS = ["read", "peek", "get", "scan", "scan", "scan_ranges", "subscribe"]  # list_logs: a scan


def test_reads_go_to_the_secondary_and_writes_to_the_primary(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client, front_ends, where, _ = make(monkeypatch, placement())
    asyncio.run(every_call(client))
    assert [what for _, what in front_ends.sent] == WRITES + READS
    assert {e for e, what in front_ends.sent if what in WRITES} <= set(WEST.front_ends)
    assert {e for e, what in front_ends.sent[len(WRITES):]} == set(EAST.front_ends)
    assert front_ends.marked == READS  # each read says it is meant for the secondary
    assert client.read_endpoints == list(EAST.front_ends)
    assert client.endpoints == list(WEST.front_ends)
    assert where.asked == 1  # one answer serves both, for its TTL


def test_a_client_reading_from_the_primary_sends_everything_there(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client, front_ends, _, _ = make(monkeypatch, placement(state="bootstrapping"),
                                    read_from="primary")
    asyncio.run(every_call(client))
    assert {e for e, _ in front_ends.sent} <= set(WEST.front_ends)
    assert client.read_endpoints == client.endpoints
    assert front_ends.marked == []  # a secondary answers none of them (Moved)


@pytest.mark.parametrize("state", ["bootstrapping", "unavailable", ""])
def test_a_secondary_that_is_not_live_is_not_read_and_writes_go_on(
        monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    client, front_ends, where, clock = make(monkeypatch, placement(state=state))

    async def scenario() -> None:
        refusals = [client.read("orders", 0), client.peek("orders"),
                    client.get("users", "alice"), client.scan_ranges(),
                    _drain(client.scan("users")), _drain(client.list_logs()),
                    _drain(client.subscribe("orders"))]
        for refused in refusals:
            with pytest.raises(SecondaryNotLive, match="not live") as caught:
                await refused
            assert caught.value.state == state
        assert front_ends.sent == []  # nothing was read anywhere: not at the primary either
        await client.append("orders", [b"r1"])
        ((written_at, _),) = front_ends.sent
        assert written_at in WEST.front_ends
        asked = where.asked
        # The secondary turns live: seen within NOT_LIVE_TTL_S, not the location's TTL.
        where.answer = placement()
        clock.advance(location.NOT_LIVE_TTL_S / 2)
        with pytest.raises(SecondaryNotLive):
            await client.read("orders", 0)
        clock.advance(location.NOT_LIVE_TTL_S)
        assert await client.read("orders", 0) == [(0, b"r0")]
        assert front_ends.sent[-1][0] in EAST.front_ends and where.asked == asked + 1

    asyncio.run(scenario())


async def _drain(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


def test_after_a_failover_reads_follow_the_secondary_and_writes_the_primary(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client, front_ends, where, clock = make(monkeypatch, placement())

    async def scenario() -> None:
        await client.read("orders", 0)
        where.answer = placement(EAST, WEST, epoch=2)  # a planned failover: roles swapped
        clock.advance(TTL_S)  # the answer's TTL ran out
        front_ends.sent.clear()
        await client.read("orders", 0)
        await client.append("orders", [b"r1"])
        (read_at, _), (write_at, _) = front_ends.sent
        assert read_at in WEST.front_ends and write_at in EAST.front_ends
        # An unplanned one leaves the old primary unavailable: not read.
        where.answer = placement(EAST, WEST, state="unavailable", epoch=3)
        clock.advance(TTL_S)
        with pytest.raises(SecondaryNotLive, match="west-1 is unavailable"):
            await client.read("orders", 0)

    asyncio.run(scenario())


def test_a_secondary_front_end_that_fails_is_avoided_and_the_account_asked_about_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two secondary front ends: one that fails a read is passed over for the other, and
    the answer is asked again (the account may have failed over), as for the primary's."""
    two = StampAddress("east-1", "east", ("127.0.0.3:1", "127.0.0.3:2"))
    client, front_ends, where, _ = make(monkeypatch, placement(secondary=two))
    broken: set[str] = set()
    session = front_ends.session

    def failing(endpoint: str, secondary_read: bool = False) -> Any:
        real = session(endpoint, secondary_read)
        if endpoint not in broken:
            return real

        class Failing:
            def submit(self, request: pb.Request, timeout_s: float, nbytes: int = 256
                       ) -> asyncio.Future[pb.Response]:
                front_ends.sent.append((endpoint, "failed"))
                future = asyncio.get_running_loop().create_future()
                future.set_exception(Unavailable("front end down"))
                return future

        return Failing()

    client._session = failing  # type: ignore[method-assign]
    monkeypatch.setattr(location, "SUSPECT_AFTER_S", 0.0)

    async def scenario() -> None:
        await client.read("orders", 0)
        first = front_ends.sent[-1][0]
        broken.add(first)
        assert await client.read("orders", 0) == [(0, b"r0")]
        (other,) = set(two.front_ends) - {first}
        assert front_ends.sent[-2:] == [(first, "failed"), (other, "read")]
        assert where.asked == 2  # suspected, and asked again
        await client.read("orders", 0)
        assert front_ends.sent[-1] == (other, "read")  # the failed one is avoided

    asyncio.run(scenario())


# ---- the last sync time -------------------------------------------------------------------

def test_sync_time_is_a_utc_datetime_or_none() -> None:
    assert location.sync_time(0) is None
    at = location.sync_time(1_700_000_000_123)
    assert at == datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=UTC)
    assert at is not None and at.tzinfo is UTC


def test_last_sync_time_asks_the_location_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    client, front_ends, where, _ = make(monkeypatch, placement(last_sync_ms=1_700_000_000_000),
                                        read_from="primary")

    async def scenario() -> None:
        assert await client.last_sync_time() == datetime.fromtimestamp(1_700_000_000,
                                                                        UTC)
        where.answer = replace(where.answer, last_sync_ms=1_700_000_002_500)
        # Asked again, although the last answer is good for its TTL still.
        assert await client.last_sync_time() == datetime.fromtimestamp(1_700_000_002.5,
                                                                        UTC)
        assert where.asked == 2 and client.location_answer.last_sync_ms == 1_700_000_002_500
        where.answer = replace(where.answer, secondary_state="bootstrapping",
                               last_sync_ms=0)
        assert await client.last_sync_time() is None
        assert front_ends.sent == []  # the location's business: no front end asked

    asyncio.run(scenario())
    with Client([], "acme", key=KEY, location=[LOCATION]) as blocking:
        blocking.aio._resolver._resolve = Location(  # type: ignore[union-attr, method-assign]
            placement(last_sync_ms=1_700_000_000_000)).resolve
        assert blocking.last_sync_time() == datetime.fromtimestamp(1_700_000_000,
                                                                   UTC)


def test_last_sync_time_needs_a_location() -> None:
    with Client(["127.0.0.1:1"], "acme", key=KEY) as blocking, \
            pytest.raises(InvalidArgument, match="needs a connection string with Location"):
        blocking.last_sync_time()


# ---- the Spark data source's option ------------------------------------------------------

TOKEN = sdk_sas.mint("acme", 1, KEY, {"read", "scan"}, "", 1_900_003_600, now_s=1_900_000_000)
AT_LOCATION = f"Location={LOCATION};Account=acme;SharedAccessSignature={TOKEN}"


def test_spark_read_from_option_reaches_the_sdk_client() -> None:
    access = read_only_access({"connectionString": AT_LOCATION, "readFrom": "secondary"})
    assert access == Access((), "acme", TOKEN, location=(LOCATION,), read_from="secondary")
    assert "read_from='secondary'" in repr(access) and TOKEN not in repr(access)
    client = access.client()
    try:
        assert client.read_from == "secondary"
        assert client.aio._resolver is not None and client.aio._resolver.reads_secondary
    finally:
        client.close()
    # Spark hands option values as given: any case.
    assert read_only_access({"connectionString": AT_LOCATION, "readFrom": "Secondary"}
                            ).read_from == "secondary"
    # Without the option: the connection string's ReadFrom; the option wins over it.
    text = AT_LOCATION + ";ReadFrom=secondary"
    assert read_only_access({"connectionString": text}).read_from == "secondary"
    assert read_only_access({"connectionString": text, "readFrom": "primary"}
                            ).read_from == "primary"
    assert read_only_access({"connectionString": AT_LOCATION}).read_from == "primary"
    # Front ends named instead of a location are read as the secondary's.
    direct = {"sas": TOKEN, "endpoints": "127.0.0.1:1", "readFrom": "secondary"}
    assert read_only_access(direct) == Access(("127.0.0.1:1",), "acme", TOKEN,
                                              read_from="secondary")


@pytest.mark.parametrize("options, error", [
    ({"connectionString": AT_LOCATION, "readFrom": "nearest"},
     "option readFrom is primary or secondary, not 'nearest'"),
    ({"sas": TOKEN, "endpoints": "127.0.0.1:1", "readFrom": "x"}, "option readFrom is"),
])
def test_spark_read_from_option_is_checked(options: dict[str, str], error: str) -> None:
    with pytest.raises(InvalidArgument, match=error):
        read_only_access(options)


def test_spark_readers_take_the_option() -> None:
    """The batch and the streaming reader both read as the option says (their Access)."""
    pytest.importorskip("pyspark")
    from spark.datasource import StampReader
    from spark.stream import StampStreamReader

    options = {"connectionString": AT_LOCATION, "readFrom": "secondary"}
    assert StampReader(options).access.read_from == "secondary"
    assert StampStreamReader({**options, "log": "orders"}).access.read_from == "secondary"
    with pytest.raises(InvalidArgument, match="option readFrom"):
        StampReader({**options, "readFrom": "east"})
