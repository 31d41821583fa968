"""frontend/auth.Authenticator on an injected clock with a fake key store: keys are read off
the event loop, once per account however many requests wait for it, kept for the TTL (a
rotated key stops working once it passes), and a failing store is Unavailable for every
waiter, never a hang."""

from __future__ import annotations

import asyncio
import threading

import pytest

from common.clock import ManualClock
from common.errors import (
    InvalidArgument,
    PermissionDenied,
    Throttled,
    Unauthenticated,
    Unavailable,
)
from common.proto import partition_pb2 as pb
from frontend import wire
from frontend.auth import LOOKUPS_IN_FLIGHT_MAX, MISS, Authenticator
from partition_layer.payload_crc import payload_crcs


class FakeStore:
    """Keys by account; counts reads and the threads they ran on; `gate` holds reads."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[bytes, bytes]] = {"acme": (b"1" * 32, b"2" * 32),
                                                     "other": (b"3" * 32, b"4" * 32)}
        self.reads: list[str] = []
        self.threads: set[int] = set()
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def read(self, account: str) -> tuple[bytes, bytes] | None:
        self.gate.wait(5)
        self.reads.append(account)
        self.threads.add(threading.get_ident())
        if self.fail:
            raise Unavailable("lock service down")
        return self.keys.get(account)


def claim(account: str, key: bytes, clock: ManualClock, signer: str | None = None
          ) -> wire.Claim:
    request = pb.Request(account=account, pname="orders", append=pb.AppendOp(
        records=[b"r"], crcs=payload_crcs([b"r"]), token="t"))
    wire.sign_call(request, wire.Credentials(signer or account, key=key), clock.wall())
    return wire.call_claim(request)


def test_keys_are_read_off_the_loop_once_and_kept_for_the_ttl() -> None:
    async def scenario() -> None:
        store, clock = FakeStore(), ManualClock(start=1_700_000_000.0)
        auth = Authenticator(store.read, clock, ttl_s=5.0)
        good = claim("acme", store.keys["acme"][0], clock)
        assert auth.check_cached(good) is MISS  # nothing cached: nothing decided
        store.gate.clear()
        waiters = [asyncio.ensure_future(auth.check(good)) for _ in range(50)]
        await asyncio.sleep(0.01)
        store.gate.set()
        assert await asyncio.wait_for(asyncio.gather(*waiters), 5) == [None] * 50
        assert store.reads == ["acme"]  # one read for fifty requests
        assert threading.get_ident() not in store.threads  # never on the event loop
        assert auth.check_cached(good) is None and store.reads == ["acme"]
        store.keys["acme"] = (b"9" * 32, store.keys["acme"][1])  # key 1 rotated
        clock.advance(4.9)
        assert auth.check_cached(claim("acme", b"1" * 32, clock)) is None  # still cached
        clock.advance(0.2)
        stale = claim("acme", b"1" * 32, clock)
        assert auth.check_cached(stale) is MISS
        with pytest.raises(Unauthenticated, match="bad signature"):
            await auth.check(stale)
        assert await auth.check(claim("acme", b"9" * 32, clock)) is None
    asyncio.run(scenario())


def test_refusals_are_typed() -> None:
    async def scenario() -> None:
        store, clock = FakeStore(), ManualClock(start=1_700_000_000.0)
        auth = Authenticator(store.read, clock, ttl_s=5.0)
        with pytest.raises(Unauthenticated):
            await auth.check(claim("nobody", b"x" * 32, clock))
        reads = len(store.reads)
        with pytest.raises(Unauthenticated):  # a name no account can have: the store not read
            forged = pb.Request(account="No_Such", pname="orders", peek=pb.Empty(), auth=pb.Auth(
                account="No_Such", timestamp_ms=int(clock.wall() * 1000), signature=b"x" * 32))
            await auth.check(wire.call_claim(forged))
        assert len(store.reads) == reads
        with pytest.raises(PermissionDenied):  # other's key on acme's log
            await auth.check(claim("acme", store.keys["other"][0], clock, signer="other"))
        assert auth.accounts_cached() == 1  # "other" only: a failed lookup is not cached
    asyncio.run(scenario())


def test_a_failing_store_is_unavailable_for_every_waiter() -> None:
    async def scenario() -> None:
        store, clock = FakeStore(), ManualClock(start=1_700_000_000.0)
        store.fail = True
        store.gate.clear()
        auth = Authenticator(store.read, clock, ttl_s=5.0)
        good = claim("acme", store.keys["acme"][0], clock)
        waiters = [asyncio.ensure_future(auth.check(good)) for _ in range(3)]
        await asyncio.sleep(0.01)
        store.gate.set()
        outcomes = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), 5)
        assert all(isinstance(o, Unavailable) for o in outcomes), outcomes
        assert store.reads == ["acme"]
        store.fail = False  # nothing cached from a failure: the next request reads again
        assert await auth.check(good) is None
    asyncio.run(scenario())


def test_reads_of_made_up_accounts_are_bounded() -> None:
    """Reads happen before authentication: a flood of made-up names gets at most
    LOOKUPS_IN_FLIGHT_MAX store reads at once, the rest Throttled; known accounts work once
    the reads are done."""
    async def scenario() -> None:
        store, clock = FakeStore(), ManualClock(start=1_700_000_000.0)
        auth = Authenticator(store.read, clock, ttl_s=5.0)
        store.gate.clear()
        flood = [asyncio.ensure_future(auth.check(claim(f"made-up-{i}", b"x" * 32, clock)))
                 for i in range(LOOKUPS_IN_FLIGHT_MAX + 10)]
        await asyncio.sleep(0.01)
        store.gate.set()
        outcomes = await asyncio.wait_for(asyncio.gather(*flood, return_exceptions=True), 5)
        throttled = [o for o in outcomes if isinstance(o, Throttled)]
        assert len(throttled) == 10 and throttled[0].retry_after_s > 0
        assert all(isinstance(o, Unauthenticated) for o in outcomes if o not in throttled)
        assert len(store.reads) == LOOKUPS_IN_FLIGHT_MAX
        assert await auth.check(claim("acme", store.keys["acme"][0], clock)) is None
    asyncio.run(scenario())


def test_ttl_is_bounded_by_ten_seconds() -> None:
    with pytest.raises(InvalidArgument, match="TTL"):
        Authenticator(FakeStore().read, ManualClock(), ttl_s=11.0)


def test_keys_are_kept_for_the_ttl_from_when_their_read_began() -> None:
    """A slow read of the store (a lock-service election) may return keys as they were
    when it began: they are dated from then, so a key rotated during the read still stops
    working within the TTL of the rotation."""
    async def scenario() -> None:
        store, clock = FakeStore(), ManualClock(start=1_700_000_000.0)
        auth = Authenticator(store.read, clock, ttl_s=5.0)
        old = store.keys["acme"][0]
        read = store.read

        def slow_read(account: str) -> tuple[bytes, bytes] | None:
            keys = read(account)  # the keys as they were when the read began...
            clock.advance(3.0)  # ...answered 3 s later
            return keys
        auth._read_keys = slow_read
        assert await auth.check(claim("acme", old, clock)) is None
        clock.advance(2.1)  # 5.1 s after the read began
        assert auth.check_cached(claim("acme", old, clock)) is MISS
    asyncio.run(scenario())
