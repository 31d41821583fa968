"""The partition client fetches its map from every partition manager at once (issue 29): a
frozen manager first in the list costs nothing while another answers. Real gRPC servers in
this process stand for the managers."""

from __future__ import annotations

import asyncio
import time

from grpc import aio

from common import rpc
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.client import GET_MAP_TIMEOUT_S, AsyncPartitionClient
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


def test_a_silent_first_manager_does_not_hold_up_the_map() -> None:
    async def scenario() -> float:
        frozen, answering = Manager(silent=True), Manager(silent=False)
        servers = [await serve(frozen), await serve(answering)]
        client = AsyncPartitionClient([address for _, address in servers])
        try:
            started = time.monotonic()
            current, _ = await client.partition_map()
            took = time.monotonic() - started
            assert current.version == 1 and len(current.partitions) == 1
            assert frozen.asked == 1 and answering.asked == 1
            return took
        finally:
            await client.close()
            for server, _ in servers:
                await server.stop(0)

    took = asyncio.run(scenario())
    # Asked in turn, the frozen manager held the fetch for its whole timeout first.
    assert took < GET_MAP_TIMEOUT_S / 2, f"the map took {took:.2f} s"
