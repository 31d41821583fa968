"""Where an account lives, asked of a location service (issue 30; protocol/location_v1.proto):
what a client whose connection string says `Location=HOST:PORT[,...]` does instead of using
fixed front ends.

Contract of `Resolver`:
- `front_ends(deadline)` is the account's primary stamp's front ends, from the last answer
  while it is younger than the TTL the location gave, else asked again. When the location
  cannot be reached (within one attempt, RESOLVE_ATTEMPT_S) but an older answer exists,
  that answer is used for STALE_RETRY_S more (as a DNS cache serves a stale record while its
  server is down): the stamps, not the location, are what must stay
  up for the account's calls to go on. With no answer at all, the location's error is raised
  (Unavailable, or NotFound for an account the location does not have).
- `suspect()` is called when a front end of the primary did not answer (Unavailable, a
  deadline): the answer, if it is SUSPECT_AFTER_S old or older, is asked again at the next
  `front_ends` (the location's own cache is short). An unplanned failover
  moves an account off a stamp that is gone; a client whose answer named that stamp would
  otherwise wait out the TTL, as a DNS client re-resolves a name whose address stopped
  answering.
- `secondary_front_ends(deadline)` is the account's secondary stamp's front ends, for a
  client that reads there (`ReadFrom=secondary`), from the same answer, asked and kept as for
  `front_ends`. It raises SecondaryNotLive while that answer says the secondary is not
  "live" (bootstrapping: its copy is not whole; unavailable: an old primary after an
  unplanned failover, which may hold writes the new primary never saw): such a copy is
  never read, and the read does not fall back to the primary either (the caller asked for
  the secondary's copy; a primary's answer would hide that the secondary is not there). A
  resolver made with `reads_secondary` keeps such an answer at most NOT_LIVE_TTL_S, not the
  location's TTL, so a secondary that turns live is read from within about that.
- `suspect()` applies to the secondary's front ends too, and after a failover the roles are
  swapped in the next answer: reads follow the account's secondary as writes follow its
  primary.
- `moved(deadline)` is called when a stamp answered Moved: it asks again, past the location's
  own cache, and says whether the placement changed (another primary, or a new epoch: every
  change of roles has one). An unchanged answer means the location has not caught up with
  the failover yet: the caller waits and tries again (the call's deadline bounds it).
- `ask(deadline)` asks the location now (not the last answer): for `last_sync_ms`, the
  account's last sync time (protocol/location_v1.proto: every write the primary acknowledged
  before it is at the secondary; 0 when not known or the secondary is not live), which
  `sync_time` makes a datetime (UTC) or None.
- One question is in flight at a time; callers arriving meanwhile wait for its answer.
- Each location server is asked in turn (stampsdk/retry.py's Endpoints: one that failed is
  avoided for a while), each for at most RESOLVE_ATTEMPT_S, until one answers or the deadline.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import grpc

from stampsdk._proto import location_v1_pb2 as pb
from stampsdk._proto import location_v1_pb2_grpc as location_grpc
from stampsdk.channels import ChannelCache
from stampsdk.clock import Clock
from stampsdk.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    SecondaryNotLive,
    StampError,
    Unavailable,
    from_rpc_error,
)
from stampsdk.retry import Endpoints

log = logging.getLogger("stampsdk.location")

RESOLVE_ATTEMPT_S = 2.0
FRESH_KEY = "stamp-resolve-fresh"  # read through the location's cache (after Moved)
RETRY_PAUSE_S = 0.05  # between rounds over every location server
SUSPECT_AFTER_S = 1.0  # an answer at least this old is asked again when its stamp fails
STALE_RETRY_S = 5.0  # the location unreachable: the last answer is used this long, then asked
# A client reading from the secondary keeps an answer saying it is not live this long at most
# (not the TTL): it then reads there within about this of the secondary turning live.
NOT_LIVE_TTL_S = 1.0
LIVE = "live"  # the secondary's state in which it is read (protocol/location_v1.proto)


@dataclass(frozen=True)
class StampAddress:
    """A stamp as a client reaches it: its name, region and front ends (HOST:PORT)."""

    name: str
    region: str
    front_ends: tuple[str, ...]


@dataclass(frozen=True)
class Resolution:
    """One answer of the location: the account's stamps, the secondary's state ("live",
    "bootstrapping" or "unavailable"), the placement's epoch, how long the answer may be
    used, and the account's last sync time in ms since the Unix epoch (0: not known)."""

    account: str
    primary: StampAddress
    secondary: StampAddress
    secondary_state: str
    epoch: int
    ttl_s: float
    last_sync_ms: int = 0


def _stamp(reply: pb.StampEndpoints) -> StampAddress:
    return StampAddress(reply.name, reply.region, tuple(reply.front_ends))


def sync_time(last_sync_ms: int) -> datetime | None:
    """A last sync time of the protocol (ms since the Unix epoch) as an aware datetime in
    UTC; None for 0 (not known)."""
    if not last_sync_ms:
        return None
    return datetime.fromtimestamp(last_sync_ms / 1000, tz=timezone.utc)


class Resolver:
    """An account's primary (and secondary) front ends, from a location (module
    contract)."""

    def __init__(self, servers: Sequence[str], account: str, channels: ChannelCache,
                 clock: Clock, rng: random.Random, reads_secondary: bool = False) -> None:
        self.account = account
        self.reads_secondary = reads_secondary
        self._servers = Endpoints(servers, clock, rng)
        self._channels = channels
        self._clock = clock
        self._answer: Resolution | None = None
        self._expires = 0.0
        self._answered_at = 0.0
        self._asking: asyncio.Future[Resolution] | None = None

    @property
    def answer(self) -> Resolution | None:
        """The last answer (None before the first)."""
        return self._answer

    async def front_ends(self, deadline: float) -> tuple[str, ...]:
        """The primary's front ends (module contract)."""
        return (await self._current(deadline)).primary.front_ends

    async def secondary_front_ends(self, deadline: float) -> tuple[str, ...]:
        """The secondary's front ends, for reads there; SecondaryNotLive while the location
        says it is not live (module contract)."""
        answer = await self._current(deadline)
        if answer.secondary_state != LIVE:
            raise SecondaryNotLive(
                f"account {self.account}'s secondary stamp {answer.secondary.name or '?'} is "
                f"{answer.secondary_state or 'not named'}, not live: it is not read from "
                f"(read from the primary, without ReadFrom=secondary)",
                answer.secondary_state)
        return answer.secondary.front_ends

    async def ask(self, deadline: float) -> Resolution:
        """The location's answer now, not the last one (module contract)."""
        return await self._ask(deadline, fresh=False)

    async def _current(self, deadline: float) -> Resolution:
        """The last answer while it is younger than its TTL, else the location's (module
        contract: the last one again for a while when the location does not answer)."""
        now = self._clock.monotonic()
        if self._answer is not None and now < self._expires:
            return self._answer
        # With an answer to fall back on, a refresh takes one attempt's time, not the call's.
        ask_by = deadline if self._answer is None else min(deadline, now + RESOLVE_ATTEMPT_S)
        try:
            return await self._ask(ask_by, fresh=False)
        except StampError as exc:
            if self._answer is None or isinstance(exc, (NotFound, InvalidArgument)):
                raise
            log.warning("location unreachable (%s): using the last answer for %s",
                        exc, self.account)
            self._expires = self._clock.monotonic() + STALE_RETRY_S  # not asked per call
            return self._answer

    def suspect(self) -> None:
        """A front end of the account's primary (or of the secondary it reads from) did not
        answer (module contract)."""
        if self._answer is not None and \
                self._clock.monotonic() - self._answered_at >= SUSPECT_AFTER_S:
            self._expires = 0.0

    async def moved(self, deadline: float) -> bool:
        """Ask again after a Moved; whether the primary is another stamp now, or the epoch
        another (module contract)."""
        before = self._answer
        after = await self._ask(deadline, fresh=True)
        return before is None or (after.primary, after.epoch) != (before.primary, before.epoch)

    async def _ask(self, deadline: float, fresh: bool) -> Resolution:
        if self._asking is None:
            self._asking = asyncio.ensure_future(self._resolve(deadline, fresh))
            self._asking.add_done_callback(self._asked)
        return await asyncio.shield(self._asking)

    def _asked(self, future: asyncio.Future[Resolution]) -> None:
        self._asking = None
        if not future.cancelled() and future.exception() is None:
            answer = self._answer = future.result()
            self._answered_at = self._clock.monotonic()
            ttl_s = answer.ttl_s
            if self.reads_secondary and answer.secondary_state != LIVE:
                ttl_s = min(ttl_s, NOT_LIVE_TTL_S)  # module contract: seen live soon
            self._expires = self._answered_at + ttl_s

    async def _resolve(self, deadline: float, fresh: bool) -> Resolution:
        metadata = ((FRESH_KEY, "1"),) if fresh else None
        error: StampError = Unavailable("no location server answered in time")
        while self._clock.monotonic() < deadline:
            server = self._servers.pick()
            stub = location_grpc.LocationStub(self._channels.get(server))
            wait_s = max(0.05, min(RESOLVE_ATTEMPT_S, deadline - self._clock.monotonic()))
            try:
                reply = await stub.Resolve(pb.ResolveRequest(account=self.account),
                                           timeout=wait_s, metadata=metadata)
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                if not isinstance(error, (Unavailable, DeadlineExceeded)):
                    raise error from None  # NotFound, InvalidArgument: asking again won't help
                self._servers.failed(server)
                await asyncio.sleep(min(RETRY_PAUSE_S, max(0.0, deadline
                                                           - self._clock.monotonic())))
                continue
            self._servers.answered(server)
            return Resolution(reply.account, _stamp(reply.primary), _stamp(reply.secondary),
                              reply.secondary_state, reply.epoch, reply.ttl_ms / 1000,
                              reply.last_sync_ms)
        raise Unavailable(f"the location ({', '.join(self._servers.all)}) did not say where "
                          f"account {self.account} is: {error}")
