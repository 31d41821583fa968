"""The extent node's journal: a write-ahead log on its own directory, with group commit (§2).

Contract:
- `append(record)` returns once the record is in the journal file AND the file is fsync'd.
  Records are written in the order `append` was called. Many waiting appends share one
  write+fdatasync (group commit): while one batch is being synced, the next one gathers.
  A batch of one or two small records is synced on the event loop itself (cheaper than two
  thread hops); larger batches on the journal's own thread, so the loop keeps serving.
- A record is `[u32 body length][u32 crc32c(body)][body]`. On restart `replay()` yields every
  whole record in order and cuts a torn tail (a partial or corrupt last record) from the last
  segment. A bad record before the last segment's tail is corruption, not a torn write, and
  stops the node rather than silently losing what follows.
- The journal is a sequence of segment files. `rotate()` starts a new segment;
  `drop_through(segment)` deletes old ones once the extent files hold what they held
  (the checkpoint's job, see store.py).
- A record may stand for bytes written elsewhere (`FileWrite`, for large appends, so they
  reach the disk once rather than twice): those are written and fdatasync'd in the same batch
  before the journal write, so a durable record always points at durable bytes.
- An I/O error on the journal is fatal: durability can no longer be promised, so the process
  exits (code 70) and recovers from disk on restart. A stop is not an error: `stop()` while a
  batch is being written waits for the journal's thread, fails the futures of everything not
  known durable (Unavailable), and returns; the process then exits as it means to.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import faults, metrics, tracing
from common.checksums import crc32c
from common.durable_fs import fsync_dir, make_dirs
from common.errors import Internal, Unavailable

log = logging.getLogger(__name__)

RECORD_HEADER = struct.Struct("<II")
SEGMENT_PREFIX = "journal-"
SEGMENT_SUFFIX = ".log"
# A batch this small is written and synced on the event loop, not the journal thread (lower
# latency for a lone appender; under load batches grow and go to the thread again).
INLINE_SYNC_RECORDS_MAX = 2
INLINE_SYNC_BYTES_MAX = 64 * 1024
# ...unless the last write took longer than this (a slow disk, issue 29): synced on the loop,
# it would block the node, its forward acks, reads and heartbeats with it, and a primary
# could no longer tell its own slow journal from its secondaries (they would all answer
# when the loop is free again: replication.py's lag rule).
INLINE_SYNC_S_MAX = 0.02


def encode_record(body: bytes) -> bytes:
    return RECORD_HEADER.pack(len(body), crc32c(body)) + body


def segment_name(seq: int) -> str:
    return f"{SEGMENT_PREFIX}{seq:012d}{SEGMENT_SUFFIX}"


def segment_seq(path: Path) -> int:
    return int(path.name[len(SEGMENT_PREFIX):-len(SEGMENT_SUFFIX)])


@dataclass(frozen=True)
class FileWrite:
    """Bytes a record stands for but does not carry: written to `path` at `offset` and
    fdatasync'd in the same batch, before the record itself (the large-append bypass)."""

    path: Path
    offset: int
    data: bytes


@dataclass
class _Pending:
    data: bytes
    future: asyncio.Future[None]
    file_write: FileWrite | None = None
    on_durable: Callable[[], None] | None = None
    trace: Any = None  # the span the record was written for (tracing on): en.journal's parent

    @property
    def size(self) -> int:
        return len(self.data) + (len(self.file_write.data) if self.file_write else 0)


class Journal:
    def __init__(self, directory: Path, batch_bytes_max: int, queue_bytes_max: int,
                 segment_bytes_max: int) -> None:
        self.directory = directory
        self.batch_bytes_max = batch_bytes_max
        self.queue_bytes_max = queue_bytes_max
        self.segment_bytes_max = segment_bytes_max
        make_dirs(directory)
        self._queue: deque[_Pending] = deque()
        self._queued_bytes = 0
        self._space = asyncio.Condition()
        self._work = asyncio.Event()
        # One thread does all journal I/O, so writes land in append order.
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal")
        self._fd = -1
        self._segment = 0
        self._segment_bytes = 0
        self._rotate_requested = False
        self._rotated = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.syncs = 0
        self.records = 0
        # Bytes written to the disk by group commits so far (records with their headers, and
        # the bytes of their FileWrites): what the journal costs the disk, which its held
        # bytes (compacted, dropped through) do not say.
        self.written_bytes = 0
        # Metrics (null objects while metrics are off): each group commit's fdatasync time,
        # records and bytes. The fdatasync is timed where it runs, observed on the loop.
        self._sync_s = 0.0
        self._write_s = 0.0  # how long the last _write_and_sync took, all of it
        self._sync_seconds = metrics.histogram(
            "stamp_journal_fsync_seconds", "journal fdatasync latency").labels()
        self._batch_records = metrics.histogram(
            "stamp_journal_group_commit_records", "records per journal group commit",
            buckets=metrics.SIZE_BUCKETS).labels()
        self._batch_bytes = metrics.histogram(
            "stamp_journal_group_commit_bytes", "bytes per journal group commit",
            buckets=metrics.BYTE_BUCKETS).labels()

    # ---- recovery -------------------------------------------------------------------------

    def segments(self) -> list[Path]:
        return sorted(self.directory.glob(f"{SEGMENT_PREFIX}*{SEGMENT_SUFFIX}"), key=segment_seq)

    def replay(self) -> Iterator[tuple[int, bytes]]:
        """Yield (segment seq, body) of every whole record in order; cut a torn tail.

        Must be called before `start()`.
        """
        segments = self.segments()
        for index, path in enumerate(segments):
            data = path.read_bytes()
            pos = 0
            while pos < len(data):
                body = self._record_at(data, pos)
                if body is None:
                    break
                yield segment_seq(path), body
                pos += RECORD_HEADER.size + len(body)
            if pos < len(data):
                if index != len(segments) - 1:
                    raise Internal(f"journal segment {path} is corrupt at byte {pos} and is not "
                                   f"the last segment: refusing to drop what follows")
                log.warning("journal: cutting torn tail of %s at byte %d (%d bytes dropped)",
                            path.name, pos, len(data) - pos)
                with open(path, "r+b") as f:
                    f.truncate(pos)
                    os.fsync(f.fileno())

    @staticmethod
    def _record_at(data: bytes, pos: int) -> bytes | None:
        if pos + RECORD_HEADER.size > len(data):
            return None
        length, crc = RECORD_HEADER.unpack_from(data, pos)
        start = pos + RECORD_HEADER.size
        if start + length > len(data):
            return None
        body = data[start:start + length]
        return body if crc32c(body) == crc else None

    # ---- running --------------------------------------------------------------------------

    def start(self) -> None:
        """Open a fresh segment after the existing ones and start the group-commit loop."""
        existing = self.segments()
        self._open_segment(segment_seq(existing[-1]) + 1 if existing else 1)
        self._task = asyncio.get_running_loop().create_task(self._flush_loop(), name="journal")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._io.shutdown(wait=True)
        _fail(self._queue, "the journal stopped")
        self._queue.clear()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    @property
    def current_segment(self) -> int:
        return self._segment

    def held_bytes(self) -> int:
        """Bytes in all segments on disk (what recovery would read)."""
        return sum(p.stat().st_size for p in self.segments())

    def has_room(self, nbytes: int) -> bool:
        return self._queued_bytes == 0 or self._queued_bytes + nbytes <= self.queue_bytes_max

    async def wait_for_room(self, nbytes: int) -> None:
        """Back-pressure: wait while the queue is full (a record larger than the bound still
        goes, alone)."""
        if self.has_room(nbytes):
            return
        async with self._space:
            await self._space.wait_for(lambda: self.has_room(nbytes))

    def submit(self, body: bytes, file_write: FileWrite | None = None,
               on_durable: Callable[[], None] | None = None) -> asyncio.Future[None]:
        """Queue one record; the future resolves when it (and its file write) is durable.
        Records become durable in submission order. `on_durable` runs the moment it is,
        before the future resolves: whoever sees the future done sees its effect (a done
        callback would only be scheduled, and a task awaiting the already-done future could
        run first). Callers bound the queue with `wait_for_room` first."""
        item = _Pending(encode_record(body), asyncio.get_running_loop().create_future(),
                        file_write, on_durable)
        if tracing.enabled:
            item.trace = tracing.current_span()
        self._queued_bytes += item.size
        future = item.future
        self._queue.append(item)
        self._work.set()
        return future

    async def append(self, body: bytes) -> None:
        """Write one record and wait until it is durable."""
        await self.wait_for_room(len(body))
        await self.submit(body)

    async def rotate(self) -> int:
        """Start a new segment once what is queued now is durable; return the closed one."""
        closed = self._segment
        self._rotated.clear()
        self._rotate_requested = True
        self._work.set()
        await self._rotated.wait()
        return closed

    async def drop_through(self, segment: int) -> None:
        """Delete every segment numbered <= `segment` (their contents are checkpointed)."""
        def drop() -> None:
            for path in self.segments():
                if segment_seq(path) <= segment:
                    path.unlink()
            fsync_dir(self.directory)
        await asyncio.get_running_loop().run_in_executor(self._io, drop)

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._work.wait()
            self._work.clear()
            while self._queue:
                batch: list[_Pending] = []
                size = 0
                while self._queue and (not batch or
                                       size + self._queue[0].size <= self.batch_bytes_max):
                    item = self._queue.popleft()
                    batch.append(item)
                    size += item.size
                data = b"".join(item.data for item in batch)
                file_writes = [item.file_write for item in batch if item.file_write is not None]
                traced_ns = time.time_ns() if tracing.enabled else 0
                try:
                    if len(batch) <= INLINE_SYNC_RECORDS_MAX and size <= INLINE_SYNC_BYTES_MAX \
                            and not file_writes and self._write_s <= INLINE_SYNC_S_MAX:
                        # Little is waiting: a thread hop each way costs more than the
                        # fdatasync itself, so sync here (a primary wakes its forwarders
                        # before this task: they send first).
                        self._write_and_sync(data, file_writes)
                    else:
                        await loop.run_in_executor(self._io, self._write_and_sync, data,
                                                   file_writes)
                except asyncio.CancelledError:
                    # stop() caught this batch in the journal's thread (it waits for the
                    # thread): a clean stop, not an I/O error. Nobody may count on the batch.
                    _fail(batch, "the journal stopped during its write")
                    raise
                except BaseException:
                    log.critical("journal write failed: exiting, recovery will replay the "
                                 "journal", exc_info=True)
                    os._exit(70)
                if traced_ns:
                    self._trace(traced_ns, batch, size)
                self.syncs += 1
                self.records += len(batch)
                self.written_bytes += size
                self._sync_seconds.observe(self._sync_s)
                self._batch_records.observe(len(batch))
                self._batch_bytes.observe(size)
                for item in batch:
                    if item.on_durable is not None:
                        try:
                            item.on_durable()
                        except Exception:  # one caller's bug must not stop the journal
                            log.exception("journal: a durability callback failed")
                    if not item.future.done():
                        item.future.set_result(None)
                async with self._space:
                    self._queued_bytes -= size
                    self._space.notify_all()
            if self._rotate_requested or self._segment_bytes >= self.segment_bytes_max:
                self._rotate_requested = False
                await loop.run_in_executor(self._io, self._open_segment, self._segment + 1)
                self._rotated.set()

    def _trace(self, started_ns: int, batch: list[_Pending], size: int) -> None:
        """Spans of one group commit that holds traced writes (tracing on): "en.journal"
        from taking the batch until it is durable, under the first traced record's span and
        linked to the others' (one fsync serves many writes), and its "en.journal.fsync".
        A batch of untraced records (a stamp's own writes) leaves no span."""
        traced = [item.trace for item in batch if item.trace is not None]
        if not traced:
            return
        now = time.time_ns()
        group = tracing.record("en.journal", started_ns, now,
                               {"records": len(batch), "bytes": size},
                               parent=tracing.under(traced[0]), links=traced[1:])
        tracing.record("en.journal.fsync", now - round(self._sync_s * 1e9), now,
                       parent=group)

    def _write_and_sync(self, data: bytes, file_writes: list[FileWrite]) -> None:
        begun = time.perf_counter()
        # Before anything of the batch is written: a test holds a primary here to kill it
        # with an append forwarded to its secondaries but not in its own journal.
        faults.point("journal.before_write")
        if file_writes:
            _write_files(file_writes)
        torn = faults.hit("journal.torn_write")
        if torn is not None:
            # A torn write: half the batch reaches the disk, then the process dies.
            os.write(self._fd, data[:max(1, len(data) // 2)])
            os.fdatasync(self._fd)
            faults.crash("journal.torn_write")
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        faults.point("journal.before_fsync")
        started = time.perf_counter()
        os.fdatasync(self._fd)
        self._sync_s = time.perf_counter() - started
        faults.point("journal.after_fsync")
        self._segment_bytes += len(data)
        self._write_s = time.perf_counter() - begun

    def _open_segment(self, seq: int) -> None:
        if self._fd >= 0:
            os.fdatasync(self._fd)
            os.close(self._fd)
        path = self.directory / segment_name(seq)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self.directory)
        self._segment = seq
        self._segment_bytes = os.fstat(self._fd).st_size


def _fail(items: Iterable[_Pending], why: str) -> None:
    for item in items:
        if not item.future.done():
            item.future.set_exception(Unavailable(why))
            # Whoever awaits it still gets the error; a future only watched through its
            # on_durable callback (a forwarded write) is not worth a warning at a stop.
            item.future.exception()


def _write_files(file_writes: list[FileWrite]) -> None:
    """pwrite each FileWrite, then fdatasync every file touched (once each)."""
    fds: dict[Path, int] = {}
    try:
        for write in file_writes:
            fd = fds.get(write.path)
            if fd is None:
                try:
                    fd = fds[write.path] = os.open(write.path, os.O_WRONLY)
                except FileNotFoundError:
                    continue  # the extent was deleted meanwhile: its record is moot too
            view, offset = memoryview(write.data), write.offset
            while view:
                written = os.pwrite(fd, view, offset)
                view, offset = view[written:], offset + written
        for fd in fds.values():
            os.fdatasync(fd)
    finally:
        for fd in fds.values():
            os.close(fd)
