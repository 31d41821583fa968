"""Extent nodes as real processes on loopback: appends, reads, SIGKILL, torn journals,
flipped bytes, seals and syncs (issue 2)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from common.checksums import crc32c
from common.errors import ChecksumError, DeadlineExceeded, ReplicationFailed, WrongOffset
from common.ids import extent_file_stem
from common.proto import extent_node_pb2 as pb
from common.rpc import arm_remote
from stream_layer import framing
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.seal import seal_extent
from tests.conftest import module_stamp
from tests.support.extent_nodes import addresses, new_extent, rejoin_sealed
from tools.chaos.extents import (
    AppendHistory,
    acknowledged,
    check_extent_image,
    pipelined_appends,
    read_image,
)
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]


@pytest.fixture(scope="module")
def shared_stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    """Three extent nodes for the tests that kill, restart and arm nothing: each works on an
    extent of its own (a flipped byte spoils only its own extent's file), so none needs a
    fresh stamp."""
    with module_stamp(tmp_path_factory, "extent-nodes", extent_nodes=3) as stamp:
        yield stamp


def test_round_trip_single_and_multi_block(shared_stamp: LocalStamp) -> None:
    stamp = shared_stamp
    replicas = addresses(stamp)

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        one = await client.append(replicas[0], extent_id, [b"first"])
        many = await client.append(replicas[0], extent_id, [b"a" * 10, b"", b"c" * 70000])
        assert one[0].offset == 0 and many[0].offset == one[0].end
        assert [loc.offset for loc in many] == [one[0].end, many[0].end, many[1].end]
        expected = [(one[0], b"first"), (many[0], b"a" * 10), (many[1], b""),
                    (many[2], b"c" * 70000)]
        images = set()
        for address in replicas:
            for loc, data in expected:
                assert await client.read(address, loc) == data
            length, sealed = await client.commit_length(address, extent_id)
            assert (length, sealed) == (many[2].end, False)
            images.add(await read_image(client, address, extent_id, length))
        assert len(images) == 1, "replicas differ"
        await client.close()
    asyncio.run(scenario())


def test_one_message_of_appends_is_placed_in_order_each_with_its_own_outcome(
        stamp_factory: StampFactory) -> None:
    """A message's appends to one extent are placed as one replicated write (node.py
    start_appends): still each is atomic and answered on its own: consecutive offsets in
    message order, and a bad checksum or an append that no longer fits fails alone."""
    stamp = stamp_factory(3, extent_node={"extent_bytes_max": 4096})
    replicas = addresses(stamp)

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        datas = [b"a" * 100, b"bad", b"b" * 200, b"c" * 5000, b"d" * 50]
        batch = pb.AppendBatch()
        for request_id, data in enumerate(datas, 1):
            crc = crc32c(data) ^ (1 if data == b"bad" else 0)
            batch.appends.add(request_id=request_id, extent_id=extent_id).blocks.add(
                data=data, crc=crc)
        call = client.stub(replicas[0]).AppendStream()
        await call.write(batch)
        acks: dict[int, pb.AppendAck] = {}
        while len(acks) < len(datas):
            acks.update({ack.request_id: ack for ack in (await call.read()).acks})
        await call.done_writing()
        assert acks[2].error_kind == "ChecksumError"
        assert acks[4].error_kind == "ExtentFull"  # 5000 bytes do not fit in 4096
        placed = [(acks[i], datas[i - 1]) for i in (1, 3, 5)]
        assert [ack.error_kind for ack, _ in placed] == ["", "", ""]
        offset = 0
        for ack, data in placed:
            assert (ack.offset, ack.end) == (offset, offset + framing.frame_bytes(len(data)))
            offset = ack.end
        for address in replicas:
            for ack, data in placed:
                assert await client.read(address, framing.Location(
                    extent_id, ack.offset, ack.end - ack.offset)) == data
            assert await client.commit_length(address, extent_id) == (offset, False)
        await client.close()
    asyncio.run(scenario())


def test_secondary_refuses_write_not_at_its_end(shared_stamp: LocalStamp) -> None:
    stamp = shared_stamp
    replicas = addresses(stamp)

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        await client.append(replicas[0], extent_id, [b"x" * 100])
        # Appending straight to a secondary makes it the "primary" of nothing: refused.
        with pytest.raises(Exception, match="not its primary"):
            await client.append(replicas[1], extent_id, [b"y"])
        from common.proto import extent_node_pb2 as pb
        call = client.stub(replicas[1]).ForwardStream()
        # A well-formed frame, but at offset 0 of a replica that already ends at 108.
        await call.write(pb.ForwardBatch(entries=[pb.ForwardEntry(
            extent_id=extent_id, offset=0, frames=framing.frame(b"z"))]))
        reply = await call.read()
        assert reply.acks[0].error_kind == WrongOffset.__name__
        # And a frame whose checksum does not hold is refused before anything else.
        await call.write(pb.ForwardBatch(entries=[pb.ForwardEntry(
            extent_id=extent_id, offset=108, frames=framing.frame(b"z")[:-1] + b"y")]))
        reply = await call.read()
        assert reply.acks[0].error_kind == ChecksumError.__name__
        call.cancel()
        length, _ = await client.commit_length(replicas[1], extent_id)
        assert length == 108, "a refused write changed the replica"
        await client.close()
    asyncio.run(scenario())


@pytest.mark.parametrize(("victim_index", "block_bytes"), [(1, 512), (0, 512), (2, 300_000)],
                         ids=["secondary", "primary", "secondary-large-blocks"])
def test_kill_replica_during_pipelined_load(stamp_factory: StampFactory, victim_index: int,
                                            block_bytes: int) -> None:
    stamp = stamp_factory(3)
    replicas = addresses(stamp)
    victim = stamp.extent_nodes()[victim_index]

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        stop = asyncio.Event()
        progress = AppendHistory()
        load = asyncio.ensure_future(pipelined_appends(client, replicas[0], extent_id, 16, stop,
                                                       block_bytes=block_bytes,
                                                       history=progress))
        await acknowledged(progress.acked, 200)  # the kill lands mid-pipeline
        assert not load.done()
        stamp.kill(victim.name)
        history = await load  # every appender stops at its first error
        assert history.acked, "nothing was acknowledged before the kill"
        assert history.failed, "appends kept succeeding with a replica dead"
        if victim_index != 0:
            # The primary refuses everything after a replication failure (sticky).
            with pytest.raises(ReplicationFailed):
                await client.append(replicas[0], extent_id, [b"after"])
        length, sealed_on = await seal_extent(client, extent_id, replicas, timeout_s=1.0)
        assert victim.address not in sealed_on and len(sealed_on) == 2
        images = [await read_image(client, a, extent_id, length) for a in sealed_on]
        assert images[0] == images[1]
        check_extent_image(images[0], history, extent_id)

        # The dead replica comes back and is brought to the sealed length.
        stamp.start(victim.name)
        await rejoin_sealed(client, victim.address, extent_id, length, sealed_on, images[0])
        await client.close()
    asyncio.run(scenario())


def test_seal_replicas_of_different_lengths(stamp_factory: StampFactory) -> None:
    """Forwarding to one secondary is held back, so the other secondary and the primary run
    ahead; the primary dies. The seal takes the smallest length, truncates the longer
    replicas (bitwise identical afterwards), and syncs the returning primary."""
    stamp = stamp_factory(3)
    replicas = addresses(stamp)

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        for i in range(20):
            await client.append(replicas[0], extent_id, [b"acked-%d" % i])
        arm_remote(replicas[0], f"en.forward.before_send@{replicas[2]}=delay:60000")
        stop = asyncio.Event()
        load = asyncio.ensure_future(pipelined_appends(client, replicas[0], extent_id, 8, stop,
                                                       deadline_s=30))
        ahead = held_back = 0
        for _ in range(500):  # until the primary and the fast secondary are well ahead of the
            # held-back one (the primary's own fsync may finish after the secondary's)
            held_back = (await client.commit_length(replicas[2], extent_id))[0]
            ahead = min([(await client.commit_length(r, extent_id))[0] for r in replicas[:2]])
            if ahead > held_back + 1000:
                break
            await asyncio.sleep(0.01)
        stamp.kill(stamp.name_of(replicas[0]))
        history = await load
        assert ahead > held_back + 1000
        length, sealed_on = await seal_extent(client, extent_id, replicas, timeout_s=1.0)
        assert length == (await client.commit_length(replicas[2], extent_id))[0]
        assert sorted(sealed_on) == sorted(replicas[1:])
        image = await read_image(client, replicas[1], extent_id, length)
        assert await read_image(client, replicas[2], extent_id, length) == image
        assert await client.commit_length(replicas[1], extent_id) == (length, True)
        check_extent_image(image, history, extent_id)
        for i in range(20):
            assert b"acked-%d" % i in image

        stamp.start(stamp.name_of(replicas[0]))
        await client.wait_serving(replicas[0])
        before, _ = await client.commit_length(replicas[0], extent_id)
        assert before > length
        await client.seal(replicas[0], extent_id, length, sealed_on)
        assert await client.commit_length(replicas[0], extent_id) == (length, True)
        assert await read_image(client, replicas[0], extent_id, length) == image
        await client.close()
    asyncio.run(scenario())


def test_restart_after_torn_journal_tail(stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3)
    replicas = addresses(stamp)
    node = stamp.extent_nodes()[1]

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        acked = [await client.append(replicas[0], extent_id, [b"rec-%d" % i * 50])
                 for i in range(30)]
        # A real torn write: half of a journal batch reaches the disk, then the node dies.
        arm_remote(node.address, "journal.torn_write=torn")
        with pytest.raises(ReplicationFailed):
            await client.append(replicas[0], extent_id, [b"torn" * 1000])
        await asyncio.sleep(0)
        stamp.kill(node.name)  # already dead by its own hand; reaps it
        journal = sorted((Path(node.dir) / "journal").glob("journal-*.log"))[-1]
        assert journal.stat().st_size > 0
        # And more garbage after it, as a crashed disk write could leave.
        with open(journal, "ab") as f:
            f.write(b"\xff\x00\x00\x10garbage")
        stamp.start(node.name)
        await client.wait_serving(node.address)
        length, sealed = await client.commit_length(node.address, extent_id)
        assert not sealed and length == acked[-1][0].end
        for i, locs in enumerate(acked):
            assert await client.read(node.address, locs[0]) == b"rec-%d" % i * 50
        assert "cutting torn tail" in (Path(node.dir) / "server.log").read_text()
        await client.close()
    asyncio.run(scenario())


def test_kill_all_replicas_acknowledged_data_survives(stamp_factory: StampFactory) -> None:
    """Acknowledged appends live in the journals only (no checkpoint yet) when every node is
    SIGKILLed; on restart the journals are replayed."""
    stamp = stamp_factory(3, extent_node={"checkpoint_interval_ms": 600_000})
    replicas = addresses(stamp)

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        stop = asyncio.Event()
        load = asyncio.ensure_future(pipelined_appends(client, replicas[0], extent_id, 8, stop,
                                                       deadline_s=1.0))
        history = await load
        assert history.acked and not history.failed
        for node in stamp.extent_nodes():
            stamp.kill(node.name)
        for node in stamp.extent_nodes():
            stamp.start(node.name)
        await client.close()
        client = AsyncExtentClient()
        length, sealed_on = await seal_extent(client, extent_id, replicas)
        assert len(sealed_on) == 3
        images = {await read_image(client, a, extent_id, length) for a in replicas}
        assert len(images) == 1
        check_extent_image(images.pop(), history, extent_id)
        await client.close()
    asyncio.run(scenario())


def test_flipped_byte_fails_one_replica_not_the_others(shared_stamp: LocalStamp) -> None:
    stamp = shared_stamp
    replicas = addresses(stamp)
    node = stamp.extent_nodes()[2]

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        locs = [(await client.append(replicas[0], extent_id, [bytes([i]) * 1000]))[0]
                for i in range(10)]
        await client.checkpoint(node.address)  # the bytes are now in the extent file
        data_file = Path(node.dir) / "extents" / f"{extent_file_stem(extent_id)}.dat"
        target = locs[5]
        with open(data_file, "r+b") as f:
            f.seek(target.offset + 8 + 123)
            byte = f.read(1)
            f.seek(target.offset + 8 + 123)
            f.write(bytes([byte[0] ^ 0x40]))
        with pytest.raises(ChecksumError):
            await client.read(node.address, target)
        assert await client.read(replicas[0], target) == bytes([5]) * 1000
        assert await client.read(replicas[1], target) == bytes([5]) * 1000
        for loc in locs[:5] + locs[6:]:  # the neighbours are untouched
            await client.read(node.address, loc)
        await client.close()
    asyncio.run(scenario())


def test_read_deadline_moves_to_another_replica(stamp_factory: StampFactory) -> None:
    stamp = stamp_factory(3)
    replicas = addresses(stamp)

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        [loc] = await client.append(replicas[0], extent_id, [b"deadline"])
        arm_remote(replicas[1], "en.read=delay:2000")
        with pytest.raises(DeadlineExceeded):
            await client.read(replicas[1], loc, timeout_s=0.2)
        assert await client.read(replicas[2], loc, timeout_s=0.2) == b"deadline"
        await client.close()
    asyncio.run(scenario())


def test_seal_during_load_keeps_every_acknowledged_append(stamp_factory: StampFactory) -> None:
    """The seal's probe fences: no append can be acknowledged past the length it reads, so a
    seal racing a pipelined load never truncates an acknowledged append."""
    stamp = stamp_factory(3)
    replicas = addresses(stamp)
    for address in replicas:  # widen the window between the probe and the seal
        arm_remote(address, "en.seal.start=delay:300")

    async def scenario() -> None:
        client = AsyncExtentClient()
        for _ in range(3):
            extent_id = await new_extent(client, replicas)
            stop = asyncio.Event()
            progress = AppendHistory()
            load = asyncio.ensure_future(pipelined_appends(client, replicas[0], extent_id, 16,
                                                           stop, deadline_s=10,
                                                           history=progress))
            await acknowledged(progress.acked, 100)
            length, sealed_on = await seal_extent(client, extent_id, replicas)
            history = await load
            assert len(sealed_on) == 3 and history.acked
            images = {await read_image(client, a, extent_id, length) for a in replicas}
            assert len(images) == 1
            check_extent_image(images.pop(), history, extent_id)
        await client.close()
    asyncio.run(scenario())


def test_appends_after_a_secondary_restarts_never_hang(stamp_factory: StampFactory) -> None:
    """The primary's forwarding stream to a SIGKILLed secondary is dead; once the secondary
    is back, appends to a new extent on the same nodes are replicated (the forwarder starts a
    new stream) — they neither hang nor fail. Repeated, since the break can land anywhere."""
    stamp = stamp_factory(3)
    replicas = addresses(stamp)
    secondary = stamp.extent_nodes()[1]

    async def scenario() -> None:
        client = AsyncExtentClient()
        for round_ in range(4):
            extent_id = await new_extent(client, replicas)
            await client.append(replicas[0], extent_id, [b"before %d" % round_])
            stamp.kill(secondary.name)
            with pytest.raises(ReplicationFailed):
                await asyncio.wait_for(client.append(replicas[0], extent_id, [b"x"]), 15)
            stamp.start(secondary.name)
            await client.wait_serving(secondary.address)
            fresh = await new_extent(client, replicas)
            [loc] = await asyncio.wait_for(client.append(replicas[0], fresh, [b"after"]), 15)
            assert await client.read(secondary.address, loc) == b"after"
        await client.close()
    asyncio.run(scenario())
