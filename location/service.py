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
  ends check every request). Its `last_sync_ms` comes from the primary stamp's latest sync
  report (location/sync_report.py), read at most `cache_ttl_s` ago; 0 while the secondary
  is not live (nothing is synced to it).
- ReportSync (common/proto/location_internal.proto) takes a stamp's sync report signed with
  the location's replication secret (geo_auth.verify_report), from a stamp the location
  knows, at most REPORT_BYTES_MAX, and keeps it in the store, replacing the stamp's last one;
  a location server given no secret refuses every report (Unavailable)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable

from grpc import aio

from common import rpc
from common.errors import InvalidArgument, NotFound, Unavailable
from common.proto import location_internal_pb2 as internal_pb
from common.proto import location_v1_pb2 as pb
from frontend.names import check_account
from location import geo_auth, sync_report
from location.client import FRESH_KEY
from location.placement import AccountPlacement, StampInfo
from location.store import LocationStore

CACHE_TTL_S = 1.0
CACHE_TTL_MAX_S = 10.0
CACHE_ENTRIES_MAX = 100_000
LOOKUPS_MAX = 16
CLIENT_TTL_MS = 60_000  # how long a client may use an answer (Moved makes it ask sooner)
# FRESH_KEY (request metadata): read through the cache (after Moved, or a geo bootstrap)


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
        self._reports: dict[str, tuple[float, internal_pb.SyncReport | None]] = {}
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


    async def synced_ms(self, account: str, stamp: str) -> int:
        """`account`'s last sync time by `stamp`'s latest report (0: unknown)."""
        cached = self._reports.get(stamp)
        if cached is None or self._now() - cached[0] > self._ttl_s:
            async with self._lookups:
                report = await asyncio.to_thread(self._store.sync_report, stamp)
            cached = (self._now(), report)
            self._reports[stamp] = cached  # one entry a stamp: bounded by the stamps
        report = cached[1]
        return 0 if report is None else sync_report.account_synced_ms(report.ranges, account)

    async def known_stamp(self, stamp: str) -> bool:
        return stamp in await self._current_stamps(refresh=False)

    async def keep_report(self, report: internal_pb.SyncReport) -> None:
        async with self._lookups:
            await asyncio.to_thread(self._store.put_sync_report, report)
        self._reports[report.stamp] = (self._now(), report)


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
        synced_ms = 0 if placement.secondary_state != "live" else \
            await self.cache.synced_ms(placement.account, placement.primary)
        return pb.ResolveReply(account=placement.account, primary=stamp_endpoints(primary),
                               secondary=stamp_endpoints(secondary),
                               secondary_state=placement.secondary_state,
                               epoch=placement.epoch, ttl_ms=CLIENT_TTL_MS,
                               last_sync_ms=synced_ms)


class LocationInternalServicer:
    """stamp.location.internal.LocationInternal (module contract). `secret` None: this
    location server was given none."""

    def __init__(self, cache: PlacementCache, secret: bytes | None,
                 wall: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self._secret = secret
        self._wall = wall

    @rpc.rpc_errors
    async def ReportSync(self, request: internal_pb.SyncReport,
                         context: aio.ServicerContext) -> internal_pb.SyncReportReply:
        if self._secret is None:
            raise Unavailable("this location server has no replication secret: it takes no "
                              "sync reports")
        geo_auth.verify_report(self._secret, request, self._wall())
        if request.ByteSize() > sync_report.REPORT_BYTES_MAX:
            raise InvalidArgument(f"a sync report is at most {sync_report.REPORT_BYTES_MAX} "
                                  f"bytes, not {request.ByteSize()}")
        if not await self.cache.known_stamp(request.stamp):
            raise NotFound(f"stamp {request.stamp} is not in this location")
        await self.cache.keep_report(request)
        return internal_pb.SyncReportReply()
