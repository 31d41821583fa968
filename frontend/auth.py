"""Authentication at the front end (§5, §6): `frontend/wire.authenticate` over account keys
read from the replicated AccountStore, without blocking the event loop.

A front end checks thousands of signatures a second; the keys come from the lock service
through a blocking client. So keys are cached here for `ttl_s` (FrontEndLimits.
account_cache_ttl_ms, at most 10 s: a rotated key or a deleted account stops working within
that), and a miss is read on a worker thread (asyncio.to_thread), once for all the requests
that wait for the same account. A key past half its TTL is served while a read refreshes it
in the background, so an account in use never waits for the store (nor for lookups made-up
names queue there).

Without the lock service (issue 29): a key past its TTL is read again, but a request waits
for that read at most `stale_wait_s`; if the read fails or has not answered by then, the
account's last keys stay in use (stale-if-error), up to `stale_max_s` past the TTL, while
one read at a time, REFRESH_RETRY_S apart, keeps trying. So an outage of the lock service
refuses no account a front end has seen lately, and once the store answers again the keys
it holds are in use within a read: a key rotated while the store is reachable still stops
working within the TTL (plus one read); one rotated during an outage, within a read of its
end. A read that finds no account (deleted) ends the old keys at once. Failed reads are
logged rate-limited (common/background.FailureLog), not once per request.

What strangers can make a front end hold (issue 28): every field of the credentials is
checked for its size before anything is looked up or cached (`check_field_sizes`); only
keys found are cached, never a failed lookup (a made-up name would otherwise occupy the
cache until it expired); and the store reads not yet answered are bounded, in all
(LOOKUPS_IN_FLIGHT_MAX) and per peer (LOOKUPS_PER_PEER_MAX, a peer being one gRPC
connection: `context.peer()`), so one peer's flood of made-up names neither starves the
others' lookups nor hammers the lock service.

Geo roles (issue 30): the reader returns the account with its role at this stamp
(frontend/accounts.py: one read gives keys and role), and the role is cached with the keys,
under the same TTL, stale-if-error and memory rules: a role changed in the store is seen
within the TTL like a rotated key, and checking it costs no read. A **write** (a method whose
shared-access permission is not a read's: `WRITE_METHODS`, from wire.PERMISSION_OF) of an
account that is secondary here is refused with Moved, naming its primary stamp, once its
credentials hold (a stranger learns nothing of the account); so is a read, unless its client
marked it as a read of the secondary (wire.READ_FROM_KEY: read access to the secondary), as
an unmarked read is meant for the primary and must not be answered from a copy behind it.
A reader may return bare keys instead of an account (test fakes): a stand-alone primary.

Contract: `check_cached` authenticates without awaiting when every key it needs is cached and
returns MISS otherwise (nothing decided); `check` always decides, reading what it lacks.
Both raise only what `wire.authenticate` raises (Unauthenticated, PermissionDenied) — plus
InvalidArgument for a field over its size (`check_field_sizes`), Moved for a write (or an
unmarked read) of an account that is secondary here, Unavailable when the account store
cannot be read, and Throttled when LOOKUPS_IN_FLIGHT_MAX other accounts are being read
already, or LOOKUPS_PER_PEER_MAX for the same peer, which a client retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from common.background import FailureLog
from common.clock import Clock
from common.errors import InvalidArgument, Throttled, Unauthenticated, Unavailable
from common.proto import partition_pb2 as pb
from frontend import names, sas, wire
from frontend.accounts import CACHE_ENTRIES_MAX, CACHE_TTL_MAX_S, STAND_ALONE, Account, GeoRole

Keys = Sequence[bytes] | None


class Held(NamedTuple):
    """What the cache holds of an account: its keys and its role here."""

    keys: Sequence[bytes]
    geo: GeoRole


# Reads an account from the replicated store (blocking; None: no such account): keys and
# role (AccountStore.lookup), or bare keys (a stand-alone primary).
KeyReader = Callable[[str], Account | Sequence[bytes] | None]
# The shared-access permissions that only read; a method needing any other writes, and is
# refused at a secondary (a new permission is a write until said otherwise: fail safe).
READ_PERMISSIONS = frozenset({"read", "scan"})
WRITE_METHODS = frozenset(method for method, permission in wire.PERMISSION_OF.items()
                          if permission not in READ_PERMISSIONS)


def held_of(found: Account | Sequence[bytes] | None) -> Held | None:
    """A reader's answer as the cache holds it."""
    if found is None:
        return None
    if isinstance(found, Account):
        return Held(found.keys, found.geo)
    return Held(found, STAND_ALONE)

log = logging.getLogger(__name__)


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
# Of those, what one peer (one connection) may have started: a flood of made-up names from
# one connection takes no more, so the other peers' lookups still find room (and a thread:
# asyncio's default pool has min(32, cores + 4) of them).
LOOKUPS_PER_PEER_MAX = 4
LOOKUPS_FULL_RETRY_AFTER_S = 0.1
# A cached key older than this part of the TTL is refreshed in the background by the first
# request that uses it, which is served the cached key meanwhile (stale-while-revalidate,
# bounded by the TTL itself: a key is never served longer than a rotation may take).
REFRESH_AFTER_TTL_FRACTION = 0.5
# Background refreshes at once. They are counted apart from LOOKUPS_IN_FLIGHT_MAX: only an
# account whose keys were found is refreshed, so lookups of made-up names, however many
# peers make them, cannot keep the accounts in use from being refreshed.
REFRESHES_IN_FLIGHT_MAX = 16
# While an account's keys cannot be read (the lock service unreachable), its reads start at
# most this often: requests go on with the old keys, the store is not hammered, and keys
# rotated meanwhile are read within this of its return.
REFRESH_RETRY_S = 0.5
# Defaults of FrontEndLimits.account_keys_stale_max_ms / _wait_ms (common/config.py).
STALE_MAX_S = 300.0
STALE_WAIT_S = 0.5
# The largest credentials fields a request may carry, checked before any lookup: names by
# frontend/names.py's rules, an HMAC-SHA256 (32 bytes; room for a longer MAC), a shared
# access token by sas.TOKEN_CHARS_MAX.
NAME_CHARS_MAX = names.NAME_CHARS_MAX
SIGNATURE_BYTES_MAX = 64
SAS_CHARS_MAX = sas.TOKEN_CHARS_MAX


def check_field_sizes(account: str, name: str | None, auth: pb.Auth) -> None:
    """InvalidArgument (a name) or Unauthenticated (a credential) if a field of a request is
    longer than any valid one can be; the message says which field and its limit, never
    what it holds. Cheap (lengths only): it runs before anything is parsed, looked up or
    cached for the request, so no field a stranger sends is kept or echoed whole."""
    if len(account) > NAME_CHARS_MAX:
        raise InvalidArgument(f"an account name of {len(account)} characters is longer than "
                              f"any account's ({NAME_CHARS_MAX})")
    if name is not None and len(name) > NAME_CHARS_MAX:
        raise InvalidArgument(f"a name of {len(name)} characters is longer than any log or "
                              f"partition name ({NAME_CHARS_MAX})")
    if len(auth.account) > NAME_CHARS_MAX:
        raise Unauthenticated(f"the credentials name an account of {len(auth.account)} "
                              f"characters, longer than any account's ({NAME_CHARS_MAX})")
    if len(auth.signature) > SIGNATURE_BYTES_MAX:
        raise Unauthenticated(f"a signature of {len(auth.signature)} bytes is longer than "
                              f"any ({SIGNATURE_BYTES_MAX})")
    if len(auth.sas) > SAS_CHARS_MAX:
        raise Unauthenticated(f"a shared access token of {len(auth.sas)} characters is "
                              f"longer than any ({SAS_CHARS_MAX})")


class _Entry:
    """An account's keys and role as read at `read_at` (monotonic): refreshed from
    `refresh_at`, served until `expires_at` — and, while its reads fail (`failing`), until
    `stale_until`, with a read tried again from `retry_at`."""

    __slots__ = ("expires_at", "failing", "geo", "keys", "read_at", "refresh_at", "retry_at",
                 "stale_until")

    def __init__(self, held: Held, read_at: float, ttl_s: float, stale_max_s: float) -> None:
        self.keys = held.keys
        self.geo = held.geo
        self.read_at = read_at
        self.refresh_at = read_at + ttl_s * REFRESH_AFTER_TTL_FRACTION
        self.expires_at = read_at + ttl_s
        self.stale_until = self.expires_at + stale_max_s
        self.failing = False
        self.retry_at = read_at


class Authenticator:
    def __init__(self, read_keys: KeyReader, clock: Clock, ttl_s: float,
                 stale_max_s: float = STALE_MAX_S, stale_wait_s: float = STALE_WAIT_S) -> None:
        if not 0 <= ttl_s <= CACHE_TTL_MAX_S:
            raise InvalidArgument(f"account cache TTL {ttl_s} s is outside 0..{CACHE_TTL_MAX_S}")
        if stale_max_s < 0 or stale_wait_s <= 0:
            raise InvalidArgument("stale keys are kept for 0 s or more, waited for over 0 s")
        self._read_keys = read_keys
        self._clock = clock
        self._ttl_s = ttl_s
        self._stale_max_s = stale_max_s
        self._stale_wait_s = stale_wait_s
        self._cache: dict[str, _Entry] = {}
        self._reading: dict[str, asyncio.Future[Held | None]] = {}
        self._peer_reads: dict[str, int] = {}  # reads started per peer, not yet answered
        self._refreshing: set[str] = set()  # accounts whose read in flight is a refresh
        self._reads: set[asyncio.Task[None]] = set()
        self._failures = FailureLog(
            f"reading account keys (the keys held stay in use up to {stale_max_s:g} s past "
            f"their TTL)", log, clock=clock)

    def accounts_cached(self) -> int:
        return len(self._cache)

    def lookups_in_flight(self) -> int:
        return len(self._reading)

    def check_cached(self, claim: wire.Claim) -> Outcome:
        """Decide `claim` from the cache alone, or MISS."""
        check_field_sizes(claim.account, claim.name, claim.auth)
        try:
            token = wire.authenticate(claim, keys_of=self._cached_keys,
                                      now_s=self._clock.wall())
        except _Miss:
            return MISS
        self._check_role(claim, None)
        return token

    async def check(self, claim: wire.Claim, now_s: float | None = None, peer: str = ""
                    ) -> sas.SasToken | None:
        """Decide `claim` (at `now_s`, by default now), reading uncached keys off the event
        loop; the reads it starts count against `peer` (the connection it came on; "" for
        none: only the bound in all applies)."""
        check_field_sizes(claim.account, claim.name, claim.auth)
        if now_s is None:
            now_s = self._clock.wall()
        # What this check read: an account that does not exist is not cached, nor are keys
        # with a TTL of 0, and each is read once per check all the same.
        loaded: dict[str, Held | None] = {}

        def keys_of(account: str) -> Keys:
            if account not in loaded:
                return self._cached_keys(account)
            held = loaded[account]
            return held.keys if held is not None else None
        for _ in range(LOOKUPS_PER_CHECK_MAX):
            try:
                token = wire.authenticate(claim, keys_of=keys_of, now_s=now_s)
            except _Miss as miss:
                loaded[miss.account] = await self._load(miss.account, peer)
                continue
            self._check_role(claim, loaded)
            return token
        raise Unauthenticated("the credentials name more accounts than a request can")

    def _check_role(self, claim: wire.Claim, loaded: dict[str, Held | None] | None) -> None:
        """Moved if `claim` (authenticated) is of an account secondary here and is a write
        or a read not marked as a read of the secondary (accounts.GeoRole.check_serves).
        Its role is the one authentication just read its keys with: this check's `loaded`,
        or the cache (no await since: the entry is still there)."""
        held = loaded.get(claim.account) if loaded else None
        entry = held if held is not None else self._cache.get(claim.account)
        assert entry is not None, "authenticated with keys neither loaded nor cached"
        entry.geo.check_serves(claim.account, claim.method in WRITE_METHODS, claim.secondary_read)

    async def recheck(self, claim: wire.Claim) -> None:
        """Raise as `check` does if the credentials of a stream admitted on `claim` no
        longer hold: its signing key was rotated away or its account deleted (seen within
        the cache's TTL, as for any request), or its token expired. A Subscribe or Scan
        stream calls it before each reply, so a stream opened with a key or token runs no
        longer than a request with it could be made. The timestamp is not checked again
        (it was timely when the stream began; streams run for hours): a key is rechecked
        as of the request's own time, a token as of now (its expiry). A stream of an
        account that became secondary here while it ran ends as a request would be
        refused (Moved), unless it reads the secondary on purpose: a subscriber of the old
        primary is sent to the new one, not left reading what is replicated here."""
        auth = claim.auth
        now_s = self._clock.wall() if auth.sas else auth.timestamp_ms / 1000
        try:
            wire.authenticate(claim, keys_of=self._cached_keys, now_s=now_s)
        except _Miss:
            await self.check(claim, now_s)
            return
        self._check_role(claim, None)

    async def account(self, account: str, peer: str = "") -> Held | None:
        """`account`'s keys and role (None: no such account), from the cache or read through
        it: for credentials verified elsewhere than `wire` (the Azure Blob endpoint,
        blob_auth.py), which checks the role of a write itself (blob_server.py)."""
        try:
            entry = self._cached_entry(account)
        except _Miss:
            return await self._load(account, peer)
        return Held(entry.keys, entry.geo)

    def _cached_keys(self, account: str) -> Keys:
        return self._cached_entry(account).keys

    def _cached_entry(self, account: str) -> _Entry:
        entry = self._cache.get(account)
        if entry is None:
            raise _Miss(account)
        now = self._clock.monotonic()
        if now < entry.refresh_at:
            return entry
        if now < entry.expires_at or (entry.failing and now < entry.stale_until):
            # Past the TTL only while reads fail: the store is unreachable (module docstring).
            self._refresh_behind(account)
            return entry
        raise _Miss(account)

    def _refresh_behind(self, account: str) -> asyncio.Future[Held | None] | None:
        """The read of `account` in flight, or one started now in the background; None if
        none may start: REFRESHES_IN_FLIGHT_MAX run, its last read failed less than
        REFRESH_RETRY_S ago, or there is no event loop (the entry simply expires)."""
        future = self._reading.get(account)
        if future is not None:
            return future
        entry = self._cache.get(account)
        if (len(self._refreshing) >= REFRESHES_IN_FLIGHT_MAX
                or (entry is not None and self._clock.monotonic() < entry.retry_at)):
            return None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None
        return self._start_read(account, "", refresh=True)

    async def _load(self, account: str, peer: str) -> Held | None:
        """`account`'s keys and role as read now; concurrent readers of one account share the read.
        An account whose keys are held past their TTL (a stale entry within `stale_max_s`)
        waits for the read at most `stale_wait_s`, then goes on with them if it failed or
        has not answered (module docstring)."""
        try:
            names.check_account(account)
        except InvalidArgument:  # no such account can exist: no read of the store for it
            return None
        entry = self._cache.get(account)
        if entry is not None and self._clock.monotonic() < entry.stale_until:
            future = self._refresh_behind(account)
            if future is not None:
                return await self._fresh_or_stale(future, entry)
        future = self._reading.get(account) or self._start_read(account, peer, refresh=False)
        return await asyncio.shield(future)

    async def _fresh_or_stale(self, future: asyncio.Future[Held | None], entry: _Entry
                              ) -> Held | None:
        try:
            return await asyncio.wait_for(asyncio.shield(future), self._stale_wait_s)
        except (TimeoutError, Unavailable):
            # The read goes on (and updates the cache if it answers); until it does, every
            # request of the account is served the keys (and role) held, without waiting.
            entry.failing = True
            return Held(entry.keys, entry.geo)

    def _start_read(self, account: str, peer: str, refresh: bool
                    ) -> asyncio.Future[Held | None]:
        """Start reading `account`'s keys on a thread; its future is the answer (Unavailable
        if the store could not be read). A `refresh` is bounded by REFRESHES_IN_FLIGHT_MAX
        (its caller's), a lookup by the lookups' bounds (Throttled here)."""
        if not refresh:
            self._admit_lookup(peer)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Held | None] = loop.create_future()
        self._reading[account] = future
        if refresh:
            self._refreshing.add(account)
        if peer:
            self._peer_reads[peer] = self._peer_reads.get(peer, 0) + 1
        # Dated from before the read: what it returns may be as old as that, and a
        # rotation during a slow read must still take effect within the TTL.
        task = loop.create_task(self._read(account, peer, future, self._clock.monotonic()))
        self._reads.add(task)
        task.add_done_callback(self._reads.discard)
        return future

    async def _read(self, account: str, peer: str, future: asyncio.Future[Held | None],
                    read_at: float) -> None:
        """The read `_start_read` started, in a task of its own: it outlives the request
        that started it (a request that gives up on it leaves it to update the cache)."""
        try:
            held = held_of(await asyncio.to_thread(self._read_keys, account))
        except BaseException as exc:  # waiters must not hang on a reader that failed
            self._read_failed(account, exc)
            future.set_exception(Unavailable(f"the account store could not be read: {exc!r}"))
            future.exception()  # retrieved: waiters (if any) get it too
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self._reading.pop(account, None)
            self._refreshing.discard(account)
            self._lookup_done(peer)
        self._failures.succeeded()
        self._remember(account, held, read_at)
        future.set_result(held)

    def _read_failed(self, account: str, exc: BaseException) -> None:
        if isinstance(exc, Exception):
            self._failures.failed(exc)
        entry = self._cache.get(account)
        if entry is not None:
            entry.failing = True
            entry.retry_at = self._clock.monotonic() + REFRESH_RETRY_S

    def _admit_lookup(self, peer: str) -> None:
        """Throttled if a new store read may not start now (module docstring's bounds)."""
        if len(self._reading) >= LOOKUPS_IN_FLIGHT_MAX:
            raise Throttled(f"{LOOKUPS_IN_FLIGHT_MAX} accounts are being looked up at "
                            f"this front end already",
                            retry_after_s=LOOKUPS_FULL_RETRY_AFTER_S)
        if peer and self._peer_reads.get(peer, 0) >= LOOKUPS_PER_PEER_MAX:
            raise Throttled(f"{LOOKUPS_PER_PEER_MAX} accounts are being looked up for this "
                            f"connection already", retry_after_s=LOOKUPS_FULL_RETRY_AFTER_S)

    def _lookup_done(self, peer: str) -> None:
        if not peer:
            return
        left = self._peer_reads.get(peer, 0) - 1
        if left > 0:
            self._peer_reads[peer] = left
        else:
            self._peer_reads.pop(peer, None)

    def _remember(self, account: str, held: Held | None, read_at: float) -> None:
        """Cache keys (and role) found; a failed lookup (no such account) is not cached,
        and drops what was (a deleted account)."""
        if held is None:
            self._cache.pop(account, None)
            return
        if self._ttl_s <= 0:
            return
        if len(self._cache) >= CACHE_ENTRIES_MAX:
            now = self._clock.monotonic()
            self._cache = {k: v for k, v in self._cache.items() if v.stale_until > now}
            if len(self._cache) >= CACHE_ENTRIES_MAX:
                self._cache.clear()  # many accounts: start over, stay bounded
        self._cache[account] = _Entry(held, read_at, self._ttl_s, self._stale_max_s)
