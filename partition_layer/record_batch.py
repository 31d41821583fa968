"""One log append's records as one row (§5 logs): the row's key is the sequence number of
its LAST record, its value the records. Why one row per append, not per record: an append
of 100 records then costs one memtable entry, one commit mutation and one run entry, not a
hundred (the partition server's CPU per record is what limits batched appends).

Why the last sequence number: a read from `seq` scans forward from `seq_row(seq)`, and the
first row it meets is the append holding `seq` (every earlier append ends below it); a trim
drops a row once its last record is below the log's first_seq (merge.py) — whole appends
only, the rest is hidden by first_seq.

Value: u32 count, count × u32 length, then the records end to end.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from common.errors import Internal

_COUNT = struct.Struct("<I")


def encoded_bytes(records: Sequence[bytes]) -> int:
    """len(encode_records(records)), without encoding them."""
    return _COUNT.size + 4 * len(records) + sum(len(r) for r in records)


def encode_records(records: Sequence[bytes]) -> bytes:
    assert records, "an append holds at least one record"
    lengths = struct.pack(f"<{len(records)}I", *map(len, records))
    return b"".join((_COUNT.pack(len(records)), lengths, *records))


def decode_records(value: bytes, last_seq: int) -> list[tuple[int, bytes]]:
    """[(seq, record)] of one append whose last record has `last_seq`."""
    try:
        (count,) = _COUNT.unpack_from(value)
        lengths = struct.unpack_from(f"<{count}I", value, _COUNT.size)
    except struct.error as exc:
        raise Internal(f"malformed record batch: {exc}") from exc
    pos = _COUNT.size + 4 * count
    if pos + sum(lengths) != len(value):
        raise Internal(f"record batch of {len(value)} bytes does not match its lengths")
    first = last_seq - count + 1
    found = []
    for i, length in enumerate(lengths):
        found.append((first + i, value[pos:pos + length]))
        pos += length
    return found
