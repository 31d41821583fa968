"""An extent node's replicas and its journal: accepting appends, reads, seals and checkpoints
(§2). No networking here; the servicer and the replication pipeline sit around it. It composes
the replica state machine (replica_state.py: what a replica takes when), the journal records
(records.py), the data-file I/O (extent_files.py), the write-behind (write_behind.py), reads
(reads.py) and recovery (recovery.py).

Contracts:
- `accept_append` gives an append its place synchronously (offsets are handed out in call
  order; a write not at the replica's end, or one its state does not take, is refused) and
  returns a future that resolves when the append is durable in the journal. Appends become
  durable in the order they were accepted.
- Reads serve only bytes below the replica's durable end, verifying every frame's checksum.
- `seal(length)` stops appends for good, waits for what was accepted to be durable, fetches
  what is missing (through the `fetch_missing` callback, from peers), writes a SEAL record,
  truncates what lies beyond, and records the seal in the commit point.
- A checkpoint writes the journal's contents through to the data files, fsyncs them, records
  each touched replica's commit point, and drops the journal segments it covered.
- `create` makes the new data file's name durable before the replica is journaled (large
  appends are fdatasync'd straight into that file: extent_files.py).
- `recover()` (at start, before serving) rebuilds every replica from its commit point plus the
  journal, then checkpoints, so a node starts with an empty journal; its open replicas come
  back UNPROVEN (no append as the primary until sealed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import faults
from common.config import ExtentNodeLimits
from common.durable_fs import fsync_dir, make_dirs
from common.errors import (
    AlreadyExists,
    ExtentFull,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    Unavailable,
    WrongOffset,
)
from stream_layer import framing
from stream_layer.extent_node import records
from stream_layer.extent_node.extent_files import (
    fsync_file,
    remove_files,
    truncate_file,
)
from stream_layer.extent_node.journal import FileWrite, Journal
from stream_layer.extent_node.reads import ReplicaReader
from stream_layer.extent_node.recovery import Recovery, new_replica
from stream_layer.extent_node.replica import (
    Replica,
    write_meta,
)
from stream_layer.extent_node.replica_state import Event, Write, next_state, refusal
from stream_layer.extent_node.scrub import ScrubResult, scrub_replica
from stream_layer.extent_node.write_behind import WriteBehind

log = logging.getLogger(__name__)

FetchMissing = Callable[[Replica, int], Awaitable[None]]


class ExtentStore:
    def __init__(self, data_dir: Path, journal_dir: Path, limits: ExtentNodeLimits) -> None:
        self.data_dir = data_dir
        self.limits = limits
        make_dirs(data_dir)
        self.replicas: dict[int, Replica] = {}
        self.journal = Journal(journal_dir, limits.journal_batch_bytes_max,
                               limits.journal_queue_bytes_max, limits.journal_segment_bytes_max)
        # Data-file writes in one thread (in order); reads in a few; metadata in one (in order).
        self._writes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extent-write")
        self._reads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="extent-read")
        self._meta_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extent-meta")
        self._reader = ReplicaReader(limits.read_bytes_max, self._reads)
        self._creating: dict[int, asyncio.Future[None]] = {}  # creates under way
        self._writer = WriteBehind(lambda extent_id: self.replicas.get(extent_id),
                                   limits.pending_file_bytes_max, self._writes)
        self._checkpoint_lock: asyncio.Lock | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._records_at_checkpoint = 0

    # ---- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self._checkpoint_lock = asyncio.Lock()
        self.journal.start()
        loop = asyncio.get_running_loop()
        self._tasks = [self._writer.start(),
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
        creating = self._creating.get(extent_id)
        if creating is not None:  # the same create, retried while the first is under way
            await asyncio.shield(creating)
        existing = self.replicas.get(extent_id)
        if existing is not None:
            if existing.meta.replicas != replicas:
                raise AlreadyExists(f"extent {extent_id} exists with replicas "
                                    f"{existing.meta.replicas}")
            return existing
        if len(replicas) < 1 or len(set(replicas)) != len(replicas):
            raise InvalidArgument(f"replica set {replicas} must be distinct addresses")
        self._creating[extent_id] = asyncio.get_running_loop().create_future()
        try:
            # The data file and its durable name first (off the loop: a directory fsync),
            # then the replica, durable through the journal (one group-committed fsync
            # shared with everything else); the commit point follows at the next checkpoint.
            replica = await self._in(self._meta_io, new_replica, self.data_dir, extent_id,
                                     list(replicas), False)
            assert isinstance(replica, Replica)
            self.replicas[extent_id] = replica
            try:
                await self.journal.append(records.create(extent_id, list(replicas)))
            except BaseException:
                self.replicas.pop(extent_id, None)
                raise
            return replica
        finally:
            self._creating.pop(extent_id).set_result(None)

    async def delete(self, extent_id: int) -> None:
        replica = self.get(extent_id)
        del self.replicas[extent_id]
        replica.state = next_state(replica.state, Event.DELETE)
        self._writer.drop(replica)
        await self.journal.append(records.delete(extent_id))
        await self._in(self._meta_io, remove_files, replica.meta_path, replica.data_path)

    # ---- appends --------------------------------------------------------------------------

    async def wait_for_room(self, nbytes: int) -> None:
        """Back-pressure: wait while the journal queue is full or too much is durable but not
        yet in data files."""
        await self.journal.wait_for_room(nbytes)
        await self._writer.wait_for_room(nbytes)

    def check_append(self, extent_id: int, offset: int, nbytes: int,
                     write: Write = Write.APPEND) -> Replica:
        """Raise what `accept_append` would raise for this write; else the replica."""
        replica = self.get(extent_id)
        refused = refusal(replica.state, write, extent_id)
        if refused is not None:
            raise refused
        if offset != replica.accepted_end:
            raise WrongOffset(f"extent {extent_id}: write at {offset}, but this replica ends "
                              f"at {replica.accepted_end}")
        if offset + nbytes > self.limits.extent_bytes_max:
            raise ExtentFull(f"extent {extent_id} would grow past "
                             f"{self.limits.extent_bytes_max} bytes")
        return replica

    def accept_append(self, extent_id: int, offset: int, frames: bytes,
                      on_durable: Callable[[], None] | None = None,
                      write: Write = Write.APPEND) -> asyncio.Future[None]:
        """Place `frames` at `offset`, which must be the replica's end, as this node's primary
        append or (`write`) a forwarded one; the future resolves when they are durable, and
        `on_durable` runs the moment they are (before the future resolves, in the journal's
        completion: no loop turn in between)."""
        replica = self.check_append(extent_id, offset, len(frames), write)
        return self._accept(replica, offset, frames, on_durable)

    def _accept(self, replica: Replica, offset: int, frames: bytes,
                then: Callable[[], None] | None = None) -> asyncio.Future[None]:
        assert offset == replica.accepted_end, (offset, replica.accepted_end)
        end = offset + len(frames)
        replica.accepted_end = end
        in_file = len(frames) >= self.limits.journal_bypass_bytes_min
        replica.pending.append((offset, frames, in_file))
        replica.pending_bytes += len(frames)
        self._writer.pending_total += len(frames)
        # A future and a callback, not a task per append: this is the hot path. The journal
        # moves durable_end before it resolves the future, so a caller that sees the future
        # done also sees durable_end past it.
        def on_durable() -> None:
            self._on_durable(replica, end)
            if then is not None:
                then()
        if in_file:
            durable = self.journal.submit(
                records.append_in_file(replica.extent_id, offset, frames),
                FileWrite(replica.data_path, offset, frames), on_durable)
        else:
            durable = self.journal.submit(records.append(replica.extent_id, offset, frames),
                                          on_durable=on_durable)
        replica.tail = durable
        return durable

    def _on_durable(self, replica: Replica, end: int) -> None:
        # The journal completes records in order, so durable_end only grows.
        replica.durable_end = max(replica.durable_end, end)
        self._writer.durable(replica)

    async def wait_durable(self, replica: Replica) -> None:
        """Wait until everything accepted so far on `replica` is durable."""
        tail = replica.tail
        if tail is not None:
            await asyncio.shield(tail)

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
        return await self._reader.read(replica, limit, offset, length)

    async def scrub(self, extent_id: int) -> ScrubResult:
        """Verify every frame of the replica below its commit length, where it lies
        (scrub.py): its length, digest and first bad frame."""
        replica = self.get(extent_id)
        limit, sealed = self.commit_length(extent_id)
        return await scrub_replica(replica, limit, sealed, self.limits.scrub_chunk_bytes,
                                   self._reads)

    # ---- sealing --------------------------------------------------------------------------

    async def fence(self, extent_id: int) -> tuple[int, bool]:
        """Stop accepting appends for good, wait for the accepted ones to be durable, and
        return the commit length, which no append can change any more (the seal's probe)."""
        replica = self.get(extent_id)
        replica.state = next_state(replica.state, Event.FENCE, replica.extent_id)
        if not replica.sealed and not replica.meta.fenced:
            # Durable through the journal like the seal itself (see _seal_locked).
            replica.meta.fenced = True
            replica.dirty = True
            await self.journal.append(records.fence(extent_id))
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
        replica.state = next_state(replica.state, Event.FENCE, replica.extent_id)
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
        replica.state = next_state(replica.state, Event.SEAL, replica.extent_id)
        await self.journal.append(records.seal(extent_id, length))
        if replica.durable_end > length:
            await self._truncate(replica, length)
        log.info("extent %d sealed at %d", extent_id, length)
        return length

    def accept_synced(self, replica: Replica, offset: int, frames: bytes) -> asyncio.Future[None]:
        """Accept frames fetched from a peer while sealing (appends are refused by then)."""
        framing.verify_frames(frames, f"extent {replica.extent_id} sync at {offset}")
        refused = refusal(replica.state, Write.SYNC, replica.extent_id)
        if refused is not None:
            raise refused
        if offset != replica.accepted_end:
            raise WrongOffset(f"sync chunk at {offset}, replica ends at {replica.accepted_end}")
        return self._accept(replica, offset, frames)

    async def _truncate(self, replica: Replica, length: int) -> None:
        await self._writer.drain({replica.extent_id: replica.durable_end})
        await self._in(self._meta_io, truncate_file, replica.data_path, length)
        replica.accepted_end = replica.durable_end = replica.file_end = length
        replica.dirty = True

    # ---- checkpoints ----------------------------------------------------------------------

    async def checkpoint(self) -> None:
        """Write the journal through to data files and drop the segments it covered."""
        assert self._checkpoint_lock is not None
        async with self._checkpoint_lock:
            self._records_at_checkpoint = self.journal.records
            closed = await self.journal.rotate()
            await self._writer.drain({r.extent_id: r.durable_end for r in self.replicas.values()})
            for replica in [r for r in self.replicas.values() if r.dirty]:
                replica.dirty = False
                length = replica.file_end
                await self._in(self._meta_io, fsync_file, replica.data_path)
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
        """Rebuild every replica from its commit point and the journal (blocking, at start;
        recovery.py)."""
        self.replicas = Recovery(self.data_dir, self.journal).run()

    # ---- helpers --------------------------------------------------------------------------

    @property
    def pending_bytes(self) -> int:
        return self._writer.pending_total

    @staticmethod
    async def _in(pool: ThreadPoolExecutor, fn: Callable[..., object], *args: object) -> object:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

