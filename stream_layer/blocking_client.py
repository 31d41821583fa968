"""The blocking, thread-safe facade over the stream client (stream_layer/client.py): the same
API on a private event loop thread, for callers without an event loop of their own.

    from stream_layer.blocking_client import StreamClient
    sc = StreamClient.from_stamp(data_dir)
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from common.config import ExtentNodeLimits, StreamManagerLimits, load_config
from common.loop_thread import LoopThread
from common.proto import stream_manager_pb2 as sm_pb
from common.stamp_file import addresses_of, read_stamp
from stream_layer.client import AsyncStream, AsyncStreamClient
from stream_layer.framing import Location

T = TypeVar("T")


class Stream:
    """Blocking facade over AsyncStream; safe to use from many threads at once."""

    def __init__(self, owner: StreamClient, stream: AsyncStream) -> None:
        self._owner = owner
        self.aio = stream
        self.name = stream.name

    def append(self, blocks: Sequence[bytes]) -> list[Location]:
        return self._owner.run(self.aio.append(blocks))

    def read(self, location: Location) -> bytes:
        return self._owner.run(self.aio.read(location))

    def blocks(self, start: Location | None = None) -> Iterator[tuple[Location, bytes]]:
        iterator = self.aio.blocks(start).__aiter__()
        while True:
            try:
                yield self._owner.run(iterator.__anext__())
            except StopAsyncIteration:
                return

    def check_commit_length(self) -> int:
        return self._owner.run(self.aio.check_commit_length())

    def seal_last(self) -> int:
        return self._owner.run(self.aio.seal_last())

    @property
    def extents(self) -> list[sm_pb.ExtentInfo]:
        return self.aio.extents


class StreamClient:
    """Blocking, thread-safe stream client (a private event loop thread)."""

    def __init__(self, sm_addresses: Sequence[str], extent_limits: ExtentNodeLimits | None = None,
                 sm_limits: StreamManagerLimits | None = None) -> None:
        self._loop = LoopThread("stream-client")
        self.aio: AsyncStreamClient = self.run(_make(sm_addresses, extent_limits, sm_limits))

    @classmethod
    def from_stamp(cls, data_dir: str) -> StreamClient:
        config = load_config(read_stamp(data_dir).get("config"))
        return cls(addresses_of(data_dir, "stream-manager"), config.extent_node,
                   config.stream_manager)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    def create_stream(self, name: str) -> Stream:
        return Stream(self, self.run(self.aio.create_stream(name)))

    def open_stream(self, name: str) -> Stream:
        return Stream(self, self.run(self.aio.open_stream(name)))

    def fence_stream(self, name: str, epoch: int) -> Stream:
        return Stream(self, self.run(self.aio.fence_stream(name, epoch)))

    def delete_stream(self, name: str) -> None:
        self.run(self.aio.delete_stream(name))

    def list_streams(self, prefix: str = "") -> list[sm_pb.StreamInfo]:
        return self.run(self.aio.list_streams(prefix))

    def close(self) -> None:
        if not self._loop.closed:
            self.run(self.aio.close())
            self._loop.close()

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make(sm_addresses: Sequence[str], extent_limits: ExtentNodeLimits | None,
                sm_limits: StreamManagerLimits | None) -> AsyncStreamClient:
    return AsyncStreamClient(sm_addresses, extent_limits, sm_limits)
