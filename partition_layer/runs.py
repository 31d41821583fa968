"""Sorted runs: the checkpoint format on the row-data stream (§4; an LSM SSTable).

A run is data blocks (sorted (key, encoded row) entries, about `block_bytes_target` each),
then its index (the first key and Location of every data block, and the run's last key;
split over blocks of about INDEX_BLOCK_BYTES_TARGET), then its bloom filter (split likewise).
Every block is one stream block; the formats are in run_blocks.py. `RunInfo` names the index
and bloom blocks; the partition's metadata record holds it (partition_meta.py).

Contracts:
- RunWriter: `add` keys strictly ascending (asserted), then `finish()` once. Data blocks go
  to the stream in batches of at most `append_bytes_max` frame bytes and
  `append_blocks_max` blocks, so the writer holds at most about one batch plus one block.
  The run is only referenced once the caller records its RunInfo: a writer that fails midway
  leaves unreferenced blocks (garbage), never a half-visible run.
- RunIndex.load reads and checks every index and bloom block (≈ 1/1000 of the data at the
  default sizes); RunReader then reads one data block per `get` (none when the bloom filter
  says no) and `scan` streams block by block. A block that does not match the index raises
  Internal; a corrupt one ChecksumError — never wrong data (§8 invariant 6).
"""

from __future__ import annotations

import asyncio
import bisect
import operator
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from common.errors import Internal, InvalidArgument
from partition_layer import run_blocks
from partition_layer.bloom import BITS_PER_KEY_DEFAULT, BloomFilter, key_hash
from partition_layer.cache import LruCache
from partition_layer.rows import row_version
from stream_layer.framing import Location, frame_bytes

KiB = 1024
MiB = 1024 * KiB
DATA_BLOCK_BYTES_DEFAULT = 64 * KiB
INDEX_BLOCK_BYTES_TARGET = 2 * MiB
BLOOM_BLOCK_BYTES_TARGET = 2 * MiB
BLOCK_BYTES_MAX = 4 * MiB  # the stream layer's block limit (ExtentNodeLimits.block_bytes_max)
# A checkpoint's appends share the disk with the commit log's: one of 8 MiB held every commit
# behind its fsync for up to 150 ms (measured under 32 appenders); at 1 MiB, about 30 ms. A
# block bigger than this (an index or bloom block) goes in an append of its own.
APPEND_BYTES_MAX_DEFAULT = 1 * MiB
APPEND_BLOCKS_MAX_DEFAULT = 128  # under ExtentNodeLimits.append_blocks_max
INDEX_ENTRY_MEMORY_BYTES = 150  # a first key's bytes object, its Location, two list slots

Append = Callable[[list[bytes]], Awaitable[list[Location]]]
Read = Callable[[Location], Awaitable[bytes]]


def _loc_to_list(loc: Location) -> list[int]:
    return [loc.extent_id, loc.offset, loc.length]


@dataclass(frozen=True)
class RunInfo:
    run_id: int
    index_blocks: tuple[Location, ...]
    bloom_blocks: tuple[Location, ...]
    key_count: int
    data_blocks: int
    data_bytes: int  # payload bytes of the data blocks
    first_key: bytes
    last_key: bytes
    min_version: int | None = None
    max_version: int | None = None
    # The view (issue 17, split and merge): only keys in [view_low, view_high) of this run
    # belong to the partition whose metadata lists it; view_high None: no upper bound. A
    # split child lists its parent's runs narrowed to its own range, so one physical run
    # (same index blocks) may be listed by several partitions, and twice by a merged one,
    # each time with a disjoint view. Reads, scans, merges and size estimates of a run go
    # through its view: a key outside it is not in the run, for this partition.
    view_low: bytes = b""
    view_high: bytes | None = None

    def in_view(self, key: bytes) -> bool:
        return self.view_low <= key and (self.view_high is None or key < self.view_high)

    def clamp(self, start: bytes, end: bytes | None) -> tuple[bytes, bytes | None] | None:
        """[start, end) narrowed to the view and to the run's keys [first_key, last_key]:
        the bounds a read of this run uses for the partition listing it; None when nothing
        is left (then the run need not be opened at all)."""
        low = max(start, self.view_low, self.first_key)
        high = end if self.view_high is None else (
            self.view_high if end is None else min(end, self.view_high))
        if low > self.last_key or (high is not None and high <= low):
            return None
        return low, high

    def whole_in_view(self) -> bool:
        """Whether every key of the run lies in its view (a run not shared by a split)."""
        return self.view_low <= self.first_key and (
            self.view_high is None or self.last_key < self.view_high)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id,
                "index_blocks": [_loc_to_list(x) for x in self.index_blocks],
                "bloom_blocks": [_loc_to_list(x) for x in self.bloom_blocks],
                "key_count": self.key_count, "data_blocks": self.data_blocks,
                "data_bytes": self.data_bytes, "first_key": self.first_key.hex(),
                "last_key": self.last_key.hex(), "min_version": self.min_version,
                "max_version": self.max_version, "view_low": self.view_low.hex(),
                "view_high": None if self.view_high is None else self.view_high.hex()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunInfo:
        return cls(run_id=d["run_id"],
                   index_blocks=tuple(Location(*x) for x in d["index_blocks"]),
                   bloom_blocks=tuple(Location(*x) for x in d["bloom_blocks"]),
                   key_count=d["key_count"], data_blocks=d["data_blocks"],
                   data_bytes=d["data_bytes"], first_key=bytes.fromhex(d["first_key"]),
                   last_key=bytes.fromhex(d["last_key"]), min_version=d.get("min_version"),
                   max_version=d.get("max_version"),
                   view_low=bytes.fromhex(d.get("view_low", "")),
                   view_high=None if d.get("view_high") is None
                   else bytes.fromhex(d["view_high"]))


class RunWriter:
    def __init__(self, append: Append, block_bytes_target: int = DATA_BLOCK_BYTES_DEFAULT,
                 append_bytes_max: int = APPEND_BYTES_MAX_DEFAULT,
                 bloom_bits_per_key: int = BITS_PER_KEY_DEFAULT, *, run_id: int = 0,
                 append_blocks_max: int = APPEND_BLOCKS_MAX_DEFAULT,
                 index_block_bytes_target: int = INDEX_BLOCK_BYTES_TARGET,
                 version_of: Callable[[bytes], int] | None = row_version) -> None:
        assert 0 < block_bytes_target <= BLOCK_BYTES_MAX
        assert append_bytes_max > 0 and append_blocks_max >= 1
        self._append = append
        self._block_target = block_bytes_target
        self._append_bytes_max = append_bytes_max
        self._append_blocks_max = append_blocks_max
        self._bits_per_key = bloom_bits_per_key
        self._index_target = index_block_bytes_target
        self._version_of = version_of
        self.run_id = run_id
        self._entries: list[tuple[bytes, bytes]] = []
        self._entries_bytes = 0
        self._pending: list[tuple[bytes, bytes]] = []  # (first key, encoded data block)
        self._pending_bytes = 0
        self._index: list[tuple[bytes, Location]] = []
        self._hashes = bytearray()
        self._first_key: bytes | None = None
        self._last_key: bytes | None = None
        self._count = 0
        self._data_bytes = 0
        self._min_version: int | None = None
        self._max_version: int | None = None
        self._finished = False
        # After finish: the run's index as a reader would load it (IndexCache.install), so
        # the partition that wrote the run need not read it back.
        self.index: RunIndex | None = None

    @property
    def key_count(self) -> int:
        return self._count

    async def add(self, key: bytes, row_bytes: bytes) -> None:
        assert not self._finished, "add after finish"
        assert self._last_key is None or key > self._last_key, "run keys must ascend strictly"
        size = len(key) + len(row_bytes) + run_blocks.DATA_ENTRY_OVERHEAD_BYTES
        if size + run_blocks.OVERHEAD_BYTES + 4 > BLOCK_BYTES_MAX:
            raise InvalidArgument(f"a row of {size} bytes does not fit a run block")
        if self._entries and self._entries_bytes + size > self._block_target:
            await self._close_block()
        if self._version_of is not None:
            version = self._version_of(row_bytes)
            if self._min_version is None or version < self._min_version:
                self._min_version = version
            if self._max_version is None or version > self._max_version:
                self._max_version = version
        self._entries.append((key, row_bytes))
        self._entries_bytes += size
        self._hashes += key_hash(key)
        if self._first_key is None:
            self._first_key = key
        self._last_key = key
        self._count += 1

    async def _close_block(self) -> None:
        block = run_blocks.encode_data_block(self._entries)
        assert len(block) <= BLOCK_BYTES_MAX
        if self._pending and (
                self._pending_bytes + frame_bytes(len(block)) > self._append_bytes_max
                or len(self._pending) >= self._append_blocks_max):
            await self._flush()
        self._pending.append((self._entries[0][0], block))
        self._pending_bytes += frame_bytes(len(block))
        self._data_bytes += len(block)
        self._entries = []
        self._entries_bytes = 0

    async def _flush(self) -> None:
        blocks = [block for _, block in self._pending]
        locations = await self._append(blocks)
        if len(locations) != len(blocks):
            raise Internal(f"append of {len(blocks)} blocks returned {len(locations)} places")
        self._index.extend(zip((k for k, _ in self._pending), locations, strict=True))
        self._pending = []
        self._pending_bytes = 0

    async def _append_all(self, blocks: Sequence[bytes]) -> list[Location]:
        """Append blocks in as few calls as the append limits allow."""
        locations: list[Location] = []
        batch: list[bytes] = []
        batch_bytes = 0
        for block in [*blocks, None]:
            if batch and (block is None or len(batch) >= self._append_blocks_max
                          or batch_bytes + frame_bytes(len(block)) > self._append_bytes_max):
                got = await self._append(batch)
                if len(got) != len(batch):
                    raise Internal(f"append of {len(batch)} blocks returned {len(got)} places")
                locations += got
                batch, batch_bytes = [], 0
            if block is not None:
                assert len(block) <= BLOCK_BYTES_MAX
                batch.append(block)
                batch_bytes += frame_bytes(len(block))
        return locations

    async def finish(self) -> RunInfo:
        assert not self._finished, "finish twice"
        assert self._count > 0, "a run holds at least one key"
        assert self._first_key is not None and self._last_key is not None
        self._finished = True
        if self._entries:
            await self._close_block()
        await self._flush()
        index_blocks = await self._append_all(self._encode_index())
        bloom = BloomFilter.from_hashes(self._hashes, self._bits_per_key).to_bytes()
        self._hashes = bytearray()
        step = BLOOM_BLOCK_BYTES_TARGET
        pieces = [bloom[i:i + step] for i in range(0, len(bloom), step)]
        bloom_blocks = await self._append_all(
            [run_blocks.encode_bloom_block(n, piece, n == len(pieces) - 1)
             for n, piece in enumerate(pieces)])
        info = RunInfo(run_id=self.run_id, index_blocks=tuple(index_blocks),
                       bloom_blocks=tuple(bloom_blocks), key_count=self._count,
                       data_blocks=len(self._index), data_bytes=self._data_bytes,
                       first_key=self._first_key, last_key=self._last_key,
                       min_version=self._min_version, max_version=self._max_version)
        self.index = RunIndex(info, [key for key, _ in self._index],
                              [location for _, location in self._index],
                              BloomFilter.from_bytes(bloom))
        return info

    def _encode_index(self) -> list[bytes]:
        blocks: list[bytes] = []
        piece: list[tuple[bytes, Location]] = []
        size = 0
        for entry in self._index:
            if piece and size + len(entry[0]) > self._index_target:
                blocks.append(run_blocks.encode_index_block(piece, None))
                piece, size = [], 0
            piece.append(entry)
            size += len(entry[0]) + run_blocks.INDEX_ENTRY_OVERHEAD_BYTES
        blocks.append(run_blocks.encode_index_block(piece, self._last_key))
        return blocks


class RunIndex:
    """A run's index and bloom filter, in memory while the run is in use."""

    def __init__(self, info: RunInfo, first_keys: list[bytes], locations: list[Location],
                 bloom: BloomFilter) -> None:
        if (not first_keys or len(first_keys) != len(locations)
                or len(first_keys) != info.data_blocks or first_keys[0] != info.first_key
                or not all(map(operator.lt, first_keys, first_keys[1:]))
                or first_keys[-1] > info.last_key):
            raise Internal(f"run {info.run_id}: index does not match its RunInfo")
        self.info = info
        self.first_keys = first_keys
        self.locations = locations
        self.last_key = info.last_key
        self.bloom = bloom
        self.nbytes = (sum(map(len, first_keys)) + INDEX_ENTRY_MEMORY_BYTES * len(first_keys)
                       + bloom.nbytes)

    @classmethod
    async def load(cls, info: RunInfo, read: Read) -> RunIndex:
        blocks = await asyncio.gather(*(read(loc) for loc in info.index_blocks),
                                      *(read(loc) for loc in info.bloom_blocks))
        first_keys: list[bytes] = []
        locations: list[Location] = []
        count = len(info.index_blocks)
        for n, buf in enumerate(blocks[:count]):
            entries, last_key = run_blocks.decode_index_block(
                buf, f"run {info.run_id} index block {n}")
            if (last_key is not None) != (n == count - 1) or (
                    last_key is not None and last_key != info.last_key):
                raise Internal(f"run {info.run_id}: index block {n} misplaced")
            first_keys += (k for k, _ in entries)
            locations += (loc for _, loc in entries)
        pieces: list[bytes] = []
        for n, buf in enumerate(blocks[count:]):
            piece, chunk, last = run_blocks.decode_bloom_block(
                buf, f"run {info.run_id} bloom block {n}")
            if piece != n or last != (n == len(info.bloom_blocks) - 1):
                raise Internal(f"run {info.run_id}: bloom block {n} misplaced")
            pieces.append(chunk)
        return cls(info, first_keys, locations, BloomFilter.from_bytes(b"".join(pieces)))

    def may_contain(self, key: bytes) -> bool:
        return self.info.first_key <= key <= self.last_key and self.bloom.may_contain(key)

    def block_number(self, key: bytes) -> int | None:
        """Which data block would hold `key` (None: outside the run)."""
        if key < self.first_keys[0] or key > self.last_key:
            return None
        return bisect.bisect_right(self.first_keys, key) - 1

    def block_for(self, key: bytes) -> Location | None:
        i = self.block_number(key)
        return None if i is None else self.locations[i]

    def block_numbers(self, start: bytes, end: bytes | None) -> range:
        """The data blocks that may hold keys in [start, end)."""
        if start > self.last_key or (end is not None and (
                end <= start or end <= self.first_keys[0])):
            return range(0)
        low = max(0, bisect.bisect_right(self.first_keys, start) - 1)
        high = len(self.first_keys) if end is None else bisect.bisect_left(self.first_keys,
                                                                            end)
        return range(low, high)

    def blocks_for_range(self, start: bytes, end: bytes | None) -> list[Location]:
        r = self.block_numbers(start, end)
        return self.locations[r.start:r.stop]


def block_cache(max_bytes: int) -> LruCache:
    """A cache of decoded data blocks for RunReader (keyed by Location; share it freely)."""
    return LruCache(max_bytes, sizeof=lambda block: block.nbytes)


class RunReader:
    def __init__(self, index: RunIndex, read_block: Read, cache: LruCache | None = None
                 ) -> None:
        self.index = index
        self._read = read_block
        self._cache = cache
        self.block_reads = 0

    @property
    def info(self) -> RunInfo:
        return self.index.info

    async def _block(self, i: int, fill_cache: bool) -> run_blocks.DataBlock:
        loc = self.index.locations[i]
        if self._cache is not None:
            cached = self._cache.get(loc) if fill_cache else self._cache.peek(loc)
            if cached is not None:
                return cached
        self.block_reads += 1
        what = f"run {self.info.run_id} data block {i} at {loc}"
        block = run_blocks.DataBlock(await self._read(loc), what)
        keys = self.index.first_keys
        upper = keys[i + 1] if i + 1 < len(keys) else None
        if block.first_key != keys[i] or (
                block.last_key >= upper if upper is not None
                else block.last_key != self.index.last_key):
            raise Internal(f"{what} does not match the run's index")
        if self._cache is not None and fill_cache:
            self._cache.put(loc, block)
        return block

    async def get(self, key: bytes) -> bytes | None:
        """The encoded row at `key` in this run, or None."""
        if not self.index.may_contain(key):
            return None
        i = self.index.block_number(key)
        if i is None:
            return None
        return (await self._block(i, fill_cache=True)).find(key)

    async def scan_blocks(self, start: bytes = b"", end: bytes | None = None
                          ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """As `scan`, one list per data block (scan_stream.py merges them without an await
        per row)."""
        for i in self.index.block_numbers(start, end):
            block = await self._block(i, fill_cache=False)
            yield list(block.items(start, end))

    async def scan(self, start: bytes = b"", end: bytes | None = None
                   ) -> AsyncIterator[tuple[bytes, bytes]]:
        """(key, encoded row) for keys in [start, end), ascending, one block in memory at a
        time. Scans use cached blocks but do not fill the cache (they would flush it)."""
        for i in self.index.block_numbers(start, end):
            block = await self._block(i, fill_cache=False)
            for item in block.items(start, end):
                yield item
