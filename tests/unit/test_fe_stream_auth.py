"""frontend/server.FrontEndServicer's Subscribe and Scan on fakes (pure asyncio, a manual
clock): a stream's credentials are checked again before every reply, so a key rotated or a
token expired while the stream runs ends it with Unauthenticated (a rotated key stops working
within the account cache's TTL, streams included) — while the timestamp of the request that
opened it, timely then, may grow as old as it likes."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from types import SimpleNamespace

import grpc
import pytest

from common.clock import ManualClock
from common.config import FrontEndLimits
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend import sas, server, wire
from frontend.auth import Authenticator
from frontend.server_call import Counters
from frontend.throttle import AccountThrottle

KEYS = {"acme": (b"1" * 32, b"2" * 32)}
HOUR_S = 3600.0


class Aborted(Exception):
    pass


class Context:
    def __init__(self) -> None:
        self.written: list[object] = []
        self.code: grpc.StatusCode | None = None

    async def write(self, message: object) -> None:
        self.written.append(message)

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: object = ()
                    ) -> None:
        self.code = code
        raise Aborted(details)


class Replies:
    """The partition side of a stream: a reply each time the test releases one (after
    moving the clock or rotating a key); counts whether the stream was closed."""

    def __init__(self) -> None:
        self.released: asyncio.Queue[int] = asyncio.Queue()
        self.closed = False
        self.opened = False  # the front end admitted the stream and opened this

    async def stream(self) -> AsyncIterator[int]:
        self.opened = True
        try:
            while True:
                yield await self.released.get()
        finally:
            self.closed = True


def servicer(clock: ManualClock, keys: dict[str, tuple[bytes, bytes]], replies: Replies
             ) -> server.FrontEndServicer:
    async def subscribe_replies(account: str, log: str, from_seq: int
                                ) -> AsyncIterator[pb.SubscribeReply]:
        assert (account, log) == ("acme", "events")
        async for seq in replies.stream():
            yield pb.SubscribeReply(records=[pb.Record(seq=seq, data=b"x")])

    fe = SimpleNamespace(auth=Authenticator(keys.get, clock, ttl_s=5.0),
                         client=SimpleNamespace(subscribe_replies=subscribe_replies,
                                                route_name=lambda account, pname: None),
                         throttle=AccountThrottle(FrontEndLimits(), clock, random.Random(0)),
                         counters=Counters(), fe_limits=FrontEndLimits())
    return server.FrontEndServicer(fe, "fe-1", "x")  # type: ignore[arg-type]


async def until(check: object) -> None:
    for _ in range(2000):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition not reached")


def run_stream(credentials: wire.Credentials, rotate: bool) -> None:
    """Open a Subscribe at the clock's time, get a reply an hour later (the request's own
    timestamp long stale), then rotate the signing key or let the token expire: the next
    reply is refused, not sent, and the partition stream is closed."""
    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        keys = dict(KEYS)
        replies = Replies()
        rpc = servicer(clock, keys, replies)
        request = pb.SubscribeRequest(account="acme", pname="events")
        wire.sign_subscribe(request, credentials, clock.wall())
        context = Context()
        stream = asyncio.ensure_future(rpc.Subscribe(request, context))  # type: ignore[arg-type]
        await until(lambda: replies.opened)
        clock.advance(HOUR_S)
        replies.released.put_nowait(0)
        await until(lambda: len(context.written) == 1)
        if rotate:
            keys["acme"] = (b"9" * 32, KEYS["acme"][1])
        clock.advance(HOUR_S)  # past the cache's TTL, and past the token's expiry
        replies.released.put_nowait(1)
        with pytest.raises(Aborted, match=r"bad signature|expired"):
            await asyncio.wait_for(stream, 5)
        assert context.code == grpc.StatusCode.UNAUTHENTICATED
        assert len(context.written) == 1  # the reply after the rotation was not sent
        assert replies.closed
        assert rpc.fe.counters.refused_unauthenticated == 1
    asyncio.run(scenario())


def test_a_subscription_ends_when_its_key_is_rotated() -> None:
    run_stream(wire.Credentials("acme", key=KEYS["acme"][0]), rotate=True)


def test_a_subscription_ends_when_its_token_expires() -> None:
    now = 1_700_000_000
    token = sas.mint("acme", 2, KEYS["acme"][1], ["read"], "", now + int(1.5 * HOUR_S), now)
    run_stream(wire.Credentials("acme", sas=token), rotate=False)


def test_a_scan_ends_when_its_key_is_rotated(monkeypatch: pytest.MonkeyPatch) -> None:
    import frontend.scan

    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        keys = dict(KEYS)
        replies = Replies()

        async def scan_pages(*_: object) -> AsyncIterator[fe_pb.ScanPage]:
            async for n in replies.stream():
                yield fe_pb.ScanPage(continuation=bytes([n]))
        monkeypatch.setattr(frontend.scan, "scan_pages", scan_pages)
        rpc = servicer(clock, keys, replies)
        request = fe_pb.ScanRequest(account="acme")
        wire.sign_scan(request, wire.Credentials("acme", key=KEYS["acme"][0]), clock.wall())
        context = Context()
        stream = asyncio.ensure_future(rpc.Scan(request, context))  # type: ignore[arg-type]
        await until(lambda: replies.opened)
        replies.released.put_nowait(0)
        await until(lambda: len(context.written) == 1)
        keys["acme"] = (b"9" * 32, KEYS["acme"][1])
        clock.advance(10)
        replies.released.put_nowait(1)
        with pytest.raises(Aborted, match="bad signature"):
            await asyncio.wait_for(stream, 5)
        assert len(context.written) == 1 and replies.closed
    asyncio.run(scenario())
