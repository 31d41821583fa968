"""The partition manager's gRPC face (common/proto/partition.proto, service
PartitionManager): maps requests onto `PartitionManager` (manager.py), its split and merge
(manager_ops.py), its history (history.py) and its balancer (balancer.py).

A request naming a partition that does not exist is the caller's mistake: InvalidArgument
(one line at the CLI), not NotFound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from common import rpc
from common.errors import InvalidArgument, NotFound
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.history import TRIGGER_OPERATOR
from partition_layer.manager import PartitionManager
from partition_layer.manager_ops import OpDone

T = TypeVar("T")


async def _named(call: Awaitable[T]) -> T:
    try:
        return await call
    except NotFound as exc:
        raise InvalidArgument(str(exc)) from exc


class ManagerServicer(pb_grpc.PartitionManagerServicer):
    def __init__(self, manager: PartitionManager) -> None:
        self.manager = manager

    @rpc.rpc_errors
    async def GetMap(self, request: pb.GetMapRequest, context: object) -> pb.PartitionMap:
        return await self.manager.get_map()

    @rpc.rpc_errors
    async def Heartbeat(self, request: pb.ServerLoad, context: object) -> pb.HeartbeatReply:
        return self.manager.heartbeat(request)

    @rpc.rpc_errors
    async def Move(self, request: pb.MoveRequest, context: object) -> pb.PartitionMap:
        if not request.server:
            raise InvalidArgument("move names the partition server to move to")
        return await _named(self.manager.move(request.partition_id, request.server))

    @rpc.rpc_errors
    async def Split(self, request: pb.SplitPartitionRequest, context: object
                    ) -> pb.PartitionOpReply:
        done = await _named(self.manager.ops.split(
            request.partition_id, request.key or None, request.trigger or TRIGGER_OPERATOR))
        return await self._reply(done)

    @rpc.rpc_errors
    async def Merge(self, request: pb.MergePartitionsRequest, context: object
                    ) -> pb.PartitionOpReply:
        done = await _named(self.manager.ops.merge(
            request.left_id, request.right_id, request.trigger or TRIGGER_OPERATOR))
        return await self._reply(done)

    async def _reply(self, done: OpDone) -> pb.PartitionOpReply:
        live = await self.manager.live()
        return pb.PartitionOpReply(done=done.entry.to_pb(), map=done.published.to_pb(live))

    @rpc.rpc_errors
    async def History(self, request: pb.HistoryRequest, context: object) -> pb.HistoryReply:
        entries = await asyncio.to_thread(self.manager.history.read)
        if request.limit:
            entries = entries[-request.limit:]
        return pb.HistoryReply(entries=[e.to_pb() for e in entries])

    @rpc.rpc_errors
    async def Balance(self, request: pb.BalanceRequest, context: object) -> pb.BalanceReply:
        return await self.manager.balancer.balance(dry_run=request.dry_run)

    @rpc.rpc_errors
    async def Status(self, request: pb.ManagerStatusRequest, context: object
                     ) -> pb.ManagerStatusReply:
        reply = self.manager.status()
        if not reply.leader:
            reply.leader_address = await asyncio.to_thread(self.manager.leader_address) or ""
        return reply
