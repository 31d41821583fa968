"""A consistent snapshot of one range partition's rows for a scan (§5: "each partition's part
is a consistent snapshot"), read in batches.

Contracts:
- `Snapshot.of` takes it without an await, so it sees one state of the partition (the
  checkpointer swaps memtables and publishes runs without one either): a copy of the live
  memtable's entries in [low, high) (bounded by `memtable_bytes_max`), the memtable being
  checkpointed (frozen: never written again) and the run readers in force (runs are
  immutable). Later writes, checkpoints and merges change nothing it returns.
- `batches(start)` yields the live rows from `start` in key order, in lists: each key once,
  with the row of the newest source holding it, tombstones dropped — merge.py's contract for
  reads, but without an await per row (a run is read a data block at a time, and the k-way
  merge of the blocks in hand is plain code). A list ends, at the latest, where a source must
  read its next block: a caller that skips what follows has it not read at all. Memory: one
  block per run, one batch.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import AsyncIterator, Iterator, Sequence
from itertools import islice
from operator import itemgetter
from typing import Protocol

from common.errors import Internal
from partition_layer.memtable import Memtable
from partition_layer.partition import RangePartition
from partition_layer.rows import is_tombstone

Rows = list[tuple[bytes, bytes]]
BATCH_ROWS = 1024


class RunSource(Protocol):
    """A sorted run as a scan reads it (run_cache.Run is one)."""

    def scan_blocks(self, start: bytes = b"", end: bytes | None = None
                    ) -> AsyncIterator[Rows]: ...


class Snapshot:
    """The rows of one partition in [low, high) as they were when it was taken."""

    def __init__(self, memtable: Rows, frozen: Memtable | None, runs: Sequence[RunSource],
                 low: bytes, high: bytes) -> None:
        assert frozen is None or frozen.frozen, "only a frozen memtable may be kept as is"
        self._memtable = memtable  # a copy: the live memtable changes under us
        self._frozen = frozen
        self._runs = list(runs)  # newest first
        self.low, self.high = low, high

    @classmethod
    def of(cls, partition: RangePartition, low: bytes, high: bytes) -> Snapshot:
        """Take it now (no await: one state of the partition)."""
        return cls(list(partition.memtable.items(low, high)), partition.frozen,
                   partition.readers, low, high)

    def batches(self, start: bytes) -> AsyncIterator[Rows]:
        """Live rows (key, encoded row) from max(start, low) up to high, ascending, in
        lists of up to about BATCH_ROWS."""
        start = max(start, self.low)
        first = bisect.bisect_left(self._memtable, start, key=itemgetter(0))
        sources = []
        if first < len(self._memtable):
            sources.append(_chunked(self._memtable[i:i + BATCH_ROWS]
                                    for i in range(first, len(self._memtable), BATCH_ROWS)))
        if self._frozen is not None:
            items = self._frozen.items(start, self.high)
            sources.append(_chunked(iter(lambda: list(islice(items, BATCH_ROWS)), [])))
        sources += [run.scan_blocks(start, self.high) for run in self._runs]
        return merged_batches(sources)


async def _chunked(chunks: Iterator[Rows]) -> AsyncIterator[Rows]:
    for chunk in chunks:
        yield chunk


async def merged_batches(sources: list[AsyncIterator[Rows]]) -> AsyncIterator[Rows]:
    """The k-way merge of ascending sources of row lists, newest source first: each key
    once, from the newest source holding it; tombstones dropped."""
    live = sources
    if not live:
        return
    if len(live) == 1:  # one run, or a memtable alone: nothing to merge
        async for chunk in live[0]:
            yield [(k, r) for k, r in chunk if not is_tombstone(r)]
        return
    chunks: list[Rows] = [[] for _ in live]
    at = [0] * len(live)
    heap: list[tuple[bytes, int]] = []  # (key, source): on equal keys the newest first

    async def refill(n: int) -> None:
        """Push source n's next key, reading its next chunk when this one is used up."""
        if at[n] == len(chunks[n]):
            previous = chunks[n][-1][0] if chunks[n] else None
            chunks[n], at[n] = [], 0
            async for chunk in live[n]:
                if chunk:
                    chunks[n] = chunk
                    break
            if not chunks[n]:
                return
            if previous is not None and chunks[n][0][0] <= previous:
                raise Internal(f"scan source {n} is not ascending at {chunks[n][0][0].hex()}")
        heapq.heappush(heap, (chunks[n][at[n]][0], n))

    for n in range(len(live)):
        await refill(n)
    out: Rows = []
    while heap:
        key, n = heapq.heappop(heap)
        chunk = chunks[n]
        row = chunk[at[n]][1]
        at[n] += 1
        if not is_tombstone(row):
            out.append((key, row))
        if at[n] < len(chunk):  # the common case, without a call
            heapq.heappush(heap, (chunk[at[n]][0], n))
        else:
            if out:
                # Hand over what is merged before reading on: the caller may skip what
                # follows without it being read (scan_stream.py skips a log's records).
                yield out
                out = []
            await refill(n)
        while heap and heap[0][0] == key:  # older versions of the same key
            _, older = heapq.heappop(heap)
            at[older] += 1
            await refill(older)
        if len(out) >= BATCH_ROWS:
            yield out
            out = []
    if out:
        yield out
