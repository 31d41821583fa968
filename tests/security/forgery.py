"""An attacker's tools against request signatures (issue 28, item 2): CRC32C is affine over
GF(2), so for a message of fixed length, flipping chosen bits changes its checksum by a
linear function of those bits. With 32 independent bits free, any checksum can be reached:
`forge_crc32c` finds them. The tests use it to turn a captured signed request into another
one whose old signed checksum still matches."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from common.checksums import crc32c
from common.proto import partition_pb2 as pb

# An unknown field of wire type fixed32 (5), number 15: a tag byte and four free bytes that
# protobuf keeps and serializes back at the end of the message.
UNKNOWN_FIXED32_TAG = bytes([(15 << 3) | 5])


def forge_crc32c(data: bytes, free_bits: Sequence[tuple[int, int]], target: int) -> bytes:
    """`data` with some of `free_bits` ((byte index, bit) pairs) flipped so that its CRC32C
    is `target`; ValueError if those bits cannot reach it."""
    base = crc32c(data)
    columns = []
    for index, bit in free_bits:
        flipped = bytearray(data)
        flipped[index] ^= 1 << bit
        columns.append(crc32c(bytes(flipped)) ^ base)
    chosen = _solve(columns, target ^ base)
    out = bytearray(data)
    for (index, bit), take in zip(free_bits, chosen, strict=True):
        if take:
            out[index] ^= 1 << bit
    assert crc32c(bytes(out)) == target
    return bytes(out)


def _solve(columns: list[int], want: int) -> list[bool]:
    """Which columns XOR to `want` (Gaussian elimination over GF(2), 32-bit rows)."""
    basis: dict[int, tuple[int, int]] = {}  # pivot bit -> (value, mask of columns)
    for i, column in enumerate(columns):
        value, mask = column, 1 << i
        for pivot in sorted(basis, reverse=True):
            if value >> pivot & 1:
                value ^= basis[pivot][0]
                mask ^= basis[pivot][1]
        if value:
            basis[value.bit_length() - 1] = (value, mask)
    mask = 0
    for pivot in sorted(basis, reverse=True):
        if want >> pivot & 1:
            want ^= basis[pivot][0]
            mask ^= basis[pivot][1]
    if want:
        raise ValueError("the free bits cannot reach that checksum")
    return [bool(mask >> i & 1) for i in range(len(columns))]


def with_unknown_fixed32(request: pb.Request, signed_view_crc: int,
                         view_of: Callable[[pb.Request], bytes]) -> pb.Request:
    """`request` plus an unknown fixed32 field whose four bytes make `view_of(result)` (the
    bytes the old front end checksummed) have CRC32C `signed_view_crc`."""
    probe = pb.Request.FromString(request.SerializeToString() + UNKNOWN_FIXED32_TAG
                                  + b"\0\0\0\0")
    view = view_of(probe)
    assert view.endswith(UNKNOWN_FIXED32_TAG + b"\0\0\0\0"), "unknown fields go last"
    start = len(view) - 4
    forged_view = forge_crc32c(view, [(start + i // 8, i % 8) for i in range(32)],
                               signed_view_crc)
    return pb.Request.FromString(request.SerializeToString() + UNKNOWN_FIXED32_TAG
                                 + forged_view[start:])
