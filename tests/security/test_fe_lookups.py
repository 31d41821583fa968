"""frontend/auth.Authenticator against strangers (issue 28, items 3 and 7), on an injected
clock and a fake key store: a field longer than any valid one is refused before any lookup,
briefly; a failed lookup is not cached; one peer's lookups of made-up names take at most
LOOKUPS_PER_PEER_MAX of the store reads in flight, so another peer's real account is read at
once; and an account in use is refreshed before its key expires, the cached key served
meanwhile, so its requests never wait for the store. Pure asyncio: the process-level
counterparts are in test_fe_memory.py."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from common.clock import ManualClock
from common.errors import InvalidArgument, StampError, Throttled, Unauthenticated
from common.proto import partition_pb2 as pb
from frontend import wire
from frontend.auth import LOOKUPS_IN_FLIGHT_MAX, LOOKUPS_PER_PEER_MAX, MISS, Authenticator

KEYS = (b"1" * 32, b"2" * 32)


class GatedStore:
    """Keys of "acme" and "other"; reads of names in `held` wait for `gate`."""

    def __init__(self) -> None:
        self.keys = {"acme": KEYS, "other": (b"3" * 32, b"4" * 32)}
        self.reads: list[str] = []
        self.gate = threading.Event()
        self.held: set[str] = set()

    def read(self, account: str) -> tuple[bytes, bytes] | None:
        if account in self.held or account.startswith("made-up"):
            self.gate.wait(10)
        self.reads.append(account)
        return self.keys.get(account)


async def until(check: Callable[[], bool], what: str, timeout_s: float = 5.0) -> None:
    """Return once `check()` holds; fail after `timeout_s` (the loop runs meanwhile)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        await asyncio.sleep(0.001)


def claim(account: str, key: bytes, clock: ManualClock) -> wire.Claim:
    request = pb.Request(account=account, pname="orders", peek=pb.Empty())
    wire.sign_call(request, wire.Credentials(account, key=key), clock.wall())
    return wire.call_claim(request)


def made_up(n: int, clock: ManualClock) -> wire.Claim:
    return claim(f"made-up-{n}", b"x" * 32, clock)


def test_a_failed_lookup_is_not_cached() -> None:
    """A made-up name used to be cached as absent (up to 100,000 of them, each as long as
    a name may be): now only keys found are."""
    async def scenario() -> None:
        store, clock = GatedStore(), ManualClock(start=1_700_000_000.0)
        store.gate.set()
        auth = Authenticator(store.read, clock, ttl_s=5.0)
        for n in range(100):
            with pytest.raises(Unauthenticated):
                await auth.check(made_up(n, clock))
        assert auth.accounts_cached() == 0
        assert await auth.check(claim("acme", KEYS[0], clock)) is None
        assert auth.accounts_cached() == 1
    asyncio.run(scenario())


@pytest.mark.parametrize("field", ["account", "pname", "auth.account", "signature", "sas"])
def test_a_long_field_is_refused_before_any_lookup(field: str) -> None:
    """A field of 256 KiB: refused by the cache path itself, with a short message, and the
    store never read (a long signature was looked up first)."""
    async def scenario() -> None:
        store, clock = GatedStore(), ManualClock(start=1_700_000_000.0)
        auth = Authenticator(store.read, clock, ttl_s=5.0)
        long = "a" * (256 * 1024)
        request = pb.Request(account="acme", pname="orders", peek=pb.Empty())
        wire.sign_call(request, wire.Credentials("acme", key=KEYS[0]), clock.wall())
        if field == "signature":
            request.auth.signature = long.encode()
        elif field == "sas":
            request.auth.signature = b""
            request.auth.sas = long
        elif field == "auth.account":
            request.auth.account = long
        else:
            setattr(request, field, long)
        made = wire.call_claim(request)
        for attempt in (lambda: auth.check_cached(made), lambda: auth.check(made)):
            with pytest.raises((InvalidArgument, Unauthenticated)) as refused:
                outcome = attempt()
                if asyncio.iscoroutine(outcome):
                    await outcome
            assert len(str(refused.value)) < 200, str(refused.value)[:300]
        assert store.reads == [] and auth.accounts_cached() == 0
    asyncio.run(scenario())


def test_one_peers_made_up_names_do_not_hold_up_another_peers_account() -> None:
    """Peer A's reads of made-up names hang (a slow store); it gets LOOKUPS_PER_PEER_MAX of
    them and the rest are Throttled at once, while peer B's account is read and decided
    (it was Throttled: A's flood took all LOOKUPS_IN_FLIGHT_MAX reads)."""
    async def scenario() -> None:
        store, clock = GatedStore(), ManualClock(start=1_700_000_000.0)
        auth = Authenticator(store.read, clock, ttl_s=5.0)
        flood = [asyncio.ensure_future(auth.check(made_up(n, clock), peer="ipv4:10.0.0.1:1"))
                 for n in range(80)]
        await until(lambda: sum(f.done() for f in flood) == 80 - LOOKUPS_PER_PEER_MAX,
                    "the flood past the peer's lookups refused")
        real = await asyncio.wait_for(
            auth.check(claim("acme", KEYS[0], clock), peer="ipv4:10.0.0.2:2"), 5)
        assert real is None and store.reads == ["acme"]
        assert auth.lookups_in_flight() == LOOKUPS_PER_PEER_MAX
        store.gate.set()
        outcomes = await asyncio.wait_for(asyncio.gather(*flood, return_exceptions=True), 10)
        throttled = [o for o in outcomes if isinstance(o, Throttled)]
        assert len(throttled) == 80 - LOOKUPS_PER_PEER_MAX
        assert all(isinstance(o, Unauthenticated) for o in outcomes if o not in throttled)
        assert throttled[0].retry_after_s > 0
        # Its reads done, the peer may look up again.
        with pytest.raises(Unauthenticated):
            await auth.check(made_up(99, clock), peer="ipv4:10.0.0.1:1")
    asyncio.run(scenario())


def test_an_account_in_use_is_refreshed_before_its_key_expires() -> None:
    """Past half the TTL a request is served from the cache and starts a background read;
    while the store is slow the cached key is still served (never past the TTL), and once
    the read returns the key is good for a TTL from then: a busy account never waits for a
    lookup, not even while made-up names from many peers take every lookup there is (the
    refresh was Throttled with them)."""
    async def scenario() -> None:
        store, clock = GatedStore(), ManualClock(start=1_700_000_000.0)
        auth = Authenticator(store.read, clock, ttl_s=5.0)
        assert await auth.check(claim("acme", KEYS[0], clock)) is None
        store.held.add("acme")  # from now on, reading acme waits for the gate
        # Made-up names from many peers take every lookup there is: no matter.
        flood = [asyncio.ensure_future(auth.check(made_up(n, clock), peer=f"ipv4:10.0.{n}.1:1"))
                 for n in range(LOOKUPS_IN_FLIGHT_MAX)]
        await until(lambda: auth.lookups_in_flight() == LOOKUPS_IN_FLIGHT_MAX,
                    "every lookup taken by the flood")
        clock.advance(3.0)
        assert auth.check_cached(claim("acme", KEYS[0], clock)) is None  # served; refreshing
        await asyncio.sleep(0.05)
        clock.advance(1.9)  # 4.9 s: the refresh still waits, the key is still served
        assert auth.check_cached(claim("acme", KEYS[0], clock)) is None
        store.gate.set()
        await asyncio.wait_for(asyncio.gather(*flood, return_exceptions=True), 10)
        for _ in range(200):
            if store.reads.count("acme") == 2:
                break
            await asyncio.sleep(0.01)
        assert store.reads.count("acme") == 2, "no refresh"
        await asyncio.sleep(0.01)  # the read's answer reaches the cache on the loop
        clock.advance(2.0)  # 6.9 s after the first read, 3.9 s after the refresh began
        assert auth.check_cached(claim("acme", KEYS[0], clock)) is not MISS
        store.keys["acme"] = (b"9" * 32, KEYS[1])  # rotated: the old key still works ...
        store.held.clear()
        clock.advance(5.0)  # ... until a TTL after the last read began, not longer
        outcome = auth.check_cached(claim("acme", KEYS[0], clock))
        assert outcome is MISS
        with pytest.raises(StampError):
            await auth.check(claim("acme", KEYS[0], clock))
    asyncio.run(scenario())
