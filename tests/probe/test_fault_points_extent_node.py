"""The extent node's fault points that no other test arms, each armed to prove what it
guards (issue 15): a replica that crashes at any step of the append path loses nothing that
was acknowledged and the seal leaves every replica bitwise equal; a checkpoint that dies
before dropping the journal replays to the same bytes; a seal or a sync from peers that dies
half way is simply done again on restart.

Real processes on loopback; each crash is the process SIGKILLing itself at the point, and
the test checks the node's log to be sure it died there and not of something else."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from common.process import LOG_FILE
from common.rpc import arm_remote
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.seal import seal_extent
from tests.support.extent_nodes import addresses, new_extent, rejoin_sealed
from tests.support.waiting import wait_for
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
DEATH_TIMEOUT_S = 30.0


async def crashed_at(stamp: LocalStamp, name: str, point: str) -> None:
    """Wait until `name` has killed itself at `point` (its log says so), then reap it."""
    record = stamp.record(name)
    async def dead() -> bool:
        return not stamp.alive(name)
    await wait_for(dead, DEATH_TIMEOUT_S, f"{name} to crash at {point}")
    stamp.kill(name)  # reaps it
    log_text = (Path(record.dir) / LOG_FILE).read_text(errors="replace")
    assert f"fault point {point}: crashing" in log_text, f"{name} died of something else"


@pytest.mark.parametrize(("point", "victim_index"), [
    ("en.forward.after_send", 0),      # the primary dies with a batch on the wire
    ("en.primary.before_ack", 0),      # ... with appends durable everywhere, not yet acked
    ("journal.after_fsync", 0),        # ... its journal synced, the replicas' acks pending
    ("en.secondary.before_ack", 1),    # a secondary dies holding durable, unacked entries
    ("journal.before_fsync", 2),       # a secondary dies with a journal batch written, unsynced
])
def test_crash_on_the_append_path_loses_nothing_acknowledged(
        stamp_factory: StampFactory, point: str, victim_index: int) -> None:
    """Under a pipelined load one replica crashes at `point`. The seal over the survivors
    holds every acknowledged append at its location, the survivors are bitwise equal, and
    the crashed replica, restarted and sealed, is brought to the very same bytes."""
    stamp = stamp_factory(3)
    replicas = addresses(stamp)
    victim = stamp.extent_nodes()[victim_index]

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        stop = asyncio.Event()
        progress = AppendHistory()
        load = asyncio.ensure_future(pipelined_appends(client, replicas[0], extent_id, 16, stop,
                                                       deadline_s=60, history=progress))
        await acknowledged(progress.acked, 100)
        # Not at the first hit: the crash lands mid-pipeline, with appends in every stage.
        arm_remote(victim.address, f"{point}=crash,after=20")
        history = await load  # every appender stops at its first error
        await crashed_at(stamp, victim.name, point)
        assert history.acked and history.failed, "the crash did not interrupt the load"

        survivors = [a for a in replicas if a != victim.address]
        length, sealed_on = await seal_extent(client, extent_id, replicas, timeout_s=1.0)
        assert sorted(sealed_on) == sorted(survivors)
        image = await read_image(client, survivors[0], extent_id, length)
        assert await read_image(client, survivors[1], extent_id, length) == image
        check_extent_image(image, history, extent_id)

        stamp.start(victim.name)
        await rejoin_sealed(client, victim.address, extent_id, length, sealed_on, image)
        await client.close()
    asyncio.run(scenario())


def test_checkpoint_crashed_before_dropping_the_journal_replays_to_the_same_bytes(
        stamp_factory: StampFactory) -> None:
    """A checkpoint has written and fsynced the extent files and their commit points, then
    the node dies before the journal segments go (en.checkpoint.before_drop). On restart the
    journal is replayed over files that already hold its bytes: nothing is lost or doubled,
    the next checkpoint completes, and the replica seals bitwise equal to the others."""
    stamp = stamp_factory(3, extent_node={"checkpoint_interval_ms": 600_000})
    replicas = addresses(stamp)
    node = stamp.extent_nodes()[1]
    point = "en.checkpoint.before_drop"

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        acked = [((await client.append(replicas[0], extent_id, [b"rec-%d|" % i * 40]))[0],
                  b"rec-%d|" % i * 40) for i in range(40)]
        end = acked[-1][0].end
        arm_remote(node.address, f"{point}=crash")
        with pytest.raises(Exception):  # noqa: B017 - whatever the dying node's call raises
            await client.checkpoint(node.address)
        await crashed_at(stamp, node.name, point)

        for round_ in range(2):  # replayed once over the crashed checkpoint, once after a clean one
            stamp.start(node.name)
            await client.wait_serving(node.address)
            assert (await client.commit_length(node.address, extent_id))[0] == end, round_
            for loc, data in acked:
                assert await client.read(node.address, loc) == data
            await client.checkpoint(node.address)
            stamp.kill(node.name)
        stamp.start(node.name)
        await client.wait_serving(node.address)
        length, sealed_on = await seal_extent(client, extent_id, replicas)
        assert length == end and len(sealed_on) == 3
        images = {await read_image(client, a, extent_id, length) for a in replicas}
        assert len(images) == 1
        check_extent_image(images.pop(), AppendHistory(acked=acked), extent_id)
        await client.close()
    asyncio.run(scenario())


def test_seal_crashed_before_its_record_is_redone_at_the_same_length(
        stamp_factory: StampFactory) -> None:
    """A replica dies after agreeing to the seal's length but before recording it
    (en.seal.before_record). The other two are sealed; the crashed one restarts, is sealed at
    the length decided before its crash, and holds the same bytes as the others."""
    stamp = stamp_factory(3)
    replicas = addresses(stamp)
    victim = stamp.extent_nodes()[2]
    point = "en.seal.before_record"

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        history = await pipelined_appends(client, replicas[0], extent_id, 8, asyncio.Event(),
                                          deadline_s=1.0)
        assert history.acked and not history.failed
        arm_remote(victim.address, f"{point}=crash")
        length, sealed_on = await seal_extent(client, extent_id, replicas)
        await crashed_at(stamp, victim.name, point)
        assert sorted(sealed_on) == sorted(replicas[:2])
        image = await read_image(client, replicas[0], extent_id, length)
        assert await read_image(client, replicas[1], extent_id, length) == image
        check_extent_image(image, history, extent_id)

        stamp.start(victim.name)
        await rejoin_sealed(client, victim.address, extent_id, length, sealed_on, image)
        await client.close()
    asyncio.run(scenario())


def test_sync_from_peers_crashed_half_way_completes_after_restart(
        stamp_factory: StampFactory) -> None:
    """A secondary falls behind (forwarding to it is held back) and dies; the other two are
    sealed past its end. Restarted, it is sealed and must fetch the missing bytes from a peer;
    it dies after the first chunk it took (en.sync.after_chunk). Restarted again, the seal
    completes from where the durable bytes end, and its replica equals the others."""
    stamp = stamp_factory(3)
    replicas = addresses(stamp)
    laggard = stamp.extent_nodes()[2]
    point = "en.sync.after_chunk"

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = await new_extent(client, replicas)
        first = [((await client.append(replicas[0], extent_id, [b"acked-%d" % i]))[0],
                  b"acked-%d" % i) for i in range(20)]
        arm_remote(replicas[0], f"en.forward.before_send@{laggard.address}=delay:60000")
        load = asyncio.ensure_future(pipelined_appends(client, replicas[0], extent_id, 16,
                                                       asyncio.Event(), deadline_s=60,
                                                       block_bytes=8_000))
        behind = (await client.commit_length(laggard.address, extent_id))[0]
        async def ahead() -> bool:  # the others are well ahead
            lengths = [(await client.commit_length(a, extent_id))[0] for a in replicas[:2]]
            return min(lengths) >= behind + 100_000
        await wait_for(ahead, 30, "the primary to run ahead")
        stamp.kill(laggard.name)
        history = await load
        history.acked[:0] = first
        length, sealed_on = await seal_extent(client, extent_id, replicas, timeout_s=1.0)
        assert sorted(sealed_on) == sorted(replicas[:2]) and length > behind + 100_000
        image = await read_image(client, replicas[0], extent_id, length)
        check_extent_image(image, history, extent_id)

        stamp.start(laggard.name, env={"STAMP_FAULTS": f"{point}=crash"})
        await client.wait_serving(laggard.address)
        with pytest.raises(Exception):  # noqa: B017 - whatever the dying node's call raises
            await client.seal(laggard.address, extent_id, length, sealed_on)
        await crashed_at(stamp, laggard.name, point)
        stamp.start(laggard.name)
        await rejoin_sealed(client, laggard.address, extent_id, length, sealed_on, image)
        await client.close()
    asyncio.run(scenario())
