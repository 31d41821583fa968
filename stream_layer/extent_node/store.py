"""An extent node's replicas and its journal: accepting appends, reads, seals, checkpoints and
recovery (§2). No networking here; the servicer and the replication pipeline sit around it.

Contracts:
- `accept_append` gives an append its place synchronously (offsets are handed out in call
  order, a write not at the replica's end is refused) and returns a future that resolves when
  the append is durable in the journal. Appends become durable in the order they were accepted.
- Reads serve only bytes below the replica's durable end, verifying every frame's checksum.
- `seal(length)` stops appends for good, waits for what was accepted to be durable, fetches
  what is missing (through the `fetch_missing` callback, from peers), writes a SEAL record,
  truncates what lies beyond, and records the seal in the commit point.
- A checkpoint writes the journal's contents through to the data files, fsyncs them, records
  each touched replica's commit point, and drops the journal segments it covered.
- `recover()` (at start, before serving) rebuilds every replica from its commit point plus the
  journal, then checkpoints, so a node starts with an empty journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import struct
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import durable_fs, faults
from common.checksums import crc32c
from common.config import ExtentNodeLimits
from common.errors import (
    AlreadyExists,
    ChecksumError,
    ExtentFull,
    Internal,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PreconditionFailed,
    Sealed,
    Unavailable,
    WrongOffset,
)
from stream_layer import framing
from stream_layer.extent_node import writeback
from stream_layer.extent_node.journal import FileWrite, Journal, fsync_dir
from stream_layer.extent_node.replica import (
    Replica,
    ReplicaMeta,
    pending_slice,
    read_range_from_file,
    replica_paths,
    write_meta,
)

log = logging.getLogger(__name__)

RECORD = struct.Struct("<BQQ")  # kind, extent id, offset (APPEND*) or length (SEAL)
IN_FILE = struct.Struct("<QI")  # APPEND_IN_FILE: frames length, crc32c of the frames
# APPEND carries its frames; APPEND_IN_FILE points at frames the journal wrote to the data file
# (and fdatasync'd) in the same batch: large appends reach the disk once, not twice.
APPEND, SEAL, APPEND_IN_FILE, FENCE, CREATE, DELETE = 1, 2, 3, 4, 5, 6
# Data-file writes up to this size are done on the event loop: a page-cache write of a few
# KiB costs less than handing it to a thread and back.
INLINE_WRITE_BYTES_MAX = 256 * 1024

FetchMissing = Callable[[Replica, int], Awaitable[None]]


class ExtentStore:
    def __init__(self, data_dir: Path, journal_dir: Path, limits: ExtentNodeLimits) -> None:
        self.data_dir = data_dir
        self.limits = limits
        durable_fs.make_dirs(data_dir)
        self.replicas: dict[int, Replica] = {}
        self.journal = Journal(journal_dir, limits.journal_batch_bytes_max,
                               limits.journal_queue_bytes_max, limits.journal_segment_bytes_max)
        # Data-file writes in one thread (in order); reads in a few; metadata in one (in order).
        self._writes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extent-write")
        self._reads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="extent-read")
        self._meta_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extent-meta")
        self._to_write: dict[int, None] = {}  # extent ids with pending bytes, in order
        self._writer_wake: asyncio.Event | None = None
        self._written: asyncio.Condition | None = None
        self._pending_total = 0
        self._checkpoint_lock: asyncio.Lock | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._records_at_checkpoint = 0

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._writer_wake = asyncio.Event()
        self._written = asyncio.Condition()
        self._checkpoint_lock = asyncio.Lock()
        self.journal.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._write_loop(), name="extent-writer"),
                       loop.create_task(self._checkpoint_loop(), name="checkpointer")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.journal.stop()
        for pool in (self._writes, self._reads, self._meta_io):
            pool.shutdown(wait=True)

    # ---- replicas -------------------------------------------------------------------------

    def get(self, extent_id: int) -> Replica:
        replica = self.replicas.get(extent_id)
        if replica is None:
            raise NotFound(f"extent {extent_id} has no replica here")
        return replica

    async def create(self, extent_id: int, replicas: list[str]) -> Replica:
        """Create an empty replica; idempotent for the same replica set."""
        existing = self.replicas.get(extent_id)
        if existing is not None:
            if existing.meta.replicas != replicas:
                raise AlreadyExists(f"extent {extent_id} exists with replicas "
                                    f"{existing.meta.replicas}")
            return existing
        if len(replicas) < 1 or len(set(replicas)) != len(replicas):
            raise InvalidArgument(f"replica set {replicas} must be distinct addresses")
        replica = self._new_replica(extent_id, list(replicas))
        # The data file's name must be durable before a large append written into it is
        # acknowledged (its journal record only points at the file): without this, a power
        # cut can leave a journal naming bytes in a file that is gone, and the node refuses
        # to start (issue 15, hole 5; tests/probe/test_power_cut.py).
        try:
            await self._in(self._meta_io, fsync_dir, self.data_dir)
        except BaseException:
            self.replicas.pop(extent_id, None)
            raise
        # Durable through the journal (one group-committed fsync shared with everything
        # else); the commit point file follows at the next checkpoint.
        try:
            await self.journal.append(RECORD.pack(CREATE, extent_id, 0)
                                      + json.dumps(replicas).encode())
        except BaseException:
            self.replicas.pop(extent_id, None)
            raise
        return replica

    def _new_replica(self, extent_id: int, replicas: list[str], replaying: bool = False
                     ) -> Replica:
        data_path, meta_path = replica_paths(self.data_dir, extent_id)
        replica = Replica(ReplicaMeta(extent_id, replicas), data_path, meta_path, dirty=True)
        # In a replay the data file may already hold synced large appends: keep it.
        flags = os.O_WRONLY | os.O_CREAT | (0 if replaying else os.O_TRUNC)
        os.close(os.open(data_path, flags, 0o644))
        self.replicas[extent_id] = replica
        return replica

    async def delete(self, extent_id: int) -> None:
        replica = self.get(extent_id)
        del self.replicas[extent_id]
        replica.sealing = True
        self._pending_total -= replica.pending_bytes
        replica.pending.clear()
        await self.journal.append(RECORD.pack(DELETE, extent_id, 0))
        await self._in(self._meta_io, _remove_files, replica)

    # ---- appends --------------------------------------------------------------------------

    async def wait_for_room(self, nbytes: int) -> None:
        """Back-pressure: wait while the journal queue is full or too much is durable but not
        yet in data files."""
        assert self._written is not None
        await self.journal.wait_for_room(nbytes)
        if self._pending_total + nbytes <= self.limits.pending_file_bytes_max:
            return
        async with self._written:
            await self._written.wait_for(
                lambda: self._pending_total == 0
                or self._pending_total + nbytes <= self.limits.pending_file_bytes_max)

    def check_append(self, extent_id: int, offset: int, nbytes: int) -> Replica:
        """Raise what `accept_append` would raise for this write; else the replica."""
        replica = self.get(extent_id)
        if replica.sealed or replica.sealing:
            raise Sealed(f"extent {extent_id} is sealed")
        if offset != replica.accepted_end:
            raise WrongOffset(f"extent {extent_id}: write at {offset}, but this replica ends "
                              f"at {replica.accepted_end}")
        if offset + nbytes > self.limits.extent_bytes_max:
            raise ExtentFull(f"extent {extent_id} would grow past "
                             f"{self.limits.extent_bytes_max} bytes")
        return replica

    def accept_append(self, extent_id: int, offset: int, frames: bytes,
                      on_durable: Callable[[], None] | None = None) -> asyncio.Future[None]:
        """Place `frames` at `offset`, which must be the replica's end; the future resolves
        when they are durable, and `on_durable` runs the moment they are (before the future
        resolves, in the journal's completion: no loop turn in between)."""
        replica = self.check_append(extent_id, offset, len(frames))
        return self._accept(replica, offset, frames, on_durable)

    def _accept(self, replica: Replica, offset: int, frames: bytes,
                then: Callable[[], None] | None = None) -> asyncio.Future[None]:
        assert offset == replica.accepted_end, (offset, replica.accepted_end)
        end = offset + len(frames)
        replica.accepted_end = end
        in_file = len(frames) >= self.limits.journal_bypass_bytes_min
        replica.pending.append((offset, frames, in_file))
        replica.pending_bytes += len(frames)
        self._pending_total += len(frames)
        # A future and a callback, not a task per append: this is the hot path. The journal
        # moves durable_end before it resolves the future, so a caller that sees the future
        # done also sees durable_end past it.
        def on_durable() -> None:
            self._on_durable(replica, end)
            if then is not None:
                then()
        if in_file:
            durable = self.journal.submit(
                RECORD.pack(APPEND_IN_FILE, replica.extent_id, offset)
                + IN_FILE.pack(len(frames), crc32c(frames)),
                FileWrite(replica.data_path, offset, frames), on_durable)
        else:
            durable = self.journal.submit(RECORD.pack(APPEND, replica.extent_id, offset) + frames,
                                          on_durable=on_durable)
        replica.tail = durable
        return durable

    def _on_durable(self, replica: Replica, end: int) -> None:
        # The journal completes records in order, so durable_end only grows.
        replica.durable_end = max(replica.durable_end, end)
        self._to_write[replica.extent_id] = None
        assert self._writer_wake is not None
        self._writer_wake.set()

    async def wait_durable(self, replica: Replica) -> None:
        """Wait until everything accepted so far on `replica` is durable."""
        tail = replica.tail
        if tail is not None:
            await asyncio.shield(tail)

    # ---- data files -----------------------------------------------------------------------

    async def _write_loop(self) -> None:
        """Write durable pending bytes into data files, behind the journal."""
        assert self._writer_wake is not None and self._written is not None
        while True:
            await self._writer_wake.wait()
            self._writer_wake.clear()
            while self._to_write:
                jobs = []
                for extent_id in list(self._to_write):
                    del self._to_write[extent_id]
                    replica = self.replicas.get(extent_id)
                    if replica is None:
                        continue
                    runs = [run for run in replica.pending
                            if run[0] + len(run[1]) <= replica.durable_end]
                    if runs:
                        jobs.append((replica, runs))
                if not jobs:
                    break
                batch = [(r.data_path, [(o, d) for o, d, in_file in runs if not in_file],
                          r.writeback_end) for r, runs in jobs]
                if sum(len(d) for _, runs, _ in batch for _, d in runs) <= INLINE_WRITE_BYTES_MAX:
                    # Into the page cache: cheaper than a thread hop.
                    writeback_ends = _write_runs(batch)
                else:
                    writeback_ends = await self._in(self._writes, _write_runs, batch)
                for (replica, _), writeback_end in zip(jobs, writeback_ends, strict=True):
                    replica.writeback_end = writeback_end
                for replica, runs in jobs:
                    written = sum(len(d) for _, d, _ in runs)
                    for _ in runs:
                        replica.pending.popleft()
                    replica.pending_bytes -= written
                    self._pending_total -= written
                    replica.file_end = runs[-1][0] + len(runs[-1][1])
                    replica.dirty = True
                    replica.check_lengths()
                async with self._written:
                    self._written.notify_all()

    async def _drain(self, targets: dict[int, int]) -> None:
        """Wait until each replica's data file reaches the given length (or it is gone)."""
        assert self._written is not None

        def done() -> bool:
            return all(extent_id not in self.replicas
                       or self.replicas[extent_id].file_end >= end
                       for extent_id, end in targets.items())
        async with self._written:
            await self._written.wait_for(done)

    # ---- reads ----------------------------------------------------------------------------

    def commit_length(self, extent_id: int) -> tuple[int, bool]:
        replica = self.get(extent_id)
        if replica.sealed:
            return replica.meta.sealed_length, True
        return replica.durable_end, False

    async def read(self, extent_id: int, offset: int, length: int) -> bytes:
        """Whole verified frames starting at `offset`, within `length` (at least one frame)."""
        replica = self.get(extent_id)
        limit, _ = self.commit_length(extent_id)
        if length <= 0 or length > self.limits.read_bytes_max:
            raise InvalidArgument(f"read length {length} not in 1..{self.limits.read_bytes_max}")
        if offset >= limit:
            raise OutOfRange(f"extent {extent_id}: offset {offset} is at or past its commit "
                             f"length {limit}")
        data = await self._read_bytes(replica, offset, min(offset + length, limit))
        if len(data) < framing.HEADER_BYTES:
            raise ChecksumError(f"extent {extent_id}: no whole frame header at {offset}")
        first = framing.frame_bytes(framing.HEADER.unpack_from(data)[0])
        if first > len(data):
            if offset + first > limit:
                raise ChecksumError(f"extent {extent_id}: frame at {offset} claims {first} "
                                    f"bytes past the commit length {limit} (corrupt, or not a "
                                    f"block boundary)")
            data = await self._read_bytes(replica, offset, offset + first)
        whole = framing.valid_prefix(data)
        if whole == 0:
            framing.verify_frames(data[:first], f"extent {extent_id} at {offset}")
            raise ChecksumError(f"extent {extent_id}: bad frame at {offset}")
        return data[:whole] if whole == len(data) else self._cut(data, whole, extent_id, offset)

    @staticmethod
    def _cut(data: bytes, whole: int, extent_id: int, offset: int) -> bytes:
        # A frame past `whole` either did not fit the requested length (fine) or is corrupt.
        rest = memoryview(data)[whole:]
        if len(rest) >= framing.HEADER_BYTES:
            size = framing.frame_bytes(framing.HEADER.unpack_from(rest)[0])
            if size <= len(rest):
                framing.verify_frames(rest[:size], f"extent {extent_id} at {offset + whole}")
        return data[:whole]

    async def _read_bytes(self, replica: Replica, start: int, end: int) -> bytes:
        file_end = replica.file_end
        pending = list(replica.pending)
        parts = []
        if start < file_end:
            part = await self._in(self._reads, read_range_from_file, replica.data_path,
                                  start, min(end, file_end))
            if len(part) != min(end, file_end) - start:
                raise Unavailable(f"extent {replica.extent_id} changed during the read")
            parts.append(part)
        if end > file_end:
            parts.append(pending_slice(pending, max(start, file_end), end))
        return b"".join(parts)

    # ---- sealing --------------------------------------------------------------------------

    async def fence(self, extent_id: int) -> tuple[int, bool]:
        """Stop accepting appends for good, wait for the accepted ones to be durable, and
        return the commit length, which no append can change any more (the seal's probe)."""
        replica = self.get(extent_id)
        replica.sealing = True
        if not replica.sealed and not replica.meta.fenced:
            # Durable through the journal like the seal itself (see _seal_locked).
            replica.meta.fenced = True
            replica.dirty = True
            await self.journal.append(RECORD.pack(FENCE, extent_id, 0))
        await self.wait_durable(replica)
        return self.commit_length(extent_id)

    async def seal(self, extent_id: int, length: int, fetch_missing: FetchMissing) -> int:
        """Fix the replica at `length` (§2 "Sealing"); idempotent for the same length."""
        replica = self.get(extent_id)
        async with replica.seal_lock:
            return await self._seal_locked(replica, length, fetch_missing)

    async def _seal_locked(self, replica: Replica, length: int,
                           fetch_missing: FetchMissing) -> int:
        extent_id = replica.extent_id
        if replica.sealed:
            if replica.meta.sealed_length != length:
                raise PreconditionFailed(f"extent {extent_id} is sealed at "
                                         f"{replica.meta.sealed_length}, not {length}")
            return length
        replica.sealing = True
        await self.wait_durable(replica)
        if replica.durable_end < length:
            await fetch_missing(replica, length)
            await self.wait_durable(replica)
            if replica.durable_end != length:
                raise Unavailable(f"extent {extent_id}: could only reach {replica.durable_end} "
                                  f"of the sealed length {length}")
        await faults.apoint("en.seal.before_record")
        # The seal is durable once its journal record is (one group-committed fsync); the
        # commit point follows at the next checkpoint. The in-memory state changes first, so
        # a checkpoint that drops the SEAL record has written a sealed commit point.
        replica.meta.sealed = True
        replica.meta.sealed_length = length
        replica.meta.file_length = min(replica.meta.file_length, length)
        replica.dirty = True
        await self.journal.append(RECORD.pack(SEAL, extent_id, length))
        if replica.durable_end > length:
            await self._truncate(replica, length)
        log.info("extent %d sealed at %d", extent_id, length)
        return length

    def accept_synced(self, replica: Replica, offset: int, frames: bytes) -> asyncio.Future[None]:
        """Accept frames fetched from a peer while sealing (appends are refused by then)."""
        framing.verify_frames(frames, f"extent {replica.extent_id} sync at {offset}")
        if offset != replica.accepted_end:
            raise WrongOffset(f"sync chunk at {offset}, replica ends at {replica.accepted_end}")
        return self._accept(replica, offset, frames)

    async def _truncate(self, replica: Replica, length: int) -> None:
        await self._drain({replica.extent_id: replica.durable_end})
        await self._in(self._meta_io, _truncate_file, replica.data_path, length)
        replica.accepted_end = replica.durable_end = replica.file_end = length
        replica.dirty = True

    # ---- checkpoints ----------------------------------------------------------------------

    async def checkpoint(self) -> None:
        """Write the journal through to data files and drop the segments it covered."""
        assert self._checkpoint_lock is not None
        async with self._checkpoint_lock:
            self._records_at_checkpoint = self.journal.records
            closed = await self.journal.rotate()
            await self._drain({r.extent_id: r.durable_end for r in self.replicas.values()})
            for replica in [r for r in self.replicas.values() if r.dirty]:
                replica.dirty = False
                length = replica.file_end
                await self._in(self._meta_io, _fsync_file, replica.data_path)
                if replica.extent_id not in self.replicas:
                    continue
                replica.meta.file_length = length
                await self._in(self._meta_io, write_meta, replica.meta_path,
                               replica.meta.encode())
            # Unlinks of deleted replicas must be durable before their DELETE records go.
            await self._in(self._meta_io, fsync_dir, self.data_dir)
            await faults.apoint("en.checkpoint.before_drop")
            await self.journal.drop_through(closed)

    async def _checkpoint_loop(self) -> None:
        interval = self.limits.checkpoint_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            if self.journal.records != self._records_at_checkpoint:
                try:
                    await self.checkpoint()
                except Exception:
                    log.exception("checkpoint failed; will retry")

    # ---- recovery -------------------------------------------------------------------------

    def recover(self) -> None:
        """Rebuild every replica from its commit point and the journal (blocking, at start)."""
        for tmp in self.data_dir.glob("*.meta.tmp"):
            tmp.unlink()
        for meta_path in sorted(self.data_dir.glob("ext-*.meta")):
            meta = ReplicaMeta.decode(meta_path.read_bytes(), str(meta_path))
            data_path, _ = replica_paths(self.data_dir, meta.extent_id)
            replica = Replica(meta, data_path, meta_path, sealing=meta.fenced)
            size = data_path.stat().st_size if data_path.exists() else 0
            end = min(size, meta.file_length)
            if meta.sealed:
                end = min(end, meta.sealed_length)
            if size < meta.file_length:
                log.error("extent %d: data file has %d bytes, its commit point claims %d",
                          meta.extent_id, size, meta.file_length)
            # Bytes past the commit point are garbage or journaled; the replay settles which,
            # and the file is cut to the replayed end afterwards.
            replica.accepted_end = replica.durable_end = replica.file_end = end
            self.replicas[meta.extent_id] = replica
        records = list(self.journal.replay())
        last_segment = records[-1][0] if records else 0
        # Two passes: an append's bytes may have been cut by a seal recorded after it (a large
        # append's bytes are then gone from the data file), so learn the seals first.
        seals: dict[int, int] = {}
        for _, body in records:
            kind, extent_id, length = RECORD.unpack_from(body)
            if kind == SEAL:
                seals[extent_id] = length
        for _, body in records:
            self._replay_record(body, seals)
        replayed = len(records)
        known = {r.data_path for r in self.replicas.values()}
        for orphan in self.data_dir.glob("ext-*.dat"):
            if orphan not in known:
                log.warning("deleting %s: not a replica (deleted, or never created)", orphan)
                orphan.unlink()
        for replica in self.replicas.values():
            _truncate_file(replica.data_path, replica.file_end)
            if replica.dirty:
                _fsync_file(replica.data_path)
                replica.meta.file_length = replica.file_end
                write_meta(replica.meta_path, replica.meta.encode())
                replica.dirty = False
        for path in self.journal.segments():
            if int(path.stem.split("-")[1]) <= last_segment:
                path.unlink()
        fsync_dir(self.journal.directory)
        log.info("recovered %d extents, replayed %d journal records",
                 len(self.replicas), replayed)

    def _replay_record(self, body: bytes, seals: dict[int, int]) -> None:
        kind, extent_id, offset = RECORD.unpack_from(body)
        replica = self.replicas.get(extent_id)
        if kind == CREATE:
            if replica is None:
                self._new_replica(extent_id, json.loads(bytes(body[RECORD.size:])),
                                  replaying=True)
            return
        if kind == DELETE:
            if replica is not None:
                del self.replicas[extent_id]
                _remove_files(replica)
            return
        if replica is None:
            return  # deleted since
        end = replica.file_end
        if kind == SEAL:
            if end < offset:
                log.error("extent %d: sealed at %d but holds only %d", extent_id, offset, end)
            elif end > offset:
                _truncate_file(replica.data_path, offset)
            replica.accepted_end = replica.durable_end = replica.file_end = min(end, offset)
            replica.meta.sealed, replica.meta.sealed_length = True, offset
            replica.dirty = True
            return
        if kind == FENCE:
            replica.meta.fenced = replica.sealing = replica.dirty = True
            return
        cap = replica.meta.sealed_length if replica.sealed else seals.get(extent_id)
        if kind == APPEND_IN_FILE:
            self._replay_in_file(replica, offset, *IN_FILE.unpack_from(body, RECORD.size), cap)
            return
        if kind != APPEND:
            raise Internal(f"unknown journal record kind {kind}")
        frames = memoryview(body)[RECORD.size:]
        if cap is not None:
            # A seal cuts what lies beyond it, but what lies below it may still be only in
            # the journal (sealed before any checkpoint).
            frames = frames[:max(0, cap - offset)]
        record_end = offset + len(frames)
        if record_end <= end:
            return  # already in the data file, or wholly cut by the seal
        if offset > end:
            log.error("extent %d: journal record at %d, but the replica ends at %d: "
                      "the replica stays at %d", extent_id, offset, end, end)
            return
        suffix = frames[end - offset:]
        framing.verify_frames(suffix, f"journal replay of extent {extent_id} at {end}")
        _write_runs([(replica.data_path, [(end, bytes(suffix))], replica.writeback_end)])
        replica.accepted_end = replica.durable_end = replica.file_end = record_end
        replica.dirty = True

    def _replay_in_file(self, replica: Replica, offset: int, length: int, crc: int,
                        cap: int | None) -> None:
        """The frames of an APPEND_IN_FILE record were fdatasync'd before the record: check
        they are there and move the replica's end past them."""
        end = replica.file_end
        record_end = offset + length
        if cap is not None:
            record_end = min(record_end, cap)
        if record_end <= end:
            return
        if offset != end:
            log.error("extent %d: journal record at %d, but the replica ends at %d",
                      replica.extent_id, offset, end)
            return
        frames = read_range_from_file(replica.data_path, offset, record_end)
        whole = record_end == offset + length
        if len(frames) != record_end - offset or (whole and crc32c(frames) != crc):
            raise Internal(f"extent {replica.extent_id}: the bytes [{offset}, {record_end}) "
                           f"the journal says were synced to the data file are not there")
        # Cut by a seal, the record's CRC no longer covers what is left: its frames' do.
        framing.verify_frames(frames, f"journal replay of extent {replica.extent_id} at "
                              f"{offset}")
        replica.accepted_end = replica.durable_end = replica.file_end = record_end
        replica.dirty = True

    # ---- helpers --------------------------------------------------------------------------

    @property
    def pending_bytes(self) -> int:
        return self._pending_total

    @staticmethod
    async def _in(pool: ThreadPoolExecutor, fn: Callable[..., object], *args: object) -> object:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


def _write_runs(jobs: list[tuple[Path, list[tuple[int, bytes]], int]]) -> list[int]:
    """Write each (path, runs, writeback_end) job's runs into its data file; start the
    writeback of what lies past writeback_end once that is WRITEBACK_BYTES_MIN or more.
    Returns each job's new writeback_end."""
    writeback_ends = []
    for path, runs, writeback_end in jobs:
        writeback_ends.append(writeback_end)
        try:
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            continue  # the extent was deleted meanwhile
        try:
            end = writeback_end
            for offset, data in runs:
                view = memoryview(data)
                while view:
                    written = os.pwrite(fd, view, offset)
                    view, offset = view[written:], offset + written
                end = max(end, offset)
            if end - writeback_end >= writeback.WRITEBACK_BYTES_MIN:
                writeback.start(fd, writeback_end, end - writeback_end)
                writeback_ends[-1] = end
        finally:
            os.close(fd)
    return writeback_ends


def _remove_files(replica: Replica) -> None:
    """Remove a deleted replica's files; its DELETE record makes recovery finish the job."""
    for path in (replica.meta_path, replica.data_path):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _fsync_file(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _truncate_file(path: Path, length: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != length:
            os.ftruncate(fd, length)
            os.fsync(fd)
    finally:
        os.close(fd)
