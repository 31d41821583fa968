"""A row of the object table and its binary encoding (§4, §5).

A Row is what one write leaves at a key: its version (the LSN of that write; the ETag is
derived from it and is opaque to clients) and exactly one of an inline value, a pointer into
the blob-data stream (large values are written there once, never copied), or a tombstone.
An entity's value (inline or blob) carries `value_crc`, the CRC32C its writer sent (DESIGN
§5 end-to-end checksums: stored beside the bytes, returned to the reader, who verifies it);
bookkeeping rows and log appends (whose records carry their own, record_batch.py) have none.

Encoding (little-endian): `u8 tag, u64 version`, then by tag
  TAG_VALUE:         the value bytes (the rest of the buffer),
  TAG_VALUE_CRC:     u32 value_crc, then the value bytes,
  TAG_BLOB:          u64 extent_id, u64 offset, u32 length (the frame), u64 value_bytes,
  TAG_BLOB_CRC:      the same as TAG_BLOB, then u32 value_crc,
  TAG_TOMBSTONE:     nothing.
The tag is the first byte so `is_tombstone` and `row_version` need not decode the rest.

Contract: `decode_row(encode_row(r)) == r`; a malformed buffer raises Internal, never
yields a wrong row. The values of a name's bookkeeping rows (keys.py) start with a format
byte that says what they are: a KIND_META row holds LogMeta (a log) or ENTITY_GROUP (an
entity group); a KIND_TOKEN row holds TokenEntry (an append's) or EntityToken (an entity
write's).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from common.errors import Internal
from stream_layer.framing import Location

TAG_VALUE = 1
TAG_BLOB = 2
TAG_TOMBSTONE = 3
TAG_VALUE_CRC = 4
TAG_BLOB_CRC = 5

_HEAD = struct.Struct("<BQ")
_BLOB = struct.Struct("<QQIQ")
_CRC = struct.Struct("<I")
_LOG_META = struct.Struct("<BQQB")
_TOKEN = struct.Struct("<BQQ")
_ENTITY_TOKEN = struct.Struct("<BQQH")
_LOG_META_FORMAT = 1
_ENTITY_GROUP_FORMAT = 2
_TOKEN_FORMAT = 1
_ENTITY_TOKEN_FORMAT = 2
_U64_MAX = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class BlobRef:
    """Where a large value lives: one block of the partition's blob-data stream."""

    location: Location
    value_bytes: int


@dataclass(frozen=True, slots=True)
class Row:
    version: int
    value: bytes | None = None
    blob: BlobRef | None = None
    tombstone: bool = False
    value_crc: int | None = None  # the CRC32C of the value, as its writer sent it

    def __post_init__(self) -> None:
        kinds = (self.value is not None) + (self.blob is not None) + bool(self.tombstone)
        assert kinds == 1, "a row is exactly one of value, blob or tombstone"
        assert 0 <= self.version <= _U64_MAX, self.version
        assert self.value_crc is None or (
            not self.tombstone and 0 <= self.value_crc < 1 << 32), self.value_crc


def etag_of(version: int) -> str:
    """The ETag of a row written at `version`: opaque to clients, changes with every write."""
    return f'"{version:x}"'


def encode_row(row: Row) -> bytes:
    crc = row.value_crc
    if row.value is not None:
        if crc is None:
            return _HEAD.pack(TAG_VALUE, row.version) + row.value
        return b"".join((_HEAD.pack(TAG_VALUE_CRC, row.version), _CRC.pack(crc), row.value))
    if row.blob is not None:
        loc = row.blob.location
        blob = _BLOB.pack(loc.extent_id, loc.offset, loc.length, row.blob.value_bytes)
        if crc is None:
            return _HEAD.pack(TAG_BLOB, row.version) + blob
        return b"".join((_HEAD.pack(TAG_BLOB_CRC, row.version), blob, _CRC.pack(crc)))
    return _HEAD.pack(TAG_TOMBSTONE, row.version)


def decode_row(b: bytes) -> Row:
    if len(b) < _HEAD.size:
        raise Internal(f"row of {len(b)} bytes is shorter than its header")
    tag, version = _HEAD.unpack_from(b)
    if tag == TAG_VALUE:
        return Row(version, value=bytes(b[_HEAD.size:]))
    if tag == TAG_VALUE_CRC:
        if len(b) < _HEAD.size + _CRC.size:
            raise Internal(f"value row of {len(b)} bytes is shorter than its header")
        (crc,) = _CRC.unpack_from(b, _HEAD.size)
        return Row(version, value=bytes(b[_HEAD.size + _CRC.size:]), value_crc=crc)
    if tag in (TAG_BLOB, TAG_BLOB_CRC):
        size = _HEAD.size + _BLOB.size + (_CRC.size if tag == TAG_BLOB_CRC else 0)
        if len(b) != size:
            raise Internal(f"blob row of {len(b)} bytes, expected {size}")
        extent_id, offset, length, value_bytes = _BLOB.unpack_from(b, _HEAD.size)
        crc = _CRC.unpack_from(b, size - _CRC.size)[0] if tag == TAG_BLOB_CRC else None
        return Row(version, blob=BlobRef(Location(extent_id, offset, length), value_bytes),
                   value_crc=crc)
    if tag == TAG_TOMBSTONE:
        if len(b) != _HEAD.size:
            raise Internal(f"tombstone row of {len(b)} bytes, expected {_HEAD.size}")
        return Row(version, tombstone=True)
    raise Internal(f"row with unknown tag {tag}")


def is_tombstone(b: bytes) -> bool:
    """Whether an encoded row is a tombstone, without decoding it."""
    if not b:
        raise Internal("empty row")
    return b[0] == TAG_TOMBSTONE


def row_version(b: bytes) -> int:
    """The version of an encoded row, without decoding it."""
    if len(b) < _HEAD.size:
        raise Internal(f"row of {len(b)} bytes is shorter than its header")
    return _HEAD.unpack_from(b)[1]


@dataclass(frozen=True, slots=True)
class LogMeta:
    """A log's state: records [first_seq, next_seq) are readable; sealed refuses appends."""

    first_seq: int
    next_seq: int
    sealed: bool

    def __post_init__(self) -> None:
        assert 0 <= self.first_seq <= self.next_seq, (self.first_seq, self.next_seq)

    def encode(self) -> bytes:
        return _LOG_META.pack(_LOG_META_FORMAT, self.first_seq, self.next_seq, self.sealed)

    @classmethod
    def decode(cls, b: bytes) -> LogMeta:
        if len(b) != _LOG_META.size:
            raise Internal(f"log meta of {len(b)} bytes, expected {_LOG_META.size}")
        fmt, first, nxt, sealed = _LOG_META.unpack(b)
        if fmt != _LOG_META_FORMAT or sealed > 1 or first > nxt:
            raise Internal(f"malformed log meta {bytes(b).hex()}")
        return cls(first, nxt, bool(sealed))


ENTITY_GROUP = bytes((_ENTITY_GROUP_FORMAT,))
"""The value of an entity group's KIND_META row: the name holds entities, not a log."""


def is_entity_group(value: bytes) -> bool:
    return value == ENTITY_GROUP


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """What an append with a token got: records [first_seq, first_seq + count)."""

    first_seq: int
    count: int

    def encode(self) -> bytes:
        return _TOKEN.pack(_TOKEN_FORMAT, self.first_seq, self.count)

    @classmethod
    def decode(cls, b: bytes) -> TokenEntry:
        if len(b) != _TOKEN.size:
            raise Internal(f"token entry of {len(b)} bytes, expected {_TOKEN.size}")
        fmt, first, count = _TOKEN.unpack(b)
        if fmt != _TOKEN_FORMAT:
            raise Internal(f"token entry of unknown format {fmt}")
        return cls(first, count)


@dataclass(frozen=True, slots=True)
class EntityToken:
    """What an entity write (put, delete, batch) with a token did: it committed at `version`
    (so a put's ETag is etag_of(version)); `puts` says which of its items were puts (the
    others were deletes, whose ETag is ""). `written_at_ms` (wall clock) lets merges drop it
    once no client can still be retrying (operations.ENTITY_TOKEN_TTL_MS)."""

    version: int
    written_at_ms: int
    puts: tuple[bool, ...]

    def encode(self) -> bytes:
        return _ENTITY_TOKEN.pack(_ENTITY_TOKEN_FORMAT, self.version, self.written_at_ms,
                                  len(self.puts)) + bytes(self.puts)

    @classmethod
    def decode(cls, b: bytes) -> EntityToken:
        if len(b) < _ENTITY_TOKEN.size:
            raise Internal(f"entity token of {len(b)} bytes is shorter than its header")
        fmt, version, written_at_ms, count = _ENTITY_TOKEN.unpack_from(b)
        flags = b[_ENTITY_TOKEN.size:]
        if fmt != _ENTITY_TOKEN_FORMAT or len(flags) != count or any(f > 1 for f in flags):
            raise Internal(f"malformed entity token {bytes(b).hex()}")
        return cls(version, written_at_ms, tuple(bool(f) for f in flags))


def is_entity_token(value: bytes) -> bool:
    """Whether a KIND_TOKEN row's value is an EntityToken (else a TokenEntry)."""
    return value[:1] == bytes((_ENTITY_TOKEN_FORMAT,))


def encode_log_meta(meta: LogMeta) -> bytes:
    return meta.encode()


def decode_log_meta(b: bytes) -> LogMeta:
    return LogMeta.decode(b)


def encode_token(entry: TokenEntry) -> bytes:
    return entry.encode()


def decode_token(b: bytes) -> TokenEntry:
    return TokenEntry.decode(b)
