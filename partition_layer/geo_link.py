"""What a partition server's shippers share (issue 30): this stamp's place in its location,
the location's answers about accounts, and the calls to other stamps' front ends.

Contracts:
- `targets(account)`, asked of operations written at this stamp: the stamp to ship them to,
  the account's secondary, when the location says this stamp is its primary; None when
  this stamp is stand-alone or the account is in no location. When the location names
  another primary (this stamp took the writes, so a failover it has not heard of yet moved
  the roles one way or the other), the account as this stamp holds it decides (`roles`):
  - held here as the primary at the location's epoch or later: the location has not caught
    up with a failover to this stamp: Unavailable after dropping the answer (the shipper
    asks again, never skips);
  - held here as the primary at an earlier epoch (an unplanned failover deposed this stamp
    while it was gone), or as the secondary (a write taken before this stamp's front ends
    saw that): the account is first made this stamp's secondary of the location's primary
    at its epoch (front ends refuse its writes with Moved from then on), then Deposed: the
    shipper sets those operations aside (geo_tail.py).
  An account whose secondary is unavailable (location/placement.py) has none: None (its
  operations count as shipped), from an answer at most UNAVAILABLE_TTL_S old: a bootstrap
  marking it `bootstrapping` relies on that (tools/geo_bootstrap.py). Other answers are
  kept for RESOLVE_TTL_S, at most RESOLVED_MAX accounts; while the location
  cannot be reached the last answer stands; with none, Unavailable.
- `send(target, requests)`: one ReplicateCall per account, signed with the location's
  secret (location/geo_auth.py), to one of the target's front ends (the next one after a
  failure); returns once all were applied there, else raises the error.
- Settings are read from the lock service at most SETTINGS_TTL_S ago, so a stamp that joins
  a location starts shipping without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from common import rpc
from common.errors import NotFound, PreconditionFailed, StampError, Unavailable
from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import partition_pb2 as pb
from location import geo_auth
from location.client import LocationClient
from location.geo_auth import SETTINGS_TTL_S, GeoSettings, SettingsCache
from partition_layer.geo_tail import Deposed, TailReport, never_deposed

PRIMARY = "primary"  # frontend/accounts.py's role names
UNAVAILABLE = "unavailable"  # location/placement.py's secondary state

log = logging.getLogger(__name__)

RESOLVE_TTL_S = 5.0
UNAVAILABLE_TTL_S = 1.0  # an answer naming an unavailable secondary (module contract)
RESOLVED_MAX = 10_000
RESOLVE_TIMEOUT_S = 2.0
SEND_TIMEOUT_S = 30.0
MESSAGE_BYTES_MAX = 64 * 1024 * 1024


@dataclass(frozen=True)
class Placement:
    """An account as the location says it is placed."""

    primary: str
    secondary: str
    secondary_front_ends: tuple[str, ...]
    epoch: int
    secondary_state: str = "live"


class Roles(Protocol):
    """Accounts as this stamp holds them (frontend/accounts.py's records), blocking calls."""

    def held(self, account: str) -> tuple[str, int]:
        """(role, epoch) of the account here."""

    def demote(self, account: str, primary: str, epoch: int) -> None:
        """Make this stamp the account's secondary of `primary` at `epoch`."""


class GeoLink:
    """A partition server's way to its location and the other stamps (module contract)."""

    def __init__(self, read_settings: Callable[[], GeoSettings | None],
                 now: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, roles: Roles | None = None,
                 tails: TailReport | None = None) -> None:
        """Without `roles`, a stamp never counts itself deposed (it waits); without
        `tails`, it has nowhere to set a tail aside (it waits too)."""
        self.settings = SettingsCache(read_settings, SETTINGS_TTL_S, now)
        self._roles = roles
        self.set_aside = never_deposed if tails is None else tails.set_aside
        self._now = now
        self._wall = wall
        self._placements: OrderedDict[str, tuple[float, Placement | None]] = OrderedDict()
        self._channels: dict[str, object] = {}  # to other stamps' front ends
        self._location = LocationClient()
        self._next_front_end = 0

    async def targets(self, account: str) -> str | None:
        settings = await self.settings()
        if settings is None:
            return None
        placement = await self._placement(settings, account)
        if placement is not None and placement.secondary_state == UNAVAILABLE:
            # What is not shipped counts as shipped: an answer that says so is kept
            # UNAVAILABLE_TTL_S only, so a bootstrap's mark is seen soon (geo_bootstrap.py).
            placement = await self._placement(settings, account, UNAVAILABLE_TTL_S)
        if placement is None:
            return None
        if placement.primary != settings.stamp:
            self._placements.pop(account, None)
            if self._roles is not None and await self._deposed(account, placement):
                return Deposed(placement.primary, placement.epoch)
            raise Unavailable(f"the location names {placement.primary} the primary of "
                              f"{account}, whose writes {settings.stamp} took: asking again")
        if placement.secondary_state == UNAVAILABLE:
            return None  # not replicated to until a bootstrap (location/placement.py)
        return placement.secondary

    async def fresh_targets(self, account: str) -> str | Deposed | None:
        """`targets`, the placement asked of the location past its cache and this one's (a
        geo bootstrap's copy: geo_copy.py): later batches ship by this answer too."""
        settings = await self.settings()
        if settings is not None:
            asked = self._now()
            self._remember(account, asked, await self._resolve(settings, account, fresh=True))
        return await self.targets(account)

    async def _deposed(self, account: str, placement: Placement) -> bool:
        """Whether `placement` (naming another primary) deposed this stamp (module
        contract); if so, the account is this stamp's secondary now."""
        assert self._roles is not None
        role, epoch = await asyncio.to_thread(self._roles.held, account)
        if role == PRIMARY and epoch >= placement.epoch:
            return False
        if role == PRIMARY or epoch < placement.epoch:
            await asyncio.to_thread(self._roles.demote, account, placement.primary,
                                    placement.epoch)
            log.warning("account %s: the location names %s its primary at epoch %d, after "
                        "this stamp's %d: it is this stamp's secondary now", account,
                        placement.primary, placement.epoch, epoch)
        return True

    async def send(self, target: str, requests: list[pb.Request]) -> None:
        settings = await self.settings()
        if settings is None:
            raise Unavailable("this stamp left its location")
        by_account: dict[str, list[pb.Request]] = {}
        for request in requests:
            by_account.setdefault(request.account, []).append(request)
        for account, theirs in by_account.items():
            placement = await self._placement(settings, account)
            if placement is None or placement.secondary != target:
                raise Unavailable(f"account {account}'s secondary is no longer {target}")
            try:
                await self._call(settings, placement, account, theirs)
            except PreconditionFailed:
                # Not held there as this stamp's secondary (a failover moved the roles):
                # ask the location again at the next attempt, not after RESOLVE_TTL_S.
                self._placements.pop(account, None)
                raise

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()  # type: ignore[attr-defined]
        self._channels.clear()
        await self._location.close()

    # ---- the location -----------------------------------------------------------------------

    async def _placement(self, settings: GeoSettings, account: str,
                         ttl_s: float = RESOLVE_TTL_S) -> Placement | None:
        cached = self._placements.get(account)
        if cached is not None and self._now() - cached[0] <= ttl_s:
            return cached[1]
        asked = self._now()
        try:
            placement = await self._resolve(settings, account)
        except StampError as exc:
            # The location is down: the last answer stands, unless it says to ship nothing
            # (its operations would count as shipped on an answer of unbounded age).
            if cached is not None and (cached[1] is None
                                       or cached[1].secondary_state != UNAVAILABLE):
                return cached[1]
            raise Unavailable(f"the location did not say where account {account} is: "
                              f"{exc}") from None
        return self._remember(account, asked, placement)

    def _remember(self, account: str, asked: float, placement: Placement | None
                  ) -> Placement | None:
        """Keep an answer, aged from when it was asked; one asked before the answer kept
        already (two questions crossing) does not replace it. The answer kept."""
        kept = self._placements.get(account)
        if kept is not None and kept[0] > asked:
            return kept[1]
        self._placements[account] = (asked, placement)
        self._placements.move_to_end(account)
        while len(self._placements) > RESOLVED_MAX:
            self._placements.popitem(last=False)
        return placement

    async def _resolve(self, settings: GeoSettings, account: str, fresh: bool = False
                       ) -> Placement | None:
        try:
            reply = await self._location.resolve(settings.location, account,
                                                 RESOLVE_TIMEOUT_S, fresh)
        except NotFound:
            return None  # not an account of the location: nothing to ship
        return Placement(reply.primary.name, reply.secondary.name,
                         tuple(reply.secondary.front_ends), reply.epoch,
                         reply.secondary_state)

    # ---- the other stamp --------------------------------------------------------------------

    async def _call(self, settings: GeoSettings, placement: Placement, account: str,
                    requests: list[pb.Request]) -> None:
        if not placement.secondary_front_ends:
            raise Unavailable(f"stamp {placement.secondary} has no front end")
        timestamp_ms = int(self._wall() * 1000)
        digest = geo_auth.requests_digest(r.SerializeToString() for r in requests)
        call = fe_pb.ReplicateCall(
            source_stamp=settings.stamp, target_stamp=placement.secondary, account=account,
            epoch=placement.epoch, requests=requests, timestamp_ms=timestamp_ms,
            signature=geo_auth.sign(settings.secret, settings.stamp, placement.secondary,
                                    account, placement.epoch, timestamp_ms, digest))
        fronts = placement.secondary_front_ends
        address = fronts[self._next_front_end % len(fronts)]
        try:
            await rpc.call(fe_grpc.FrontEndStub(self._channel(address)).Replicate(
                call, timeout=SEND_TIMEOUT_S))
        except StampError:
            self._next_front_end += 1  # the next attempt goes to another front end
            raise

    def _channel(self, address: str) -> object:
        channel = self._channels.get(address)
        if channel is None:
            # Plain, or this process's stamp identity: a location's stamps share no CA yet,
            # so replication between stamps with TLS on is not supported (issue 30 notes).
            channel = self._channels[address] = rpc.aio_channel(address, MESSAGE_BYTES_MAX)
        return channel
