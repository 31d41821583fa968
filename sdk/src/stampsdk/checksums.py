"""CRC32C, the checksum every record and value carries end to end: the SDK computes it
before sending, the stamp checks it on every hop and stores it with the bytes, and reads
return it for the SDK to check again (`verify_value`, `verify_records`: ChecksumError,
never wrong bytes). Hardware-accelerated through the `crc32c` package."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Union

import crc32c as _crc32c

from stampsdk.errors import ChecksumError

BytesLike = Union[bytes, bytearray, memoryview]


def crc32c(data: BytesLike, value: int = 0) -> int:
    """CRC32C (Castagnoli) of `data`, continuing from `value` when checksumming in pieces."""
    return _crc32c.crc32c(data, value)


def crc32cs(values: Iterable[BytesLike]) -> list[int]:
    """The CRC32C of each of `values` (one C call each, no Python frame: a hot path)."""
    return list(map(_crc32c.crc32c, values))


def verify_value(value: bytes, expected: int, what: str) -> bytes:
    """`value` if it matches `expected`; ChecksumError naming `what` otherwise."""
    if crc32c(value) != expected:
        raise ChecksumError(f"{what} does not match its CRC32C: corrupted on the way")
    return value


def verify_records(records: Sequence[Any], what: str) -> list[tuple[int, bytes]]:
    """[(seq, data)] of records read (`Record`s of a read or subscribe reply) if each
    matches the CRC32C it came with; ChecksumError naming `what` and the record otherwise.
    Checked in bulk; each record's data is read out of the message once (every access
    copies it)."""
    datas = [r.data for r in records]
    if crc32cs(datas) != [r.crc for r in records]:
        bad = next(r for r in records if crc32c(r.data) != r.crc)
        verify_value(bad.data, bad.crc, f"record {bad.seq} of {what}")
    return [(r.seq, d) for r, d in zip(records, datas)]
