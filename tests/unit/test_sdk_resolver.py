"""The SDK's resolver (sdk/src/stampsdk/location.py, issue 30) against an in-process location
server: an answer is kept for its TTL, asked again early when the primary's front ends stop
answering (an unplanned failover moves an account off a stamp that is gone), and kept, within
one attempt's time, while the location itself is down."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from grpc import aio
from stampsdk import location as sdk_location
from stampsdk.channels import ChannelCache
from stampsdk.clock import SystemClock
from stampsdk.location import Resolver

from common.proto import location_v1_pb2 as pb
from common.proto import location_v1_pb2_grpc as location_grpc


class Location(location_grpc.LocationServicer):
    def __init__(self) -> None:
        self.primary = "west-1"
        self.asked = 0

    async def Resolve(self, request: pb.ResolveRequest, context: object) -> pb.ResolveReply:
        self.asked += 1
        fronts = {"west-1": "127.0.0.2:1", "east-1": "127.0.0.3:1"}
        secondary = "east-1" if self.primary == "west-1" else "west-1"
        return pb.ResolveReply(
            account=request.account, epoch=1, ttl_ms=60_000, secondary_state="live",
            primary=pb.StampEndpoints(name=self.primary, front_ends=[fronts[self.primary]]),
            secondary=pb.StampEndpoints(name=secondary, front_ends=[fronts[secondary]]))


def test_a_primary_that_stops_answering_is_asked_about_again_and_a_down_location_costs_one_attempt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdk_location, "SUSPECT_AFTER_S", 0.0)
    monkeypatch.setattr(sdk_location, "RESOLVE_ATTEMPT_S", 0.3)

    async def scenario() -> None:
        location = Location()
        server = aio.server()
        location_grpc.add_LocationServicer_to_server(location, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        channels = ChannelCache(1 << 20)
        resolver = Resolver([f"127.0.0.1:{port}"], "acme", channels, SystemClock(),
                            random.Random(1))
        deadline = time.monotonic() + 30
        assert await resolver.front_ends(deadline) == ("127.0.0.2:1",)
        location.primary = "east-1"  # an unplanned failover
        assert await resolver.front_ends(deadline) == ("127.0.0.2:1",)  # its TTL holds
        resolver.suspect()  # west-1's front end did not answer
        assert await resolver.front_ends(deadline) == ("127.0.0.3:1",)
        assert location.asked == 2
        # The location goes down: a suspect answer is kept after one attempt's time, not
        # the call's, and the location is not asked again at every call meanwhile.
        await server.stop(None)
        asked = 0
        resolve = resolver._resolve

        async def counted(deadline: float, fresh: bool) -> object:
            nonlocal asked
            asked += 1
            return await resolve(deadline, fresh)

        resolver._resolve = counted  # type: ignore[method-assign]
        resolver.suspect()
        # Within the call's 30 s: one attempt's 0.3 s, not all of it.
        answer = await asyncio.wait_for(resolver.front_ends(deadline), timeout=10)
        assert answer == ("127.0.0.3:1",) and asked == 1
        assert await resolver.front_ends(deadline) == ("127.0.0.3:1",) and asked == 1
        await channels.close()

    asyncio.run(scenario())
