"""A primary opens its forward streams ahead of the first append (in one process, real store
files; the secondaries' addresses lead nowhere, which only delays the streams' failure)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from common.proto import extent_node_pb2 as pb
from stream_layer.extent_node.node import ExtentNode
from stream_layer.extent_node.server import ExtentNodeServicer
from tests.unit.test_store import LIMITS, open_store

PRIMARY = "127.0.0.1:1"
SECONDARIES = ["127.0.0.1:2", "127.0.0.1:3"]


def _forwarding(node: ExtentNode) -> set[str]:
    return {address for address, forwarder in node._forwarders.items()
            if forwarder._task is not None}


def test_create_extent_as_primary_opens_the_forward_streams(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = open_store(tmp_path)
        await store.start()
        node = ExtentNode(PRIMARY, store, LIMITS)
        servicer = ExtentNodeServicer(node, "en-1", "fd-1", "ud-1")
        try:
            await servicer.CreateExtent(pb.CreateExtentRequest(
                extent_id=7, replicas=[SECONDARIES[0], PRIMARY, SECONDARIES[1]]), None)
            assert _forwarding(node) == set()  # a secondary of extent 7 forwards nothing
            await servicer.CreateExtent(pb.CreateExtentRequest(
                extent_id=8, replicas=[PRIMARY, *SECONDARIES]), None)
            assert _forwarding(node) == set(SECONDARIES)
        finally:
            await node.close()
            await store.stop()
    asyncio.run(scenario())


def test_a_restarted_primary_reopens_the_forward_streams_of_its_open_extents(
        tmp_path: Path) -> None:
    async def before_the_crash() -> None:
        store = open_store(tmp_path)
        await store.start()
        await store.create(8, [PRIMARY, *SECONDARIES])
        await store.create(9, [PRIMARY, "127.0.0.1:4", "127.0.0.1:5"])
        await store.seal(9, 0, lambda replica, target: asyncio.sleep(0))
        await store.create(10, [PRIMARY, "127.0.0.1:6", "127.0.0.1:7"])
        await store.fence(10)  # fenced for a seal that the crash interrupts
        await store.stop()

    async def after_the_restart() -> None:
        store = open_store(tmp_path)
        await store.start()
        node = ExtentNode(PRIMARY, store, LIMITS)
        try:
            node.warm_forwarders()
            # Not those of the sealed extent, nor of the fenced one: neither takes appends.
            assert _forwarding(node) == set(SECONDARIES)
        finally:
            await node.close()
            await store.stop()
    asyncio.run(before_the_crash())
    asyncio.run(after_the_restart())
