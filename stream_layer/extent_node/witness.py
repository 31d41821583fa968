"""A CURP witness's durable store (§11, issue 32): a WitnessTable (witness_table.py) behind
its own group-committed Journal (journal.py) in its own directory, one per extent node.

Contracts:
- Every change to the table and the submission of the journal entries standing for it
  happen in one synchronous step (no await between them), so the journal's order is the
  table's order: replaying it redoes the same history.
- `record` returns once every ACCEPTED record is durable, and everything submitted before it
  (the fence it was judged against, the first copy of a retried record): the journal makes
  records durable in submission order, so waiting for the last one submitted covers them.
  Refusals do not wait for the disk: a refusal is always safe (the front end falls back to
  the sync path).
- `fence`, `clear` and `drop_partition` return only once durable: a fence a power cut forgot
  would let a deposed owner's write be accepted after the new owner replayed.
- `gc` does not wait, nor does it cost a sync of its own: its entry is held back and
  submitted with the next entry or wait (a record, a fence, a clear, a flush: each returns
  with the drops before it durable), so it shares that group commit, or after GC_FLUSH_S
  when none comes (an owner drops the records of every block it syncs: an fsync of their own
  would double the witness's disk work, on the disk the replicas' journal shares on one
  machine). Submitted in the table's order all the same, so replay sees the same history. A
  gc lost in a crash only brings records back; the owner dedupes them by token when it
  replays. `flush()` waits for it.
  `gc` and `list` go by the caller's epoch (witness_table.py: a deposed owner drops and lists
  nothing, and never a newer owner's record).
- Compaction (`compact`, run in the background when the journal holds more than
  `compact_ratio` x the live state plus `compact_floor_bytes`): rotate the journal, write one
  SNAPSHOT of the whole table into the new segment, wait until it is durable, then drop the
  older segments. Replay applies only what follows the last SNAPSHOT it finds (and that
  snapshot), so a crash at any step replays to the same table: before the snapshot is whole
  the old segments are all there; after it, whatever is left of them is ignored.
- `start()` replays the journal (torn tail cut by the Journal) into the table, then starts
  the journal. A whole record (its crc holds) that does not decode is a bug or a format
  this code does not know: Internal, the node does not start on a guess.
- Time: the store's `clock` (common/clock.py, its wall time in ms) is what `record` judges
  deadlines by and what a record counts as accepted at; a replay counts every record it
  brings back as accepted at the replay (acceptance times are not persisted: they serve
  only the owner's sweep, which then waits a little longer after a restart).

On-disk entry (one journal record each; little-endian; version 2: version 1, without
deadlines or shared keys, was never deployed and is not read):
  [u8 version][u8 kind] then by kind
  HELD      [u64 partition] RECORD
  RELEASED  [u64 partition][u32 n] n x ([u16 len][token])
  FENCED    [u64 partition][u64 epoch]
  CLEARED   [u64 partition][u64 epoch]
  DROPPED   [u64 partition]
  SNAPSHOT  [u32 n fences][u32 n dropped][u32 n records]
            n x ([u64 partition][u64 fence]), n x [u64 partition],
            n x ([u64 partition] RECORD)
  RECORD = [u64 epoch][u64 deadline_ms][u16 token len][u32 n exclusive][u32 n shared]
           [u32 payload len][token] n x ([u32 len][key]) n x ([u32 len][key]) [payload]
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from common import faults
from common.clock import Clock, SystemClock
from common.config import ExtentNodeLimits, WitnessLimits
from common.errors import Internal, Unavailable
from stream_layer.extent_node.journal import RECORD_HEADER, Journal, segment_seq
from stream_layer.extent_node.witness_table import (
    Cleared,
    Entry,
    Fenced,
    Held,
    PartitionDropped,
    Record,
    Released,
    Snapshot,
    Verdict,
    WitnessTable,
)

log = logging.getLogger(__name__)

VERSION = 2
# gc entries held back this long at most when no entry that is waited for comes (module doc).
GC_FLUSH_S = 0.5
HELD, RELEASED, FENCED, CLEARED, DROPPED, SNAPSHOT = 1, 2, 3, 4, 5, 6
_HEAD = struct.Struct("<BB")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_PAIR = struct.Struct("<QQ")
_COUNTS = struct.Struct("<III")
_RECORD = struct.Struct("<QQHIII")
# What a held record costs in a snapshot beyond its payload and keys (header, token, key
# lengths), and what a partition's fence or tombstone costs, for the compaction rule's
# estimate of the live state.
_RECORD_OVERHEAD_BYTES = _U64.size + _RECORD.size + 64
_PARTITION_BYTES = _PAIR.size


# ---- encoding -----------------------------------------------------------------------------

def encode(entry: Entry) -> bytes:
    """One entry as a journal record body (module doc)."""
    if isinstance(entry, Held):
        return _head(HELD) + _U64.pack(entry.partition) + _encode_record(entry.record)
    if isinstance(entry, Released):
        tokens = b"".join(_U16.pack(len(t)) + t for t in entry.tokens)
        return _head(RELEASED) + _U64.pack(entry.partition) + _U32.pack(len(entry.tokens)) + tokens
    if isinstance(entry, Fenced):
        return _head(FENCED) + _PAIR.pack(entry.partition, entry.epoch)
    if isinstance(entry, Cleared):
        return _head(CLEARED) + _PAIR.pack(entry.partition, entry.epoch)
    if isinstance(entry, PartitionDropped):
        return _head(DROPPED) + _U64.pack(entry.partition)
    if isinstance(entry, Snapshot):
        return _encode_snapshot(entry)
    raise Internal(f"witness: cannot encode {entry!r}")


def _head(kind: int) -> bytes:
    return _HEAD.pack(VERSION, kind)


def _encode_record(record: Record) -> bytes:
    # Keys sorted: the same record always encodes the same bytes.
    exclusive, shared = sorted(record.exclusive), sorted(record.shared)
    parts = [_RECORD.pack(record.epoch, record.deadline_ms, len(record.token), len(exclusive),
                          len(shared), len(record.payload)),
             record.token]
    for key in (*exclusive, *shared):
        parts += [_U32.pack(len(key)), key]
    parts.append(record.payload)
    return b"".join(parts)


def _encode_snapshot(snapshot: Snapshot) -> bytes:
    parts = [_head(SNAPSHOT),
             _COUNTS.pack(len(snapshot.fences), len(snapshot.dropped), len(snapshot.records))]
    parts += [_PAIR.pack(partition, epoch) for partition, epoch in snapshot.fences]
    parts += [_U64.pack(partition) for partition in snapshot.dropped]
    for partition, record in snapshot.records:
        parts += [_U64.pack(partition), _encode_record(record)]
    return b"".join(parts)


class _Reader:
    """A cursor over one body; running short is Internal (the crc held: not a torn write)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.pos = 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.body):
            raise Internal(f"witness entry ends at byte {len(self.body)}, "
                           f"{n} more wanted at {self.pos}")
        data = self.body[self.pos:self.pos + n]
        self.pos += n
        return data

    def unpack(self, shape: struct.Struct) -> tuple[int, ...]:
        return shape.unpack(self.take(shape.size))

    def record(self) -> Record:
        epoch, deadline_ms, token_len, n_exclusive, n_shared, payload_len = self.unpack(_RECORD)
        token = self.take(token_len)
        exclusive = self.keys(n_exclusive)
        shared = self.keys(n_shared)
        return Record(token, epoch, exclusive, shared, self.take(payload_len), deadline_ms)

    def keys(self, count: int) -> frozenset[bytes]:
        keys = frozenset(self.take(self.unpack(_U32)[0]) for _ in range(count))
        if len(keys) != count:
            raise Internal(f"witness entry lists a key twice at byte {self.pos}")
        return keys

    def done(self) -> None:
        if self.pos != len(self.body):
            raise Internal(f"witness entry has {len(self.body) - self.pos} bytes past its end")


def kind_of(body: bytes) -> int:
    """The kind of an entry, its version checked."""
    if len(body) < _HEAD.size:
        raise Internal(f"witness entry of {len(body)} bytes has no header")
    version, kind = _HEAD.unpack_from(body)
    if version != VERSION:
        raise Internal(f"witness entry version {version}: this code reads {VERSION}")
    return kind


def decode(body: bytes) -> Entry:
    """The entry `body` encodes; Internal if it is not one (a bug, not a torn write)."""
    kind = kind_of(body)
    reader = _Reader(body)
    reader.take(_HEAD.size)
    entry: Entry
    if kind == HELD:
        entry = Held(reader.unpack(_U64)[0], reader.record())
    elif kind == RELEASED:
        partition, count = reader.unpack(_U64)[0], reader.unpack(_U32)[0]
        entry = Released(partition, tuple(reader.take(reader.unpack(_U16)[0])
                                          for _ in range(count)))
    elif kind in (FENCED, CLEARED):
        partition, epoch = reader.unpack(_PAIR)
        entry = Fenced(partition, epoch) if kind == FENCED else Cleared(partition, epoch)
    elif kind == DROPPED:
        entry = PartitionDropped(reader.unpack(_U64)[0])
    elif kind == SNAPSHOT:
        entry = _decode_snapshot(reader)
    else:
        raise Internal(f"witness entry of unknown kind {kind}")
    reader.done()
    return entry


def _decode_snapshot(reader: _Reader) -> Snapshot:
    n_fences, n_dropped, n_records = reader.unpack(_COUNTS)
    fences = tuple((p, e) for p, e in (reader.unpack(_PAIR) for _ in range(n_fences)))
    dropped = tuple(reader.unpack(_U64)[0] for _ in range(n_dropped))
    records = tuple((reader.unpack(_U64)[0], reader.record()) for _ in range(n_records))
    return Snapshot(fences, dropped, records)


def replay_entries(bodies: Sequence[bytes]) -> list[Entry]:
    """The entries to apply, in order: the last SNAPSHOT and what follows it (all of them if
    there is none). Every body is decoded, the ones skipped too: a bad one is a bug anywhere."""
    entries = [decode(body) for body in bodies]
    last = max((i for i, e in enumerate(entries) if isinstance(e, Snapshot)), default=0)
    return entries[last:]


# ---- the store ----------------------------------------------------------------------------

class WitnessStore:
    """A WitnessTable made durable (module doc). `table` is for reading (metrics, tests);
    change it only through the store."""

    def __init__(self, directory: Path, limits: WitnessLimits | None = None,
                 clock: Clock | None = None) -> None:
        self.limits = limits or ExtentNodeLimits().witness
        self.directory = directory
        self.clock = clock or SystemClock()
        self.table = WitnessTable(self.limits.records_max, self.limits.bytes_max)
        self.journal = Journal(directory, self.limits.journal_batch_bytes_max,
                               self.limits.journal_queue_bytes_max,
                               self.limits.journal_segment_bytes_max)
        self._last: asyncio.Future[None] | None = None  # the last entry submitted
        self._gc_held: list[bytes] = []  # gc entries not yet submitted (module doc)
        self._gc_flush: asyncio.TimerHandle | None = None
        self._journal_bytes = 0  # in the segments, or queued for them
        self._running = False
        self._compact_lock: asyncio.Lock | None = None
        self._compaction: asyncio.Task[None] | None = None
        self.compactions = 0

    # ---- lifecycle ------------------------------------------------------------------------

    @classmethod
    async def open(cls, directory: Path, limits: WitnessLimits | None = None,
                   clock: Clock | None = None) -> WitnessStore:
        """A started store on `directory` (its table rebuilt from the journal there)."""
        store = cls(directory, limits, clock)
        await store.start()
        return store

    async def start(self) -> None:
        """Rebuild the table from the journal, then start the journal."""
        loop = asyncio.get_running_loop()
        bodies = await loop.run_in_executor(None, self._read_journal)
        entries = replay_entries(bodies)
        now_ms = self.now_ms()  # what every record brought back counts as accepted at
        for entry in entries:
            self.table.apply(entry, now_ms)
        self._journal_bytes = await loop.run_in_executor(None, self.journal.held_bytes)
        self._compact_lock = asyncio.Lock()
        self.journal.start()
        self._running = True
        self._maybe_compact()  # the journal may have grown across restarts
        log.info("witness store %s: %d entries replayed (%d applied), %d records of %d "
                 "partitions held, %d journal bytes", self.directory, len(bodies), len(entries),
                 self.table.held_records(), len(self.table.partitions()), self._journal_bytes)

    async def stop(self) -> None:
        """Stop the journal; what is not yet durable fails (Unavailable) for its waiters."""
        if self._running and self._gc_held:
            self._submit_gc()
            await self._durable()
        self._running = False
        if self._compaction is not None:
            self._compaction.cancel()
            await asyncio.gather(self._compaction, return_exceptions=True)
        await self.journal.stop()

    # ---- operations -----------------------------------------------------------------------

    async def record(self, partition: int, records: Sequence[Record]) -> list[Verdict]:
        """Decide the batch (WitnessTable.record); return once every ACCEPTED one is durable."""
        self._check_running()
        # Back-pressure before deciding: the decision and its entries must not be split by
        # an await (module doc), so the wait for the journal's room comes first.
        await self.journal.wait_for_room(sum(r.size + _RECORD_OVERHEAD_BYTES for r in records))
        self._check_running()
        verdicts, entries = self.table.record(partition, records, self.now_ms())
        self._persist(entries)
        if Verdict.ACCEPTED in verdicts:
            await self._durable()
        return verdicts

    def gc(self, partition: int, tokens: Iterable[bytes], *, epoch: int) -> int:
        """Drop the records the owner at `epoch` synced (WitnessTable.gc); durable with the
        next group commit, not awaited (module doc). Returns how many were dropped."""
        self._check_running()
        entries = self.table.gc(partition, tokens, epoch=epoch)
        if entries:
            self._gc_held += [encode(entry) for entry in entries]
            if self._gc_flush is None:
                self._gc_flush = asyncio.get_running_loop().call_later(GC_FLUSH_S,
                                                                       self._submit_gc)
        return sum(len(entry.tokens) for entry in entries if isinstance(entry, Released))

    async def gc_durable(self, partition: int, tokens: Iterable[bytes], *, epoch: int) -> int:
        """`gc`, answered once durable (the owner's sweep counts a round only then: a drop a
        restart forgets would bring back a record whose token may expire meanwhile)."""
        dropped = self.gc(partition, tokens, epoch=epoch)
        await self._durable()
        return dropped

    def list(self, partition: int, older_than_ms: int, *, epoch: int) -> list[Record]:
        """The partition's records of `epoch` or older held at least `older_than_ms` by the
        store's clock (held since the last restart at most), in acceptance order; none below
        the fence (WitnessTable.list)."""
        self._check_running()
        return self.table.list(partition, older_than_ms, self.now_ms(), epoch=epoch)

    async def fence(self, partition: int, epoch: int) -> list[Record]:
        """Fence out owners below `epoch`; return every record held for the partition. Both
        the fence and those records are durable when this returns."""
        self._check_running()
        held, entries = self.table.fence(partition, epoch)
        self._persist(entries)
        await self._durable()
        return held

    async def clear(self, partition: int, epoch: int) -> None:
        """Drop the partition's records below `epoch` and fence at `epoch`; durable."""
        self._check_running()
        self._persist(self.table.clear(partition, epoch))
        await self._durable()

    async def drop_partition(self, partition: int) -> None:
        """Forget the partition and refuse it for good (witness_table.py says why); durable."""
        self._check_running()
        self._persist(self.table.drop_partition(partition))
        await self._durable()

    async def flush(self) -> None:
        """Wait until everything so far (the gc entries held back included) is durable."""
        await self._durable()

    # ---- compaction -----------------------------------------------------------------------

    @property
    def journal_bytes(self) -> int:
        """Bytes the journal holds or has queued: what a restart would read."""
        return self._journal_bytes

    def live_bytes_estimate(self) -> int:
        """About the size of a snapshot of the table now (the compaction rule's "live")."""
        return (self.table.held_bytes() + self.table.held_records() * _RECORD_OVERHEAD_BYTES
                + self.table.partition_count() * _PARTITION_BYTES)

    def compaction_due(self) -> bool:
        return (self._journal_bytes > self.limits.compact_ratio * self.live_bytes_estimate()
                + self.limits.compact_floor_bytes)

    async def compact(self) -> None:
        """Rotate, write a SNAPSHOT, wait until it is durable, drop the older segments. A crash
        between any two steps replays to the same table (module doc)."""
        self._check_running()
        assert self._compact_lock is not None
        async with self._compact_lock:
            await self.journal.rotate()
            # Every segment below this one is closed and holds only entries submitted
            # before the snapshot below, so the snapshot supersedes them all.
            first_kept = self.journal.current_segment
            await faults.apoint("witness.compact.after_rotate")
            snapshot = self.table.snapshot()
            self._persist([snapshot])
            await self._durable()
            await faults.apoint("witness.compact.after_snapshot")
            loop = asyncio.get_running_loop()
            old_bytes = await loop.run_in_executor(None, self._bytes_below, first_kept)
            await self.journal.drop_through(first_kept - 1)
            self._journal_bytes -= old_bytes
            self.compactions += 1
            log.info("witness store %s compacted: snapshot of %d records, %d journal bytes "
                     "dropped, %d held", self.directory, len(snapshot.records), old_bytes,
                     self._journal_bytes)

    def _maybe_compact(self) -> None:
        # Not while a compaction runs (its own snapshot would call for the next one).
        busy = self._compaction is not None or (self._compact_lock is not None
                                                and self._compact_lock.locked())
        if not busy and self._running and self.compaction_due():
            self._compaction = asyncio.get_running_loop().create_task(
                self._compact_in_background(), name="witness-compaction")

    async def _compact_in_background(self) -> None:
        try:
            await self.compact()
        except asyncio.CancelledError:
            raise
        except Exception:  # the next submission past the threshold tries again
            log.exception("witness store %s: compaction failed", self.directory)
        finally:
            self._compaction = None

    def _bytes_below(self, segment: int) -> int:
        return sum(path.stat().st_size for path in self.journal.segments()
                   if segment_seq(path) < segment)

    # ---- internals ------------------------------------------------------------------------

    def now_ms(self) -> int:
        """The store's clock: wall time, ms since the epoch (deadlines are wall times)."""
        return int(self.clock.wall() * 1000)

    def _read_journal(self) -> list[bytes]:
        return [body for _, body in self.journal.replay()]

    def _check_running(self) -> None:
        if not self._running:
            raise Unavailable("the witness store is not running")

    def _submit_gc(self) -> None:
        """Submit the gc entries held back (before any later entry: the table's order)."""
        if self._gc_flush is not None:
            self._gc_flush.cancel()
            self._gc_flush = None
        held, self._gc_held = self._gc_held, []
        for body in held:
            self._last = self.journal.submit(body)
            self._journal_bytes += RECORD_HEADER.size + len(body)

    def _persist(self, entries: Sequence[Entry]) -> None:
        """Submit the entries, in order, in the same step that changed the table (the gc
        entries held back first)."""
        if entries and self._gc_held:
            self._submit_gc()
        for entry in entries:
            body = encode(entry)
            self._last = self.journal.submit(body)
            self._journal_bytes += RECORD_HEADER.size + len(body)
        if entries:
            self._maybe_compact()

    async def _durable(self) -> None:
        """Wait until everything submitted so far is durable. Shielded: a caller that gives
        up must not cancel a future other callers wait on too."""
        if self._gc_held:  # everything before a wait is durable after it, drops included
            self._submit_gc()
        if self._last is not None:
            await asyncio.shield(self._last)
