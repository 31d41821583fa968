"""Inter-stamp replication's door at a front end (issue 30): `FrontEnd.Replicate` takes one
account's operations as its primary stamp committed them (partition_layer/geo_shipper.py)
and applies them here, at its secondary, through this stamp's partition layer (each on the
partition that holds its name here: the two stamps partition the key space independently).

Contract of `replicate`, in this order:
1. this stamp is in a location (`geo/stamp` in its lock service, read at most
   geo_auth.SETTINGS_TTL_S ago: geo_auth.SettingsCache), else Unavailable (a stamp that
   just joined its location is told within that);
2. the call names this stamp as its target and is signed with the location's replication
   secret within the clock skew allowed, else Unauthenticated;
3. the account is held here as the secondary of the calling stamp at the call's epoch (as
   the front ends' account cache says: frontend/auth.py), else PreconditionFailed: a stamp
   that is no longer the primary (a failover happened) cannot overwrite the new primary;
4. every request is a ReplicateOp of that account (InvalidArgument otherwise, nothing
   applied), at most one per partition name;
5. all are applied at once (`forward`, which raises a request's error); the answer comes when
   every one is durable here. If any fails,
   the call fails with its error (some may have been applied: the sender sends the whole call
   again, and applying one again writes what it wrote).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from common.errors import (
    InvalidArgument,
    PreconditionFailed,
    Unauthenticated,
    Unavailable,
)
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend.accounts import SECONDARY
from frontend.auth import Authenticator
from location import geo_auth
from location.geo_auth import GeoSettings

log = logging.getLogger(__name__)

REQUESTS_MAX = 4096

SettingsReader = Callable[[], Awaitable[GeoSettings | None]]
# Applies one request on this stamp's partition layer (ForwardingClient.call): its response,
# or the StampError it was refused with.
Forward = Callable[[pb.Request], Awaitable[pb.Response]]


class GeoDoor:
    """`FrontEnd.Replicate` (module contract)."""

    def __init__(self, settings: SettingsReader, auth: Authenticator, forward: Forward,
                 wall: Callable[[], float] = time.time) -> None:
        self._settings = settings
        self._auth = auth
        self._forward = forward
        self._wall = wall
        self.applied = 0  # requests applied (metrics)

    async def replicate(self, call: fe_pb.ReplicateCall, peer: str = "") -> fe_pb.ReplicateAnswer:
        settings = await self._settings()
        if settings is None:
            raise Unavailable("this stamp is in no location: it takes no replicated writes")
        if call.target_stamp != settings.stamp:
            raise Unauthenticated(f"a replicated call for stamp {call.target_stamp[:64]!r} "
                                  f"came to {settings.stamp}")
        digest = geo_auth.requests_digest(r.SerializeToString() for r in call.requests)
        geo_auth.verify(settings.secret, call.signature, call.source_stamp, call.target_stamp,
                        call.account, call.epoch, call.timestamp_ms, digest, self._wall())
        await self._check_role(call, peer)
        self._check_requests(call)
        await asyncio.gather(*(self._forward(r) for r in call.requests))
        self.applied += len(call.requests)
        return fe_pb.ReplicateAnswer(applied=len(call.requests))

    async def _check_role(self, call: fe_pb.ReplicateCall, peer: str) -> None:
        held = await self._auth.account(call.account, peer)
        if held is None:
            raise PreconditionFailed(f"account {call.account} is not held here")
        geo = held.geo
        if (geo.role, geo.primary, geo.epoch) != (SECONDARY, call.source_stamp, call.epoch):
            raise PreconditionFailed(
                f"account {call.account} is held here as {geo.role} of {geo.primary or '-'} "
                f"at epoch {geo.epoch}, not as the secondary of {call.source_stamp} at epoch "
                f"{call.epoch}: its operations are not taken")

    @staticmethod
    def _check_requests(call: fe_pb.ReplicateCall) -> None:
        if not 1 <= len(call.requests) <= REQUESTS_MAX:
            raise InvalidArgument(f"a replicated call has 1..{REQUESTS_MAX} requests")
        names = set()
        for request in call.requests:
            if request.account != call.account or request.WhichOneof("op") != "replicate":
                raise InvalidArgument("a replicated call carries ReplicateOps of its account "
                                      "only")
            if request.pname in names:
                raise InvalidArgument(f"a replicated call names {request.pname!r} twice")
            names.add(request.pname)

