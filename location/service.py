"""The location service's public door (issue 30): `stamp.location.v1.Location/Resolve`
(protocol/location_v1.proto), answered from location/store.py through a short cache.

Contracts:
- An answer is at most `cache_ttl_s` (default CACHE_TTL_S, at most CACHE_TTL_MAX_S) older
  than the store: a failover or migration (a new placement, its epoch one more) reaches
  every resolver of the location within that, and clients within that plus the TTL they
  were given (CLIENT_TTL_MS), or at once when a stamp answers Moved and they ask again.
  Asking again after Moved always reads through (`fresh=True` on the account's entry), so
  a client is never sent back to the stamp that just refused it by a stale cache.
- Memory is bounded: at most CACHE_ENTRIES_MAX placements are cached (the oldest dropped
  first); a failed lookup (no such account, a malformed name) is never cached, so made-up
  names cost a store read each but no memory; at most LOOKUPS_MAX store reads run at once
  (they run on threads: the lock client blocks), the rest wait their turn within their
  call's deadline.
- Resolve checks no credentials (it says where front ends are, as DNS would; the front
  ends check every request)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable

from grpc import aio

from common import rpc
from common.errors import InvalidArgument, NotFound
from common.proto import location_v1_pb2 as pb
from frontend.names import check_account
from location.placement import AccountPlacement, StampInfo
from location.store import LocationStore

CACHE_TTL_S = 1.0
CACHE_TTL_MAX_S = 10.0
CACHE_ENTRIES_MAX = 100_000
LOOKUPS_MAX = 16
CLIENT_TTL_MS = 60_000  # how long a client may use an answer (Moved makes it ask sooner)
FRESH_KEY = "stamp-resolve-fresh"  # request metadata: read through the cache (after Moved)


class PlacementCache:
    """Placements and stamps as the store had them at most `ttl_s` ago (module contract).
    `now` is monotonic seconds (injected for tests)."""

    def __init__(self, store: LocationStore, ttl_s: float = CACHE_TTL_S,
                 entries_max: int = CACHE_ENTRIES_MAX,
                 now: Callable[[], float] = time.monotonic) -> None:
        if not 0 <= ttl_s <= CACHE_TTL_MAX_S:
            raise InvalidArgument(f"the location's cache TTL is 0 to {CACHE_TTL_MAX_S} s, "
                                  f"not {ttl_s}")
        self._store = store
        self._ttl_s = ttl_s
        self._entries_max = entries_max
        self._now = now
        self._placements: OrderedDict[str, tuple[float, AccountPlacement]] = OrderedDict()
        self._stamps: tuple[float, dict[str, StampInfo]] | None = None
        self._lookups = asyncio.Semaphore(LOOKUPS_MAX)

    def __len__(self) -> int:
        return len(self._placements)

    async def resolve(self, account: str, fresh: bool = False
                      ) -> tuple[AccountPlacement, StampInfo, StampInfo]:
        """(placement, primary stamp, secondary stamp) of `account`; InvalidArgument for a
        malformed name, NotFound for an unknown account or a placement naming a stamp the
        location does not have (a bug, or a stamp removed: not answered with half)."""
        check_account(account)
        placement = None if fresh else self._cached(account)
        if placement is None:
            async with self._lookups:
                placement, _ = await asyncio.to_thread(self._store.resolve, account)
            self._remember(account, placement)
        stamps = await self._current_stamps(refresh=fresh)
        try:
            return placement, stamps[placement.primary], stamps[placement.secondary]
        except KeyError as missing:
            raise NotFound(f"account {account}'s placement names stamp {missing}, which the "
                           "location does not know") from None

    def _cached(self, account: str) -> AccountPlacement | None:
        entry = self._placements.get(account)
        if entry is None or self._now() - entry[0] > self._ttl_s:
            return None
        return entry[1]

    def _remember(self, account: str, placement: AccountPlacement) -> None:
        if self._ttl_s == 0:
            return
        self._placements[account] = (self._now(), placement)
        self._placements.move_to_end(account)
        while len(self._placements) > self._entries_max:
            self._placements.popitem(last=False)

    async def _current_stamps(self, refresh: bool) -> dict[str, StampInfo]:
        cached = self._stamps
        if cached is not None and not refresh and self._now() - cached[0] <= self._ttl_s:
            return cached[1]
        async with self._lookups:
            stamps = await asyncio.to_thread(self._store.stamps)
        self._stamps = (self._now(), stamps)
        return stamps


def stamp_endpoints(stamp: StampInfo) -> pb.StampEndpoints:
    return pb.StampEndpoints(name=stamp.name, region=stamp.region,
                             front_ends=list(stamp.front_ends),
                             blob_endpoints=list(stamp.blob_endpoints))


class LocationServicer:
    """stamp.location.v1.Location (module contract)."""

    def __init__(self, cache: PlacementCache) -> None:
        self.cache = cache

    @rpc.rpc_errors
    async def Resolve(self, request: pb.ResolveRequest, context: aio.ServicerContext
                      ) -> pb.ResolveReply:
        fresh = any(key == FRESH_KEY for key, _ in (context.invocation_metadata() or ()))
        placement, primary, secondary = await self.cache.resolve(request.account, fresh)
        return pb.ResolveReply(account=placement.account, primary=stamp_endpoints(primary),
                               secondary=stamp_endpoints(secondary),
                               secondary_state=placement.secondary_state,
                               epoch=placement.epoch, ttl_ms=CLIENT_TTL_MS)
