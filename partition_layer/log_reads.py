"""Reading a log's records out of a range partition's rows (§5 `read`): appends are rows
keyed by their last record (record_batch.py), large ones in blob data.

Contract: `read_log` returns records [from_seq, ...) in sequence order with no gap (§8
invariant 5: a hole below the log's next_seq is a bug and raises Internal), up to `limit`
records or about `read_bytes_max` bytes; Trimmed below the log's first record, OutOfRange
past its end. It reads the partition only through `LogSource`.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from common.config import PartitionLimits
from common.errors import Internal, OutOfRange, Trimmed
from partition_layer import keys
from partition_layer.record_batch import Record, decode_records
from partition_layer.rows import LogMeta, Row

SCAN_ROWS_PER_READ = 256


class LogSource(Protocol):
    """What a log read needs of its partition (partition.py's RangePartition)."""

    limits: PartitionLimits

    async def log_state(self, account: str, pname: str) -> LogMeta: ...

    async def scan(self, start: bytes, end: bytes | None, limit: int
                   ) -> tuple[list[tuple[bytes, Row]], bool]: ...

    async def read_blob(self, row: Row) -> bytes: ...


async def read_log(p: LogSource, account: str, pname: str, from_seq: int, limit: int
                   ) -> tuple[list[Record], LogMeta]:
    """Records [from_seq, ...) of a log, (seq, data, the CRC32C stored with it), up to
    `limit` records or about `read_bytes_max` bytes, and the log's state."""
    meta = await p.log_state(account, pname)
    if from_seq < meta.first_seq:
        raise Trimmed(f"log {pname!r} is trimmed below {meta.first_seq}")
    if from_seq > meta.next_seq:
        raise OutOfRange(f"log {pname!r} ends at {meta.next_seq}")
    end = min(meta.next_seq, from_seq + limit)
    if end == from_seq:
        return [], meta
    # Appends are rows keyed by their last record (record_batch.py): the first row at or
    # after from_seq holds it; read rows until `end` is covered or the byte budget is.
    records: list[Record] = []
    budget = p.limits.read_bytes_max
    start = keys.encode_key(account, pname, keys.KIND_RECORD, keys.seq_row(from_seq))
    stop = keys.prefix_end(keys.kind_prefix(account, pname, keys.KIND_RECORD))
    while from_seq + len(records) < end and budget > 0:
        rows, more = await p.scan(start, stop, SCAN_ROWS_PER_READ)
        batches = await _record_batches(p, rows, end, budget)
        for (key, _), (last, value) in zip(rows, batches, strict=False):
            for seq, data, crc in decode_records(value, last):
                expected = from_seq + len(records)
                if seq < expected:
                    continue  # the start of the append holding from_seq
                if seq != expected:
                    # §8 invariant 5: no gap below next_seq; a hole is a bug.
                    raise Internal(f"log {pname!r}: record {expected} missing below "
                                   f"next_seq {meta.next_seq}")
                if seq >= end or (records and budget < len(data)):
                    return records, meta  # a full read: the caller asks again from here
                budget -= len(data)
                records.append((seq, data, crc))
            start = key + b"\x00"
        if not more and len(batches) == len(rows):
            break
    if from_seq + len(records) < end and budget > 0:
        raise Internal(f"log {pname!r}: record {from_seq + len(records)} missing below "
                       f"next_seq {meta.next_seq}")
    return records, meta


async def _record_batches(p: LogSource, rows: list[tuple[bytes, Row]], end: int,
                         budget: int) -> list[tuple[int, bytes]]:
    """(last seq, encoded records) of the first appends among `rows` that a read ending
    at `end`, of about `budget` bytes, needs: large ones are fetched from blob data
    together."""
    needed = []
    for key, row in rows:
        last = keys.row_seq(keys.decode_key(key)[3])
        needed.append((last, row))
        budget -= row.blob.value_bytes if row.blob is not None else len(row.value or b"")
        if last >= end - 1 or budget <= 0:
            break
    values = await asyncio.gather(*(p.read_blob(row) for _, row in needed
                                    if row.value is None))
    fetched = iter(values)
    return [(last, row.value if row.value is not None else next(fetched))
            for last, row in needed]
