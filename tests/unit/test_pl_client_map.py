"""The partition client fetches its map from every partition manager at once (issue 29): a
frozen manager first in the list costs nothing while another answers. Real gRPC servers in
this process stand for the managers."""

from __future__ import annotations

import asyncio

import pytest
from grpc import aio

from common import rpc
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from common.retry import AttemptTimer
from partition_layer import client as client_module
from partition_layer.client import AsyncPartitionClient
from partition_layer.partition_map import PartitionMap


class Manager(pb_grpc.PartitionManagerServicer):
    def __init__(self, silent: bool) -> None:
        self.silent = silent
        self.asked = 0

    async def GetMap(self, request, context):  # type: ignore[no-untyped-def]
        self.asked += 1
        if self.silent:  # frozen: never answers
            await asyncio.sleep(3600)
        return PartitionMap.bootstrap().to_pb({"ps-1": "127.0.0.1:1"})


async def serve(manager: Manager) -> tuple[aio.Server, str]:
    server = aio.server()
    pb_grpc.add_PartitionManagerServicer_to_server(manager, server)
    port = rpc.add_port(server, "127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def test_a_silent_first_manager_does_not_hold_up_the_map(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each manager gets an hour to answer: asked in turn, the silent first one would hold
    the fetch for that hour, and the test's deadline (a condition, not a measure) fails."""
    monkeypatch.setattr(client_module, "GET_MAP_TIMEOUT_S", 3600.0)

    async def scenario() -> None:
        frozen, answering = Manager(silent=True), Manager(silent=False)
        servers = [await serve(frozen), await serve(answering)]
        client = AsyncPartitionClient([address for _, address in servers])
        try:
            current, _ = await asyncio.wait_for(client.partition_map(), 30)
            assert current.version == 1 and len(current.partitions) == 1
            # The silent one may not even have seen its call yet: the fetch did not wait.
            assert answering.asked == 1
        finally:
            await client.close()
            for server, _ in servers:
                await server.stop(0)

    asyncio.run(scenario())


class MovingManager(pb_grpc.PartitionManagerServicer):
    """Its map names ps-1 for the one partition until `moved`, then ps-2."""

    def __init__(self, addresses: dict[str, str]) -> None:
        self.addresses = addresses
        self.moved = False

    async def GetMap(self, request, context):  # type: ignore[no-untyped-def]
        current = PartitionMap.bootstrap().assigned({1: "ps-1"})
        if self.moved:
            current = current.assigned({1: "ps-2"})
        return current.to_pb(self.addresses)


class Server(pb_grpc.PartitionServerServicer):
    """A partition server that answers every request (first_seq 7), or, `frozen`, none."""

    def __init__(self, frozen: bool) -> None:
        self.frozen = frozen
        self.asked = asyncio.Event()

    async def Call(self, request_iterator, context):  # type: ignore[no-untyped-def]
        async for batch in request_iterator:
            self.asked.set()
            if not self.frozen:
                yield pb.ResponseBatch(responses=[pb.Response(id=r.id, first_seq=7)
                                                  for r in batch.requests])


def test_an_attempt_waiting_on_a_frozen_server_follows_the_partition_when_it_moves() -> None:
    """The owner froze; the map moves its partition on while an append waits there: the
    append is sent to the new owner at once, not after its attempt's whole wait (here an
    hour: without the map watch the append is not answered within the test's deadline)."""
    async def scenario() -> int:
        frozen, alive = Server(frozen=True), Server(frozen=False)
        servers = []
        for servicer in (frozen, alive):
            server = aio.server()
            pb_grpc.add_PartitionServerServicer_to_server(servicer, server)
            port = rpc.add_port(server, "127.0.0.1:0")
            await server.start()
            servers.append((server, f"127.0.0.1:{port}"))
        manager = MovingManager({"ps-1": servers[0][1], "ps-2": servers[1][1]})
        pm_server = aio.server()
        pb_grpc.add_PartitionManagerServicer_to_server(manager, pm_server)
        pm_port = rpc.add_port(pm_server, "127.0.0.1:0")
        await pm_server.start()
        client = AsyncPartitionClient([f"127.0.0.1:{pm_port}"])
        client.attempts = AttemptTimer(first_s=3600.0, max_s=3600.0)
        try:
            append = asyncio.ensure_future(client.append("acct", "log", [b"r"]))
            await asyncio.wait_for(frozen.asked.wait(), 10)
            manager.moved = True
            return await asyncio.wait_for(append, 10)
        finally:
            await client.close()
            for server in [pm_server, *(s for s, _ in servers)]:
                await server.stop(0)

    assert asyncio.run(scenario()) == 7
