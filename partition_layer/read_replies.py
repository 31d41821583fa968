"""What a partition server's reads put on the wire: the bytes with the CRC32C stored beside
them (DESIGN §5 end-to-end checksums). The CRC is the one the writer sent, never one computed
here from what was read, so bytes changed anywhere between the writer and the reader — in
this server's memory, in the commit log, a checkpoint, an extent node — fail the reader's
check (§8 invariant 6: the read fails with a checksum error, never silently).

Every read of a log's records (Call read, Subscribe) and of an entity's value (Call get, the
Call scan, the streaming Scan) goes through here; the fault points let a test alter what a
read returns and see the reader refuse it.
"""

from __future__ import annotations

from collections.abc import Sequence

from common import faults
from common.checksums import crc32c
from common.proto import partition_pb2 as pb
from partition_layer.partition import RangePartition
from partition_layer.record_batch import Record
from partition_layer.rows import Row


async def value_and_crc(partition: RangePartition, row: Row) -> tuple[bytes, int]:
    """An entity row's value (read from blob data if it lives there) and its CRC32C as the
    writer sent it. A row written before end-to-end checksums has none stored: its CRC is
    computed from the bytes read, the best that is left."""
    if row.blob is not None:
        value = await partition.read_blob(row)
    else:
        assert row.value is not None, "an entity row holds a value"
        value = row.value
    return stored_value(row, value)


def stored_value(row: Row, value: bytes) -> tuple[bytes, int]:
    """(`value`, read for `row`, as it goes on the wire; its CRC32C as the writer sent it):
    `value_and_crc` for a caller that read the value itself (the streaming Scan reads
    inline values without a coroutine per row)."""
    crc = row.value_crc if row.value_crc is not None else crc32c(value)
    return faults.flipped("ps.read.flip_value", value), crc


def records_reply(records: Sequence[Record]) -> list[pb.Record]:
    """The Record messages of records read from a log (partition.read_log), CRCs beside."""
    if records:
        seq, data, crc = records[0]
        altered = faults.flipped("ps.read.flip_record", data)
        if altered is not data:
            records = [(seq, altered, crc), *records[1:]]
    return [pb.Record(seq=seq, data=data, crc=crc) for seq, data, crc in records]
