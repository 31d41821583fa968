"""A partition's checkpoints as it reads them: each run's index and bloom filter are loaded
on first use, kept in a bounded index cache, and loaded again if evicted (§4 "an index cache
... bounded").

Why lazily: a partition load then reads only the metadata record and the commit log since the
checkpoint, so it does not grow with the partition's size (issue 6); the indexes are warmed
in the background right after the load, and a read that comes first waits for its run's only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from partition_layer.cache import LruCache
from partition_layer.runs import Read, RunIndex, RunInfo, RunReader


class IndexCache:
    """Loaded run indexes of one partition, bounded in bytes; single-flight loads."""

    def __init__(self, max_bytes: int, read: Read, block_cache: LruCache) -> None:
        self._cache = LruCache(max_bytes, sizeof=lambda reader: reader.index.nbytes)
        self._read = read
        self._block_cache = block_cache
        self._loading: dict[int, asyncio.Task[RunReader]] = {}
        self.loads = 0

    async def reader(self, info: RunInfo) -> RunReader:
        found = self._cache.get(info.run_id)
        if found is not None:
            return found
        task = self._loading.get(info.run_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(info))
            self._loading[info.run_id] = task
            task.add_done_callback(lambda _: self._loading.pop(info.run_id, None))
        return await asyncio.shield(task)

    async def _load(self, info: RunInfo) -> RunReader:
        reader = RunReader(await RunIndex.load(info, self._read), self._read, self._block_cache)
        self.loads += 1
        self._cache.put(info.run_id, reader)
        return reader

    @property
    def nbytes(self) -> int:
        return self._cache.nbytes


class Run:
    """One checkpoint run, its index loaded on demand through the partition's IndexCache."""

    def __init__(self, info: RunInfo, indexes: IndexCache) -> None:
        self.info = info
        self._indexes = indexes

    async def get(self, key: bytes) -> bytes | None:
        if not self.info.first_key <= key <= self.info.last_key:
            return None  # outside the run: no need for its index
        return await (await self._indexes.reader(self.info)).get(key)

    async def scan(self, start: bytes = b"", end: bytes | None = None
                   ) -> AsyncIterator[tuple[bytes, bytes]]:
        reader = await self._indexes.reader(self.info)
        async for item in reader.scan(start, end):
            yield item

    async def scan_blocks(self, start: bytes = b"", end: bytes | None = None
                          ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        reader = await self._indexes.reader(self.info)
        async for rows in reader.scan_blocks(start, end):
            yield rows

    async def warm(self) -> None:
        await self._indexes.reader(self.info)
