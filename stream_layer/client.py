"""The stream client: streams for the partition layer (§2). This Python API is a contract:

    from stream_layer.blocking_client import StreamClient
    sc = StreamClient.from_stamp(data_dir)      # reads <data_dir>/stamp.json
    s = sc.create_stream("name")                # or sc.open_stream("name")
    locs = s.append([b"...", b"..."])    # atomic; list of Location(extent_id, offset, length)
    s.read(locs[0]) -> bytes                    # deadline, falls back to another replica
    for loc, data in s.blocks(): ...            # every block of the stream, in order

It caches each stream's extents so the stream manager stays off the data path: appends go
straight to the last extent's primary, many in flight at once. When an append fails (a replica
died, the extent is full or sealed), the stream asks the stream manager to seal that extent and
add a new one — once, however many appends failed together — and re-sends every append that
was not acknowledged there: the caller notices only latency. Appends still in flight when that
happens may land twice (at-least-once; §2), and concurrent appends have no order between them.

`AsyncStreamClient` / `AsyncStream` are the asyncio core; `StreamClient` / `Stream`
(blocking_client.py) are the blocking, thread-safe facade over them (a private event loop
thread).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from common import tracing
from common.checksums import crc32c
from common.config import ExtentNodeLimits, StreamManagerLimits
from common.errors import (
    ChecksumError,
    DeadlineExceeded,
    ExtentFull,
    FaultInjected,
    Internal,
    InvalidArgument,
    NotFound,
    NotPrimary,
    OutOfRange,
    ReplicationFailed,
    Sealed,
    StampError,
    Unavailable,
    WrongOffset,
)
from common.proto import stream_manager_pb2 as sm_pb
from stream_layer import framing
from stream_layer.ec.reader import CodedExtent, CodedReader
from stream_layer.extent_client import AsyncExtentClient
from stream_layer.framing import Location
from stream_layer.seal import ReplicaLength, decide_seal_length
from stream_layer.sm_client import AsyncStreamManagerClient

log = logging.getLogger(__name__)

T = TypeVar("T")

# Failures of a read from one replica that another replica may not have: a failing disk's
# error on its node (Internal; FaultInjected stands in for it in tests and chaos) included.
READ_ERRORS = (ChecksumError, Unavailable, DeadlineExceeded, NotFound, OutOfRange, Internal,
               FaultInjected)
# Failures of an append that a new extent cures.
ROLLOVER_ON = (ReplicationFailed, Unavailable, Sealed, ExtentFull, NotFound, NotPrimary,
               DeadlineExceeded, WrongOffset)
ROLLOVERS_PER_APPEND_MAX = 8
# How often a stream client refreshes its warm connections to extent nodes (at most).
WARM_INTERVAL_S = 10.0
SCAN_CHUNK_BYTES = 4 * 1024 * 1024


# Stall intervals a stream remembers: enough to cover any operation still being timed.
STALLS_KEPT = 16


class Stalls:
    """Intervals of time (disjoint, in order; at most STALLS_KEPT, the latest) during which
    appends waited on failed extents. Pure: callers pass the times."""

    def __init__(self) -> None:
        self._spans: deque[tuple[float, float]] = deque(maxlen=STALLS_KEPT)

    def add(self, start: float, end: float) -> None:
        """Add [start, end], merged with the spans it touches (failures are rare: a copy
        of at most STALLS_KEPT spans is nothing)."""
        if end <= start:
            return
        apart = [(a, b) for a, b in self._spans if b < start or a > end]
        touching = [(a, b) for a, b in self._spans if not (b < start or a > end)]
        start = min([start, *(a for a, _ in touching)])
        end = max([end, *(b for _, b in touching)])
        self._spans = deque(sorted([*apart, (start, end)]), maxlen=STALLS_KEPT)

    def overlap(self, start: float, end: float) -> float:
        """How much of [start, end] the spans cover."""
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in self._spans)


class AsyncStream:
    def __init__(self, client: AsyncStreamClient, info: sm_pb.StreamInfo,
                 epoch: int = 0) -> None:
        self.client = client
        self.name = info.name
        # This writer's fencing epoch (0: unfenced use). Once a writer with a higher epoch
        # fences the stream, this one's rollovers are refused (Fenced) and its appends fail.
        self.epoch = epoch
        self._info = info
        self._extents = {e.extent_id: e for e in info.extents}
        self._rollovers: dict[int, asyncio.Future[None]] = {}
        # Per extent: bytes this writer has sent there, and its appends still in flight.
        # An append that would not fit waits for those to finish and rolls over, rather than
        # fail at the primary with ExtentFull: that would also fail the appends still in
        # flight there (the seal fences them), each to be sent again.
        self._sent: dict[int, int] = {}
        self._inflight: dict[int, int] = {}
        self._idle: dict[int, asyncio.Event] = {}
        # When this writer's appends waited on extents that failed under them; and per
        # extent, when its current run of slow appends began (`_note_latency`).
        self.stalls = Stalls()
        self._slow_since: dict[int, float] = {}
        self._slow_s = client.extent_limits.replica_timeout_min_ms / 1000
        client.warm_soon()

    def stalled_s(self, start: float, end: float) -> float:
        """How much of [start, end] (time.monotonic() seconds) this writer's appends spent
        waiting on extents that failed under them: from an append's send to a failed extent
        (or the send of the first of the slow appends that ran up to the failure) until the
        stream had moved on to the next. A caller that times operations takes it off: that
        wait is a failure sealed away, not load."""
        return self.stalls.overlap(start, end)

    # ---- metadata ---------------------------------------------------------------------------

    def _update(self, info: sm_pb.StreamInfo) -> None:
        self._info = info
        self._extents.update({e.extent_id: e for e in info.extents})

    async def refresh(self) -> sm_pb.StreamInfo:
        self._update(await self.client.sm.open_stream(self.name))
        return self._info

    @property
    def extents(self) -> list[sm_pb.ExtentInfo]:
        return list(self._info.extents)

    @property
    def last_extent_id(self) -> int:
        """The last extent this writer knows of (0: none): its next append lands there or
        in a later one (garbage collection pins it while a write is in flight)."""
        return self._info.extents[-1].extent_id if self._info.extents else 0

    async def _extent(self, extent_id: int) -> sm_pb.ExtentInfo:
        extent = self._extents.get(extent_id)
        if extent is None:
            await self.refresh()
            extent = self._extents.get(extent_id)
        if extent is None:
            raise NotFound(f"extent {extent_id} is not part of stream {self.name!r}")
        return extent

    # ---- appends ----------------------------------------------------------------------------

    async def append(self, blocks: Sequence[bytes]) -> list[Location]:
        """Append blocks atomically (all in one extent, or none); one Location per block."""
        if not blocks:
            raise InvalidArgument("an append carries at least one block")
        size = sum(framing.frame_bytes(len(b)) for b in blocks)
        if size > self.client.extent_limits.append_bytes_max:
            raise InvalidArgument(f"an append carries at most "
                                  f"{self.client.extent_limits.append_bytes_max} bytes")
        crcs = [crc32c(b) for b in blocks]
        last_error: StampError | None = None
        for _ in range(ROLLOVERS_PER_APPEND_MAX):
            tail = self._info.extents[-1] if self._info.extents else None
            if tail is None or tail.state != "open":
                await self._rollover(tail.extent_id if tail else 0)
                continue
            extent_id = tail.extent_id
            if extent_id in self._rollovers:
                # Its rollover is under way: nothing new goes there. The seal fences it anyway,
                # and its primary may have restarted short of what its secondaries hold
                # (issue 15 hole 3): wait for the new extent instead.
                await self._rollover(extent_id)
                continue
            if self._sent.get(extent_id, 0) + size > self.client.extent_limits.extent_bytes_max:
                await self._until_idle(extent_id)
                await self._rollover(extent_id)
                continue
            self._sent[extent_id] = self._sent.get(extent_id, 0) + size
            self._inflight[extent_id] = self._inflight.get(extent_id, 0) + 1
            sent = stalled_from = time.monotonic()
            try:
                # Tracing on: the replicated append, as this writer waits for it, under the
                # current span (the commit's); the AppendRequest carries its context to the
                # primary (extent_client.py), whose "en.append" goes under it.
                if tracing.enabled:
                    with tracing.span("stream.append", {
                            "stream": self.name, "extent": extent_id, "blocks": len(blocks),
                            "bytes": size, "primary": tail.addresses[0],
                            "replicas": len(tail.addresses)}) as span:
                        locations = await self.client.extents.append(
                            tail.addresses[0], extent_id, blocks, crcs)
                        span.set_attribute("offset", locations[0].offset)  # en.append's
                else:
                    locations = await self.client.extents.append(tail.addresses[0], extent_id,
                                                                 blocks, crcs)
                self._note_latency(extent_id, sent, time.monotonic())
                return locations
            except ROLLOVER_ON as exc:
                last_error = exc
                # The failure began with this append, or with the run of slow ones before
                # it (a slow disk fails an extent only after a few late appends in a row).
                stalled_from = min(sent, self._slow_since.get(extent_id, sent))
                log.info("stream %s: append to extent %d failed (%s): rolling over",
                         self.name, extent_id, type(exc).__name__)
            finally:
                self._inflight[extent_id] -= 1
                if not self._inflight[extent_id] and extent_id in self._idle:
                    self._idle.pop(extent_id).set()
            await self._rollover(extent_id, _late_replica(last_error, tail.addresses[0]))
            if not isinstance(last_error, ExtentFull):
                self.stalls.add(stalled_from, time.monotonic())
        raise Unavailable(f"stream {self.name!r}: append failed after "
                          f"{ROLLOVERS_PER_APPEND_MAX} new extents: {last_error}")

    async def ensure_open(self) -> None:
        """Give the stream an open last extent now, if it has none (after a fence, say),
        so that the next append does not wait for the new extent."""
        tail = self._info.extents[-1] if self._info.extents else None
        if tail is None or tail.state != "open":
            await self._rollover(tail.extent_id if tail else 0)

    async def _until_idle(self, extent_id: int) -> None:
        """Until none of this writer's appends to `extent_id` is in flight."""
        if self._inflight.get(extent_id, 0):
            await self._idle.setdefault(extent_id, asyncio.Event()).wait()

    async def _rollover(self, extent_id: int, late_replica: str = "") -> None:
        """Seal `extent_id` (if it is still the last) and move to a new extent — one stream
        manager call however many appends failed on it. `late_replica`: the replica whose
        per-replica timeout failed the append that asks, the seal's cause (the stream
        manager does not wait for it and keeps new extents off it)."""
        pending = self._rollovers.get(extent_id)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._rollovers[extent_id] = pending
            self._abandon_inflight(extent_id)
            try:
                self._update(await self.client.sm.seal_and_add(
                    self.name, extent_id, self.epoch,
                    [late_replica] if late_replica else []))
                pending.set_result(None)
                self._slow_since.pop(extent_id, None)
                if not self._inflight.get(extent_id):
                    self._sent.pop(extent_id, None)  # nothing goes there any more
                    self._inflight.pop(extent_id, None)
                self.client.warm_soon()
            except BaseException as exc:
                pending.set_exception(exc)
                # Let the next failure try again rather than inherit this one forever.
                del self._rollovers[extent_id]
                if not isinstance(exc, Exception):
                    raise
        await asyncio.shield(pending)  # raises the rollover's error (and so retrieves it)

    def _note_latency(self, extent_id: int, sent: float, acked: float) -> None:
        """Remember when the extent's current run of slow appends (slower than the shortest
        per-replica timeout) began; a fast one ends the run. If the extent then fails, its
        slow appends were the failure's too (`stalled_s`)."""
        if acked - sent > self._slow_s:
            self._slow_since.setdefault(extent_id, sent)
        elif self._slow_since:
            self._slow_since.pop(extent_id, None)

    def _abandon_inflight(self, extent_id: int) -> None:
        """The appends still in flight on `extent_id`, whose rollover begins, give up now
        and wait for the new extent. The seal fences the extent, so they cannot be
        acknowledged there any more; left alone, those sent to a frozen primary would each
        wait out its own timeout, which runs from its own send: a writer pipelining N
        appends (a partition's group commits) would wait up to the last one's, well past
        the rollover."""
        extent = self._extents.get(extent_id)
        if extent is None or not extent.addresses or not self._inflight.get(extent_id):
            return
        abandoned = self.client.extents.abandon(
            extent.addresses[0], extent_id,
            Unavailable(f"extent {extent_id} is being sealed: append re-sent to the next"))
        if abandoned:
            log.info("stream %s: %d appends in flight on extent %d re-sent to the next",
                     self.name, abandoned, extent_id)

    # ---- reads ------------------------------------------------------------------------------

    async def read(self, location: Location) -> bytes:
        """The block at `location`: from the replicas, hedged (`_from_replicas`: a corrupt,
        slow or frozen replica is passed over); of an erasure-coded extent, from its data
        fragment or rebuilt from others (stream_layer/ec/reader.py)."""
        extent = await self._extent(location.extent_id)
        if extent.state != "erasure_coded":
            try:
                return await self._from_replicas(
                    extent, lambda address: self.client.extents.read(address, location))
            except READ_ERRORS:
                coded = await self._coded_meanwhile(extent)
                if coded is None:
                    raise
                extent = coded
        frames = await self._read_coded(extent, location.offset, location.length)
        blocks = framing.payloads(frames, f"extent {location.extent_id} at {location.offset}")
        if len(blocks) != 1 or len(frames) != location.length:
            raise InvalidArgument(f"{location} is not one block of extent {extent.extent_id}")
        return blocks[0]

    async def _read_frames(self, extent: sm_pb.ExtentInfo, offset: int, length: int) -> bytes:
        if extent.state != "erasure_coded":
            try:
                return await self._from_replicas(extent, lambda address: (
                    self.client.extents.read_frames(address, extent.extent_id, offset, length)))
            except READ_ERRORS:
                coded = await self._coded_meanwhile(extent)
                if coded is None:
                    raise
                extent = coded
        return await self._read_coded(extent, offset, length)

    async def _from_replicas(self, extent: sm_pb.ExtentInfo,
                             fetch: Callable[[str], Awaitable[T]]) -> T:
        """`fetch` from the extent's replicas in read order, hedged: one more replica is
        asked whenever those asked have not answered within `read_hedge_ms`, or one fails;
        the first answer wins. A frozen or slow replica costs the hedge delay, not the read
        deadline (§2: a replica that misses the deadline is abandoned for another). Raises
        the last replica's error when none answers."""
        order = iter(_read_order(extent))
        hedge_s = self.client.extent_limits.read_hedge_ms / 1000
        asked: dict[asyncio.Future[T], str] = {}
        last_error: StampError = Unavailable(f"no replica of extent {extent.extent_id}")

        def ask_next() -> None:
            address = next(order, None)
            if address is not None:
                asked[asyncio.ensure_future(fetch(address))] = address

        ask_next()
        try:
            while asked:
                done, _ = await asyncio.wait(asked, timeout=hedge_s,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    ask_next()  # the replicas asked are slow: ask one more as well
                for task in done:
                    address = asked.pop(task)
                    error = task.exception()
                    if error is None:
                        return task.result()
                    if not isinstance(error, READ_ERRORS):
                        raise error
                    last_error = error
                    log.warning("reading extent %d from %s failed (%s): trying another "
                                "replica", extent.extent_id, address, error)
                    ask_next()
            raise last_error
        finally:
            for task in asked:
                task.cancel()

    async def _read_coded(self, extent: sm_pb.ExtentInfo, offset: int, length: int) -> bytes:
        try:
            return await self.client.coded.read_frames(CodedExtent.from_info(extent), offset,
                                                       length)
        except Unavailable:
            # Fewer than k fragments answered where the cache says they are: repairs may
            # have moved some since. Ask once where they are now.
            await self.refresh()
            fresh = self._extents.get(extent.extent_id, extent)
            if list(fresh.fragment_addresses) == list(extent.fragment_addresses):
                raise
            return await self.client.coded.read_frames(CodedExtent.from_info(fresh), offset,
                                                       length)

    async def _coded_meanwhile(self, extent: sm_pb.ExtentInfo) -> sm_pb.ExtentInfo | None:
        """The extent's fresh record if it was erasure-coded since it was cached (its
        replicas are then deleted): no replica answering is the sign to ask."""
        if extent.state != "sealed":
            return None
        await self.refresh()
        fresh = self._extents.get(extent.extent_id)
        return fresh if fresh is not None and fresh.state == "erasure_coded" else None

    async def blocks(self, start: Location | None = None
                     ) -> AsyncIterator[tuple[Location, bytes]]:
        """Every block of the stream in order: sealed extents to their sealed length, the open
        last extent to what its replicas agree is committed. With `start`, from that block on
        (it must be a block of this stream)."""
        info = await self.refresh()
        extents = list(info.extents)
        first_offset = 0
        if start is not None:
            ids = [e.extent_id for e in extents]
            if start.extent_id not in ids:
                raise NotFound(f"extent {start.extent_id} is not part of stream {self.name!r}")
            extents = extents[ids.index(start.extent_id):]
            first_offset = start.offset
        for extent in extents:
            if extent.state == "open":
                end = await self.committed_length(extent)
            else:
                end = extent.sealed_length
            offset, first_offset = first_offset, 0
            while offset < end:
                frames = await self._read_frames(extent, offset,
                                                 min(SCAN_CHUNK_BYTES, end - offset))
                for pos, payload in framing.iter_frames(frames, f"extent {extent.extent_id}"):
                    yield (Location(extent.extent_id, offset + pos,
                                    framing.frame_bytes(len(payload))), bytes(payload))
                offset += len(frames)

    async def committed_length(self, extent: sm_pb.ExtentInfo) -> int:
        """The smallest commit length of the reachable replicas: every acknowledged byte lies
        below it (§2)."""
        lengths = await self._commit_lengths(extent)
        return decide_seal_length(lengths)

    async def _commit_lengths(self, extent: sm_pb.ExtentInfo
                              ) -> dict[str, ReplicaLength | None]:
        # The seal's probe timeout, not the read deadline: a frozen replica would hold a
        # partition load up for the whole deadline, and a silent one is sealed away anyway.
        timeout_s = self.client.sm.limits.seal_probe_timeout_ms / 1000

        async def ask(address: str) -> ReplicaLength | None:
            try:
                length, sealed = await self.client.extents.commit_length(
                    address, extent.extent_id, timeout_s=timeout_s)
                return ReplicaLength(length, sealed)
            except StampError:
                return None
        replies = await asyncio.gather(*(ask(a) for a in extent.addresses))
        return dict(zip(extent.addresses, replies, strict=True))

    # ---- fencing ----------------------------------------------------------------------------

    async def check_commit_length(self) -> int:
        """The true end of the stream's last extent: if its replicas disagree on the commit
        length (or one does not answer), seal it through the stream manager, which fixes the
        length for good (§2 "Sealing"). Partition load uses this."""
        info = await self.refresh()
        if not info.extents:
            return 0
        last = info.extents[-1]
        if last.state != "open":
            return last.sealed_length
        lengths = await self._commit_lengths(last)
        values = {r.length for r in lengths.values() if r is not None}
        if len(values) == 1 and all(r is not None and not r.sealed for r in lengths.values()):
            return values.pop()
        return await self.seal_last()

    async def seal_last(self) -> int:
        """Seal the last extent now (fences any other writer: its appends there fail)."""
        info = await self.refresh()
        if not info.extents:
            return 0
        extent = await self.client.sm.seal_extent(info.extents[-1].extent_id)
        await self.refresh()
        return extent.sealed_length


def _late_replica(error: StampError | None, primary: str) -> str:
    """The replica whose per-replica timeout caused `error`, if that is its cause: the one
    the primary names, or the primary itself when it did not answer within the client's
    timeout (above the primary's own bounds on its replicas, so a primary that is merely
    waiting for a late secondary says so first). "": not a timeout."""
    if isinstance(error, ReplicationFailed):
        return error.late_replica
    return primary if isinstance(error, DeadlineExceeded) else ""


def _read_order(extent: sm_pb.ExtentInfo) -> list[str]:
    # Secondaries first: the primary of an open extent has the append work to do.
    addresses = list(extent.addresses)
    return addresses[1:] + addresses[:1] if extent.state == "open" else addresses


class AsyncStreamClient:
    def __init__(self, sm_addresses: Sequence[str], extent_limits: ExtentNodeLimits | None = None,
                 sm_limits: StreamManagerLimits | None = None) -> None:
        self.extent_limits = extent_limits or ExtentNodeLimits()
        self.sm = AsyncStreamManagerClient(sm_addresses, sm_limits)
        self.extents = AsyncExtentClient(self.extent_limits)
        # Bad fragments a read finds are reported, so that the stream manager rebuilds them.
        self.coded = CodedReader(self.extents, report=self.sm.report_fragment)
        self._warmed_at = -WARM_INTERVAL_S
        self._warming: asyncio.Task[None] | None = None

    def warm_soon(self) -> None:
        """In the background, at most every WARM_INTERVAL_S: connect to every live extent
        node and open an append stream to it. The next extent can be on any of them, and a
        rollover that had to connect first would take milliseconds longer."""
        now = time.monotonic()
        if self._warming is not None or now - self._warmed_at < WARM_INTERVAL_S:
            return
        self._warmed_at = now
        self._warming = asyncio.get_running_loop().create_task(self._warm())

    async def _warm(self) -> None:
        try:
            for node in await self.sm.list_nodes():
                if node.state == "alive" and not node.suspect:
                    self.extents.warm(node.address)
        except StampError as exc:
            log.debug("warming extent node connections failed: %s", exc)
        finally:
            self._warming = None

    async def create_stream(self, name: str) -> AsyncStream:
        return AsyncStream(self, await self.sm.create_stream(name))

    async def open_stream(self, name: str) -> AsyncStream:
        return AsyncStream(self, await self.sm.open_stream(name))

    async def fence_stream(self, name: str, epoch: int) -> AsyncStream:
        """Take the stream over as the writer of `epoch` (a fencing token): every writer
        with a smaller epoch is cut off — its appends fail from now on — and the stream's
        last extent is sealed, so what was acknowledged before is exactly what it holds."""
        return AsyncStream(self, await self.sm.fence_stream(name, epoch), epoch)

    async def delete_stream(self, name: str) -> None:
        await self.sm.delete_stream(name)

    async def list_streams(self, prefix: str = "") -> list[sm_pb.StreamInfo]:
        return await self.sm.list_streams(prefix)

    async def close(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
        await self.sm.close()
        await self.extents.close()
