"""A stamp process's calls to its location's servers (issue 30): `Resolve` (where an account
lives: partition_layer/geo_link.py, frontend/blob_forward.py) and `ReportSync` (a partition
manager's last sync times: partition_layer/geo_report.py).

Contract: each call goes to the location's servers in turn, starting after the last one
that failed, each for at most its timeout, until one answers; NotFound and InvalidArgument
are the location's answer and raised at once; otherwise the last server's error is raised.
Channels are kept per address until `close`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from common import rpc
from common.errors import InvalidArgument, NotFound, StampError, Unavailable
from common.proto import location_internal_pb2 as internal_pb
from common.proto import location_internal_pb2_grpc as internal_grpc
from common.proto import location_v1_pb2 as location_pb
from common.proto import location_v1_pb2_grpc as location_grpc

MESSAGE_BYTES_MAX = 1024 * 1024
FRESH_KEY = "stamp-resolve-fresh"  # request metadata: read through the location's cache
T = TypeVar("T")


class LocationClient:
    """Calls to a location's servers (module contract)."""

    def __init__(self) -> None:
        self._channels: dict[str, Any] = {}
        self._next = 0

    async def resolve(self, servers: Sequence[str], account: str, timeout_s: float,
                      fresh: bool = False) -> location_pb.ResolveReply:
        """Where `account` lives; `fresh`: read through the location's cache."""
        request = location_pb.ResolveRequest(account=account)
        metadata = ((FRESH_KEY, "1"),) if fresh else None
        return await self._first(servers, lambda channel: location_grpc.LocationStub(
            channel).Resolve(request, timeout=timeout_s, metadata=metadata))

    async def report_sync(self, servers: Sequence[str], report: internal_pb.SyncReport,
                          timeout_s: float) -> None:
        await self._first(servers, lambda channel: internal_grpc.LocationInternalStub(
            channel).ReportSync(report, timeout=timeout_s))

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def _first(self, servers: Sequence[str], call: Callable[[Any], Awaitable[T]]) -> T:
        error: StampError = Unavailable("the location has no server")
        for _ in servers:
            address = servers[self._next % len(servers)]
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = rpc.aio_channel(address, MESSAGE_BYTES_MAX)
            try:
                return await rpc.call(call(channel))
            except (NotFound, InvalidArgument):
                raise
            except StampError as exc:
                error = exc
                self._next += 1
        raise error
