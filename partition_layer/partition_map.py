"""The partition map (§4): which range partition covers which keys, and which partition
server (PS) serves it. Pure data; the PM keeps it in the lock service as JSON.

Contract (§8 invariant 4): the ranges are disjoint and cover the whole key space — sorted by
`low`, the first starts at b"", each ends where the next begins, the last is open-ended
(`high` None). Every change makes a new map with a higher version; `validate` asserts the
invariant and every constructor of a changed map calls it, as do `from_json` and `from_pb`
(a map is checked where it is built and where it is loaded).

Issue 17 (split, merge): partition ids are never reused — `next_id` is the next one to hand
out and only grows (a map stored before it existed: max id + 1). `pending` lists the splits
and merges under way, written before the PS is asked (so a new leader finds and finishes or
rolls back each one); a pending op's new ids are allocated (below `next_id`) but not in the
map until it is published by `with_split` / `with_merge`. Each entry says how it was `born`:
only a "bootstrap" partition may have its streams created by a load (a child whose split
never committed must not be served empty).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from common.errors import InvalidArgument, NotFound
from common.proto import partition_pb2 as pb
from partition_layer import keys
from partition_layer.pending_op import (
    OP_MERGE,
    OP_SPLIT,
    PendingOp,
    show_key,
    split_key_problem,
)

__all__ = ["OP_MERGE", "OP_SPLIT", "PartitionEntry", "PartitionMap", "PendingOp", "show_key",
           "split_key_problem"]

BORN_BOOTSTRAP = "bootstrap"
BORN_SPLIT = "split"
BORN_MERGE = "merge"
BORN = (BORN_BOOTSTRAP, BORN_SPLIT, BORN_MERGE)
@dataclass(frozen=True)
class PartitionEntry:
    id: int
    low: bytes
    high: bytes | None  # None: to the end of the key space
    server: str = ""    # the PS assigned to serve it; "" while unassigned
    born: str = BORN_BOOTSTRAP  # bootstrap | split | merge

    def contains(self, key: bytes) -> bool:
        return self.low <= key and (self.high is None or key < self.high)

    def range_pb(self) -> pb.KeyRange:
        return pb.KeyRange(low=self.low, high=self.high or b"", has_high=self.high is not None)


@dataclass(frozen=True)
class PartitionMap:
    version: int
    partitions: tuple[PartitionEntry, ...]
    next_id: int = 0  # the next partition id to hand out; 0: max id + 1 (filled in)
    pending: tuple[PendingOp, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.next_id == 0 and self.partitions:
            object.__setattr__(self, "next_id", max(p.id for p in self.partitions) + 1)

    @classmethod
    def bootstrap(cls, split_keys: Sequence[bytes] = ()) -> PartitionMap:
        """The first map, its partitions not yet assigned: one covering the whole key space,
        cut at each of `split_keys` (ascending, distinct, not empty) into more."""
        if list(split_keys) != sorted(set(split_keys)) or b"" in split_keys:
            raise InvalidArgument("bootstrap split keys are distinct, ascending and not empty")
        lows = [b"", *split_keys]
        highs: list[bytes | None] = [*split_keys, None]
        return cls(1, tuple(PartitionEntry(i, low, high) for i, (low, high)
                            in enumerate(zip(lows, highs, strict=True), start=1)),
                   next_id=len(lows) + 1).validate()

    def validate(self) -> PartitionMap:
        """Assert §8 invariant 4 and the bookkeeping of ids and pending ops."""
        if not self.partitions:
            raise InvalidArgument("a partition map has at least one partition")
        if self.partitions[0].low != b"":
            raise InvalidArgument("the first partition must start at the empty key")
        for left, right in zip(self.partitions, self.partitions[1:], strict=False):
            if left.high is None or left.high != right.low:
                raise InvalidArgument(f"partitions {left.id} and {right.id} do not meet: "
                                      f"{left.high!r} vs {right.low!r}")
            if not left.low < left.high:
                raise InvalidArgument(f"partition {left.id} has an empty range")
        if self.partitions[-1].high is not None:
            raise InvalidArgument("the last partition must run to the end of the key space")
        ids = [p.id for p in self.partitions]
        if len(set(ids)) != len(ids):
            raise InvalidArgument(f"partition ids repeat: {ids}")
        if max(ids) >= self.next_id:
            raise InvalidArgument(f"next_id {self.next_id} is not above every id: {ids}")
        for entry in self.partitions:
            if entry.born not in BORN:
                raise InvalidArgument(f"partition {entry.id}: unknown origin {entry.born!r}")
        touched: set[int] = set()
        for op in self.pending:
            for source in op.sources:
                self.get(source)
            if op.op == OP_SPLIT and split_key_problem(self.get(op.parent), op.key):
                raise InvalidArgument(f"pending split {op}: "
                                      f"{split_key_problem(self.get(op.parent), op.key)}")
            if op.op == OP_MERGE and self.get(op.left).high != self.get(op.right).low:
                raise InvalidArgument(f"pending merge of {op.left} and {op.right}: "
                                      f"not adjacent")
            for new_id in op.results:
                if new_id in ids or new_id >= self.next_id:
                    raise InvalidArgument(f"pending {op.op}: id {new_id} is in use or not "
                                          f"allocated (next_id {self.next_id})")
            both = set(op.sources) | set(op.results)
            if both & touched:
                raise InvalidArgument(f"two pending operations touch {sorted(both & touched)}")
            touched |= both
        return self

    def lookup(self, key: bytes) -> PartitionEntry:
        """The partition whose range holds `key`."""
        index = bisect.bisect_right([p.low for p in self.partitions], key) - 1
        entry = self.partitions[index]
        assert entry.contains(key), (key, entry)
        return entry

    def get(self, partition_id: int) -> PartitionEntry:
        for entry in self.partitions:
            if entry.id == partition_id:
                return entry
        raise NotFound(f"no partition {partition_id}")

    def index(self, partition_id: int) -> int:
        for i, entry in enumerate(self.partitions):
            if entry.id == partition_id:
                return i
        raise NotFound(f"no partition {partition_id}")

    def right_neighbour(self, partition_id: int) -> PartitionEntry:
        i = self.index(partition_id)
        if i + 1 == len(self.partitions):
            raise InvalidArgument(f"partition {partition_id} is the last: it has no right "
                                  f"neighbour to merge with")
        return self.partitions[i + 1]

    def pending_for(self, partition_id: int) -> PendingOp | None:
        """The pending op consuming or making `partition_id`, if any."""
        for op in self.pending:
            if partition_id in op.sources or partition_id in op.results:
                return op
        return None

    def assigned(self, changes: dict[int, str]) -> PartitionMap:
        """A new version with partitions reassigned: {partition id: server name}. A pending
        op on a reassigned source follows it (its PS call goes to the new server)."""
        for partition_id in changes:
            self.get(partition_id)
        pending = tuple(
            replace(op, server=changes[op.sources[0]]) if op.sources[0] in changes else op
            for op in self.pending)
        return replace(self, version=self.version + 1, pending=pending, partitions=tuple(
            replace(p, server=changes.get(p.id, p.server)) for p in self.partitions)
        ).validate()

    # ---- split and merge ------------------------------------------------------------------

    def with_pending_split(self, parent: int, key: bytes, trigger: str, now: float
                           ) -> tuple[PartitionMap, PendingOp]:
        """Step 1 of a split: allocate the children's ids and record the op (the parent
        stays served where it is)."""
        entry = self.get(parent)
        problem = split_key_problem(entry, key)
        if problem:
            raise InvalidArgument(problem)
        self._refuse_busy(parent)
        op = PendingOp(OP_SPLIT, entry.server, self.next_id, self.next_id + 1, parent=parent,
                       key=key, trigger=trigger, started_at=now)
        return replace(self, version=self.version + 1, next_id=self.next_id + 2,
                       pending=(*self.pending, op)).validate(), op

    def with_pending_merge(self, left: int, right: int, trigger: str, now: float
                           ) -> tuple[PartitionMap, PendingOp]:
        """Step 1 of a merge (both already on one server): allocate the merged id."""
        self._check_mergeable(left, right)
        self._refuse_busy(left)
        self._refuse_busy(right)
        op = PendingOp(OP_MERGE, self.get(left).server, left, right, merged=self.next_id,
                       trigger=trigger, started_at=now)
        return replace(self, version=self.version + 1, next_id=self.next_id + 1,
                       pending=(*self.pending, op)).validate(), op

    def with_split(self, parent: int, key: bytes, left_id: int, right_id: int
                   ) -> PartitionMap:
        """Parent B replaced by C = [B.low, key) and D = [key, B.high), both on B's server;
        B's pending op (if any) is done."""
        entry = self.get(parent)
        problem = split_key_problem(entry, key)
        if problem:
            raise InvalidArgument(problem)
        i = self.index(parent)
        children = (PartitionEntry(left_id, entry.low, key, entry.server, BORN_SPLIT),
                    PartitionEntry(right_id, key, entry.high, entry.server, BORN_SPLIT))
        return replace(
            self, version=self.version + 1,
            partitions=(*self.partitions[:i], *children, *self.partitions[i + 1:]),
            next_id=max(self.next_id, left_id + 1, right_id + 1),
            pending=tuple(op for op in self.pending if parent not in op.sources)).validate()

    def with_merge(self, left: int, right: int, merged: int) -> PartitionMap:
        """Adjacent C, D replaced by E = [C.low, D.high) on C's server; the pending op of
        C and D (if any) is done."""
        self._check_mergeable(left, right)
        a, b = self.get(left), self.get(right)
        i = self.index(left)
        entry = PartitionEntry(merged, a.low, b.high, a.server, BORN_MERGE)
        return replace(
            self, version=self.version + 1,
            partitions=(*self.partitions[:i], entry, *self.partitions[i + 2:]),
            next_id=max(self.next_id, merged + 1),
            pending=tuple(op for op in self.pending if left not in op.sources)).validate()

    def without_pending(self, op: PendingOp) -> PartitionMap:
        """Roll back: the op is dropped; its sources stay as they are (their loader clears
        the intent). Its ids stay allocated: never reused."""
        return replace(self, version=self.version + 1,
                       pending=tuple(p for p in self.pending if p != op)).validate()

    def with_attempt(self, op: PendingOp) -> tuple[PartitionMap, PendingOp]:
        """The op's failed-attempt count + 1 (stored: a new leader keeps counting)."""
        counted = replace(op, attempts=op.attempts + 1)
        return replace(self, version=self.version + 1, pending=tuple(
            counted if p == op else p for p in self.pending)).validate(), counted

    def _check_mergeable(self, left: int, right: int) -> None:
        a, b = self.get(left), self.get(right)
        if a.high is None or a.high != b.low:
            raise InvalidArgument(f"partitions {left} and {right} are not adjacent "
                                  f"(left's high must be right's low)")
        if a.server != b.server:
            raise InvalidArgument(f"partitions {left} and {right} are on different servers")

    def _refuse_busy(self, partition_id: int) -> None:
        op = self.pending_for(partition_id)
        if op is not None:
            raise InvalidArgument(f"partition {partition_id} has a {op.op} under way "
                                  f"(started by {op.trigger or 'someone'})")

    # ---- encodings ------------------------------------------------------------------------

    def to_json(self) -> bytes:
        return json.dumps({"version": self.version, "next_id": self.next_id, "partitions": [
            {"id": p.id, "low": p.low.hex(), "high": None if p.high is None else p.high.hex(),
             "server": p.server, "born": p.born} for p in self.partitions],
            "pending": [op.to_dict() for op in self.pending]}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> PartitionMap:
        """A stored map, checked. Maps stored before issue 17 have no next_id, pending or
        born: max id + 1, none, and "bootstrap" (their only origin then)."""
        data = json.loads(raw)
        return cls(data["version"], tuple(
            PartitionEntry(p["id"], bytes.fromhex(p["low"]),
                           None if p["high"] is None else bytes.fromhex(p["high"]), p["server"],
                           p.get("born", BORN_BOOTSTRAP))
            for p in data["partitions"]), next_id=data.get("next_id", 0),
            pending=tuple(PendingOp.from_dict(op) for op in data.get("pending", []))
        ).validate()

    def to_pb(self, addresses: dict[str, str]) -> pb.PartitionMap:
        return pb.PartitionMap(version=self.version, partitions=[
            pb.PartitionEntry(id=p.id, range=p.range_pb(), server=p.server,
                              address=addresses.get(p.server, ""))
            for p in self.partitions])

    @classmethod
    def from_pb(cls, message: pb.PartitionMap) -> tuple[PartitionMap, dict[str, str]]:
        """The map, and the addresses of the servers it names (checked: invariant 4)."""
        entries = tuple(PartitionEntry(p.id, p.range.low,
                                       p.range.high if p.range.has_high else None, p.server)
                        for p in message.partitions)
        addresses = {p.server: p.address for p in message.partitions if p.address}
        return cls(message.version, entries).validate(), addresses


def bootstrap_split_keys(names: Sequence[str]) -> list[bytes]:
    """The keys at which a fresh stamp's map is cut (PartitionLimits.bootstrap_split_keys):
    each "account/pname" is the first name of a range partition, which holds every key of
    that name and of the names after it up to the next; in key order."""
    found = set()
    for name in names:
        account, slash, pname = name.partition("/")
        if not slash or not account:
            raise InvalidArgument(f"partition.bootstrap_split_keys: {name!r} is not "
                                  f"'account/pname'")
        # The name's smallest key (its meta row's): `stamp partition ls` shows it by name.
        found.add(keys.encode_key(account, pname, keys.KIND_META, b""))
    if len(found) != len(names):
        raise InvalidArgument("partition.bootstrap_split_keys repeat a name")
    return sorted(found)


def range_from_pb(message: pb.KeyRange) -> tuple[bytes, bytes | None]:
    return message.low, (message.high if message.has_high else None)


def least_loaded(servers: Iterable[str], current: PartitionMap) -> str | None:
    """The live server serving the fewest partitions (ties: by name), or None."""
    counts = {name: 0 for name in servers}
    for entry in current.partitions:
        if entry.server in counts:
            counts[entry.server] += 1
    return min(counts, key=lambda n: (counts[n], n)) if counts else None


def assigned_elsewhere(current: PartitionMap, server: str, serving: Iterable[int]
                       ) -> list[int]:
    """Of the partitions `server` reports `serving`, those `current` assigns to another
    server: it must let them go (their owner by the map cannot load them while it holds
    their leases). A partition the map does not hold yet (a split's or merge's result
    before it is published) or that a pending op names is left alone: the op decides."""
    assigned = {entry.id: entry.server for entry in current.partitions}
    return sorted(partition_id for partition_id in set(serving)
                  if assigned.get(partition_id) not in (None, "", server)
                  and current.pending_for(partition_id) is None)
