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
- Nothing waits forever: every wait on a partition server (a page, the map, an address) has
  a deadline of `client_timeout_ms`; the consumer's wait for a segment ends when the segment's
  task ends, even without its end marker; and when the scan ends (the limit, an error, the
  caller closing it) the segments' tasks are cancelled and waited for, cancelled again should
  a cancellation be lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from common import rpc
from common.config import PartitionLimits
from common.errors import DeadlineExceeded, Internal, NotOwner, StampError, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.partition_map import PartitionMap
from partition_layer.scan_stream import clamp

QUEUE_PAGES = 2
STOP_RECANCEL_S = 1.0  # a segment task still running this long after its cancellation
RETRY_BACKOFF_MIN_S = 0.05
RETRY_BACKOFF_MAX_S = 0.5
RETRYABLE = (NotOwner, Unavailable, DeadlineExceeded)

log = logging.getLogger(__name__)

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
    items: Sequence[pb.ScanItem]  # never empty
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
        self.ended = False  # the end marker (None or an error) is queued
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.task.add_done_callback(self._task_done)

    async def _run(self) -> None:
        """The queue ends with None or an error: the consumer never waits for a segment
        that is gone (and `next` covers a task that ended otherwise)."""
        try:
            await self._read()
        except StampError as exc:
            await self._end(exc)
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: the scan fails, it does not hang
            await self._end(Internal(f"scan of [{self.request.start_key.hex()}, "
                                     f"{self.end.hex()}) failed: {exc!r}"))
            return
        await self._end(None)

    async def _end(self, marker: StampError | None) -> None:
        await self.queue.put(marker)
        self.ended = True

    def _lost(self) -> Internal:
        return Internal(f"the scan of [{self.request.start_key.hex()}, {self.end.hex()}) "
                        f"stopped without its end marker")

    def _task_done(self, task: asyncio.Task[None]) -> None:
        # A task that ended without its end marker (cancelled by someone else, a
        # BaseException): wake a consumer waiting on the empty queue. A full queue needs no
        # wake-up: `next` sees the ended task once the consumer has emptied it.
        if not self.ended and not self.queue.full():
            self.queue.put_nowait(self._lost())
            self.ended = True

    async def next(self) -> ScanPage | StampError | None:
        """The segment's next page, or its end: None, or the error that ended it."""
        if self.queue.empty() and self.task.done():
            return self._lost()
        return await self.queue.get()

    async def _read(self) -> None:
        request = self.request
        limited = request.limit > 0  # then request.limit is what is left of it
        deadline = time.monotonic() + self.page_timeout_s
        backoff = RETRY_BACKOFF_MIN_S
        stale = False  # the map is refreshed before the next attempt
        while True:
            try:
                async with asyncio.timeout(self.page_timeout_s):
                    if stale:
                        await self.router.refresh_map()
                        stale = False
                    address = await self.router.address_for(request.start_key)
                pages = self.router.scan_stream(address, request)
                try:
                    while True:
                        # asyncio.timeout, not wait_for: in Python 3.11 wait_for returns a
                        # page that arrives with its cancellation and drops the cancellation
                        # (gh-86296): the segment then read on after the scan ended, blocked
                        # on its full queue, and the scan's exit waited for it forever.
                        async with asyncio.timeout(self.page_timeout_s):
                            page = await anext(pages)
                        if page.items:
                            resume = key_after(request.account, request.mode, page.items[-1])
                            await self.queue.put(ScanPage(page.items, resume))
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
                error = DeadlineExceeded(f"no map, address or scan page within "
                                         f"{self.page_timeout_s:g}s")
            except RETRYABLE as exc:
                error = exc
            if time.monotonic() + backoff > deadline:
                raise error
            await asyncio.sleep(backoff)
            backoff = min(RETRY_BACKOFF_MAX_S, backoff * 2)
            stale = True


async def _stop(segments: list[_Segment]) -> None:
    """Cancels the segments' tasks and returns once each has ended. A cancellation can be
    lost (a library awaiting with the wait_for race above): a task still running
    STOP_RECANCEL_S later is cancelled again. The caller's own cancellation is not swallowed
    (the tasks are cancelled already)."""
    pending = {segment.task for segment in segments}
    for task in pending:
        task.cancel()
    while pending:
        _, pending = await asyncio.wait(pending, timeout=STOP_RECANCEL_S)
        for task in pending:
            log.warning("a scan segment still runs %gs after its cancellation: cancelled "
                        "again", STOP_RECANCEL_S)
            task.cancel()
    for task in {segment.task for segment in segments}:
        if not task.cancelled():
            task.exception()  # retrieved: its error, if any, was queued for the consumer


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
                    try:
                        async with asyncio.timeout(timeout_s):
                            await router.refresh_map()
                    except TimeoutError:
                        raise DeadlineExceeded(
                            f"no partition map within {timeout_s:g}s") from None
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
            got = await active[0].next()
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
        await _stop(active)
