"""A primary opens its forward streams ahead of the first append (in one process, real store
files; the secondaries' addresses lead nowhere, which only delays the streams' failure)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common.errors import ReplicationFailed
from common.proto import extent_node_pb2 as pb
from stream_layer import framing
from stream_layer.extent_node.node import ExtentNode
from stream_layer.extent_node.replica_state import Write
from stream_layer.extent_node.server import ExtentNodeServicer
from tests.support.extent_store import LIMITS, open_store

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


def test_a_restarted_primary_takes_no_append_and_warms_no_forward_stream(
        tmp_path: Path) -> None:
    """Its open replicas come back UNPROVEN (issue 15 hole 3): no append as the primary, so no
    forward stream to open; as a secondary it still takes a forwarded write at its end."""
    async def before_the_crash() -> None:
        store = open_store(tmp_path)
        await store.start()
        await store.create(8, [PRIMARY, *SECONDARIES])
        await store.create(9, [SECONDARIES[0], PRIMARY, SECONDARIES[1]])
        await store.stop()

    async def after_the_restart() -> None:
        store = open_store(tmp_path)
        await store.start()
        node = ExtentNode(PRIMARY, store, LIMITS)
        try:
            with pytest.raises(ReplicationFailed, match="restarted"):
                node.start_appends(8, [framing.frame(b"x")])
            assert _forwarding(node) == set()
            await store.accept_append(9, 0, framing.frame(b"forwarded"),
                                      write=Write.FORWARD)
            assert store.commit_length(9) == (len(framing.frame(b"forwarded")), False)
        finally:
            await node.close()
            await store.stop()
    asyncio.run(before_the_crash())
    asyncio.run(after_the_restart())
