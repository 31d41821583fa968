"""A primary restarted with an open extent whose secondaries hold bytes it lacks (hole 3 of
issue 15): it must not take appends there until the extent is sealed, or the seal at the
smallest length leaves replicas whose bytes differ (invariant 2)."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable

import pytest

from common.errors import ReplicationFailed, StampError
from common.ids import random_extent_id
from common.rpc import arm_remote
from stream_layer import framing
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.seal import seal_extent
from tests.checker import AppendHistory, check_extent_image, read_image
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

StampFactory = Callable[..., LocalStamp]
LARGE_BLOCK = 300_000  # past journal_bypass_bytes_min: journaled on the journal's thread


async def _until_commit_length(client: AsyncExtentClient, addresses: list[str],
                               extent_id: int, length: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        lengths = [(await client.commit_length(a, extent_id))[0] for a in addresses]
        if all(n == length for n in lengths):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"commit lengths {lengths}, waited for {length}")
        await asyncio.sleep(0.02)


def test_restarted_primary_takes_no_append_its_secondaries_would_contradict(
        stamp_factory: StampFactory) -> None:
    """The primary forwards a large append and is killed before its own journal writes it;
    it restarts at once and appending goes on. The seal must leave bitwise identical
    replicas holding every acknowledged append."""
    stamp = stamp_factory(3)
    replicas = [n.address for n in stamp.extent_nodes()]
    primary = stamp.extent_nodes()[0]

    async def scenario() -> None:
        client = AsyncExtentClient()
        extent_id = random_extent_id()
        await client.create_replicated(extent_id, replicas)
        history = AppendHistory()
        for i in range(10):
            block = b"before-%d" % i
            [loc] = await client.append(replicas[0], extent_id, [block])
            history.acked.append((loc, block))
        end = history.acked[-1][0].end
        # Held before its journal write, the primary has forwarded the append all the same.
        arm_remote(primary.address, "journal.before_write=delay:60000")
        lost = asyncio.ensure_future(client.append(replicas[0], extent_id,
                                                   [b"L" * LARGE_BLOCK]))
        await _until_commit_length(client, replicas[1:], extent_id,
                                   end + framing.frame_bytes(LARGE_BLOCK))
        stamp.kill(primary.name)
        with pytest.raises(StampError):
            await lost
        stamp.start(primary.name)
        await client.wait_serving(primary.address)
        assert (await client.commit_length(primary.address, extent_id))[0] == end

        # Keep appending: the restarted primary must refuse (its replica is not provably
        # current), never place an append at its shorter end.
        for i in range(5):
            block = b"after-%d" % i
            try:
                [loc] = await client.append(replicas[0], extent_id, [block])
                history.acked.append((loc, block))
            except ReplicationFailed:
                history.failed.append((block, "ReplicationFailed"))
        assert (await client.commit_length(primary.address, extent_id))[0] == end

        length, sealed_on = await seal_extent(client, extent_id, replicas)
        assert sorted(sealed_on) == sorted(replicas)
        digests = {a: hashlib.sha256(await read_image(client, a, extent_id, length)).hexdigest()
                   for a in replicas}
        assert len(set(digests.values())) == 1, f"sealed replicas differ: {digests}"
        check_extent_image(await read_image(client, replicas[1], extent_id, length), history,
                           extent_id)
        await client.close()
    asyncio.run(scenario())
