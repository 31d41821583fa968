"""Authentication at the front end (§5, §6): `frontend/wire.authenticate` over account keys
read from the replicated AccountStore, without blocking the event loop.

A front end checks thousands of signatures a second; the keys come from the lock service
through a blocking client. So keys are cached here for `ttl_s` (FrontEndLimits.
account_cache_ttl_ms, at most 10 s: a rotated key or a deleted account stops working within
that), and a miss is read on a worker thread (asyncio.to_thread), once for all the requests
that wait for the same account.

Contract: `check_cached` authenticates without awaiting when every key it needs is cached and
returns MISS otherwise (nothing decided); `check` always decides, reading what it lacks.
Both raise only what `wire.authenticate` raises (Unauthenticated, PermissionDenied) — plus
Unavailable when the account store cannot be read, and Throttled when LOOKUPS_IN_FLIGHT_MAX
other accounts are being read already, which a client retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final

from common.clock import Clock
from common.errors import InvalidArgument, StampError, Throttled, Unavailable
from frontend import names, sas, wire
from frontend.accounts import CACHE_ENTRIES_MAX, CACHE_TTL_MAX_S

Keys = Sequence[bytes] | None
# Reads the keys of an account from the replicated store (blocking; None: no such account).
KeyReader = Callable[[str], Keys]


class _Miss(Exception):
    """Raised through wire.authenticate by the cache lookup when a key is not cached."""

    def __init__(self, account: str) -> None:
        super().__init__(account)
        self.account = account


class _MissSentinel:
    pass


MISS: Final = _MissSentinel()
Outcome = sas.SasToken | None | _MissSentinel
LOOKUPS_PER_CHECK_MAX = 3  # a request names at most two accounts (signer, token); margin
# Accounts read from the store at once. Reads are made before a request is authenticated,
# so without a bound anyone could queue a store read per name they make up; past it a new
# name is refused (Throttled, retried by the SDK) until reads finish.
LOOKUPS_IN_FLIGHT_MAX = 64
LOOKUPS_FULL_RETRY_AFTER_S = 0.1


class Authenticator:
    def __init__(self, read_keys: KeyReader, clock: Clock, ttl_s: float) -> None:
        if not 0 <= ttl_s <= CACHE_TTL_MAX_S:
            raise InvalidArgument(f"account cache TTL {ttl_s} s is outside 0..{CACHE_TTL_MAX_S}")
        self._read_keys = read_keys
        self._clock = clock
        self._ttl_s = ttl_s
        self._cache: dict[str, tuple[float, Keys]] = {}
        self._reading: dict[str, asyncio.Future[Keys]] = {}

    def accounts_cached(self) -> int:
        return len(self._cache)

    def check_cached(self, claim: wire.Claim) -> Outcome:
        """Decide `claim` from the cache alone, or MISS."""
        try:
            return wire.authenticate(claim, keys_of=self._cached_keys, now_s=self._clock.wall())
        except _Miss:
            return MISS

    async def check(self, claim: wire.Claim, now_s: float | None = None
                    ) -> sas.SasToken | None:
        """Decide `claim` (at `now_s`, by default now), reading uncached keys off the event
        loop."""
        if now_s is None:
            now_s = self._clock.wall()
        for _ in range(LOOKUPS_PER_CHECK_MAX):
            try:
                return wire.authenticate(claim, keys_of=self._cached_keys, now_s=now_s)
            except _Miss as miss:
                await self._load(miss.account)
        # Keys that expire as soon as read (a TTL of 0): decide on what was just read.
        fresh: dict[str, Keys] = {}
        for name in {claim.auth.account, claim.account}:
            fresh[name] = await self._load(name)
        return wire.authenticate(claim, keys_of=lambda n: fresh.get(n), now_s=now_s)

    async def recheck(self, claim: wire.Claim) -> None:
        """Raise as `check` does if the credentials of a stream admitted on `claim` no
        longer hold: its signing key was rotated away or its account deleted (seen within
        the cache's TTL, as for any request), or its token expired. A Subscribe or Scan
        stream calls it before each reply, so a stream opened with a key or token runs no
        longer than a request with it could be made. The timestamp is not checked again
        (it was timely when the stream began; streams run for hours): a key is rechecked
        as of the request's own time, a token as of now (its expiry)."""
        auth = claim.auth
        now_s = self._clock.wall() if auth.sas else auth.timestamp_ms / 1000
        try:
            wire.authenticate(claim, keys_of=self._cached_keys, now_s=now_s)
        except _Miss:
            await self.check(claim, now_s)

    async def keys(self, account: str) -> Keys:
        """`account`'s keys (None: no such account), from the cache or read through it: for
        credentials verified elsewhere than `wire` (the Azure Blob endpoint, blob_auth.py)."""
        try:
            return self._cached_keys(account)
        except _Miss:
            return await self._load(account)

    def _cached_keys(self, account: str) -> Keys:
        cached = self._cache.get(account)
        if cached is None or self._clock.monotonic() >= cached[0]:
            raise _Miss(account)
        return cached[1]

    async def _load(self, account: str) -> Keys:
        """Read `account`'s keys on a thread; concurrent readers of one account share it."""
        try:
            names.check_account(account)
        except InvalidArgument:  # no such account can exist: no read of the store for it
            self._remember(account, None)
            return None
        future = self._reading.get(account)
        if future is None:
            if len(self._reading) >= LOOKUPS_IN_FLIGHT_MAX:
                raise Throttled(f"{LOOKUPS_IN_FLIGHT_MAX} accounts are being looked up at "
                                f"this front end already",
                                retry_after_s=LOOKUPS_FULL_RETRY_AFTER_S)
            future = asyncio.get_running_loop().create_future()
            self._reading[account] = future
            # Dated from before the read: what it returns may be as old as that, and a
            # rotation during a slow read must still take effect within the TTL.
            read_at = self._clock.monotonic()
            try:
                keys = await asyncio.to_thread(self._read_keys, account)
            except BaseException as exc:  # waiters must not hang on a reader that failed
                error = Unavailable(f"the account store could not be read: {exc!r}")
                future.set_exception(error)
                future.exception()  # retrieved: waiters (if any) get it too
                if isinstance(exc, StampError):
                    raise error from None
                raise
            finally:
                self._reading.pop(account, None)
            self._remember(account, keys, read_at)
            future.set_result(keys)
            return keys
        return await asyncio.shield(future)

    def _remember(self, account: str, keys: Keys, read_at: float | None = None) -> None:
        now = self._clock.monotonic()
        if len(self._cache) >= CACHE_ENTRIES_MAX:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            if len(self._cache) >= CACHE_ENTRIES_MAX:
                self._cache.clear()  # a flood of distinct names: start over, stay bounded
        self._cache[account] = ((now if read_at is None else read_at) + self._ttl_s, keys)
