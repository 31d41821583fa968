"""A CURP witness's table (§11, issue 32): the unsynced writes it holds, per range partition.
No I/O: every operation takes inputs and returns decisions plus the entries that stand for the
state it changed; the store (witness.py) makes those entries durable before it answers.

Contracts:
- A witness holds a write only if it commutes with every write it holds for that partition:
  no two held records of one partition share a key (a key is opaque: a row, a log). The
  index key -> token makes that check O(keys of the record), never a scan.
- `record` decides a batch in order, each record against the table as the records before it
  left it (two records of one batch on one key: the second is a CONFLICT). Per record, first
  match wins: FENCED (its epoch is below the partition's fence, or the partition was
  dropped), ACCEPTED without change (its token is held with the same keys: a retry; nothing
  to persist), CONFLICT (its token is held with other keys, or a key is held by another
  record), FULL (holding it would pass `records_max` or `bytes_max`), else ACCEPTED.
- A fence epoch only grows. `fence` returns every record held for the partition, whatever
  its epoch, in the order they were accepted: the loading owner replays them.
- `clear(p, e)` drops the records of p with an epoch below e (their owner replayed and synced
  them) and raises the fence to e.
- `drop_partition` forgets a partition's records for good and keeps a tombstone that refuses
  everything sent for it later (FENCED). Why a tombstone, not a forgotten fence: partition
  ids are never reused (partition_map.py), so nobody ever fences or replays that id again. A
  write a late or deposed owner still sends for it would otherwise be accepted and then
  either leak (held forever, no owner will gc it) or, worse, complete a CURP acknowledgement
  nobody can replay. A tombstone is one int per split or merge over the node's life.
- Entries are effects, not requests: `apply(entry)` redoes one without deciding anything
  again (no bounds, no fence), so a replay under smaller bounds still brings back every
  record that was acknowledged. A replay may therefore leave the table above its bounds; it
  refuses (FULL) until gc makes room. A replayed record that clashes with one held is a
  history the table cannot have made: Internal.
- Bytes of a record (the bound, the metrics) = its payload plus its keys.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from common.errors import Internal, InvalidArgument

# A token is a write's exactly-once id (a few dozen bytes); the cap keeps memory bounded by
# records_max even though the byte bound counts payloads and keys only.
TOKEN_BYTES_MAX = 256
# What the store's format can hold (u64 ids and epochs, u32 lengths): checked here, before
# anything changes, so an entry the table made can always be encoded.
ID_MAX = (1 << 64) - 1
FIELD_BYTES_MAX = (1 << 32) - 1


class Verdict(enum.Enum):
    ACCEPTED = "accepted"
    CONFLICT = "conflict"  # does not commute with an unsynced write held here
    FENCED = "fenced"  # sent for an owner generation that a newer owner has fenced out
    FULL = "full"  # the table is at its bounds


@dataclass(frozen=True)
class Record:
    """One write as a witness holds it. `keys` is its footprint; `payload` the request, opaque,
    for a recovering owner to execute."""

    token: bytes
    epoch: int
    keys: frozenset[bytes]
    payload: bytes

    @property
    def size(self) -> int:
        return len(self.payload) + sum(len(key) for key in self.keys)


# ---- entries: what changed, for the store to persist and replay ---------------------------

@dataclass(frozen=True)
class Held:
    """`record` was accepted for `partition`."""

    partition: int
    record: Record


@dataclass(frozen=True)
class Released:
    """These held tokens were garbage-collected (their owner synced them)."""

    partition: int
    tokens: tuple[bytes, ...]


@dataclass(frozen=True)
class Fenced:
    partition: int
    epoch: int


@dataclass(frozen=True)
class Cleared:
    partition: int
    epoch: int


@dataclass(frozen=True)
class PartitionDropped:
    partition: int


@dataclass(frozen=True)
class Snapshot:
    """The whole table: applied, it replaces what was there (compaction). `fences` lists every
    partition with state, in partition order; `records` are in partition order, then in the
    order they were accepted."""

    fences: tuple[tuple[int, int], ...]
    dropped: tuple[int, ...]
    records: tuple[tuple[int, Record], ...]


Entry = Held | Released | Fenced | Cleared | PartitionDropped | Snapshot


@dataclass
class _Partition:
    fence: int = 0
    records: dict[bytes, Record] = field(default_factory=dict)  # token -> record, in order
    index: dict[bytes, bytes] = field(default_factory=dict)  # key -> token holding it
    bytes: int = 0


class WitnessTable:
    """The held records and fences of every partition this witness serves (see module doc)."""

    def __init__(self, records_max: int, bytes_max: int) -> None:
        if records_max < 1 or bytes_max < 1:
            raise InvalidArgument(f"witness bounds must be positive: records_max {records_max}, "
                                  f"bytes_max {bytes_max}")
        self.records_max = records_max
        self.bytes_max = bytes_max
        self._partitions: dict[int, _Partition] = {}
        self._dropped: set[int] = set()
        self._records = 0
        self._bytes = 0

    # ---- operations -----------------------------------------------------------------------

    def record(self, partition: int, records: Sequence[Record]
               ) -> tuple[list[Verdict], list[Entry]]:
        """Decide `records` in order (module doc); return a verdict per record and a Held
        entry per record newly accepted. A malformed record fails the whole batch
        (InvalidArgument) before anything changes."""
        _check_partition(partition)
        for record in records:
            _check_record(record)
        verdicts: list[Verdict] = []
        entries: list[Entry] = []
        for record in records:
            verdict, new = self._decide(partition, record)
            verdicts.append(verdict)
            if new:
                self._hold(partition, record)
                entries.append(Held(partition, record))
        return verdicts, entries

    def gc(self, partition: int, tokens: Iterable[bytes]) -> list[Entry]:
        """Drop the records with these tokens (synced by the owner); unknown ones are
        ignored."""
        state = self._partitions.get(partition)
        if state is None:
            return []
        held = tuple(dict.fromkeys(token for token in tokens if token in state.records))
        if not held:
            return []
        self._release(partition, held)
        return [Released(partition, held)]

    def fence(self, partition: int, epoch: int) -> tuple[list[Record], list[Entry]]:
        """Refuse records below `epoch` from now on (a lower or equal fence changes nothing);
        return every record held for the partition, in acceptance order."""
        _check_partition(partition)
        _check_epoch(epoch)
        if partition in self._dropped:
            return [], []
        entries: list[Entry] = []
        if epoch > self.fence_epoch(partition):
            self._raise_fence(partition, epoch)
            entries.append(Fenced(partition, epoch))
        return self.records(partition), entries

    def clear(self, partition: int, epoch: int) -> list[Entry]:
        """Drop the partition's records with an epoch below `epoch`; raise its fence to
        `epoch`."""
        _check_partition(partition)
        _check_epoch(epoch)
        if partition in self._dropped:
            return []
        state = self._partitions.get(partition)
        older = state is not None and any(r.epoch < epoch for r in state.records.values())
        if not older and epoch <= self.fence_epoch(partition):
            return []
        self._clear_below(partition, epoch)
        return [Cleared(partition, epoch)]

    def drop_partition(self, partition: int) -> list[Entry]:
        """Forget the partition's records; refuse everything sent for it from now on."""
        _check_partition(partition)
        if partition in self._dropped:
            return []
        self._drop(partition)
        return [PartitionDropped(partition)]

    def snapshot(self) -> Snapshot:
        """The whole table as one entry (compaction, tests' equality)."""
        fences = tuple((p, self._partitions[p].fence) for p in sorted(self._partitions))
        records = tuple((p, r) for p, _ in fences for r in self._partitions[p].records.values())
        return Snapshot(fences, tuple(sorted(self._dropped)), records)

    def apply(self, entry: Entry) -> None:
        """Redo an entry's effect (replay): no decision, no bounds. An entry the table's state
        cannot have produced (a second holder of a key) is a bug: Internal."""
        if isinstance(entry, Held):
            self._replay_held(entry)
        elif isinstance(entry, Released):
            self._release(entry.partition, tuple(t for t in entry.tokens
                                                 if t in self._held_tokens(entry.partition)))
        elif isinstance(entry, Fenced):
            if entry.partition not in self._dropped:
                self._raise_fence(entry.partition, entry.epoch)
        elif isinstance(entry, Cleared):
            if entry.partition not in self._dropped:
                self._clear_below(entry.partition, entry.epoch)
        elif isinstance(entry, PartitionDropped):
            self._drop(entry.partition)
        elif isinstance(entry, Snapshot):
            self._restore(entry)
        else:
            raise Internal(f"witness: not an entry: {entry!r}")

    # ---- introspection (metrics, tests) ---------------------------------------------------

    def held_records(self, partition: int | None = None) -> int:
        if partition is None:
            return self._records
        state = self._partitions.get(partition)
        return len(state.records) if state is not None else 0

    def held_bytes(self, partition: int | None = None) -> int:
        if partition is None:
            return self._bytes
        state = self._partitions.get(partition)
        return state.bytes if state is not None else 0

    def fence_epoch(self, partition: int) -> int:
        state = self._partitions.get(partition)
        return state.fence if state is not None else 0

    def is_dropped(self, partition: int) -> bool:
        return partition in self._dropped

    def partitions(self) -> list[int]:
        """Partitions with a fence or a held record (not the dropped ones)."""
        return sorted(self._partitions)

    def dropped_partitions(self) -> list[int]:
        return sorted(self._dropped)

    def partition_count(self) -> int:
        """Partitions with state, tombstones included: O(1), for the store's size estimate."""
        return len(self._partitions) + len(self._dropped)

    def records(self, partition: int) -> list[Record]:
        """The partition's held records, in the order they were accepted."""
        state = self._partitions.get(partition)
        return list(state.records.values()) if state is not None else []

    def holder(self, partition: int, key: bytes) -> bytes | None:
        """The token of the record holding `key` in `partition`, if any."""
        state = self._partitions.get(partition)
        return state.index.get(key) if state is not None else None

    # ---- decisions ------------------------------------------------------------------------

    def _decide(self, partition: int, record: Record) -> tuple[Verdict, bool]:
        """The record's verdict and whether it is newly held (not a retry)."""
        if partition in self._dropped:
            return Verdict.FENCED, False
        state = self._partitions.get(partition)
        if record.epoch < (state.fence if state is not None else 0):
            return Verdict.FENCED, False
        if state is not None:
            held = state.records.get(record.token)
            if held is not None:
                return (Verdict.ACCEPTED if held.keys == record.keys else Verdict.CONFLICT), False
            if any(key in state.index for key in record.keys):
                return Verdict.CONFLICT, False
        if self._records + 1 > self.records_max or self._bytes + record.size > self.bytes_max:
            return Verdict.FULL, False
        return Verdict.ACCEPTED, True

    # ---- mutations: shared by the operations and by apply, so both mean the same ---------

    def _hold(self, partition: int, record: Record) -> None:
        state = self._partitions.setdefault(partition, _Partition())
        state.records[record.token] = record
        for key in record.keys:
            state.index[key] = record.token
        state.bytes += record.size
        self._records += 1
        self._bytes += record.size

    def _release(self, partition: int, tokens: Iterable[bytes]) -> None:
        state = self._partitions.get(partition)
        if state is None:
            return
        for token in tokens:
            record = state.records.pop(token)
            for key in record.keys:
                del state.index[key]
            state.bytes -= record.size
            self._records -= 1
            self._bytes -= record.size
        self._forget_if_idle(partition)

    def _raise_fence(self, partition: int, epoch: int) -> None:
        state = self._partitions.setdefault(partition, _Partition())
        state.fence = max(state.fence, epoch)
        self._forget_if_idle(partition)

    def _clear_below(self, partition: int, epoch: int) -> None:
        state = self._partitions.get(partition)
        if state is not None:
            self._release(partition, [t for t, r in state.records.items() if r.epoch < epoch])
        self._raise_fence(partition, epoch)

    def _drop(self, partition: int) -> None:
        state = self._partitions.pop(partition, None)
        if state is not None:
            self._records -= len(state.records)
            self._bytes -= state.bytes
        self._dropped.add(partition)

    def _forget_if_idle(self, partition: int) -> None:
        """A partition with no record and fence 0 is the default state: keep no memory."""
        state = self._partitions.get(partition)
        if state is not None and not state.records and state.fence == 0:
            del self._partitions[partition]

    def _held_tokens(self, partition: int) -> dict[bytes, Record]:
        state = self._partitions.get(partition)
        return state.records if state is not None else {}

    def _replay_held(self, entry: Held) -> None:
        partition, record = entry.partition, entry.record
        if partition in self._dropped:
            raise Internal(f"witness replay: record {record.token!r} held for dropped "
                           f"partition {partition}")
        state = self._partitions.get(partition)
        if state is not None:
            clash = record.token in state.records or any(k in state.index for k in record.keys)
            if clash:
                raise Internal(f"witness replay: record {record.token!r} of partition "
                               f"{partition} clashes with one already held")
        self._hold(partition, record)

    def _restore(self, snapshot: Snapshot) -> None:
        self._partitions.clear()
        self._dropped = set(snapshot.dropped)
        self._records = self._bytes = 0
        for partition, epoch in snapshot.fences:
            self._partitions[partition] = _Partition(fence=epoch)
        for partition, record in snapshot.records:
            self._replay_held(Held(partition, record))
        for partition in list(self._partitions):
            self._forget_if_idle(partition)


def _check_partition(partition: int) -> None:
    if not 0 <= partition <= ID_MAX:
        raise InvalidArgument(f"witness: partition id {partition} is not in 0..{ID_MAX}")


def _check_epoch(epoch: int) -> None:
    if not 0 <= epoch <= ID_MAX:
        raise InvalidArgument(f"witness: epoch {epoch} is not in 0..{ID_MAX}")


def _check_record(record: Record) -> None:
    if not record.token or len(record.token) > TOKEN_BYTES_MAX:
        raise InvalidArgument(f"witness: a token is 1..{TOKEN_BYTES_MAX} bytes, not "
                              f"{len(record.token)}")
    _check_epoch(record.epoch)
    if len(record.payload) > FIELD_BYTES_MAX or len(record.keys) > FIELD_BYTES_MAX or \
            any(len(key) > FIELD_BYTES_MAX for key in record.keys):
        raise InvalidArgument("witness: a payload, a key or a key count is 4 GiB or more")
