"""Which extents of its streams a range partition still needs (issue 18, gc; §4 "A range
partition's streams"). Pure: decisions as functions of their inputs, no I/O, no clock.

A reload of the partition (§4 "Partition load") reads the newest record of the metadata
stream, the runs that record names, and the commit log from its replay point on. So:
- metadata: every extent is kept (records are small; the newest rules, and a split or merge
  intent is read back from there).
- commit log: the extents before the one holding the replay point, in stream order, are
  replayed by nobody (`log_unneeded`). No replay point (never checkpointed): all are needed.
  Nor those from where inter-stamp replication reads on (issue 30: a partition's `geo`
  mark): what is not shipped to the secondary stamp yet stays.
  A split child's or merged partition's meta has one replay point too (meta_derive.py: the
  parent's, or the right side's), inside its own log stream; a replay point whose extent the
  stream does not hold (never expected) keeps everything.
- row data: extents holding a block (data, index or bloom) of a run the metadata names
  (`run_extents`); runs a merge replaced are named by no record in force. Several records,
  several checkpoint lists: only the newest record rules a reload, and a merged partition's
  record holds both sides' runs.
- blob data: extents holding the value of a live row: the newest version of its key, not a
  tombstone, not a log record trimmed away (`live_blob_extents`).
- Writes in flight (a run being written and not yet named by a durable record, a value in
  blob data whose operation has not committed) land in the extent that was the stream's last
  when they began, or later ones: `WritePins` records those extents, and every extent from
  the earliest of them on is needed.
- Never the last extent of a stream (appends go there) and never an open one: the stream
  manager refuses both anyway (DropExtents).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass

from partition_layer.merge import merge
from partition_layer.partition_meta import GeoMark
from partition_layer.rows import decode_row
from partition_layer.runs import RunInfo
from stream_layer.framing import Location


@dataclass(frozen=True)
class Listed:
    """One extent of a stream as the stream manager listed it."""

    extent_id: int
    sealed: bool  # sealed or erasure-coded (not open)
    nbytes: int = 0  # its sealed length


def _droppable(listed: Sequence[Listed], candidates: Iterable[int]) -> list[int]:
    """`candidates` without the last extent and open ones, in stream order."""
    wanted = set(candidates)
    return [e.extent_id for e in listed[:-1] if e.sealed and e.extent_id in wanted]


def kept_from(listed: Sequence[Listed], first_kept: int) -> list[int]:
    """The extents before `first_kept` in stream order; none when the stream does not hold
    it (0 included: the stream was empty when a write began)."""
    ids = [e.extent_id for e in listed]
    return ids[:ids.index(first_kept)] if first_kept in ids else []


def first_pinned(listed: Sequence[Listed], pinned: Collection[int]) -> int | None:
    """The earliest of `pinned` in stream order (None: nothing pinned; 0: one the stream
    does not hold, so everything must be kept)."""
    if not pinned:
        return None
    ids = [e.extent_id for e in listed]
    if any(p not in ids for p in pinned):
        return 0
    return min(pinned, key=ids.index)


def log_unneeded(listed: Sequence[Listed], replay_from: Location | None,
                 geo: GeoMark | None = None) -> list[int]:
    """Commit-log extents wholly below the replay point, and below where inter-stamp
    replication reads on (`geo`, issue 30: what is not shipped yet stays)."""
    if replay_from is None or (geo is not None and geo.read_from is None):
        return []
    below = kept_from(listed, replay_from.extent_id)
    if geo is not None:
        assert geo.read_from is not None
        shipping = set(kept_from(listed, geo.read_from.extent_id))
        below = [e for e in below if e in shipping]
    return _droppable(listed, below)


def data_unneeded(listed: Sequence[Listed], referenced: Collection[int],
                  pinned: Collection[int] = ()) -> list[int]:
    """Row- or blob-data extents no reference needs and no write in flight may use."""
    floor = first_pinned(listed, pinned)
    below = [e.extent_id for e in listed] if floor is None else kept_from(listed, floor)
    return _droppable(listed, (e for e in below if e not in referenced))


def run_extents(info: RunInfo, data_blocks: Iterable[Location]) -> set[int]:
    """Every extent holding a block of the run: its data blocks (from its loaded index), its
    index blocks and its bloom blocks. A run shared by a split's children is needed whole
    by each that lists it, whatever its view."""
    return {loc.extent_id for loc in itertools.chain(data_blocks, info.index_blocks,
                                                     info.bloom_blocks)}


async def live_blob_extents(sources: list[AsyncIterator[tuple[bytes, bytes]]]) -> set[int]:
    """The blob-data extents live rows point at, given every source of a partition's rows
    newest first (memtables, then runs through their views). The merge (merge.py) yields
    each key's newest version only, drops tombstones, and drops a log's records trimmed
    away (they are never read again)."""
    found: set[int] = set()
    async for _, encoded in merge(sources, drop_tombstones=True):
        row = decode_row(encoded)
        if row.blob is not None:
            found.add(row.blob.location.extent_id)
    return found


class WritePins:
    """Writes in flight to one stream, each pinned at the extent that was the stream's last
    when it began (it lands there or later). `watch()` records every extent pinned while it
    lasts, including writes already in flight when it starts: a decision taken under a watch
    keeps every extent from the earliest recorded one on."""

    def __init__(self) -> None:
        self._active: dict[int, int] = {}
        self._watches: list[set[int]] = []
        self._tokens = itertools.count()

    @contextlib.contextmanager
    def pinned(self, last_extent: int) -> Iterator[None]:
        """Around one write: from before its first append until what it wrote is referenced
        by durable state (a record, a committed operation) or abandoned."""
        token = next(self._tokens)
        self._active[token] = last_extent
        for watch in self._watches:
            watch.add(last_extent)
        try:
            yield
        finally:
            del self._active[token]

    @contextlib.contextmanager
    def watch(self) -> Iterator[set[int]]:
        recorded = set(self._active.values())
        self._watches.append(recorded)
        try:
            yield recorded
        finally:
            self._watches.remove(recorded)

    @property
    def active(self) -> int:
        return len(self._active)
