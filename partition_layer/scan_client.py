"""A key-range scan across range partitions (§5 scans; the front end's fan-out, §6): pages of
one account's rows in key order, read from the partition servers' `Scan` streams
(scan_stream.py), several partitions ahead at once.

Contracts:
- Items come in key order, each once, from [start_key, end_key) of `account` (end None: to the
  account's end); at most `limit` in all (0: no limit).
- The range is cut into segments at the partition boundaries the map names when the segment
  is planned; up to `in_flight` segments are read at once, each into a queue of at most
  QUEUE_PAGES pages (a slow consumer stops the reading, and gRPC flow control the server), and
  they are yielded strictly one after the other.
- Within a segment a stream may end early at its partition's high key (the map was stale, or
  the partition split): the segment goes on from there in the partition that holds it. On
  NotOwner, Unavailable or a deadline, the map is refreshed and the segment resumes exactly
  after the last item it queued, until `client_timeout_ms` pass without progress.
- Consistency: each PS stream is one snapshot of its partition's part. A segment resumed
  after a failure (or continued past a split) is then two (or more) snapshots: the rows before
  the resume point from the first, the rest from the next, never a row twice or none.
- Each page carries `resume_key`: the key right after its last item, where the same scan
  resumes without repeating or skipping an item.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

import grpc

from common import rpc
from common.config import PartitionLimits
from common.errors import DeadlineExceeded, NotOwner, StampError, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.partition_map import PartitionMap
from partition_layer.scan_stream import clamp

QUEUE_PAGES = 2
RETRY_BACKOFF_MIN_S = 0.05
RETRY_BACKOFF_MAX_S = 0.5
RETRYABLE = (NotOwner, Unavailable, DeadlineExceeded)

StreamOpener = Callable[[str, pb.PartitionScanRequest], AsyncIterator[pb.PartitionScanPage]]


class ScanRouter(Protocol):
    """What the scanner needs of a partition client (AsyncPartitionClient is one)."""

    map: PartitionMap | None
    limits: PartitionLimits

    async def refresh_map(self) -> None: ...

    async def address_for(self, key: bytes) -> str: ...

    def scan_stream(self, address: str, request: pb.PartitionScanRequest
                    ) -> AsyncIterator[pb.PartitionScanPage]: ...


@dataclass
class ScanPage:
    items: list[pb.ScanItem]
    resume_key: bytes  # right after the last item


def key_after(account: str, mode: int, item: pb.ScanItem) -> bytes:
    """The first key a scan resuming after `item` reads: past an entity's key, or past every
    key of a log (a log-name scan lists each name once)."""
    if mode == pb.SCAN_LOG_NAMES:
        end = keys.prefix_end(keys.pname_prefix(account, item.pname))
        assert end is not None
        return end
    return keys.encode_key(account, item.pname, keys.KIND_ENTITY, item.row) + b"\x00"


async def open_grpc_stream(stub: object, request: pb.PartitionScanRequest
                           ) -> AsyncIterator[pb.PartitionScanPage]:
    """The pages of a PS Scan call on `stub`, gRPC failures as typed Stamp errors."""
    call = stub.Scan(request)  # type: ignore[attr-defined]
    try:
        async for page in call:
            yield page
    except grpc.RpcError as exc:
        raise rpc.from_rpc_error(exc) from None
    finally:
        call.cancel()


class _Segment:
    """[start, end) of the scan inside one partition (as planned), read into a queue."""

    def __init__(self, router: ScanRouter, request: pb.PartitionScanRequest, end: bytes,
                 page_timeout_s: float) -> None:
        self.router = router
        self.request = request  # start_key moves as items are queued
        self.end = end
        self.page_timeout_s = page_timeout_s
        self.queue: asyncio.Queue[ScanPage | StampError | None] = asyncio.Queue(QUEUE_PAGES)
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            await self._read()
            await self.queue.put(None)
        except StampError as exc:
            await self.queue.put(exc)

    async def _read(self) -> None:
        request = self.request
        limited = request.limit > 0  # then request.limit is what is left of it
        deadline = time.monotonic() + self.page_timeout_s
        backoff = RETRY_BACKOFF_MIN_S
        while True:
            try:
                address = await self.router.address_for(request.start_key)
                pages = self.router.scan_stream(address, request)
                try:
                    while True:
                        page = await asyncio.wait_for(anext(pages), self.page_timeout_s)
                        if page.items:
                            resume = key_after(request.account, request.mode, page.items[-1])
                            await self.queue.put(ScanPage(list(page.items), resume))
                            request.start_key = resume
                            deadline = time.monotonic() + self.page_timeout_s
                            backoff = RETRY_BACKOFF_MIN_S
                            if limited:
                                request.limit = max(0, request.limit - len(page.items))
                                if not request.limit:
                                    return
                        if page.done:
                            break
                finally:
                    await pages.aclose()
                if not page.resume_key or page.resume_key >= self.end:
                    return
                # The partition ended before the segment (a split, a stale map): go on in the
                # partition that holds the rest.
                request.start_key = page.resume_key
                continue
            except StopAsyncIteration:
                error: StampError = Unavailable("a scan stream ended without its last page")
            except TimeoutError:
                error = DeadlineExceeded(f"no scan page within {self.page_timeout_s:g}s")
            except RETRYABLE as exc:
                error = exc
            if time.monotonic() + backoff > deadline:
                raise error
            await asyncio.sleep(backoff)
            backoff = min(RETRY_BACKOFF_MAX_S, backoff * 2)
            await self.router.refresh_map()

    def cancel(self) -> None:
        self.task.cancel()


async def scan(router: ScanRouter, account: str, start_key: bytes, end_key: bytes | None,
               mode: int = pb.SCAN_ENTITIES, *, limit: int = 0, page_rows: int = 0,
               page_bytes: int = 0, in_flight: int = 3) -> AsyncIterator[ScanPage]:
    """The pages of the scan in key order (module docstring)."""
    start, end = clamp(account, start_key, end_key)
    if in_flight < 1:
        raise ValueError("in_flight is at least 1")
    timeout_s = router.limits.client_timeout_ms / 1000
    active: list[_Segment] = []
    planned = start  # segments are planned up to here
    returned = 0
    try:
        while active or planned < end:
            while len(active) < in_flight and planned < end:
                if router.map is None:
                    await router.refresh_map()
                assert router.map is not None
                entry = router.map.lookup(planned)
                seg_end = end if entry.high is None else min(end, entry.high)
                # Earlier segments may fill the limit yet: what is left now is an upper bound.
                remaining = limit - returned if limit else 0
                segment = _Segment(router, pb.PartitionScanRequest(
                    account=account, start_key=planned, end_key=seg_end, has_end=True,
                    mode=mode, page_rows=page_rows, page_bytes=page_bytes, limit=remaining),
                    seg_end, timeout_s)
                active.append(segment)
                planned = seg_end
            got = await active[0].queue.get()
            if got is None:
                active.pop(0)
                continue
            if isinstance(got, StampError):
                raise got
            if limit and returned + len(got.items) >= limit:
                got.items = got.items[:limit - returned]
                got.resume_key = key_after(account, mode, got.items[-1])
                yield got
                return
            returned += len(got.items)
            yield got
    finally:
        for segment in active:
            segment.cancel()
        for segment in active:
            with contextlib.suppress(asyncio.CancelledError, StampError):
                await segment.task
