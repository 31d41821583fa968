"""One log append's records as one row (§5 logs): the row's key is the sequence number of
its LAST record, its value the records with the CRC32C each came with. Why one row per
append, not per record: an append of 100 records then costs one memtable entry, one commit
mutation and one run entry, not a hundred (the partition server's CPU per record is what
limits batched appends).

Why the last sequence number: a read from `seq` scans forward from `seq_row(seq)`, and the
first row it meets is the append holding `seq` (every earlier append ends below it); a trim
drops a row once its last record is below the log's first_seq (merge.py) — whole appends
only, the rest is hidden by first_seq.

Value (little-endian), format 2: u32 0 (the marker), u32 count, count × u32 length,
count × u32 CRC32C, then the records end to end. The CRCs are the ones the client sent
(verified on arrival, payload_crc.py), not recomputed here: they travel with the bytes through
the commit log and the checkpoints to the extent nodes, and back to the reader, who verifies
them (DESIGN §5, §8 invariant 6).
Format 1, written before end-to-end checksums: u32 count, count × u32 length, the records.
Its count is never 0, so format 2's marker tells the two apart; its records are read back
with CRCs computed here (all it has).

Contract: a malformed value (lengths that do not add up, truncated) raises Internal, never
yields wrong records.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from common.checksums import crc32c
from common.errors import Internal

_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<II")  # marker 0, count
_MARKER = 0

Record = tuple[int, bytes, int]  # (seq, data, CRC32C of data)


def encoded_bytes(records: Sequence[bytes]) -> int:
    """len(encode_records(records, crcs)), without encoding them."""
    return _HEAD.size + 8 * len(records) + sum(map(len, records))


def encode_records(records: Sequence[bytes], crcs: Sequence[int]) -> bytes:
    """Format 2: `records` with their CRC32Cs, as the client sent them (one per record)."""
    count = len(records)
    assert count, "an append holds at least one record"
    assert len(crcs) == count, (len(crcs), count)
    head = struct.pack(f"<II{2 * count}I", _MARKER, count, *map(len, records), *crcs)
    return b"".join((head, *records))


def decode_records(value: bytes, last_seq: int) -> list[Record]:
    """[(seq, record, crc)] of one append whose last record has `last_seq`."""
    try:
        (first_word,) = _U32.unpack_from(value)
        if first_word == _MARKER:
            _, count = _HEAD.unpack_from(value)
            lengths = struct.unpack_from(f"<{count}I", value, _HEAD.size)
            crcs: Sequence[int] | None = struct.unpack_from(
                f"<{count}I", value, _HEAD.size + 4 * count)
            pos = _HEAD.size + 8 * count
        else:
            count = first_word
            lengths = struct.unpack_from(f"<{count}I", value, _U32.size)
            crcs = None
            pos = _U32.size + 4 * count
    except struct.error as exc:
        raise Internal(f"malformed record batch: {exc}") from exc
    if not count or pos + sum(lengths) != len(value):
        raise Internal(f"record batch of {len(value)} bytes does not match its "
                       f"{count} lengths")
    first = last_seq - count + 1
    found = []
    for i, length in enumerate(lengths):
        data = value[pos:pos + length]
        found.append((first + i, data, crcs[i] if crcs is not None else crc32c(data)))
        pos += length
    return found
