"""The stream manager and the stream client as real processes: leader failover under load,
seal-and-continue, re-replication after the grace period, atomic namespace changes (issue 3)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from common.errors import AlreadyExists, Fenced
from common.proto import stream_manager_pb2 as pb
from stream_layer.client import AsyncStream, AsyncStreamClient
from stream_layer.framing import Location
from tests.support.stamps import StampFactory
from tests.support.streams import (
    append_load,
    assert_all_readable,
    client_for,
    converged_digests,
    leader_name,
    start_load,
)
from tests.support.waiting import wait_for
from tools.chaos.extents import acknowledged

pytestmark = pytest.mark.slow



def test_full_extents_roll_over_without_failing_appends_in_flight(
        stamp_factory: StampFactory, caplog: pytest.LogCaptureFixture) -> None:
    """Concurrent appenders fill many small extents. The stream client rolls over before an
    append would not fit, once its appends in flight there are done: no append fails with
    ExtentFull (which would have the seal fail the ones in flight, each sent again), and the
    stream holds every acknowledged block exactly once."""
    caplog.set_level(logging.INFO, logger="stream_layer.client")
    stamp = stamp_factory(6, 3, extent_node={"extent_bytes_max": 64 * 1024})

    async def scenario() -> None:
        client = client_for(stamp)
        stream = await client.create_stream("full")
        stop, acked, load = start_load(stream, 4)
        await acknowledged(acked, 400)  # about six extents' worth
        stop.set()
        await load
        await stream.refresh()
        assert len(stream.extents) >= 5
        found = [(loc, data) async for loc, data in stream.blocks()]
        assert sorted(found) == sorted(acked), "blocks lost, changed or written twice"
        failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
        assert not failed, f"appends failed and were sent again: {failed[:3]}"
        await client.close()
    asyncio.run(scenario())


def test_sm_leader_killed_during_appends(stamp_factory: StampFactory) -> None:
    # Small extents: the stream rolls over (a stream manager call) every few dozen appends.
    stamp = stamp_factory(6, 3, extent_node={"extent_bytes_max": 64 * 1024})

    async def scenario() -> None:
        client = client_for(stamp)
        stream = await client.create_stream("log")
        stop, progress, load = start_load(stream, 4)
        await acknowledged(progress, 100)
        victim = await leader_name(stamp, client)
        stamp.kill(victim)
        rollovers_before = len(stream.extents)
        await wait_for(lambda: _grown(stream, rollovers_before + 3), 20,
                       "appends to continue on new extents after the failover")
        stop.set()
        acked = await load
        assert len(stream.extents) > 3
        stamp.start(victim)
        digests = await converged_digests(stamp, client)
        assert len(digests) == 1, "stream manager replicas disagree after failover"
        await assert_all_readable(stream, acked)

        for rec in stamp.stream_managers():
            stamp.kill(rec.name)
        for rec in stamp.stream_managers():
            stamp.start(rec.name)
        assert await converged_digests(stamp, client) == digests, "state lost in a restart"
        reopened = await client.open_stream("log")
        await assert_all_readable(reopened, acked)
        await client.close()
    asyncio.run(scenario())


async def _grown(stream: AsyncStream, extents: int) -> bool:
    return len(stream.extents) >= extents


def test_kill_extent_node_of_the_open_extent(stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(6, 3)

    async def scenario() -> None:
        client = client_for(stamp)
        stream = await client.create_stream("log")
        stop = asyncio.Event()
        progress: list[tuple[Location, bytes]] = []
        load = asyncio.ensure_future(append_load(stream, 8, stop, progress))
        await acknowledged(progress, 100)
        open_extent = stream.extents[-1]
        stamp.kill(stamp.name_of(open_extent.addresses[0]))  # the primary
        await wait_for(lambda: _grown(stream, 2), 10, "the stream to continue")
        await acknowledged(progress, len(progress) + 100)  # and it goes on appending
        stop.set()
        acked = await load
        extents = {e.extent_id: e for e in (await stream.refresh()).extents}
        assert extents[open_extent.extent_id].state == "sealed"
        assert any(loc.extent_id != open_extent.extent_id for loc, _ in acked)
        await assert_all_readable(stream, acked)
        await client.close()
    asyncio.run(scenario())


def test_dead_node_is_rereplicated_and_a_quick_return_costs_nothing(
        stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(6, 3, stream_manager={"heartbeat_interval_ms": 200,
                                                "suspect_after_ms": 1000,
                                                "dead_after_ms": 2500})

    async def scenario() -> None:
        client = client_for(stamp)
        streams = [await client.create_stream(f"s{i}") for i in range(4)]
        for stream in streams:  # a few sealed extents spread over the nodes
            for _ in range(3):
                await stream.append([b"data" * 300])
                await stream.seal_last()
        extents = [e for e in await client.sm.list_extents() if e.state == "sealed"]
        victim = max(stamp.extent_nodes(),
                     key=lambda n: sum(n.name in e.replicas for e in extents)).name
        held = {e.extent_id for e in extents if victim in e.replicas}
        assert held
        stamp.kill(victim)

        async def rereplicated() -> list[pb.ExtentInfo] | None:
            now = {e.extent_id: e for e in await client.sm.list_extents()}
            if any(victim in now[i].replicas for i in held):
                return None
            return [now[i] for i in held]
        copies = await wait_for(rereplicated, 30, f"{victim}'s sealed extents to be copied")
        domains = {n.name: n.fault_domain for n in stamp.extent_nodes()}
        for extent in copies:
            assert len({domains[r] for r in extent.replicas}) == 3, extent
            for address in extent.addresses:  # every replica, the new one too, serves it
                frames = await client.extents.read_frames(address, extent.extent_id, 0,
                                                          extent.sealed_length)
                assert len(frames) == extent.sealed_length
        stamp.start(victim)

        # A node back within the grace period: nothing is copied.
        before = {e.extent_id: tuple(e.replicas) for e in await client.sm.list_extents()}
        quick = next(n.name for n in stamp.extent_nodes()
                     if any(n.name in r for r in before.values()))
        stamp.kill(quick)
        await wait_for(lambda: _node(client, quick, suspect=True), 10, f"{quick} suspect")
        stamp.start(quick)
        await wait_for(lambda: _node(client, quick, suspect=False), 10, f"{quick} back")
        after = {e.extent_id: tuple(e.replicas) for e in await client.sm.list_extents()}
        assert after == before, "a node back within the grace period caused copies"
        assert (await _node(client, quick, suspect=False)).state == "alive"
        await client.close()
    asyncio.run(scenario())


async def _node(client: AsyncStreamClient, name: str, suspect: bool) -> pb.NodeInfo | None:
    node = next(n for n in await client.sm.list_nodes() if n.name == name)
    return node if node.suspect == suspect else None


def test_concat_and_multi_modify_are_atomic(stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3, 3)

    async def scenario() -> None:
        client = client_for(stamp)
        b = await client.create_stream("b")
        await b.append([b"row data"])
        await b.seal_last()
        before = await client.sm.list_streams()
        with pytest.raises(AlreadyExists):
            await client.sm.multi_modify([
                pb.StreamOp(create="c"), pb.StreamOp(concat=pb.ConcatRequest(
                    target="c", source="b")), pb.StreamOp(create="b")])
        assert await client.sm.list_streams() == before
        streams = await client.sm.multi_modify([
            pb.StreamOp(create="c"), pb.StreamOp(concat=pb.ConcatRequest(target="c",
                                                                         source="b")),
            pb.StreamOp(create="d"), pb.StreamOp(concat=pb.ConcatRequest(target="d",
                                                                         source="b")),
            pb.StreamOp(delete="b")])
        extents = {s.name: [e.extent_id for e in s.extents] for s in streams}
        assert extents["c"] == extents["d"] == [e.extent_id for e in b.extents]
        assert [s.name for s in await client.sm.list_streams()] == ["c", "d"]
        c = await client.open_stream("c")
        assert [data async for _, data in c.blocks()] == [b"row data"]
        await client.close()
    asyncio.run(scenario())


def test_fenced_writer_cannot_append_after_a_newer_writer_took_over(
        stamp_factory: StampFactory) -> None:
    # Small extents: the old writer rolls over often, so it tries to add extents after the
    # fence as well as to append to the sealed one.
    stamp = stamp_factory(3, 3, extent_node={"extent_bytes_max": 64 * 1024})

    async def scenario() -> None:
        old_client, new_client = client_for(stamp), client_for(stamp)
        await old_client.create_stream("p1/log")
        old = await old_client.fence_stream("p1/log", 5)
        stop = asyncio.Event()
        acked: list[tuple[Location, bytes]] = []
        load = asyncio.ensure_future(append_load(old, 4, stop, acked))
        await acknowledged(acked, 100)
        new = await new_client.fence_stream("p1/log", 6)
        fenced_at = len(acked)
        with pytest.raises(Fenced):
            await load  # every old appender ends with Fenced, none hangs
        stop.set()
        # At most the appends in flight at the fence were acknowledged after it: each of
        # them lies below the sealed end the new writer saw.
        assert len(acked) <= fenced_at + 4
        before = {loc: data async for loc, data in new.blocks()}
        missing = [loc for loc, data in acked if before.get(loc) != data]
        assert not missing, f"acknowledged blocks of the old writer lost: {missing[:3]}"
        (loc,) = await new.append([b"new owner"])
        after = [loc async for loc, _ in new.blocks()]
        assert after[-1] == loc and len(after) == len(before) + 1
        with pytest.raises(Fenced):
            await old.append([b"late"])
        with pytest.raises(Fenced):
            await old_client.fence_stream("p1/log", 4)
        await old_client.close()
        await new_client.close()

    asyncio.run(scenario())
