"""A range partition's size through its runs' views, and the key that halves it (issue 17).

After a split both children list the parent's runs (runs.py RunInfo views), so a run's
`data_bytes` overstates a child's share of it. A run's bytes within its view are estimated
from its index: the run's mean data-block bytes times the number of its data blocks that
hold keys of the view, a block only partly in the view counting half. Without the index
(not loaded yet: indexes warm in the background after a load) the estimate is RunInfo's
`data_bytes`, or 0 for a view that misses the run's keys altogether.

`size_split_key` is where the policy splits a partition that is too big (`trigger` size):
the weighted median of the partition's data — each in-view data block of a run with a loaded
index weighs its bytes at its first key (a run whose index is not loaded is left out: it
says nothing of where its bytes lie), and a spread of memtable keys weighs the memtable's
bytes — moved to the start of its partition name, because a split never cuts a partition
name (split17.md). When that start is the partition's low end, the start of the next name
is tried. b"" when no name start lies strictly inside the range with data on both sides
(one name holds it all). Cost: a few bisections per run and memtable sample, no walk over
the data, so it runs at every heartbeat.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from common.errors import InvalidArgument
from partition_layer import keys
from partition_layer.memtable import Memtable
from partition_layer.run_cache import Run
from partition_layer.runs import RunIndex, RunInfo

MEMTABLE_SAMPLE_KEYS = 64  # memtable keys that stand for its bytes in the median
PARTIAL_BLOCK_SHARE = 0.5  # a data block only partly in the view: half its bytes


class Points(Protocol):
    """Ascending weighted keys: one source of a partition's data."""

    @property
    def count(self) -> int: ...

    def key(self, j: int) -> bytes: ...

    def weight(self) -> float: ...

    def weight_below(self, key: bytes, inclusive: bool) -> float: ...

    def first_at_or_after(self, key: bytes) -> bytes | None: ...


@dataclass(frozen=True)
class ViewBlocks:
    """The data blocks lo..hi-1 of a run that hold keys of its view, as points: block lo
    stands at max(its first key, view_low), the others at their first keys; each weighs the
    run's mean block bytes, a block only partly in the view PARTIAL_BLOCK_SHARE of it."""

    first_keys: Sequence[bytes]
    lo: int
    hi: int
    start: bytes
    block_bytes: float
    first_share: float
    last_share: float

    @classmethod
    def of(cls, info: RunInfo, index: RunIndex) -> ViewBlocks:
        first_keys = index.first_keys
        blocks = index.block_numbers(info.view_low, info.view_high)
        lo, hi = blocks.start, blocks.stop
        mean = info.data_bytes / max(1, info.data_blocks)
        if lo >= hi:
            return cls(first_keys, 0, 0, b"", mean, 1.0, 1.0)
        first_partial = first_keys[lo] < info.view_low
        high = info.view_high
        # Block hi-1 ends below first_keys[hi] (>= view_high), or at the run's last key.
        last_partial = high is not None and (
            index.last_key >= high if hi == len(first_keys) else first_keys[hi] > high)
        if hi - lo == 1:
            share = PARTIAL_BLOCK_SHARE if first_partial or last_partial else 1.0
            return cls(first_keys, lo, hi, max(first_keys[lo], info.view_low), mean, share,
                       share)
        return cls(first_keys, lo, hi, max(first_keys[lo], info.view_low), mean,
                   PARTIAL_BLOCK_SHARE if first_partial else 1.0,
                   PARTIAL_BLOCK_SHARE if last_partial else 1.0)

    @property
    def count(self) -> int:
        return self.hi - self.lo

    def key(self, j: int) -> bytes:
        return self.start if j == 0 else self.first_keys[self.lo + j]

    def _first(self, m: int) -> float:
        """The weight of the first m points."""
        if m <= 0:
            return 0.0
        shares = m - (1.0 - self.first_share)
        if m == self.count and self.count > 1:
            shares -= 1.0 - self.last_share
        return shares * self.block_bytes

    def weight(self) -> float:
        return self._first(self.count)

    def weight_below(self, key: bytes, inclusive: bool) -> float:
        """The weight of the points < key (<= key if inclusive)."""
        if not self.count or (key <= self.start if not inclusive else key < self.start):
            return 0.0
        find = bisect.bisect_right if inclusive else bisect.bisect_left
        return self._first(find(self.first_keys, key, self.lo + 1, self.hi) - self.lo)

    def first_at_or_after(self, key: bytes) -> bytes | None:
        if not self.count:
            return None
        if key <= self.start:
            return self.start
        i = bisect.bisect_left(self.first_keys, key, self.lo + 1, self.hi)
        return self.first_keys[i] if i < self.hi else None


@dataclass(frozen=True)
class SpreadKeys:
    """Keys spread evenly over a memtable, each weighing an equal share of its bytes."""

    keys: list[bytes]
    each: float

    @classmethod
    def of(cls, memtable: Memtable) -> SpreadKeys:
        spread = memtable.keys_spread(MEMTABLE_SAMPLE_KEYS)
        return cls(spread, memtable.nbytes / len(spread) if spread else 0.0)

    @property
    def count(self) -> int:
        return len(self.keys)

    def key(self, j: int) -> bytes:
        return self.keys[j]

    def weight(self) -> float:
        return self.each * len(self.keys)

    def weight_below(self, key: bytes, inclusive: bool) -> float:
        find = bisect.bisect_right if inclusive else bisect.bisect_left
        return self.each * find(self.keys, key)

    def first_at_or_after(self, key: bytes) -> bytes | None:
        i = bisect.bisect_left(self.keys, key)
        return self.keys[i] if i < len(self.keys) else None


def run_bytes_in_view(info: RunInfo, index: RunIndex | None) -> int:
    """The estimated payload bytes of `info`'s data blocks within its view."""
    if info.clamp(b"", None) is None:
        return 0
    if info.whole_in_view() or index is None:
        return info.data_bytes
    return round(ViewBlocks.of(info, index).weight())


class SizedPartition(Protocol):
    """What the estimates read of a partition (RangePartition is one)."""

    range: keys.KeyRange
    memtable: Memtable
    frozen: Memtable | None
    readers: list[Run]


def partition_run_bytes(partition: SizedPartition) -> int:
    """The bytes of the partition's runs, each through its view."""
    return sum(run_bytes_in_view(r.info, r.loaded_index()) for r in partition.readers)


def _sources(partition: SizedPartition) -> list[Points]:
    sources: list[Points] = []
    for run in partition.readers:
        index = run.loaded_index()
        if index is not None:
            sources.append(ViewBlocks.of(run.info, index))
    for table in (partition.memtable, partition.frozen):
        if table is not None and len(table):
            sources.append(SpreadKeys.of(table))
    return [s for s in sources if s.count]


def _below(sources: Sequence[Points], key: bytes, inclusive: bool) -> float:
    return sum(s.weight_below(key, inclusive) for s in sources)


def _median(sources: Sequence[Points], half: float) -> bytes | None:
    """The smallest point key with at least `half` of the weight at or below it."""
    found: bytes | None = None
    for source in sources:
        lo, hi = 0, source.count
        while lo < hi:  # the first point of this source where the total reaches half
            mid = (lo + hi) // 2
            if _below(sources, source.key(mid), True) >= half:
                hi = mid
            else:
                lo = mid + 1
        if lo < source.count and (found is None or source.key(lo) < found):
            found = source.key(lo)
    return found


def _name_start(key: bytes) -> bytes:
    account, pname, _, _ = keys.decode_key(key)
    return keys.encode_key(account, pname, keys.KIND_META, b"")


def size_split_key(partition: SizedPartition) -> bytes:
    """The start of a partition name that about halves the partition's data; b"" if none
    lies strictly inside its range with data on both sides."""
    sources = _sources(partition)
    total = sum(s.weight() for s in sources)
    if total <= 0:
        return b""
    half = total / 2
    median = _median(sources, half)
    if median is None:
        return b""
    try:
        candidates = [_name_start(median)]
        # The start of the next name holding data: better when the median's name starts
        # at the partition's low end (the first name holds more than half).
        after = keys.prefix_end(median[:keys.kind_offset(median)])
        nexts = [k for s in sources if after is not None
                 and (k := s.first_at_or_after(after)) is not None]
        if nexts:
            candidates.append(_name_start(min(nexts)))
    except InvalidArgument:
        return b""  # not a key of the object table: nothing to split at
    low, high = partition.range.low, partition.range.high
    best, best_miss = b"", total
    for key in candidates:
        if not (low < key and (high is None or key < high)):
            continue
        left = _below(sources, key, False)
        if 0 < left < total and abs(left - half) < best_miss:
            best, best_miss = key, abs(left - half)
    return best
