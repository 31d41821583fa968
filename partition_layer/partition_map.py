"""The partition map (§4): which range partition covers which keys, and which partition
server (PS) serves it. Pure data; the PM keeps it in the lock service as JSON.

Contract (§8 invariant 4): the ranges are disjoint and cover the whole key space — sorted by
`low`, the first starts at b"", each ends where the next begins, the last is open-ended
(`high` None). Every change makes a new map with a higher version; `validate` asserts the
invariant and every constructor of a changed map calls it.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from common.errors import InvalidArgument, NotFound
from common.proto import partition_pb2 as pb
from partition_layer import keys


@dataclass(frozen=True)
class PartitionEntry:
    id: int
    low: bytes
    high: bytes | None  # None: to the end of the key space
    server: str = ""    # the PS assigned to serve it; "" while unassigned

    def contains(self, key: bytes) -> bool:
        return self.low <= key and (self.high is None or key < self.high)

    def range_pb(self) -> pb.KeyRange:
        return pb.KeyRange(low=self.low, high=self.high or b"", has_high=self.high is not None)


@dataclass(frozen=True)
class PartitionMap:
    version: int
    partitions: tuple[PartitionEntry, ...]

    @classmethod
    def bootstrap(cls, split_keys: Sequence[bytes] = ()) -> PartitionMap:
        """The first map, its partitions not yet assigned: one covering the whole key space,
        cut at each of `split_keys` (ascending, distinct, not empty) into more."""
        if list(split_keys) != sorted(set(split_keys)) or b"" in split_keys:
            raise InvalidArgument("bootstrap split keys are distinct, ascending and not empty")
        lows = [b"", *split_keys]
        highs: list[bytes | None] = [*split_keys, None]
        return cls(1, tuple(PartitionEntry(i, low, high) for i, (low, high)
                            in enumerate(zip(lows, highs, strict=True), start=1))).validate()

    def validate(self) -> PartitionMap:
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

    def assigned(self, changes: dict[int, str]) -> PartitionMap:
        """A new version with partitions reassigned: {partition id: server name}."""
        for partition_id in changes:
            self.get(partition_id)
        return PartitionMap(self.version + 1, tuple(
            replace(p, server=changes.get(p.id, p.server)) for p in self.partitions)).validate()

    # ---- encodings ------------------------------------------------------------------------

    def to_json(self) -> bytes:
        return json.dumps({"version": self.version, "partitions": [
            {"id": p.id, "low": p.low.hex(), "high": None if p.high is None else p.high.hex(),
             "server": p.server} for p in self.partitions]}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> PartitionMap:
        data = json.loads(raw)
        return cls(data["version"], tuple(
            PartitionEntry(p["id"], bytes.fromhex(p["low"]),
                           None if p["high"] is None else bytes.fromhex(p["high"]), p["server"])
            for p in data["partitions"])).validate()

    def to_pb(self, addresses: dict[str, str]) -> pb.PartitionMap:
        return pb.PartitionMap(version=self.version, partitions=[
            pb.PartitionEntry(id=p.id, range=p.range_pb(), server=p.server,
                              address=addresses.get(p.server, ""))
            for p in self.partitions])

    @classmethod
    def from_pb(cls, message: pb.PartitionMap) -> tuple[PartitionMap, dict[str, str]]:
        """The map, and the addresses of the servers it names."""
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
