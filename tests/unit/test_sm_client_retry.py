"""The stream-manager client leaves a silent leader after a short attempt (issue 29): real
gRPC servers in this process stand for the three replicas of a stream-manager group."""

from __future__ import annotations

import asyncio

import pytest
from grpc import aio

from common import rpc
from common.clock import ManualClock
from common.config import StreamManagerLimits
from common.errors import NotLeader, Unavailable
from common.proto import stream_manager_pb2 as pb
from common.proto import stream_manager_pb2_grpc as pb_grpc
from common.retry import LeaderGuess
from stream_layer.sm_client import AsyncStreamManagerClient


class Replica(pb_grpc.StreamManagerServicer):
    """`frozen`: never answers; otherwise leads if `leads`, else names `hint` as leader."""

    def __init__(self, frozen: bool = False, leads: bool = False, slow_s: float = 0.0
                 ) -> None:
        self.frozen = frozen
        self.leads = leads
        self.slow_s = slow_s
        self.hint = ""
        self.asked = 0

    @rpc.rpc_errors
    async def SealAndAdd(self, request, context):  # type: ignore[no-untyped-def]
        self.asked += 1
        if self.frozen:
            await asyncio.sleep(3600)
        await asyncio.sleep(self.slow_s)
        if not self.leads:
            raise NotLeader("a follower", leader=self.hint or None)
        return pb.StreamInfo(name=request.stream, writer_epoch=request.last_extent_id + 1)

    @rpc.rpc_errors
    async def CreateStream(self, request, context):  # type: ignore[no-untyped-def]
        return await self.SealAndAdd(pb.SealAndAddRequest(stream=request.name), context)


async def serve(replica: Replica) -> tuple[aio.Server, str]:
    server = aio.server()
    pb_grpc.add_StreamManagerServicer_to_server(replica, server)
    port = rpc.add_port(server, "127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def test_a_frozen_leader_is_left_and_its_followers_hints_ignored() -> None:
    """The first replica (the client's guess) is frozen and the second still names it as
    leader; the third leads. With the old 30 s attempt (or by following the second's hint
    back to the frozen one) the call outlasts the test's deadline, a condition not a
    measure."""

    async def scenario() -> None:
        frozen, follower, leader = Replica(frozen=True), Replica(), Replica(leads=True)
        servers = [await serve(r) for r in (frozen, follower, leader)]
        addresses = [address for _, address in servers]
        follower.hint = addresses[0]
        client = AsyncStreamManagerClient(addresses, StreamManagerLimits(leader_wait_ms=60_000))
        try:
            info = await asyncio.wait_for(client.seal_and_add("s", 7), 20)
            assert info.writer_epoch == 8
            assert frozen.asked == 1 and follower.asked == 1 and leader.asked == 1
        finally:
            await client.close()
            for server, _ in servers:
                await server.stop(0)

    asyncio.run(scenario())


def slow_leader(slow_s: float) -> tuple[Replica, Replica, Replica]:
    return Replica(leads=True, slow_s=slow_s), Replica(), Replica()


def test_a_rollover_that_takes_a_second_is_waited_for_not_resent() -> None:
    """A SealAndAdd may take a second on purpose (a fence and a placement, each waiting up
    to half a second on extent nodes): its first attempt waits that long (the floor); with
    the plain first attempt (0.75 s) it was given up and sent round the followers."""

    async def scenario() -> None:
        slow, *followers = slow_leader(1.0)
        servers = [await serve(r) for r in (slow, *followers)]
        client = AsyncStreamManagerClient([address for _, address in servers],
                                          StreamManagerLimits(leader_wait_ms=60_000))
        try:
            await asyncio.wait_for(client.seal_and_add("s", 1), 30)
            assert (slow.asked, followers[0].asked, followers[1].asked) == (1, 0, 0)
        finally:
            await client.close()
            for server, _ in servers:
                await server.stop(0)

    asyncio.run(scenario())


def test_a_leader_merely_slow_is_asked_again_with_a_longer_wait() -> None:
    """The leader answers after 2 s, past the first attempt's wait; its followers name it.
    Suspect for a while, it is asked again once that is over, with a doubled wait."""

    async def scenario() -> None:
        slow = Replica(leads=True, slow_s=2.0)
        followers = [Replica(), Replica()]
        servers = [await serve(r) for r in (slow, *followers)]
        addresses = [address for _, address in servers]
        for follower in followers:
            follower.hint = addresses[0]
        client = AsyncStreamManagerClient(addresses, StreamManagerLimits(leader_wait_ms=60_000))
        try:
            info = await asyncio.wait_for(client.seal_and_add("s", 1), 30)
            assert info.writer_epoch == 2 and slow.asked >= 2
        finally:
            await client.close()
            for server, _ in servers:
                await server.stop(0)

    asyncio.run(scenario())


def test_a_call_that_cannot_be_resent_waits_for_its_answer() -> None:
    """CreateStream is not resent after a timeout (a resend of an unseen success would be
    refused as AlreadyExists): it waits on the frozen guess until the leader wait runs out
    and is then refused as Unavailable, never sent to the others."""

    async def scenario() -> None:
        frozen, leader = Replica(frozen=True), Replica(leads=True)
        servers = [await serve(r) for r in (frozen, leader)]
        client = AsyncStreamManagerClient([address for _, address in servers],
                                          StreamManagerLimits(leader_wait_ms=1_500))
        try:
            with pytest.raises(Unavailable):
                await asyncio.wait_for(client.create_stream("s"), 20)
            assert frozen.asked == 1 and leader.asked == 0
        finally:
            await client.close()
            for server, _ in servers:
                await server.stop(0)

    asyncio.run(scenario())


def test_leader_guess_skips_suspects_until_they_have_served_their_time() -> None:
    clock = ManualClock()
    guess = LeaderGuess(["a", "b", "c"], clock.monotonic, suspect_s=1.0)
    guess.timed_out("a")
    assert guess.address == "b"
    assert not guess.follow("a", asked="b")  # b names the frozen a: not followed
    guess.failed("b")
    assert guess.address == "c"
    guess.failed("c")
    assert guess.address == "b"  # round the trusted ones, not back to a
    clock.advance(1.1)
    assert guess.follow("a", asked="b") and guess.address == "a"
    guess.answered("a")
    guess.failed("a")
    assert guess.address == "b"
