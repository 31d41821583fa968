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
- `moved(deadline)` is called when a stamp answered Moved: it asks again, past the location's
  own cache, and says whether the primary changed. An unchanged answer means the location has
  not caught up with the failover yet: the caller waits and tries again (the call's deadline
  bounds it).
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

import grpc

from stampsdk._proto import location_v1_pb2 as pb
from stampsdk._proto import location_v1_pb2_grpc as location_grpc
from stampsdk.channels import ChannelCache
from stampsdk.clock import Clock
from stampsdk.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
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


@dataclass(frozen=True)
class StampAddress:
    """A stamp as a client reaches it: its name, region and front ends (HOST:PORT)."""

    name: str
    region: str
    front_ends: tuple[str, ...]


@dataclass(frozen=True)
class Resolution:
    """One answer of the location: the account's stamps and the placement's epoch."""

    account: str
    primary: StampAddress
    secondary: StampAddress
    secondary_state: str
    epoch: int
    ttl_s: float


def _stamp(reply: pb.StampEndpoints) -> StampAddress:
    return StampAddress(reply.name, reply.region, tuple(reply.front_ends))


class Resolver:
    """An account's primary front ends, from a location (module contract)."""

    def __init__(self, servers: Sequence[str], account: str, channels: ChannelCache,
                 clock: Clock, rng: random.Random) -> None:
        self.account = account
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
        now = self._clock.monotonic()
        if self._answer is not None and now < self._expires:
            return self._answer.primary.front_ends
        # With an answer to fall back on, a refresh takes one attempt's time, not the call's.
        ask_by = deadline if self._answer is None else min(deadline, now + RESOLVE_ATTEMPT_S)
        try:
            return (await self._ask(ask_by, fresh=False)).primary.front_ends
        except StampError as exc:
            if self._answer is None or isinstance(exc, (NotFound, InvalidArgument)):
                raise
            log.warning("location unreachable (%s): using the last answer for %s",
                        exc, self.account)
            self._expires = self._clock.monotonic() + STALE_RETRY_S  # not asked per call
            return self._answer.primary.front_ends

    def suspect(self) -> None:
        """A primary's front end did not answer (module contract)."""
        if self._answer is not None and \
                self._clock.monotonic() - self._answered_at >= SUSPECT_AFTER_S:
            self._expires = 0.0

    async def moved(self, deadline: float) -> bool:
        """Ask again after a Moved; whether the primary is another stamp now."""
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
            self._answer = future.result()
            self._answered_at = self._clock.monotonic()
            self._expires = self._answered_at + self._answer.ttl_s

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
                              reply.secondary_state, reply.epoch, reply.ttl_ms / 1000)
        raise Unavailable(f"the location ({', '.join(self._servers.all)}) did not say where "
                          f"account {self.account} is: {error}")
