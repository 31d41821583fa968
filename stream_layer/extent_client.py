"""Talking to extent nodes: appends, reads, seals and admin, for the stream client, tools and
tests.

`AsyncExtentClient` is the asyncio core. Appends to one primary share one AppendStream; what
callers queue while the stream is busy goes out as one message, so many concurrent appenders
cost few messages. Every block carries its CRC32C from here to the disk, and every read is
verified here again (end to end, §5). Every read carries a deadline, and so does every
append: a primary that has not acknowledged one within the client's per-replica timeout
(adapted to the latencies it sees, replica_timeout.py; at most `append_deadline_ms`) has
failed it with DeadlineExceeded, and the stream seals the extent away (§2: a frozen primary
is a failed one).

`ExtentClient` is the blocking, thread-safe facade: it runs the async core on a private event
loop thread.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import grpc

from common import rpc, tracing
from common.checksums import crc32c, verify
from common.config import ExtentNodeLimits
from common.errors import (
    ChecksumError,
    DeadlineExceeded,
    ReplicationFailed,
    StampError,
    Unavailable,
)
from common.loop_thread import LoopThread
from common.proto import extent_node_pb2 as pb
from common.proto import extent_node_pb2_grpc as pb_grpc
from stream_layer import framing
from stream_layer.framing import Location
from stream_layer.replica_timeout import AdaptiveTimeout

T = TypeVar("T")

# The append watchdog looks this many times per shortest timeout.
WATCH_TICKS_PER_TIMEOUT = 4


def append_timeout(limits: ExtentNodeLimits) -> AdaptiveTimeout:
    """The client's timeout on a primary's acknowledgement."""
    return AdaptiveTimeout(limits.append_timeout_min_ms / 1000, limits.append_deadline_ms / 1000,
                           limits.replica_timeout_multiple, limits.replica_timeout_bytes_per_s)


def locations(extent_id: int, offset: int, blocks: Sequence[bytes]) -> list[Location]:
    """Where each block of an append acknowledged at `offset` lives."""
    out = []
    for block in blocks:
        size = framing.frame_bytes(len(block))
        out.append(Location(extent_id, offset, size))
        offset += size
    return out


class _QueuedAppend(NamedTuple):
    request_id: int
    extent_id: int
    blocks: Sequence[bytes]
    crcs: Sequence[int]
    nbytes: int
    traceparent: str  # the caller's span ("stream.append"), tracing on (common/tracing.py)


class _AppendSession:
    """One AppendStream to one primary, multiplexing every caller's appends."""

    def __init__(self, address: str, stub: Callable[[], pb_grpc.ExtentNodeStub],
                 limits: ExtentNodeLimits, timeout: AdaptiveTimeout) -> None:
        self.address = address
        self._stub = stub  # asked anew for each stream: the channel may have been replaced
        self._limits = limits
        self._timeout = timeout  # shared by the client's sessions: one baseline for all
        self._ids = itertools.count(1)
        # Appends not yet sent, as plain tuples: the protobuf request is built once, straight
        # into the batch message (copying a built request would copy its blocks again).
        self._queue: deque[_QueuedAppend] = deque()
        self._waiting: dict[int, asyncio.Future[pb.AppendAck]] = {}
        self._extent_of: dict[int, int] = {}  # request id -> extent id, while it waits
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # request id -> (when queued, bytes), in the order queued: the oldest come first.
        self._sent_at: dict[int, tuple[float, int]] = {}
        self._watchdog: asyncio.Task[None] | None = None
        self._rewarm = rpc.Rewarm(self.warm)

    async def append(self, extent_id: int, blocks: Sequence[bytes],
                     crcs: Sequence[int] | None = None) -> pb.AppendAck:
        request_id = next(self._ids)
        crcs = crcs if crcs is not None else [crc32c(b) for b in blocks]
        if len(crcs) != len(blocks):
            raise ValueError("one crc per block")
        future: asyncio.Future[pb.AppendAck] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        self._extent_of[request_id] = extent_id
        self._queue.append(_QueuedAppend(request_id, extent_id, blocks, crcs,
                                         sum(len(b) + 16 for b in blocks) + 32,
                                         tracing.traceparent() if tracing.enabled else ""))
        self._wake.set()
        self.warm()
        sent = time.monotonic()
        self._sent_at[request_id] = (sent, self._queue[-1].nbytes)
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._expire())
        try:
            ack = await future
        finally:
            self._sent_at.pop(request_id, None)
            self._extent_of.pop(request_id, None)
        if ack.error_kind:
            error = rpc.error_from_name(ack.error_kind, ack.error_message)
            if isinstance(error, ReplicationFailed):
                error.late_replica = ack.late_replica
            raise error
        self._timeout.observe(self.address, time.monotonic() - sent)
        return ack

    def abandon(self, extent_id: int, error: StampError) -> int:
        """Fail every append to `extent_id` not yet answered with `error`, at once: the
        extent is being sealed, so none can be acknowledged any more (or, if one still is,
        its re-sent copy is a duplicate, which the stream layer allows: at-least-once).
        Those not yet sent are dropped from the queue. Returns how many were failed."""
        doomed = [r for r, e in self._extent_of.items() if e == extent_id]
        if not doomed:
            return 0
        self._queue = deque(q for q in self._queue if q.extent_id != extent_id)
        for request_id in doomed:
            future = self._waiting.pop(request_id, None)
            if future is not None and not future.done():
                future.set_exception(error)
        return len(doomed)

    def warm(self) -> None:
        """Open the append stream now if none is open."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _expire(self) -> None:
        """The per-append timeout, so that no failure anywhere down the chain (a frozen or
        slow primary above all) can hold a caller past it: an append that outlives it is
        ambiguous, like one on a broken stream, and the stream seals the extent away. One
        watchdog per session (not a timer per append: this is the hot path)."""
        tick_s = self._timeout.min_s / WATCH_TICKS_PER_TIMEOUT
        while self._sent_at:
            await asyncio.sleep(tick_s)
            now = time.monotonic()
            # Failing a future runs its caller later (and only then leaves _sent_at): no
            # copy of the dict, which may hold thousands, on every tick.
            for request_id, (sent, nbytes) in self._sent_at.items():
                if now - sent <= self._timeout.min_s:
                    break  # queued in order: none after this one can be late yet
                timeout_s = self._timeout.timeout_s(nbytes)
                if now - sent <= timeout_s:
                    continue
                future = self._waiting.pop(request_id, None)
                if future is not None and not future.done():
                    future.set_exception(DeadlineExceeded(
                        f"append to {self.address} unanswered after {(now - sent) * 1000:.0f}"
                        f" ms (timeout {timeout_s * 1000:.0f} ms): a slow primary is a failed "
                        f"one"))
        self._watchdog = None

    async def _run(self) -> None:
        call = self._stub().AppendStream()
        reader = asyncio.get_running_loop().create_task(self._read(call))
        error: StampError = Unavailable(f"append stream to {self.address} ended")
        sent_any = cancelled = False
        try:
            # An empty first message sets the stream up end to end before an append needs it.
            await call.write(pb.AppendBatch())
            while not reader.done():
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    batch = pb.AppendBatch()
                    size = 0
                    # Sizes from the blocks: ByteSize() would serialize the message again.
                    while self._queue and (size == 0 or size + self._queue[0].nbytes
                                           <= self._limits.forward_batch_bytes_max):
                        queued = self._queue.popleft()
                        size += queued.nbytes
                        request = batch.appends.add(request_id=queued.request_id,
                                                    extent_id=queued.extent_id)
                        for data, crc in zip(queued.blocks, queued.crcs, strict=True):
                            request.blocks.add(data=data, crc=crc)  # one copy, in place
                        if queued.traceparent:
                            request.traceparent = queued.traceparent
                    sent_any = True
                    await call.write(batch)
        except asyncio.CancelledError:
            error, cancelled = Unavailable("client closed"), True
            raise
        except Exception as exc:  # whatever gRPC raises for a dead stream
            error = rpc.from_rpc_error(exc) if isinstance(exc, grpc.RpcError) else Unavailable(
                f"append stream to {self.address} failed: {exc!r}")
        finally:
            call.cancel()
            reader.cancel()
            self._task = None
            # Appends written to the dead stream may or may not have happened: they fail
            # (the caller decides). Appends never sent go out on a fresh stream — unless this
            # stream carried nothing (the peer is unreachable) or the client is closing.
            retry = sent_any and not cancelled
            unsent = {request.request_id for request in self._queue} if retry else set()
            if not retry:
                self._queue.clear()
            for request_id in [r for r in self._waiting if r not in unsent]:
                future = self._waiting.pop(request_id)
                if not future.done():
                    future.set_exception(type(error)(f"append to {self.address} lost: "
                                                     f"{error}"))
            if self._queue:
                self._task = asyncio.get_running_loop().create_task(self._run())
            elif not cancelled:
                self._rewarm.broken()

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        try:
            async for acks in call:
                self._rewarm.answered()
                for ack in acks.acks:
                    future = self._waiting.pop(ack.request_id, None)
                    if future is not None and not future.done():
                        future.set_result(ack)
        except grpc.RpcError:
            pass
        finally:
            self._wake.set()

    async def close(self) -> None:
        self._rewarm.close()
        for task in (self._task, self._watchdog):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


class AsyncExtentClient:
    def __init__(self, limits: ExtentNodeLimits | None = None) -> None:
        self.limits = limits or ExtentNodeLimits()
        self._channels = rpc.ChannelCache(self.limits.rpc_message_bytes_max)
        self._sessions: dict[str, _AppendSession] = {}
        self.append_timeout = append_timeout(self.limits)

    def stub(self, address: str) -> pb_grpc.ExtentNodeStub:
        return pb_grpc.ExtentNodeStub(self._channels.get(address))

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()
        await self._channels.close()
        self._sessions.clear()

    # ---- data path ------------------------------------------------------------------------

    def _session(self, primary: str) -> _AppendSession:
        session = self._sessions.get(primary)
        if session is None:
            session = _AppendSession(primary, lambda: self.stub(primary), self.limits,
                                     self.append_timeout)
            self._sessions[primary] = session
        return session

    async def append(self, primary: str, extent_id: int, blocks: Sequence[bytes],
                     crcs: Sequence[int] | None = None) -> list[Location]:
        """Append blocks atomically at the extent's primary; one Location per block."""
        ack = await self._session(primary).append(extent_id, blocks, crcs)
        return locations(extent_id, ack.offset, blocks)

    def abandon(self, primary: str, extent_id: int, error: StampError) -> int:
        """Fail at once every append to `extent_id` at `primary` still waiting for its
        answer (`_AppendSession.abandon`): the caller is sealing the extent and re-sends
        them elsewhere, so they need not wait out their timeouts. How many were failed."""
        session = self._sessions.get(primary)
        return 0 if session is None else session.abandon(extent_id, error)

    def warm(self, address: str) -> None:
        """Connect to `address` and open its append stream now, in the background, so that
        the first append to a new extent there does not pay for either."""
        self._session(address).warm()

    async def read_frames(self, address: str, extent_id: int, offset: int, length: int,
                          timeout_s: float | None = None) -> bytes:
        """Whole frames from one replica, verified here (end to end)."""
        reply = await rpc.call(self.stub(address).Read(
            pb.ReadRequest(extent_id=extent_id, offset=offset, length=length),
            timeout=timeout_s or self.limits.read_deadline_ms / 1000.0))
        framing.verify_frames(reply.frames, f"read of extent {extent_id} at {offset} from "
                              f"{address}")
        return reply.frames

    async def read(self, address: str, location: Location,
                   timeout_s: float | None = None) -> bytes:
        """The block at `location`, from one replica."""
        frames = await self.read_frames(address, location.extent_id, location.offset,
                                        location.length, timeout_s)
        blocks = framing.payloads(frames, f"extent {location.extent_id} at {location.offset}")
        if len(blocks) != 1 or len(frames) != location.length:
            raise Unavailable(f"{address} returned {len(frames)} bytes for a "
                              f"{location.length}-byte block at {location}")
        return blocks[0]

    # ---- erasure-coded fragments ----------------------------------------------------------

    async def write_fragment(self, address: str, extent_id: int, index: int, data: bytes,
                             timeout_s: float = 600.0) -> int:
        """Store one whole fragment on `address` (in chunks); the node checks its CRC32C and
        puts it in place durably and atomically. Returns the CRC32C."""
        crc = crc32c(data)
        chunk = self.limits.fragment_chunk_bytes

        def chunks() -> Iterator[pb.FragmentChunk]:
            view = memoryview(data)
            for offset in range(0, max(len(data), 1), chunk):
                yield pb.FragmentChunk(extent_id=extent_id, index=index, length=len(data),
                                       crc=crc, offset=offset,
                                       data=bytes(view[offset:offset + chunk]))
        reply = await rpc.call(self.stub(address).WriteFragment(chunks(), timeout=timeout_s))
        if reply.crc != crc or reply.length != len(data):
            raise ChecksumError(f"{address} stored fragment {index} of extent {extent_id} "
                                f"as {reply.length} bytes, crc32c {reply.crc:#010x}")
        return crc

    async def read_fragment(self, address: str, extent_id: int, index: int, offset: int,
                            length: int, timeout_s: float | None = None) -> bytes:
        """Fragment bytes [offset, offset+length) from `address`, checksummed on the wire."""
        reply = await rpc.call(self.stub(address).ReadFragment(
            pb.ReadFragmentRequest(extent_id=extent_id, index=index, offset=offset,
                                   length=length),
            timeout=timeout_s or self.limits.read_deadline_ms / 1000.0))
        verify(reply.data, reply.crc, f"fragment {index} of extent {extent_id} from {address}")
        if len(reply.data) != length:
            raise Unavailable(f"{address} returned {len(reply.data)} of {length} bytes of "
                              f"fragment {index} of extent {extent_id}")
        return reply.data

    async def read_whole_fragment(self, address: str, extent_id: int, index: int,
                                  length: int) -> bytes:
        """A whole fragment, read in chunks."""
        chunk = self.limits.fragment_chunk_bytes
        parts = [await self.read_fragment(address, extent_id, index, offset,
                                          min(chunk, length - offset))
                 for offset in range(0, length, chunk)]
        return b"".join(parts)

    async def verify_fragment(self, address: str, extent_id: int, index: int,
                              timeout_s: float = 120.0) -> int:
        """Have the node read and verify the whole fragment; its CRC32C."""
        reply = await rpc.call(self.stub(address).VerifyFragment(
            pb.FragmentRequest(extent_id=extent_id, index=index), timeout=timeout_s))
        return reply.crc

    async def delete_fragment(self, address: str, extent_id: int, index: int) -> None:
        await rpc.call(self.stub(address).DeleteFragment(
            pb.FragmentRequest(extent_id=extent_id, index=index), timeout=10.0))

    async def list_fragments(self, address: str) -> list[tuple[int, int]]:
        reply = await rpc.call(self.stub(address).ListFragments(pb.ListFragmentsRequest(),
                                                                timeout=10.0))
        return [(f.extent_id, f.index) for f in reply.fragments]

    # ---- control --------------------------------------------------------------------------

    async def create_extent(self, address: str, extent_id: int, replicas: Sequence[str],
                            timeout_s: float | None = None) -> None:
        """Create a replica on `address`; a node that does not within `timeout_s` (default:
        the read deadline) has failed it (the stream manager passes its
        `create_extent_timeout_ms` and places the extent elsewhere)."""
        await rpc.call(self.stub(address).CreateExtent(
            pb.CreateExtentRequest(extent_id=extent_id, replicas=list(replicas)),
            timeout=timeout_s or self.limits.read_deadline_ms / 1000.0))

    async def create_replicated(self, extent_id: int, replicas: Sequence[str],
                                timeout_s: float | None = None) -> None:
        """Create the extent's replica on each node of `replicas` (replicas[0] primary)."""
        await asyncio.gather(*(self.create_extent(a, extent_id, replicas, timeout_s)
                               for a in replicas))

    async def commit_length(self, address: str, extent_id: int, timeout_s: float | None = None,
                            fence: bool = False) -> tuple[int, bool]:
        """A replica's commit length; with `fence`, final (it accepts no more appends)."""
        reply = await rpc.call(self.stub(address).CommitLength(
            pb.CommitLengthRequest(extent_id=extent_id, fence=fence),
            timeout=timeout_s or self.limits.read_deadline_ms / 1000.0))
        return reply.length, reply.sealed

    async def seal(self, address: str, extent_id: int, length: int,
                   sources: Sequence[str] = (), timeout_s: float | None = None) -> int:
        reply = await rpc.call(self.stub(address).Seal(
            pb.SealRequest(extent_id=extent_id, length=length, sources=list(sources)),
            timeout=timeout_s or self.limits.read_deadline_ms / 1000.0))
        return reply.length

    async def scrub_extent(self, address: str, extent_id: int, timeout_s: float = 600.0
                           ) -> pb.ScrubExtentReply:
        """Have the node verify its replica where it lies (stream_layer/extent_node/scrub.py)."""
        return await rpc.call(self.stub(address).ScrubExtent(
            pb.ScrubExtentRequest(extent_id=extent_id), timeout=timeout_s))

    async def delete_extent(self, address: str, extent_id: int) -> None:
        await rpc.call(self.stub(address).DeleteExtent(
            pb.DeleteExtentRequest(extent_id=extent_id), timeout=10.0))

    async def list_extents(self, address: str) -> list[pb.ExtentInfo]:
        reply = await rpc.call(self.stub(address).ListExtents(pb.ListExtentsRequest(),
                                                              timeout=10.0))
        return list(reply.extents)

    async def checkpoint(self, address: str) -> int:
        reply = await rpc.call(self.stub(address).Checkpoint(pb.CheckpointRequest(),
                                                             timeout=60.0))
        return reply.journal_bytes

    async def node_status(self, address: str, timeout_s: float = 2.0) -> pb.NodeStatusReply:
        return await rpc.call(self.stub(address).NodeStatus(pb.NodeStatusRequest(),
                                                            timeout=timeout_s))

    async def wait_serving(self, address: str, timeout_s: float = 15.0) -> None:
        """Wait until a (re)started node answers; its channel may be in reconnect backoff."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await self.node_status(address, timeout_s=0.5)
                return
            except StampError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)


class ExtentClient:
    """Blocking, thread-safe facade over AsyncExtentClient (a private event loop thread)."""

    def __init__(self, limits: ExtentNodeLimits | None = None) -> None:
        self._loop = LoopThread("extent-client")
        self.aio: AsyncExtentClient = self.run(_make(limits))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the client's loop and wait for its result."""
        return self._loop.run(coro)

    def close(self) -> None:
        if not self._loop.closed:
            self.run(self.aio.close())
            self._loop.close()

    def __enter__(self) -> ExtentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(self, primary: str, extent_id: int, blocks: Sequence[bytes]) -> list[Location]:
        return self.run(self.aio.append(primary, extent_id, blocks))

    def read(self, address: str, location: Location, timeout_s: float | None = None) -> bytes:
        return self.run(self.aio.read(address, location, timeout_s))

    def read_frames(self, address: str, extent_id: int, offset: int, length: int) -> bytes:
        return self.run(self.aio.read_frames(address, extent_id, offset, length))

    def create_replicated(self, extent_id: int, replicas: Sequence[str]) -> None:
        self.run(self.aio.create_replicated(extent_id, replicas))

    def commit_length(self, address: str, extent_id: int) -> tuple[int, bool]:
        return self.run(self.aio.commit_length(address, extent_id))

    def checkpoint(self, address: str) -> int:
        return self.run(self.aio.checkpoint(address))

    def list_extents(self, address: str) -> list[pb.ExtentInfo]:
        return self.run(self.aio.list_extents(address))


async def _make(limits: ExtentNodeLimits | None) -> AsyncExtentClient:
    return AsyncExtentClient(limits)
