"""A CURP witness's table (§11, issue 32): the unsynced writes it holds, per range partition.
No I/O: every operation takes inputs and returns decisions plus the entries that stand for the
state it changed; the store (witness.py) makes those entries durable before it answers.

Contracts:
- A witness holds a write only if it commutes with every write it holds for that partition.
  A record's footprint is two sets of opaque keys (a row, a log, an entity group's mark):
  `exclusive` and `shared`; two records conflict when one holds exclusively a key the other
  holds in either mode, and shared/shared commutes — exactly partition_layer/curp.py's
  `Footprint.conflicts` (not imported: the stream layer does not depend on the partition
  layer; the tests check the two agree). Per partition, an index of exclusive holders
  (key -> token) and a count of shared holders (key -> count) make that check O(keys of
  the record), never a scan. A key is in one mode per record (InvalidArgument otherwise).
- `record` decides a batch in order at `now_ms` (the store's wall clock, ms since the epoch;
  the table never reads time), each record against the table as the records before it
  left it (two records of one batch that conflict: the second is a CONFLICT). Per record,
  first match wins: FENCED (its epoch is below the partition's fence, or the partition was
  dropped), EXPIRED (its `deadline_ms` is set and at or before `now_ms`: its owner executes
  no request after its deadline, so a record of it could only linger), ACCEPTED without
  change (its token is held for the same attempt: a retry; nothing to persist), CONFLICT
  (its token is held for another attempt, or its footprint conflicts with a held one), FULL
  (holding it would pass `records_max` or `bytes_max`), else ACCEPTED.
- A retry is the same attempt: the same epoch, the same exclusive and shared sets, and a
  deadline no later than the held one's (0, none, is the latest). An acceptance answers
  for the record as held, so a later attempt must not be answered by an older record: a
  held epoch below the new one is dropped by the new owner's `clear` while the new attempt
  counts as recorded, and a held deadline before the new one lets the owner's sweep drop
  the record while the owner may still execute the new attempt. Either would leave an
  acknowledged write on fewer than three witnesses; a CONFLICT only sends it the sync way.
- Each held record remembers when it was accepted (`now_ms` of `record`, or of `apply` on
  a replay: not persisted, so a restart restarts the count); `list(p, older_than_ms, now,
  epoch=e)` answers those held at least that long, for the owner's sweep of records it never
  got.
- `gc` and `list` carry the caller's epoch: they see only the records of that epoch or older,
  and nothing at all below the partition's fence. Why: a deposed owner still running (it
  has not yet learnt it lost the partition) must not drop a newer owner's record, which may
  stand for a write the newer owner acknowledged and has not synced; and once fenced, even
  its own records are the new owner's to replay and `clear`. Below the fence a drop is a
  no-op, not an error: the owner does not await its drops, so nobody would act on one.
- A fence epoch only grows. `fence` returns every record held for the partition, whatever
  its epoch, in the order they were accepted: the loading owner replays them.
- `clear(p, e)` drops the records of p with an epoch below e (their owner replayed and synced
  them) and raises the fence to e; the records of epoch e and above (the new owner's own fast
  writes, perhaps not synced yet) stay.
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
- Bytes of a record (the bound, the metrics) = its payload plus its keys (both modes).
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
    """A record's verdict; the values are the wire's (common/proto/witness.proto Verdict)."""

    ACCEPTED = 0
    CONFLICT = 1  # does not commute with an unsynced write held here
    FENCED = 2  # sent for an owner generation that a newer owner has fenced out
    FULL = 3  # the table is at its bounds
    EXPIRED = 4  # its deadline passed: its owner will not execute it


@dataclass(frozen=True)
class Record:
    """One write as a witness holds it. `exclusive` and `shared` are its footprint
    (curp.Footprint); `payload` the request, opaque, for a recovering owner to execute;
    `deadline_ms` the request's deadline (ms since the epoch, 0: none)."""

    token: bytes
    epoch: int
    exclusive: frozenset[bytes]
    shared: frozenset[bytes]
    payload: bytes
    deadline_ms: int = 0

    @property
    def size(self) -> int:
        return (len(self.payload) + sum(len(key) for key in self.exclusive)
                + sum(len(key) for key in self.shared))

    def retries(self, held: Record) -> bool:
        """Whether this is a retry of the attempt `held` stands for (module doc)."""
        return (self.epoch == held.epoch and self.exclusive == held.exclusive
                and self.shared == held.shared
                and (held.deadline_ms == 0
                     or 0 < self.deadline_ms <= held.deadline_ms))


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
    accepted_ms: dict[bytes, int] = field(default_factory=dict)  # token -> when accepted
    exclusive: dict[bytes, bytes] = field(default_factory=dict)  # key -> token holding it
    shared: dict[bytes, int] = field(default_factory=dict)  # key -> records holding it
    bytes: int = 0

    def conflicts(self, record: Record) -> bool:
        """Whether `record` conflicts with a held record (curp.Footprint.conflicts)."""
        exclusive, shared = self.exclusive, self.shared
        return (any(key in exclusive or key in shared for key in record.exclusive)
                or any(key in exclusive for key in record.shared))


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

    def record(self, partition: int, records: Sequence[Record], now_ms: int
               ) -> tuple[list[Verdict], list[Entry]]:
        """Decide `records` in order at `now_ms` (module doc); return a verdict per record
        and a Held entry per record newly accepted. A malformed record fails the whole batch
        (InvalidArgument) before anything changes."""
        _check_partition(partition)
        for record in records:
            _check_record(record)
        verdicts: list[Verdict] = []
        entries: list[Entry] = []
        for record in records:
            verdict, new = self._decide(partition, record, now_ms)
            verdicts.append(verdict)
            if new:
                self._hold(partition, record, now_ms)
                entries.append(Held(partition, record))
        return verdicts, entries

    def gc(self, partition: int, tokens: Iterable[bytes], *, epoch: int) -> list[Entry]:
        """Drop the records with these tokens that the owner at `epoch` synced: those of
        `epoch` or older; nothing if `epoch` is below the fence (module doc). Unknown tokens,
        and a newer owner's, are ignored."""
        _check_partition(partition)
        _check_epoch(epoch)
        state = self._partitions.get(partition)
        if state is None or epoch < state.fence:
            return []
        held = tuple(dict.fromkeys(token for token in tokens
                                   if (r := state.records.get(token)) is not None
                                   and r.epoch <= epoch))
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

    def apply(self, entry: Entry, now_ms: int) -> None:
        """Redo an entry's effect (replay) at `now_ms` (what a record it brings back counts as
        accepted at): no decision, no bounds. An entry the table's state cannot have produced
        (a record conflicting with one held) is a bug: Internal."""
        if isinstance(entry, Held):
            self._replay_held(entry, now_ms)
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
            self._restore(entry, now_ms)
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

    def list(self, partition: int, older_than_ms: int, now_ms: int, *, epoch: int
             ) -> list[Record]:
        """The partition's records of `epoch` or older held at least `older_than_ms` at
        `now_ms` (accepted at or before `now_ms - older_than_ms`), in the order they were
        accepted: the owner's sweep of records it never received. None if `epoch` is below
        the fence (module doc)."""
        _check_partition(partition)
        _check_epoch(epoch)
        state = self._partitions.get(partition)
        if state is None or epoch < state.fence:
            return []
        before_ms = now_ms - older_than_ms
        return [r for t, r in state.records.items()
                if r.epoch <= epoch and state.accepted_ms[t] <= before_ms]

    def holder(self, partition: int, key: bytes) -> bytes | None:
        """The token of the record holding `key` exclusively in `partition`, if any."""
        state = self._partitions.get(partition)
        return state.exclusive.get(key) if state is not None else None

    def shared_holders(self, partition: int, key: bytes) -> int:
        """How many records hold `key` shared in `partition`."""
        state = self._partitions.get(partition)
        return state.shared.get(key, 0) if state is not None else 0

    # ---- decisions ------------------------------------------------------------------------

    def _decide(self, partition: int, record: Record, now_ms: int) -> tuple[Verdict, bool]:
        """The record's verdict and whether it is newly held (not a retry)."""
        if partition in self._dropped:
            return Verdict.FENCED, False
        state = self._partitions.get(partition)
        if record.epoch < (state.fence if state is not None else 0):
            return Verdict.FENCED, False
        if record.deadline_ms and record.deadline_ms <= now_ms:
            return Verdict.EXPIRED, False
        if state is not None:
            held = state.records.get(record.token)
            if held is not None:
                return (Verdict.ACCEPTED if record.retries(held) else Verdict.CONFLICT), False
            if state.conflicts(record):
                return Verdict.CONFLICT, False
        if self._records + 1 > self.records_max or self._bytes + record.size > self.bytes_max:
            return Verdict.FULL, False
        return Verdict.ACCEPTED, True

    # ---- mutations: shared by the operations and by apply, so both mean the same ---------

    def _hold(self, partition: int, record: Record, now_ms: int) -> None:
        state = self._partitions.setdefault(partition, _Partition())
        state.records[record.token] = record
        state.accepted_ms[record.token] = now_ms
        for key in record.exclusive:
            state.exclusive[key] = record.token
        for key in record.shared:
            state.shared[key] = state.shared.get(key, 0) + 1
        state.bytes += record.size
        self._records += 1
        self._bytes += record.size

    def _release(self, partition: int, tokens: Iterable[bytes]) -> None:
        state = self._partitions.get(partition)
        if state is None:
            return
        for token in tokens:
            record = state.records.pop(token)
            del state.accepted_ms[token]
            for key in record.exclusive:
                del state.exclusive[key]
            for key in record.shared:
                left = state.shared[key] - 1
                if left:
                    state.shared[key] = left
                else:
                    del state.shared[key]
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

    def _replay_held(self, entry: Held, now_ms: int) -> None:
        partition, record = entry.partition, entry.record
        if partition in self._dropped:
            raise Internal(f"witness replay: record {record.token!r} held for dropped "
                           f"partition {partition}")
        state = self._partitions.get(partition)
        if state is not None and (record.token in state.records or state.conflicts(record)):
            raise Internal(f"witness replay: record {record.token!r} of partition "
                           f"{partition} clashes with one already held")
        self._hold(partition, record, now_ms)

    def _restore(self, snapshot: Snapshot, now_ms: int) -> None:
        self._partitions.clear()
        self._dropped = set(snapshot.dropped)
        self._records = self._bytes = 0
        for partition, epoch in snapshot.fences:
            self._partitions[partition] = _Partition(fence=epoch)
        for partition, record in snapshot.records:
            self._replay_held(Held(partition, record), now_ms)
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
    if not 0 <= record.deadline_ms <= ID_MAX:
        raise InvalidArgument(f"witness: deadline {record.deadline_ms} ms is not in "
                              f"0..{ID_MAX}")
    if not record.exclusive.isdisjoint(record.shared):
        raise InvalidArgument("witness: a key is held both exclusive and shared")
    sets = (record.exclusive, record.shared)
    if len(record.payload) > FIELD_BYTES_MAX or any(len(s) > FIELD_BYTES_MAX for s in sets) \
            or any(len(key) > FIELD_BYTES_MAX for s in sets for key in s):
        raise InvalidArgument("witness: a payload, a key or a key count is 4 GiB or more")
