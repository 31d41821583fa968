"""Extent nodes through a power cut (issue 15 hole 5), on the lossy file system of
tools/lossyfs: what no fsync made durable, file bytes and directory entries both, is gone
after the cut. A large append is fdatasync'd straight into a new extent's data file and
acknowledged; the data file's name must have been durable by then, or after the cut the
journal names bytes in a file that is gone and the node refuses to start."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

import pytest

from common.ids import random_extent_id
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.seal import seal_extent
from tests.conftest import stamp_config
from tools.chaos.extents import AppendHistory, check_extent_image, read_image
from tools.local_stamp import LocalStamp
from tools.lossyfs.mount import LossyMount, available, power_cut

pytestmark = pytest.mark.slow

WHY_NOT = available()
# No checkpoint between the appends and the cut: only create's own directory sync can have
# made the new data file's name durable (a checkpoint syncs the directory too).
LIMITS = {"checkpoint_interval_ms": 3_600_000}
LARGE_BLOCK = 300_000  # past journal_bypass_bytes_min: written into the data file itself


@pytest.fixture
def lossy_extent_nodes(lossy_stamp_factory: Callable[..., tuple[LocalStamp, LossyMount]]
                       ) -> tuple[LocalStamp, LossyMount]:
    return lossy_stamp_factory(stamp_config(3, extent_node=LIMITS), extent_node=LIMITS)


@pytest.mark.skipif(WHY_NOT is not None, reason=f"no FUSE here: {WHY_NOT}")
def test_large_appends_to_new_extents_survive_a_power_cut(
        lossy_extent_nodes: tuple[LocalStamp, LossyMount]) -> None:
    stamp, mount = lossy_extent_nodes
    replicas = [n.address for n in stamp.extent_nodes()]
    histories: dict[int, AppendHistory] = {}

    async def write() -> None:
        client = AsyncExtentClient()
        for round_ in range(3):
            extent_id = random_extent_id()
            await client.create_replicated(extent_id, replicas)
            history = histories[extent_id] = AppendHistory()
            for i in range(2):
                block = bytes([round_ * 2 + i]) * LARGE_BLOCK
                [loc] = await client.append(replicas[0], extent_id, [block])
                history.acked.append((loc, block))
        await client.close()
    asyncio.run(write())

    report = power_cut(stamp.pids(), mount)
    assert int(report["entries_dropped"]) + int(report["bytes_dropped"]) > 0, report
    stamp.forget_dead()
    stamp.up()  # every extent node starts: none refuses its journal

    async def check() -> None:
        client = AsyncExtentClient()
        for extent_id, history in histories.items():
            length, sealed_on = await seal_extent(client, extent_id, replicas)
            assert sorted(sealed_on) == sorted(replicas)
            images = [await read_image(client, a, extent_id, length) for a in replicas]
            assert len({hashlib.sha256(i).digest() for i in images}) == 1
            check_extent_image(images[0], history, extent_id)
        await client.close()
    asyncio.run(check())
