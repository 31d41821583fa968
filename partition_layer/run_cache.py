"""A partition's checkpoints as it reads them: each run's index and bloom filter are loaded
on first use, kept in a bounded index cache, and loaded again if evicted (§4 "an index cache
... bounded").

Why lazily: a partition load then reads only the metadata record and the commit log since the
checkpoint, so it does not grow with the partition's size (issue 6); the indexes are warmed
in the background right after the load, and a read that comes first waits for its run's only.

Views (issue 17): a run is read through its RunInfo's view. After a split both children list
the parent's runs, each narrowed to its own range; a merge lists the two pieces of one
physical run once where their views meet, but may list it twice with disjoint views
(meta_derive.merged_runs). `Run` clamps every get and scan to the view, so a key
outside it is not in the run for this partition — a key the other half deleted and merged
away stays gone. Indexes are cached per physical run (its index blocks), so a run listed
twice is loaded once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from partition_layer.cache import LruCache
from partition_layer.runs import Read, RunIndex, RunInfo, RunReader
from stream_layer.framing import Location


def physical_run(info: RunInfo) -> tuple[Location, ...]:
    """What names a physical run: its index blocks, whatever its run id and view in the
    listing that reads it (the index cache's key; a merge joins the pieces a split made of
    one run by it, meta_derive.py)."""
    return info.index_blocks


class IndexCache:
    """Loaded run indexes of one partition, bounded in bytes; single-flight loads."""

    def __init__(self, max_bytes: int, read: Read, block_cache: LruCache) -> None:
        self._cache = LruCache(max_bytes, sizeof=lambda reader: reader.index.nbytes)
        self._read = read
        self._block_cache = block_cache
        self._loading: dict[tuple[Location, ...], asyncio.Task[RunReader]] = {}
        self.loads = 0

    async def reader(self, info: RunInfo) -> RunReader:
        key = physical_run(info)
        found = self._cache.get(key)
        if found is not None:
            return found
        task = self._loading.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(info))
            self._loading[key] = task
            task.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(task)

    def install(self, info: RunInfo, index: RunIndex) -> None:
        """The index of a run this partition just wrote (RunWriter.index): its first reads
        then do not wait for the extent nodes."""
        self._cache.put(physical_run(info), RunReader(index, self._read, self._block_cache))

    def adopt(self, other: IndexCache) -> None:
        """Take `other`'s loaded indexes (a split or merge parent's: its runs are this
        partition's physical runs, and a run never changes), read through this cache's own
        stream and block cache from now on."""
        for key, reader in other._cache.items():
            if key not in self._cache:
                self._cache.put(key, RunReader(reader.index, self._read, self._block_cache))

    def peek(self, info: RunInfo) -> RunReader | None:
        """The run's reader if its index is loaded now; never loads (size estimates)."""
        return self._cache.peek(physical_run(info))

    async def _load(self, info: RunInfo) -> RunReader:
        reader = RunReader(await RunIndex.load(info, self._read), self._read, self._block_cache)
        self.loads += 1
        self._cache.put(physical_run(info), reader)
        return reader

    @property
    def nbytes(self) -> int:
        return self._cache.nbytes

    @property
    def count(self) -> int:
        return len(self._cache)


class Run:
    """One checkpoint run as one partition lists it: its index loaded on demand through the
    partition's IndexCache, its keys those in `info`'s view."""

    def __init__(self, info: RunInfo, indexes: IndexCache) -> None:
        self.info = info
        self._indexes = indexes

    async def get(self, key: bytes) -> bytes | None:
        if not (self.info.in_view(key) and self.info.first_key <= key <= self.info.last_key):
            return None  # not this partition's key in this run: no need for its index
        return await (await self._indexes.reader(self.info)).get(key)

    async def scan(self, start: bytes = b"", end: bytes | None = None
                   ) -> AsyncIterator[tuple[bytes, bytes]]:
        """(key, encoded row) for the keys in [start, end) and in the view, ascending."""
        bounds = self.info.clamp(start, end)
        if bounds is None:
            return
        reader = await self._indexes.reader(self.info)
        async for item in reader.scan(*bounds):
            yield item

    async def scan_blocks(self, start: bytes = b"", end: bytes | None = None
                          ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """As `scan`, one list per data block."""
        bounds = self.info.clamp(start, end)
        if bounds is None:
            return
        reader = await self._indexes.reader(self.info)
        async for rows in reader.scan_blocks(*bounds):
            yield rows

    def loaded_index(self) -> RunIndex | None:
        """The run's index if loaded now (size_split.py estimates with it), else None."""
        reader = self._indexes.peek(self.info)
        return None if reader is None else reader.index

    async def warm(self) -> None:
        await self._indexes.reader(self.info)
