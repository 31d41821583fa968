"""End-to-end checksums of a request's payload (DESIGN §5, §8 invariant 6): the SDK (or the
partition client) computes a CRC32C per record and value; front end and partition server call
`verify_payload` before acting on a request, the CRC is stored beside the bytes, and reads
return it for the caller to verify (`verify_read`).
"""

from __future__ import annotations

from collections.abc import Sequence

from common.checksums import crc32c
from common.errors import ChecksumError, InvalidArgument
from common.proto import partition_pb2 as pb


def payload_crcs(values: Sequence[bytes]) -> list[int]:
    """The CRC32C of each record or value, as the SDK sends them."""
    return [crc32c(v) for v in values]


def verify_payload(request: pb.Request, where: str) -> None:
    """ChecksumError unless every record and value of `request` matches the CRC32C it carries
    (InvalidArgument if an append does not carry one per record). `where` names the hop."""
    op = request.WhichOneof("op")
    if op == "append":
        append = request.append
        if len(append.crcs) != len(append.records):
            raise InvalidArgument(f"an append carries one CRC32C per record: "
                                  f"{len(append.records)} records, {len(append.crcs)} CRCs")
        for i, (record, expected) in enumerate(zip(append.records, append.crcs, strict=True)):
            if crc32c(record) != expected:
                raise ChecksumError(f"{where}: record {i} of the append to "
                                    f"{request.pname!r} does not match its CRC32C")
    elif op == "put":
        if crc32c(request.put.value) != request.put.value_crc:
            raise ChecksumError(f"{where}: the value put to {request.pname!r} does not match "
                                f"its CRC32C")
    elif op == "batch":
        for i, item in enumerate(request.batch.items):
            if item.kind == "put" and crc32c(item.value) != item.value_crc:
                raise ChecksumError(f"{where}: item {i} of the batch on {request.pname!r} "
                                    f"does not match its CRC32C")


def verify_value(value: bytes, expected: int, what: str) -> bytes:
    """`value` if it matches `expected`; ChecksumError naming `what` otherwise (reads)."""
    if crc32c(value) != expected:
        raise ChecksumError(f"{what} does not match its CRC32C: corrupted on the way")
    return value
