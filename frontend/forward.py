"""How a front end reaches the partition layer (§6): the partition client, routing by its
cached partition map (refreshed on NotOwner, then retried), plus what a front end needs
beyond it:

- `route(key)`: the partition server (name and address) the cached map names for a key,
  without awaiting — the hot path forwards on that server's session directly, and the
  throttle needs the server's name;
- every session reports the ServerPressure its server sends to `on_pressure` (throttling);
- `subscribe_replies`: a log's SubscribeReplies as the partition servers send them (each
  record with its CRC32C, for the SDK to verify end to end), across partition moves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import grpc

from common import rpc
from common.config import PartitionLimits
from common.errors import DeadlineExceeded, NotOwner, Unavailable
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from partition_layer.client import (
    RETRY_BACKOFF_MIN_S,
    SUBSCRIBE_ATTEMPT_S,
    AsyncPartitionClient,
)
from partition_layer.requests import route_key
from partition_layer.session import CallSession, PressureHook


class ForwardingClient(AsyncPartitionClient):
    def __init__(self, pm_addresses: Sequence[str], limits: PartitionLimits,
                 on_pressure: PressureHook | None = None) -> None:
        super().__init__(pm_addresses, limits)
        self._on_pressure = on_pressure

    def _session(self, address: str) -> CallSession:
        session = self._sessions.get(address)
        if session is None:
            session = CallSession(
                address, lambda: pb_grpc.PartitionServerStub(self._channels.get(address)),
                self._on_pressure)
            self._sessions[address] = session
        return session

    def route(self, key: bytes) -> tuple[str, str] | None:
        """(server name, address) the cached map names for `key`; None if there is no map
        yet or that partition has no live server (the caller takes the slow path)."""
        if self.map is None:
            return None
        server = self.map.lookup(key).server
        address = self.addresses.get(server)
        return None if address is None else (server, address)

    def session(self, address: str) -> CallSession:
        return self._session(address)

    def map_version(self) -> int:
        return self.map.version if self.map is not None else 0

    async def subscribe_replies(self, request: pb.SubscribeRequest
                                ) -> AsyncIterator[pb.SubscribeReply]:
        """As AsyncPartitionClient.subscribe, but whole replies, records untouched."""
        next_seq = request.from_seq
        key = route_key(request.account, request.pname)
        timeout_s = self.limits.client_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                address = await self._address_for(key)
                stub = pb_grpc.PartitionServerStub(self._channels.get(address))
                stream = stub.Subscribe(pb.SubscribeRequest(
                    account=request.account, pname=request.pname, from_seq=next_seq),
                    timeout=SUBSCRIBE_ATTEMPT_S)
                try:
                    async for reply in stream:
                        if reply.records and reply.records[0].seq < next_seq:
                            # A retry after a move may start earlier than asked: skip those.
                            fresh = [r for r in reply.records if r.seq >= next_seq]
                            del reply.records[:]
                            reply.records.extend(fresh)
                        if reply.records:
                            next_seq = reply.records[-1].seq + 1
                            yield reply
                        deadline = time.monotonic() + timeout_s
                    return
                except grpc.RpcError as exc:
                    raise rpc.from_rpc_error(exc) from None
                finally:
                    stream.cancel()
            except (NotOwner, Unavailable, DeadlineExceeded):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(RETRY_BACKOFF_MIN_S)
                await self.refresh_map()
