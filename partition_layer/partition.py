"""One range partition as its owner serves it (§4): four streams, a memtable, checkpoints,
commit-log replay, group commit.

Contracts:
- A write is acknowledged only after the commit-log block holding it is durable on the stream
  layer (3 replicas). Many concurrent operations share one block (group commit); up to
  `commit_pipeline_depth` blocks are in flight, sent in LSN order on the one stream, so they
  land in LSN order and replay is a plain scan that skips what it has seen (a retried append
  may land twice; committer.py says what happens when one fails).
- Loading fences the previous owner first (`fence_stream` with this owner's lease token on
  the metadata and commit-log streams — any older owner's append fails from then on, §8
  invariant 3), then reads the last metadata record and replays the commit log from the
  replay point: its cost grows with the log since the last checkpoint, not with the
  partition's size (indexes load on first use). A newest record with a split or merge
  intent is resolved first (meta_derive.py: a child's meta derived, published in the
  background; or the intent rolled back); replay skips mutations outside its range.
- It serves only while its lease is valid (the lease client stops claiming before the lock
  service could hand the partition to another PS). A failed commit-log append leaves the
  partition's state unknown (was it written?): the partition stops serving, and the next load
  finds out from the log.
- The committer (committer.py) and the checkpointer (checkpoint.py) see the partition only
  through `CommitSite` and `CheckpointSite`: this class is both, and neither imports it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from common import rpc
from common.config import PartitionLimits
from common.errors import Internal, NotOwner, StampError, Unavailable
from common.proto import witness_pb2 as wpb
from partition_layer import keys, log_reads, meta_derive, size_split
from partition_layer.cache import LruCache
from partition_layer.checkpoint import Checkpointer
from partition_layer.commit_log import CommitOp, Replayer, decode_batch, within
from partition_layer.committer import GroupCommitter
from partition_layer.extent_needs import WritePins
from partition_layer.geo_shipper import GeoShipper
from partition_layer.memtable import Memtable
from partition_layer.merge import aiter_sync, merge
from partition_layer.operations import Operation, log_meta_of, meta_key
from partition_layer.partition_meta import PartitionMeta, encode_meta
from partition_layer.partition_states import (
    GONE,
    LOADING,
    MERGING,
    SERVING,
    SPLITTING,
    UNLOADING,
    States,
)
from partition_layer.partition_streams import LoadReport, newest_meta, open_fenced
from partition_layer.record_batch import Record
from partition_layer.rows import BlobRef, LogMeta, Row, decode_row, row_version
from partition_layer.run_cache import IndexCache, Run
from partition_layer.runs import block_cache
from partition_layer.speculation import replaying
from partition_layer.stats import LoadStats
from partition_layer.warm_start import inherit_caches
from partition_layer.witness_set import OwnerCalls, set_epoch
from stream_layer.client import AsyncStream, AsyncStreamClient
from stream_layer.framing import Location

log = logging.getLogger(__name__)

ABSENT = b""  # the row cache's mark for "no row in the checkpoints"


class RangePartition(States):
    def __init__(self, partition_id: int, key_range: keys.KeyRange, streams: AsyncStreamClient,
                 limits: PartitionLimits, epoch: int, lease_valid: Callable[[], bool]) -> None:
        self.id = partition_id
        self.range = key_range
        self.client = streams
        self.limits = limits
        self.epoch = epoch
        self.lease_valid = lease_valid
        self._state = LOADING
        self.streams: dict[str, AsyncStream] = {}
        self.memtable = Memtable()
        self.frozen: Memtable | None = None
        self.readers: list[Run] = []  # newest first, as meta.runs
        self.meta: PartitionMeta | None = None
        self.applied_lsn = 0
        # The last operation applied here from another stamp (this stamp its secondary then):
        # in this process, by commit or replay (issue 30, geo_shipping.start_position).
        self.replicated_lsn = 0
        # The highest version of any row applied (committer._version; kept in the metadata).
        self.version_floor = 0
        self.last_commit: Location | None = None
        self.log_bytes = 0  # commit log written since the replay point
        self.row_cache = LruCache(limits.row_cache_bytes_max)
        # Decoded data blocks of the checkpoints (the run indexes themselves stay loaded).
        self.block_cache = block_cache(limits.block_cache_bytes_max)
        self.blob_cache = LruCache(limits.blob_cache_bytes_max)
        self.blob_pins = WritePins()  # blob values not committed yet: gc keeps their extents
        # Inter-stamp replication (issue 30): ships what commits to secondary stamps.
        self.shipper: GeoShipper | None = None
        self.indexes: IndexCache | None = None
        self.writes = 0  # bumped by every memtable write: guards the row cache
        self.stats = LoadStats()
        self.checkpointer = Checkpointer(self)
        self.committer = GroupCommitter(self)
        # What each needs of the other, as the sites name it: bound methods, so the commit
        # path (wait_for_room is awaited for every block) pays no extra frame.
        self.wait_for_room = self.checkpointer.wait_for_room
        self.checkpoint_if_due = self.checkpointer.maybe_start
        self.drain_commits = self.committer.drain
        self.resume_commits = self.committer.resume
        self._log_events: dict[tuple[str, str], asyncio.Event] = {}
        self.stopped = asyncio.Event()
        self._warming: asyncio.Task[None] | None = None
        # CURP (curp.py, witness_replay.py): how this server reaches witnesses (set by it),
        # the records the witnesses of the newest metadata held (fenced at load, executed
        # while `recovering`), this owner's own witnesses once recorded, and the search for
        # a set when none answered at load (witness_repick.pick_later).
        self.witness_channels: rpc.ChannelCache | None = None
        self.witnessed: list[wpb.WitnessRecord] = []
        self.fenced_witnesses: OwnerCalls | None = None
        self.recovering = False
        self.witnesses: OwnerCalls | None = None
        self.curp_tasks: set[asyncio.Task[None]] = set()

    # ---- load -------------------------------------------------------------------------------

    async def load(self, create_if_missing: bool = False,
                   parents: Sequence[RangePartition] = ()) -> LoadReport:
        """`parents`: those it was just split or merged from, here (warm_start.py)."""
        started, report = time.monotonic(), LoadReport()
        self.streams = await open_fenced(self.client, self.id, self.epoch, create_if_missing)
        fenced_at = time.monotonic()
        # The fence sealed the log's last extent: a new one now, not at the first commit.
        newest, _ = await asyncio.gather(newest_meta(self.streams["meta"]),
                                         self.streams["log"].ensure_open())
        self.meta, resolved = meta_derive.resolve(newest, self.id)
        derived = resolved and newest is not None and newest.partition_id != self.id  # a child
        if self.meta is None:
            self.meta = PartitionMeta(partition_id=self.id, key_range=self.range)
        if resolved:
            log.info("partition %d: meta %s: %s, %d runs", self.id, "derived" if derived
                     else "rolled back", self.meta.key_range.to_dict(), len(self.meta.runs))
        if resolved and not derived:  # its own record first: no later load rolls back again
            await self.streams["meta"].append([encode_meta(self.meta)])
        self.range = self.meta.key_range
        await self._fence_witnesses()
        self.applied_lsn = self.meta.applied_lsn
        self.version_floor = max(self.meta.version_floor, self.meta.applied_lsn)
        self.last_commit = self.meta.replay_from
        self.indexes = IndexCache(self.limits.index_cache_bytes_max, self.streams["row"].read,
                                  self.block_cache)
        inherit_caches(self, parents if derived else ())
        # Indexes load on first use (not here: size-independent), warmed soon after serving.
        self.readers = [Run(info, self.indexes) for info in self.meta.runs]
        report.runs = len(self.readers)
        replayer = Replayer(self.applied_lsn)
        async for location, block in self.streams["log"].blocks(self.meta.replay_from):
            for op in replayer.feed(decode_batch(block)):
                self.apply(within(op, self.range))  # a split child replays its parent's
                report.replayed_ops += 1
            report.replayed_bytes += len(block)
            self.log_bytes += len(block)
            self.last_commit = location
        dropped = replayer.finish()
        if dropped:
            log.warning("partition %d: %d unacknowledged operations past a gap in the commit "
                        "log were dropped (a previous owner failed mid-pipeline)", self.id,
                        dropped)
        if self.state == GONE:  # stopped while loading (its lease or session was lost)
            raise Unavailable(f"partition {self.id} stopped while it loaded")
        self._move(SERVING)
        # Until its witnesses' writes are executed and its own set recorded (witness_replay).
        self.recovering = self.witness_channels is not None
        # Its own record if derived (off the unavailable time of the split or merge); run
        # merges only while it serves (checkpoint.py `after_load`).
        self.checkpointer.after_load(derived, serving=lambda: self.state == SERVING)
        self.committer.start()
        self._warming = asyncio.get_running_loop().create_task(self._warm_indexes())
        report.seconds = time.monotonic() - started
        log.info("partition %d loaded at epoch %d in %.3f s (streams fenced in %.3f s): %d "
                 "runs, %d ops replayed (%d bytes)", self.id, self.epoch, report.seconds,
                 fenced_at - started, report.runs, report.replayed_ops, report.replayed_bytes)
        return report

    async def _fence_witnesses(self) -> None:
        """CURP (curp.py step 7): fence the witnesses the newest metadata names with this
        owner's epoch — no write of an older owner is acknowledged from then on — and keep
        what they held, for witness_replay.py to execute once the commit log is replayed."""
        assert self.meta is not None
        if self.meta.witnesses is None:
            return
        if self.witness_channels is None:
            raise Unavailable(f"partition {self.id} has CURP witnesses to fence, and this "
                              "server no way to reach them")
        self.fenced_witnesses = OwnerCalls(self.witness_channels, self.meta.witnesses,
                                           self.id, set_epoch(self.epoch))
        self.witnessed = await self.fenced_witnesses.fence()

    async def _warm_indexes(self) -> None:
        await asyncio.sleep(self.limits.index_warm_delay_ms / 1000)
        for run in list(self.readers):
            try:
                await run.warm()
            except StampError as exc:  # a read that needs it will try again
                log.warning("partition %d: warming run %d: %s", self.id, run.info.run_id, exc)

    # ---- serving checks ---------------------------------------------------------------------

    def committing(self) -> bool:
        return self.state in (SERVING, UNLOADING, SPLITTING, MERGING)

    def gone(self) -> bool:
        return self.state == GONE

    def check_serving(self) -> None:
        if self.state != SERVING:
            raise NotOwner(f"partition {self.id} is {self.state} here")  # e.g. "splitting"
        if not self.lease_valid():
            raise NotOwner(f"partition {self.id}: this server's lease has run out")
        if self.recovering and not replaying.get():
            raise NotOwner(f"partition {self.id} is executing its witnesses' writes here")

    # ---- writes: group commit (committer.py) -------------------------------------------------

    async def submit(self, op: Operation, nbytes: int, hint: int = 0) -> Any:
        """Queue `op` for the next group commit; its result once the commit is durable (or
        early, with CURP's version `hint`: committer.py)."""
        self.check_serving()
        return await self.committer.submit(op, nbytes, hint)

    def apply(self, op: CommitOp) -> None:
        """Make a durable operation visible (commit or replay), strictly in LSN order."""
        assert op.lsn == self.applied_lsn + 1, (op.lsn, self.applied_lsn)
        for key, row in op.mutations:
            self.memtable.put(key, row)
            self.row_cache.pop(key)
        if op.mutations:  # one version for an op's rows, unless they were replicated
            rows = op.mutations if op.replicated else op.mutations[:1]
            self.version_floor = max(self.version_floor, *(row_version(r) for _, r in rows))
        if op.replicated:  # local operations before it are never shipped (geo_shipping)
            self.replicated_lsn = op.lsn
        self.writes += 1
        self.applied_lsn = op.lsn

    def wake_logs(self, ops: Iterable[Operation]) -> None:
        for op in ops:
            if op.log:
                event = self._log_events.pop((op.account, op.pname), None)
                if event is not None:
                    event.set()

    def log_event(self, account: str, pname: str) -> asyncio.Event:
        """Set at the next commit that changes this log (or when the partition stops)."""
        return self._log_events.setdefault((account, pname), asyncio.Event())

    # ---- reads ------------------------------------------------------------------------------

    def row_in_memory(self, key: bytes) -> tuple[bool, Row | None]:
        """(True, the live row at `key`) when the memtables or the row cache know it without
        a read; else (False, None). The committer's lookups take this path first: its
        rows are nearly always in memory, and an await per key costs more than the lookup."""
        for table in (self.memtable, self.frozen):
            if table is not None:
                encoded = table.get(key)
                if encoded is not None:
                    return True, _live(decode_row(encoded))
        cached = self.row_cache.get(key)
        if cached is not None:
            return True, None if cached == ABSENT else _live(decode_row(cached))
        return False, None

    async def get_row(self, key: bytes) -> Row | None:
        """The live row at `key`: memtable, the memtable being checkpointed, then the
        checkpoints newest first (bloom filters skip most)."""
        known, row = self.row_in_memory(key)
        return row if known else await self.row_from_checkpoints(key)

    async def row_from_checkpoints(self, key: bytes, remember_absent: bool = True
                                   ) -> Row | None:
        """The live row at `key` in the checkpoints, for a key `row_in_memory` did not know;
        cached. `remember_absent=False`: do not cache a miss (the caller is about to write
        the key: the entry would be dropped at once)."""
        writes, readers = self.writes, list(self.readers)
        found: bytes | None = None
        for reader in readers:
            found = await reader.get(key)
            if found is not None:
                break
        # A write since the lookup began may have made this stale: then do not cache it.
        if writes == self.writes and readers == self.readers and (
                found is not None or remember_absent):
            self.row_cache.put(key, found if found is not None else ABSENT)
        return _live(decode_row(found)) if found is not None else None

    async def scan(self, start: bytes, end: bytes | None, limit: int
                   ) -> tuple[list[tuple[bytes, Row]], bool]:
        """Up to `limit` live rows in [start, end), and whether more follow — a consistent
        snapshot: the memtables are copied at once, the checkpoints are immutable."""
        sources = []
        for table in (self.memtable, self.frozen):
            if table is not None:
                sources.append(aiter_sync(table.live_prefix(start, end, limit + 1)))
        sources += [reader.scan(start, end) for reader in self.readers]
        rows: list[tuple[bytes, Row]] = []
        more = False
        async for key, encoded in merge(sources, drop_tombstones=True):
            if len(rows) == limit:
                more = True
                break
            rows.append((key, decode_row(encoded)))
        return rows, more

    async def log_state(self, account: str, pname: str) -> LogMeta:
        return log_meta_of(await self.get_row(meta_key(account, pname)), pname)

    async def read_log(self, account: str, pname: str, from_seq: int, limit: int
                       ) -> tuple[list[Record], LogMeta]:
        """Records [from_seq, ...) of a log and its state (log_reads.py)."""
        return await log_reads.read_log(self, account, pname, from_seq, limit)

    async def write_blob(self, data: bytes) -> BlobRef:
        """Write a large value to blob data (once: rows then point at it), pinned in
        `blob_pins` until the operation pointing at it has committed (requests.py)."""
        assert self.blob_pins.active, "a blob is written while pinned in blob_pins"
        (location,) = await self.streams["blob"].append([data])
        self.blob_cache.put(location, data)
        return BlobRef(location, len(data))

    async def read_blob(self, row: Row) -> bytes:
        assert row.blob is not None
        location = row.blob.location
        data = self.blob_cache.get(location)
        if data is None:
            data = await self.streams["blob"].read(location)
            self.blob_cache.put(location, data)
        if len(data) != row.blob.value_bytes:
            raise Internal(f"blob at {location} has {len(data)} bytes, row says "
                           f"{row.blob.value_bytes}")
        return data

    # ---- stop -------------------------------------------------------------------------------

    async def stop(self, reason: str) -> None:
        """Stop serving at once (lease lost, fenced, commit failed, unloaded): every queued
        operation fails with NotOwner, subscribers wake up and end. During an unload only
        the loss of the ownership stops it early: the unload stops it anyway, and at once if
        it fails (`unload`)."""
        if reason != "unloaded" and (self.state == GONE or (
                self.state == UNLOADING and self.lease_valid())):
            return
        if self.state != GONE:
            log.warning("partition %d stops serving: %s", self.id, reason)
        self._move(GONE)
        self.committer.fail_queued(f"moved: {reason}")
        for event in self._log_events.values():
            event.set()
        self._log_events.clear()
        self.committer.abort()
        self.checkpointer.cancel()
        if self._warming is not None:
            self._warming.cancel()
        self.stopped.set()

    async def closed(self) -> None:
        """Until every task of the partition has ended (after `stop`): a process that stops
        leaves none behind, and every operation it took has had its answer."""
        await self.committer.closed()
        await self.checkpointer.closed()
        if self._warming is not None:
            await asyncio.gather(self._warming, return_exceptions=True)
        for task in self.curp_tasks:
            task.cancel()
        await asyncio.gather(*self.curp_tasks, return_exceptions=True)
        for calls in (self.witnesses, self.fenced_witnesses):
            if calls is not None:
                await calls.close()

    async def unload(self) -> None:
        """Hand the partition over cleanly: finish the queued writes, checkpoint (so the next
        owner replays little), then stop — whatever fails or is cancelled on the way: a
        partition left UNLOADING would serve nothing and keep its lease for ever."""
        if self.state != SERVING:
            return
        self._move(UNLOADING)
        try:
            await self.committer.settle()
            await self.checkpointer.checkpoint_now()
        except StampError as exc:
            log.warning("partition %d: unload: %s; it stops without a checkpoint", self.id,
                        exc)
        finally:
            await self.stop("unloaded")

    # ---- load report for heartbeats ---------------------------------------------------------

    def load_report(self) -> dict[str, Any]:
        """The window's figures, the size (runs through their views: size_split.py) and
        `size_split_key` (bytes, b"" for none): where a split by size would cut."""
        window = self.stats.figures()
        checkpointed = size_split.partition_run_bytes(self)
        memtable = self.memtable.nbytes + (self.frozen.nbytes if self.frozen else 0)
        return {**window, "size_bytes": checkpointed + memtable, "memtable_bytes": memtable,
                "runs": len(self.readers), "size_split_key": size_split.size_split_key(self)}


def _live(row: Row) -> Row | None:
    return None if row.tombstone else row
