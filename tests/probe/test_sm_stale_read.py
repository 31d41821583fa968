"""A deposed stream manager leader must not answer reads from its stale state (issue 15,
hole 7): real processes; the leader's Raft tick thread is frozen by a delay at its journal
sync (its gRPC server keeps answering), the other two elect a leader and change the
namespace, then the old leader is asked."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest

from common import rpc
from common.errors import NotFound, NotLeader, StampError, Unavailable
from common.proto import stream_manager_pb2 as pb
from common.proto import stream_manager_pb2_grpc as pb_grpc
from stream_layer.sm_client import AsyncStreamManagerClient
from tests.support.streams import client_for, leader_name
from tests.support.waiting import wait_for
from tools.local_stamp import LocalStamp

# serial: its bounds are timings (or it freezes processes); `make test` runs it alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# Long enough for an election (0.8-1.6 s of silence, then a vote) and a change, several
# times over: the test runs alone (serial). Every second of it is the suite's: the old
# leader answers only once it thaws. 8 s (12 s before): the election gets half of it, 4 s,
# 2.5 times its longest silence, and the test fails, not passes, if the freeze ends too soon
# (the stalled create must still be pending after the survivors' change).
FROZEN_MS = 8_000


def test_a_frozen_leader_does_not_answer_reads_from_stale_state(
        stamp_factory: Callable[..., LocalStamp]) -> None:
    stamp = stamp_factory(extent_nodes=3, stream_managers=3)
    asyncio.run(_frozen_leader_reads(stamp))


async def _frozen_leader_reads(stamp: LocalStamp) -> None:
    client = client_for(stamp)
    channels = rpc.ChannelCache(16 * 1024 * 1024)
    try:
        await client.sm.create_stream("before")
        old_name = await leader_name(stamp, client)
        old = next(r for r in stamp.stream_managers() if r.name == old_name)
        others = [r for r in stamp.stream_managers() if r.name != old_name]
        old_stub = pb_grpc.StreamManagerStub(channels.get(old.address))

        # The next journal sync on the leader's tick thread stalls: it sends no heartbeat,
        # learns of no new term, and still believes it leads.
        rpc.arm_remote(old.address, f"raft_journal.sync=delay:{FROZEN_MS},times=1")
        stalled = asyncio.ensure_future(rpc.call(old_stub.CreateStream(
            pb.StreamRequest(name="stalled"), timeout=FROZEN_MS / 1000 + 30)))

        async def new_leader() -> str | None:
            for rec in others:
                if (await client.sm.status(rec.address)).leader:
                    return rec.address
            return None
        await wait_for(new_leader, FROZEN_MS / 2000, "the other two to elect a leader")
        assert (await client.sm.status(old.address)).leader, \
            "the frozen leader must still believe it leads for this test to mean anything"
        survivors = AsyncStreamManagerClient([r.address for r in others],
                                             stamp.config.stream_manager)
        try:
            fresh = await survivors.create_stream("fresh")
        finally:
            await survivors.close()
        assert fresh.name == "fresh"
        assert not stalled.done(), "the old leader's tick thread was not frozen"

        # The old leader either answers with the change or refuses; never the old state.
        try:
            info = await rpc.call(old_stub.OpenStream(pb.StreamRequest(name="fresh"),
                                                      timeout=FROZEN_MS / 1000 + 30))
            assert info.name == "fresh"
        except NotFound as exc:
            raise AssertionError(f"a deposed leader answered from stale state: {exc}") from None
        except (NotLeader, Unavailable):
            pass
        try:
            listed = await rpc.call(old_stub.ListStreams(pb.ListStreamsRequest(),
                                                         timeout=FROZEN_MS / 1000 + 30))
            assert "fresh" in {stream.name for stream in listed.streams}, \
                "a deposed leader listed a stale namespace"
        except (NotLeader, Unavailable):
            pass
        # Committed after all (a follower forwards a queued command to the new leader) or
        # refused: either is fine, it only had to freeze the tick thread.
        with contextlib.suppress(StampError):
            await stalled
    finally:
        await channels.close()
        await client.close()
