"""frontend/auth.Authenticator while its key store does not answer (issue 29), on an injected
clock: keys held are served past their TTL (up to stale_max_s) when a read fails or hangs,
a request waits for such a read at most stale_wait_s, and the keys read once the store
answers again are in use at once (a rotation takes effect, a deleted account is refused)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from common.clock import ManualClock
from common.errors import Unauthenticated, Unavailable
from common.proto import partition_pb2 as pb
from frontend import wire
from frontend.auth import MISS, REFRESH_RETRY_S, Authenticator

TTL_S = 5.0
STALE_MAX_S = 60.0
STALE_WAIT_S = 0.05


class FakeStore:
    """Keys by account; `fail` refuses reads, a cleared `gate` holds them (up to 5 s)."""

    def __init__(self) -> None:
        self.keys: dict[str, tuple[bytes, bytes]] = {"acme": (b"1" * 32, b"2" * 32)}
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def read(self, account: str) -> tuple[bytes, bytes] | None:
        self.gate.wait(5)
        if self.fail:
            raise Unavailable("lock service down")
        return self.keys.get(account)


def claim(account: str, key: bytes, clock: ManualClock) -> wire.Claim:
    request = pb.Request(account=account, pname="orders", peek=pb.Empty())
    wire.sign_call(request, wire.Credentials(account, key=key), clock.wall())
    return wire.call_claim(request)


async def settle(auth: Authenticator) -> None:
    """Let the reads in flight answer (they run on threads; the fake store answers at once
    unless gated)."""
    for _ in range(500):
        if not auth.lookups_in_flight():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("reads still in flight")


def make() -> tuple[FakeStore, ManualClock, Authenticator]:
    store, clock = FakeStore(), ManualClock(start=1_700_000_000.0)
    return store, clock, Authenticator(store.read, clock, ttl_s=TTL_S,
                                       stale_max_s=STALE_MAX_S, stale_wait_s=STALE_WAIT_S)


def test_keys_held_are_served_while_the_store_fails_then_rotation_takes_effect() -> None:
    async def scenario() -> None:
        store, clock, auth = make()
        key = store.keys["acme"][0]
        assert await auth.check(claim("acme", key, clock)) is None
        store.fail = True
        clock.advance(TTL_S + 0.1)  # expired, and the store refuses to be read
        assert await asyncio.wait_for(auth.check(claim("acme", key, clock)), 5) is None
        await settle(auth)
        clock.advance(30.0)  # long past the TTL: served from the cache, without waiting
        assert auth.check_cached(claim("acme", key, clock)) is None
        await settle(auth)
        store.fail = False
        store.keys["acme"] = (b"9" * 32, store.keys["acme"][1])  # rotated during the outage
        clock.advance(REFRESH_RETRY_S + 0.01)  # the next request's read is not held back
        assert auth.check_cached(claim("acme", key, clock)) is None  # starts the read
        await settle(auth)
        with pytest.raises(Unauthenticated, match="bad signature"):
            await auth.check(claim("acme", key, clock))
        assert await auth.check(claim("acme", b"9" * 32, clock)) is None
    asyncio.run(scenario())


def test_a_hanging_read_is_waited_for_briefly_and_a_deleted_account_is_refused() -> None:
    async def scenario() -> None:
        store, clock, auth = make()
        key = store.keys["acme"][0]
        assert await auth.check(claim("acme", key, clock)) is None
        store.gate.clear()  # the store hangs (a frozen lock service)
        clock.advance(TTL_S + 0.1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await asyncio.wait_for(auth.check(claim("acme", key, clock)), 5) is None
        assert loop.time() - started < 1.0  # waited about STALE_WAIT_S, not for the store
        assert auth.check_cached(claim("acme", key, clock)) is None  # no wait at all now
        del store.keys["acme"]  # deleted meanwhile: the read that answers says so
        store.gate.set()
        await settle(auth)
        assert auth.check_cached(claim("acme", key, clock)) is MISS
        with pytest.raises(Unauthenticated):
            await auth.check(claim("acme", key, clock))
    asyncio.run(scenario())


def test_keys_are_not_served_past_stale_max() -> None:
    async def scenario() -> None:
        store, clock, auth = make()
        key = store.keys["acme"][0]
        assert await auth.check(claim("acme", key, clock)) is None
        store.fail = True
        clock.advance(TTL_S + 0.1)
        assert await auth.check(claim("acme", key, clock)) is None
        await settle(auth)
        clock.advance(STALE_MAX_S)
        assert auth.check_cached(claim("acme", key, clock)) is MISS
        with pytest.raises(Unavailable):
            await auth.check(claim("acme", key, clock))
    asyncio.run(scenario())
