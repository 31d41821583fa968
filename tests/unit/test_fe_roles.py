"""A front end at an account's geo secondary (issue 30): its request path (frontend/
server_call.FrontEnd on a fake partition layer, and the Azure Blob endpoint's `authorize`)
refuses every write with Moved, naming the primary stamp, and every read but those its client
marked as reads of the secondary (wire.READ_FROM_KEY), which it forwards; the role
comes with the keys from one cached read (frontend/auth.py), so a role changed in the store
is seen once the cache's TTL has passed, and a cached role costs no read."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from common.clock import ManualClock
from common.config import FrontEndLimits, PartitionLimits
from common.errors import Moved
from common.proto import partition_pb2 as pb
from common.retry import AttemptTimer
from frontend import blob_auth, blob_request, blob_server, blob_store, sas, wire
from frontend.accounts import Account, GeoRole
from frontend.auth import WRITE_METHODS, Authenticator
from frontend.server_call import FrontEnd
from frontend.throttle import AccountThrottle
from partition_layer.payload_crc import payload_crcs
from partition_layer.session import Waiter

KEY = b"k" * 32
TTL_S = 5.0
SECONDARY = GeoRole("secondary", "east-1", 3)
MOVED_MESSAGE = "account acme is not written at this stamp: its primary is stamp east-1 (epoch 3)"
READ_MOVED = ("account acme is not read (but from its secondary, on purpose) at this stamp: its "
              "primary is stamp east-1 (epoch 3)")


class Store:
    """The account store as the front end reads it (AccountStore.lookup), counting reads."""

    def __init__(self, geo: GeoRole) -> None:
        self.account = Account("acme", (KEY, KEY), 1.0, geo)
        self.reads = 0

    def lookup(self, name: str) -> Account | None:
        self.reads += 1
        return self.account if name == "acme" else None


class Session:
    """The partition server: answers every request forwarded, and records it."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, request: pb.Request, timeout_s: float, nbytes: int, waiter: Waiter) -> int:
        self.sent.append(request.WhichOneof("op") or "")
        waiter.set_result(pb.Response(id=request.id, first_seq=1))
        return request.id


class Client:
    def __init__(self) -> None:
        self.session_ = Session()
        self.attempts = AttemptTimer()

    def route(self, key: bytes) -> tuple[str, str]:
        return "ps-1", "127.0.0.1:1"

    def route_name(self, account: str, pname: str) -> tuple[str, str]:
        return "ps-1", "127.0.0.1:1"

    def session(self, address: str) -> Session:
        return self.session_

    async def call(self, request: pb.Request, idempotent: bool, nbytes: int) -> pb.Response:
        """The slow path's forward (an uncached account)."""
        self.session_.sent.append(request.WhichOneof("op") or "")
        return pb.Response(id=request.id, first_seq=1)


def front_end(store: Store, clock: ManualClock) -> tuple[FrontEnd, Session]:
    client = Client()
    limits = FrontEndLimits()
    fe = FrontEnd(Authenticator(store.lookup, clock, ttl_s=TTL_S), client,  # type: ignore[arg-type]
                  AccountThrottle(limits, clock, random.Random(1)), PartitionLimits(), limits,
                  clock)
    return fe, client.session_


def request(op: str, clock: ManualClock, credentials: wire.Credentials | None = None
            ) -> pb.Request:
    ops = {
        "append": lambda: pb.Request(append=pb.AppendOp(
            records=[b"r"], crcs=payload_crcs([b"r"]), token="t1")),
        "put": lambda: pb.Request(token="t2", put=pb.PutOp(
            row=b"r", value=b"v", value_crc=payload_crcs([b"v"])[0])),
        "trim": lambda: pb.Request(trim=pb.TrimOp(upto_seq=1)),
        "seal": lambda: pb.Request(seal=pb.Empty()),
        "read": lambda: pb.Request(read=pb.ReadOp(from_seq=0, limit=1)),
        "peek": lambda: pb.Request(peek=pb.Empty()),
        "get": lambda: pb.Request(get=pb.GetOp(row=b"r")),
    }
    made = ops[op]()
    made.id, made.account, made.pname = 9, "acme", "orders"
    wire.sign_call(made, credentials or wire.Credentials("acme", key=KEY), clock.wall())
    return made


async def answer(fe: FrontEnd, made: pb.Request, secondary_read: bool = False
                 ) -> pb.Response:
    answered: asyncio.Future[pb.Response] = asyncio.get_running_loop().create_future()
    fe.start(made, answered.set_result, secondary_read=secondary_read)
    return await asyncio.wait_for(answered, 5)


def test_writes_and_only_writes_are_classified_as_such() -> None:
    """The split is wire.PERMISSION_OF's, not a second list: what a read token may do is a
    read."""
    assert sorted(WRITE_METHODS) == ["Append", "Batch", "Delete", "Put", "Seal", "Trim"]


def test_a_secondary_refuses_writes_and_unmarked_reads_with_moved() -> None:
    """Only reads marked as reads of the secondary are answered: an unmarked read is meant
    for the primary (a client whose location answer still names this stamp so after a
    failover), and a copy behind the primary must not answer it (DESIGN §8)."""
    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        store = Store(SECONDARY)
        fe, session = front_end(store, clock)
        first = await answer(fe, request("append", clock))  # uncached: the slow path
        assert (first.id, first.error, first.message) == (9, "Moved", MOVED_MESSAGE)
        for op in ("put", "trim", "seal", "append"):  # cached: the hot path
            for marked in (False, True):  # marked or not, a write is never answered here
                refused = await answer(fe, request(op, clock), secondary_read=marked)
                assert (refused.error, refused.message) == ("Moved", MOVED_MESSAGE), op
        for op in ("read", "peek", "get"):
            refused = await answer(fe, request(op, clock))
            assert (refused.error, refused.message) == ("Moved", READ_MOVED), op
            read = await answer(fe, request(op, clock), secondary_read=True)
            assert (read.id, read.error) == (9, ""), op
        assert session.sent == ["read", "peek", "get"]  # no write, no unmarked read went on
        assert store.reads == 1  # the role came with the keys, once
    asyncio.run(scenario())


def test_a_token_holder_is_refused_as_the_key_holder_is() -> None:
    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        fe, session = front_end(Store(SECONDARY), clock)
        token = sas.mint("acme", 1, KEY, ["append", "read"], "", int(clock.wall()) + 3600,
                         clock.wall())
        holder = wire.Credentials("acme", sas=token)
        assert (await answer(fe, request("append", clock, holder))).error == "Moved"
        assert (await answer(fe, request("read", clock, holder))).error == "Moved"
        assert (await answer(fe, request("read", clock, holder), secondary_read=True)
                ).error == ""
        assert session.sent == ["read"]
    asyncio.run(scenario())


def test_a_stranger_learns_no_primary() -> None:
    """The role is checked only once the credentials hold."""
    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        fe, _ = front_end(Store(SECONDARY), clock)
        forged = await answer(fe, request("append", clock, wire.Credentials("acme",
                                                                            key=b"x" * 32)))
        assert forged.error == "Unauthenticated" and "east-1" not in forged.message
    asyncio.run(scenario())


def test_a_role_change_is_seen_within_the_cache_ttl() -> None:
    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        store = Store(GeoRole("primary", "east-1", 3))
        fe, session = front_end(store, clock)
        assert (await answer(fe, request("append", clock))).error == ""
        store.account = Account("acme", (KEY, KEY), 1.0, GeoRole("secondary", "west-1", 4))
        clock.advance(TTL_S + 0.001)  # past the TTL: the next request reads again
        moved = await answer(fe, request("append", clock))
        assert moved.error == "Moved" and "stamp west-1 (epoch 4)" in moved.message
        assert session.sent == ["append"] and store.reads == 2
    asyncio.run(scenario())


def test_a_primary_answers_marked_and_unmarked_reads() -> None:
    """A client reading from the secondary may reach the primary (just failed over to, its
    location answer not yet renewed): fresher than asked for, never staler."""
    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        fe, session = front_end(Store(GeoRole("primary", "west-1", 3)), clock)
        for marked in (False, True):
            assert (await answer(fe, request("get", clock), secondary_read=marked)).error == ""
        assert session.sent == ["get", "get"]
    asyncio.run(scenario())


@pytest.mark.parametrize("marked", [False, True])
def test_a_stream_ends_with_moved_once_its_stamp_turns_secondary(marked: bool) -> None:
    """A Subscribe or Scan stream rechecks before each reply (Authenticator.recheck): one
    admitted at the primary ends with Moved once the role in the store says secondary
    (within the TTL), so its SDK goes on at the new primary; one reading the secondary on
    purpose goes on."""
    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        store = Store(GeoRole("primary", "east-1", 3))
        auth = Authenticator(store.lookup, clock, ttl_s=TTL_S)
        subscribe = pb.SubscribeRequest(account="acme", pname="orders", from_seq=1)
        wire.sign_subscribe(subscribe, wire.Credentials("acme", key=KEY), clock.wall())
        claim = wire.subscribe_claim(subscribe, secondary_read=marked)
        await auth.check(claim)
        await auth.recheck(claim)
        store.account = Account("acme", (KEY, KEY), 1.0, SECONDARY)
        clock.advance(TTL_S + 0.001)
        if marked:
            await auth.recheck(claim)
            await auth.recheck(claim)  # cached now: the hot path of a recheck
            return
        for _ in range(2):  # read through the cache, then from it
            with pytest.raises(Moved, match="is not read"):
                await auth.recheck(claim)
    asyncio.run(scenario())


def _blob_http(method: str, comp: str) -> SimpleNamespace:
    """A Shared Key request of account acme's blob c/b, signed now."""
    headers = {"x-ms-date": datetime.now(UTC).strftime("%a, %d %b %Y %H:%M:%S GMT"),
               "x-ms-version": "2021-12-02"}
    query = {"comp": comp} if comp else {}
    text = blob_auth.string_to_sign(method, headers, "acme", "/acme/c/b", list(query.items()))
    headers["Authorization"] = f"SharedKey acme:{blob_auth.sign(KEY, text)}"
    return SimpleNamespace(method=method, headers=headers, remote="127.0.0.1",
                           transport=None, raw_path="/acme/c/b" + (f"?comp={comp}" if comp
                                                                   else ""), query=query)


@pytest.mark.parametrize(("method", "comp", "message"), [
    ("PUT", "appendblock", MOVED_MESSAGE), ("PUT", "", MOVED_MESSAGE),
    ("DELETE", "", MOVED_MESSAGE), ("PUT", "seal", MOVED_MESSAGE), ("GET", "", READ_MOVED),
    ("HEAD", "metadata", READ_MOVED)])
def test_the_blob_endpoint_refuses_every_request_at_a_secondary(method: str, comp: str,
                                                                message: str) -> None:
    """Reads too: a client of Azure's SDK reaches the account at one URL, the old primary's
    after a failover, and must not read the copy behind the new primary (the refusal is
    forwarded there: frontend/blob_forward.py)."""
    clock = ManualClock(start=1_700_000_000.0)
    fe, _ = front_end(Store(SECONDARY), clock)
    http = _blob_http(method, comp)
    blob = blob_request.BlobRequest(http, "id", "acme", "c", "b", dict(http.query))  # type: ignore[arg-type]
    with pytest.raises(Moved) as moved:
        asyncio.run(blob_server.authorize(blob, fe, 900.0))
    refusal = blob_store.service_error(moved.value)
    assert (refusal.status, refusal.code, refusal.message) == (
        blob_store.MOVED_STATUS, blob_store.MOVED_CODE, message)


def test_the_blob_endpoint_answers_reads_at_a_primary() -> None:
    clock = ManualClock(start=1_700_000_000.0)
    fe, _ = front_end(Store(GeoRole("primary", "west-1", 3)), clock)
    http = _blob_http("GET", "")
    blob = blob_request.BlobRequest(http, "id", "acme", "c", "b", dict(http.query))  # type: ignore[arg-type]
    asyncio.run(blob_server.authorize(blob, fe, 900.0))
