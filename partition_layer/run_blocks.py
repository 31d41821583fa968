"""The block formats of a sorted run (runs.py): data, index and bloom blocks.

Every block is self-describing and carries its own CRC32C, on top of the stream layer's
(defense in depth, §8 invariant 6): `[u8×2 magic][u8 format][u32 count] body [u32 crc32c]`,
the CRC over everything before it. Decoding checks magic, format, CRC and every length; a
mismatch raises ChecksumError (bad CRC) or Internal (a consistent block that breaks its own
rules), never returns wrong data.

Data block body: (count + 1) u32 offsets of the entries, relative to the first entry, then
the entries `u32 key_len, key, value` (a value's length follows from the next offset).
The offsets table lets `DataBlock.find` binary-search without decoding every entry.

Index block body: u8 flags (FLAG_LAST), then count entries `u32 key_len, first key, u64
extent_id, u64 offset, u32 length` (the first key and Location of a data block), and in the
last index block of a run `u32 key_len, the run's last key`.

Bloom block body: u8 flags (FLAG_LAST), then a piece of the serialized bloom filter; a run's
bloom blocks concatenate, in order, to `BloomFilter.to_bytes()`. `count` numbers the piece.
"""

from __future__ import annotations

import bisect
import operator
import struct
from collections.abc import Iterator, Sequence

from common.checksums import crc32c
from common.errors import ChecksumError, Internal
from stream_layer.framing import Location

FORMAT = 1
DATA_MAGIC = b"RD"
INDEX_MAGIC = b"RI"
BLOOM_MAGIC = b"RB"
FLAG_LAST = 1

_HEADER = struct.Struct("<2sBI")
_CRC = struct.Struct("<I")
_U32 = struct.Struct("<I")
_FLAGS = struct.Struct("<B")
_LOCATION = struct.Struct("<QQI")
OVERHEAD_BYTES = _HEADER.size + _CRC.size + _FLAGS.size
DATA_ENTRY_OVERHEAD_BYTES = 2 * _U32.size  # its offset and its key length
INDEX_ENTRY_OVERHEAD_BYTES = _U32.size + _LOCATION.size


def _seal(parts: list[bytes]) -> bytes:
    body = b"".join(parts)
    return body + _CRC.pack(crc32c(body))


def _open(buf: bytes, magic: bytes, what: str) -> tuple[int, int]:
    """Check CRC, magic and format; return (count, end of body)."""
    if len(buf) < _HEADER.size + _CRC.size:
        raise Internal(f"{what}: {len(buf)} bytes is shorter than a block header")
    end = len(buf) - _CRC.size
    (expected,) = _CRC.unpack_from(buf, end)
    if crc32c(memoryview(buf)[:end]) != expected:
        raise ChecksumError(f"{what}: block checksum mismatch")
    got_magic, fmt, count = _HEADER.unpack_from(buf)
    if got_magic != magic or fmt != FORMAT:
        raise Internal(f"{what}: not a {magic!r} block of format {FORMAT} "
                       f"({got_magic!r}, {fmt})")
    return count, end


# ---- data blocks ------------------------------------------------------------------------------

def encode_data_block(entries: Sequence[tuple[bytes, bytes]]) -> bytes:
    offsets: list[int] = []
    parts: list[bytes] = []
    pos = 0
    for key, value in entries:
        offsets.append(pos)
        parts += (_U32.pack(len(key)), key, value)
        pos += _U32.size + len(key) + len(value)
    offsets.append(pos)
    head = _HEADER.pack(DATA_MAGIC, FORMAT, len(entries))
    return _seal([head, struct.pack(f"<{len(offsets)}I", *offsets), *parts])


class DataBlock:
    """A decoded data block: entries are read lazily through the offsets table."""

    __slots__ = ("_buf", "_offsets", "_start", "count")

    def __init__(self, buf: bytes, what: str = "data block") -> None:
        count, end = _open(buf, DATA_MAGIC, what)
        table = _HEADER.size
        start = table + 4 * (count + 1)
        if count == 0 or start > end:
            raise Internal(f"{what}: {count} entries do not fit {len(buf)} bytes")
        offsets = struct.unpack_from(f"<{count + 1}I", buf, table)
        if offsets[0] != 0 or offsets[-1] != end - start or not all(
                map(operator.lt, offsets, offsets[1:])):
            raise Internal(f"{what}: inconsistent offsets table")
        self._buf = buf
        self._offsets = offsets
        self._start = start
        self.count = count

    def _entry(self, i: int) -> tuple[int, int, int]:
        """(key start, key end = value start, value end) of entry i."""
        pos = self._start + self._offsets[i]
        nxt = self._start + self._offsets[i + 1]
        (key_len,) = _U32.unpack_from(self._buf, pos)
        key_end = pos + _U32.size + key_len
        if key_end > nxt:
            raise Internal(f"data block entry {i}: key overruns its entry")
        return pos + _U32.size, key_end, nxt

    def key_at(self, i: int) -> bytes:
        k0, k1, _ = self._entry(i)
        return self._buf[k0:k1]

    def item_at(self, i: int) -> tuple[bytes, bytes]:
        k0, k1, v1 = self._entry(i)
        return self._buf[k0:k1], self._buf[k1:v1]

    def lower_bound(self, key: bytes) -> int:
        """The index of the first entry whose key is >= key (count if none)."""
        return bisect.bisect_left(range(self.count), key, key=self.key_at)

    def find(self, key: bytes) -> bytes | None:
        i = self.lower_bound(key)
        if i < self.count:
            found, value = self.item_at(i)
            if found == key:
                return value
        return None

    def items(self, start: bytes = b"", end: bytes | None = None
              ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with keys in [start, end), ascending."""
        i = self.lower_bound(start) if start else 0
        previous: bytes | None = None
        for j in range(i, self.count):
            key, value = self.item_at(j)
            if end is not None and key >= end:
                return
            if previous is not None and key <= previous:
                raise Internal(f"data block keys out of order at entry {j}")
            previous = key
            yield key, value

    @property
    def first_key(self) -> bytes:
        return self.key_at(0)

    @property
    def last_key(self) -> bytes:
        return self.key_at(self.count - 1)

    @property
    def nbytes(self) -> int:
        return len(self._buf) + 8 * len(self._offsets) + 100


# ---- index blocks -----------------------------------------------------------------------------

def encode_index_block(entries: Sequence[tuple[bytes, Location]], last_key: bytes | None
                       ) -> bytes:
    """One piece of a run's index; `last_key` (the run's) is given for the last piece only."""
    parts = [_HEADER.pack(INDEX_MAGIC, FORMAT, len(entries)),
             _FLAGS.pack(FLAG_LAST if last_key is not None else 0)]
    for key, loc in entries:
        parts += (_U32.pack(len(key)), key, _LOCATION.pack(loc.extent_id, loc.offset,
                                                            loc.length))
    if last_key is not None:
        parts += (_U32.pack(len(last_key)), last_key)
    return _seal(parts)


def decode_index_block(buf: bytes, what: str = "index block"
                       ) -> tuple[list[tuple[bytes, Location]], bytes | None]:
    """(entries, the run's last key if this is the last piece)."""
    count, end = _open(buf, INDEX_MAGIC, what)
    pos = _HEADER.size
    if end < pos + _FLAGS.size:
        raise Internal(f"{what}: no flags byte")
    (flags,) = _FLAGS.unpack_from(buf, pos)
    pos += _FLAGS.size

    def take_key() -> bytes:
        nonlocal pos
        if pos + _U32.size > end:
            raise Internal(f"{what}: truncated")
        (n,) = _U32.unpack_from(buf, pos)
        pos += _U32.size
        if pos + n > end:
            raise Internal(f"{what}: key overruns the block")
        pos += n
        return buf[pos - n:pos]

    entries: list[tuple[bytes, Location]] = []
    for _ in range(count):
        key = take_key()
        if pos + _LOCATION.size > end:
            raise Internal(f"{what}: truncated")
        entries.append((key, Location(*_LOCATION.unpack_from(buf, pos))))
        pos += _LOCATION.size
    last_key = take_key() if flags & FLAG_LAST else None
    if pos != end or flags & ~FLAG_LAST:
        raise Internal(f"{what}: {end - pos} stray bytes or bad flags {flags}")
    return entries, last_key


# ---- bloom blocks -----------------------------------------------------------------------------

def encode_bloom_block(piece: int, chunk: bytes, last: bool) -> bytes:
    return _seal([_HEADER.pack(BLOOM_MAGIC, FORMAT, piece),
                  _FLAGS.pack(FLAG_LAST if last else 0), chunk])


def decode_bloom_block(buf: bytes, what: str = "bloom block") -> tuple[int, bytes, bool]:
    """(piece number, chunk, whether it is the last piece)."""
    piece, end = _open(buf, BLOOM_MAGIC, what)
    if end < _HEADER.size + _FLAGS.size:
        raise Internal(f"{what}: no flags byte")
    (flags,) = _FLAGS.unpack_from(buf, _HEADER.size)
    if flags & ~FLAG_LAST:
        raise Internal(f"{what}: bad flags {flags}")
    return piece, buf[_HEADER.size + _FLAGS.size:end], bool(flags & FLAG_LAST)
