"""End-to-end checksums of a request's payload (DESIGN §5, §8 invariant 6): the SDK (or the
partition client) computes a CRC32C per record and value; front end and partition server call
`verify_payload` before acting on a request, the CRC is stored beside the bytes, and reads
return it for the caller to verify (`verify_value`, `verify_records`).
"""

from __future__ import annotations

from collections.abc import Sequence

from common.checksums import crc32c, crc32cs
from common.config import PartitionLimits
from common.errors import ChecksumError, InvalidArgument
from common.proto import partition_pb2 as pb


def payload_crcs(values: Sequence[bytes]) -> list[int]:
    """The CRC32C of each record or value, as the SDK sends them."""
    return crc32cs(values)


def verify_payload(request: pb.Request, where: str) -> None:
    """ChecksumError unless every record and value of `request` matches the CRC32C it carries
    (InvalidArgument if an append does not carry one per record). `where` names the hop."""
    op = request.WhichOneof("op")
    if op == "append":
        verify_append(tuple(request.append.records), tuple(request.append.crcs), where,
                      request.pname)
    elif op == "put":
        if crc32c(request.put.value) != request.put.value_crc:
            raise ChecksumError(f"{where}: the value put to {request.pname!r} does not match "
                                f"its CRC32C")
    elif op == "batch":
        for i, item in enumerate(request.batch.items):
            if item.kind == "put" and crc32c(item.value) != item.value_crc:
                raise ChecksumError(f"{where}: item {i} of the batch on {request.pname!r} "
                                    f"does not match its CRC32C")


def verify_append(records: Sequence[bytes], crcs: Sequence[int], where: str, pname: str
                  ) -> None:
    """verify_payload of an append whose records and CRCs the caller has read out of the
    request already (each access to a repeated bytes field copies the bytes)."""
    if len(crcs) != len(records):
        raise InvalidArgument(f"an append carries one CRC32C per record: "
                              f"{len(records)} records, {len(crcs)} CRCs")
    # All at once first (the hot path: no Python work per record); which one is wrong is
    # looked for only when one is.
    actual = crc32cs(records)
    if actual != list(crcs):
        i = next(i for i, (a, e) in enumerate(zip(actual, crcs, strict=True)) if a != e)
        raise ChecksumError(f"{where}: record {i} of the append to {pname!r} does not "
                            f"match its CRC32C")


def verify_value(value: bytes, expected: int, what: str) -> bytes:
    """`value` if it matches `expected`; ChecksumError naming `what` otherwise (reads)."""
    if crc32c(value) != expected:
        raise ChecksumError(f"{what} does not match its CRC32C: corrupted on the way")
    return value


def verify_records(records: Sequence[pb.Record], what: str) -> list[tuple[int, bytes]]:
    """[(seq, data)] of records read (a read or subscribe reply) if each matches the CRC32C
    it came with; ChecksumError naming `what` and the record otherwise. Checked in bulk
    (reads and subscriptions are hot paths, here and in the SDK); each record's data is
    read out of the message once (every access copies it)."""
    datas = [r.data for r in records]
    if crc32cs(datas) != [r.crc for r in records]:
        bad = next(r for r in records if crc32c(r.data) != r.crc)
        verify_value(bad.data, bad.crc, f"record {bad.seq} of {what}")
    return [(r.seq, d) for r, d in zip(records, datas, strict=True)]


def check_append_sizes(sizes: Sequence[int], limits: PartitionLimits) -> int:
    """The bytes of an append whose records have `sizes`; InvalidArgument naming the limit it
    breaks (records per append, bytes per record, bytes per append). One check for the SDK
    (before sending), the front end and the partition server."""
    if not sizes:
        raise InvalidArgument("an append carries at least one record")
    if len(sizes) > limits.append_records_max:
        raise InvalidArgument(f"an append of {len(sizes)} records exceeds "
                              f"partition.append_records_max = {limits.append_records_max}")
    if max(sizes) > limits.record_bytes_max:
        i = next(i for i, size in enumerate(sizes) if size > limits.record_bytes_max)
        raise InvalidArgument(f"record {i} has {sizes[i]} bytes, more than "
                              f"partition.record_bytes_max = {limits.record_bytes_max}")
    total = sum(sizes)
    if total > limits.append_bytes_max:
        raise InvalidArgument(f"an append of {total} bytes exceeds "
                              f"partition.append_bytes_max = {limits.append_bytes_max}")
    return total
